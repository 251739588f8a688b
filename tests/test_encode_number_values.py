"""A direct batch encodes every attribute value by its own type, however often its key repeats.

The encoders memoise repeated entries; 1, 1.0 and True are equal as dict keys, so a memo keyed by
value alone would hand a later float the entry of an earlier int. Each form must match the
exporter library's own encoding of the same spans.
"""

from __future__ import annotations

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from rulvar_otel.export import parse_otlp_json_line
from rulvar_otel.otel._encode import BatchHeader, EncodedBatch
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
