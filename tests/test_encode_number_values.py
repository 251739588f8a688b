"""A direct batch encodes every attribute value by its own type, however often its key repeats,
and its hand-written protobuf wire form is the very message the field-by-field path builds.

The encoders memoise repeated entries; 1, 1.0 and True are equal as dict keys, so a memo keyed by
value alone would hand a later float the entry of an earlier int. Each form must match the
exporter library's own encoding of the same spans.
"""

from __future__ import annotations

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from rulvar_otel.export import parse_otlp_json_line
from rulvar_otel.otel._encode import BatchHeader, EncodedBatch
from rulvar_otel.otel._pb_wire import request_bytes
from rulvar_otel.otel._records import RecordingTracer, SpanRecord


def _batch() -> EncodedBatch:
    ended: list[SpanRecord] = []
    tracer = RecordingTracer(ended.append)
    for index, value in enumerate([1, 1.0, True, 0, 0.0, False, "1"]):
        span = tracer.start_span(f"span {index}", attributes={"v": value}, start_time=10)
        span.add_event("e", {"v": value}, 11)
        span.end(12)
    return EncodedBatch(ended, BatchHeader(Resource.create({}), InstrumentationScope("t")))


def test_equal_numbers_of_different_types_encode_by_type_in_the_protobuf_request() -> None:
    batch = _batch()
    assert batch.request() == encode_spans(list(batch))


def test_equal_numbers_of_different_types_encode_by_type_in_the_otlp_json_line() -> None:
    batch = _batch()
    line = parse_otlp_json_line(batch.otlp_json())
    assert json_format.MessageToDict(line) == json_format.MessageToDict(encode_spans(list(batch)))


def test_the_wire_form_parses_into_the_message_built_field_by_field() -> None:
    ended: list[SpanRecord] = []
    tracer = RecordingTracer(ended.append)
    remote = SpanContext(7, 9, True, TraceFlags(1), TraceState([("k", "v")]))
    values: list[object] = [
        -1,
        -(2**63),
        2**63 - 1,
        0,
        "",
        "é ✓",
        False,
        -0.5,
        (1, 2),
        (0.5, -1.0),
        ("a", ""),
    ]
    for index, value in enumerate(values):
        span = tracer.start_span(
            f"span {index}",
            context=set_span_in_context(NonRecordingSpan(remote)),
            attributes={"v": value, "s": "same"},
            links=[Link(remote)],
            start_time=0,
        )
        span.add_event("", {}, 0)
        span.add_event("e", {"v": value}, 2**63)
        span.set_status(Status(StatusCode.ERROR, "why") if index % 2 else StatusCode.OK)
        span.end(5)
    ended[0].dropped_events = 3
    ended[0].dropped_attributes = 2
    header = BatchHeader(Resource.create({"service.name": "t"}), InstrumentationScope("t", "1", "https://s"))
    batch = EncodedBatch(ended, header)
    built = batch._built_request()
    wire = request_bytes(
        ended,
        header.resource_bytes,
        "",
        header.scope_bytes,
        "https://s",
        header.wire_memo,
        header.wire_statuses,
    )
    assert ExportTraceServiceRequest.FromString(wire) == built  # the wire path itself, no fallback
    assert batch.request().SerializeToString() == built.SerializeToString()
