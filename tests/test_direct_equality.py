"""The direct path exports exactly what the SDK path exports, for every stream of the corpus.

Same spans, parents, attributes, span events, statuses, times, resource and scope, with the
deterministic ids of ``RulvarIdGenerator``; in all three forms a direct batch takes (the protobuf
request, the OTLP/JSON line, the SDK span objects other exporters read).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.otel import export_events, semconv
from rulvar_otel.otel._encode import EncodedBatch
from rulvar_otel.otel._otlp_json import parse_otlp_json_line
from rulvar_otel.otel.direct import export_events_direct
from rulvar_otel.otel.ids import RulvarIdGenerator
from tests._fixtures import events, outcome, stream_names

_RESOURCE = Resource.create({SERVICE_NAME: "equality"})


class Batches(SpanExporter):
    """Keeps the direct batches it is handed."""

    def __init__(self) -> None:
        self.batches: list[EncodedBatch] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        assert isinstance(spans, EncodedBatch)
        self.batches.append(spans)
        return SpanExportResult.SUCCESS


def _sdk_request(name: str, limits: SpanLimits) -> ExportTraceServiceRequest:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=_RESOURCE, span_limits=limits, id_generator=RulvarIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    export_events(events(name), provider.get_tracer(semconv.INSTRUMENTATION_SCOPE), outcome=outcome(name))
    return encode_spans(memory.get_finished_spans())


def _direct(name: str, limits: SpanLimits) -> EncodedBatch:
    kept = Batches()
    export_events_direct(
        events(name),
        kept,
        outcome=outcome(name),
        resource=_RESOURCE,
        id_generator=RulvarIdGenerator(),
        limits=limits,
    )
    assert kept.batches, "the direct path exported nothing"
    # One batch holding every record, in end order, as the SDK's request holds them.
    return EncodedBatch([r for b in kept.batches for r in b.records], kept.batches[0].header)


_UNLIMITED = SpanLimits(max_events=SpanLimits.UNSET)


@pytest.mark.parametrize("name", stream_names())
def test_the_direct_path_exports_what_the_sdk_path_exports(name: str) -> None:
    expected = _sdk_request(name, _UNLIMITED)
    batch = _direct(name, _UNLIMITED)
    request = batch.request()
    assert request.resource_spans[0].resource == expected.resource_spans[0].resource
    assert request.resource_spans[0].scope_spans[0].scope == expected.resource_spans[0].scope_spans[0].scope
    got = list(request.resource_spans[0].scope_spans[0].spans)
    want = list(expected.resource_spans[0].scope_spans[0].spans)
    assert [s.name for s in got] == [s.name for s in want]
    for got_span, want_span in zip(got, want, strict=True):
        assert got_span == want_span, got_span.name
    assert request == expected
    # The OTLP/JSON line and the SDK span objects say the same.
    assert parse_otlp_json_line(batch.otlp_json()) == expected
    assert encode_spans(list(batch)) == expected


@pytest.mark.parametrize("name", ["large", "orchestrate"])
def test_span_limits_cut_the_same_events_on_both_paths(name: str) -> None:
    limits = SpanLimits(max_events=3, max_attribute_length=12, max_span_attribute_length=9)
    expected = _sdk_request(name, limits)
    batch = _direct(name, limits)
    assert batch.request() == expected
    assert any(s.dropped_events_count for s in expected.resource_spans[0].scope_spans[0].spans)
