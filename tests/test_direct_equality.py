"""The direct path exports exactly what the SDK path exports, for every stream of the corpus.

Same spans, parents, attributes, span events, statuses, times, resource and scope, with the
deterministic ids of ``RulvarIdGenerator``; in all three forms a direct batch takes (the protobuf
request, the OTLP/JSON line, the SDK span objects other exporters read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.export import parse_otlp_json_line
from rulvar_otel.otel import export_events, semconv
from rulvar_otel.otel._encode import EncodedBatch
from rulvar_otel.otel.direct import export_events_direct
from rulvar_otel.otel.ids import RulvarIdGenerator
from tests._support import ev, events, outcome, stream_names

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
    export_events(
        events(name),
        provider.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, semconv.INSTRUMENTATION_VERSION, schema_url=semconv.SCHEMA_URL
        ),
        outcome=outcome(name),
    )
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
    # Byte for byte what the library serializes, not only an equal message.
    assert batch.request_bytes() == expected.SerializeToString()
    # The OTLP/JSON line and the SDK span objects say the same.
    assert parse_otlp_json_line(batch.otlp_json()) == expected
    assert encode_spans(list(batch)) == expected


@pytest.mark.parametrize("name", ["large", "orchestrate"])
def test_span_limits_cut_the_same_events_on_both_paths(name: str) -> None:
    limits = SpanLimits(max_events=3, max_attribute_length=12, max_span_attribute_length=9)
    expected = _sdk_request(name, limits)
    batch = _direct(name, limits)
    assert batch.request() == expected
    assert batch.request_bytes() == expected.SerializeToString()
    assert any(s.dropped_events_count for s in expected.resource_spans[0].scope_spans[0].spans)


_WELL_FORMED = [
    ev("run:start", 0, "s0", workflow="w"),
    ev("phase:start", 1, "p", "s0", phase="x"),
    ev("agent:start", 2, "a", "p", agentType="t", model="m", role="loop"),
    ev("agent:phase:start", 3, "a", invocation=1, role="loop", model="m"),
    ev("tool:start", 4, "a", toolName="t", toolCallId="c"),
    ev("tool:start", 5, "a", toolName="t"),
    ev("tool:end", 6, "a", toolName="t", outcome="ok"),
    ev("tool:end", 7, "a", toolName="t", toolCallId="c", outcome="error", error={"name": "E"}),
    ev("agent:phase:end", 8, "a", invocation=1, outcome="ok", usage={"inputTokens": 3}),
    ev("agent:end", 9, "a", status="ok", costUsd=0.5),
    ev("child:start", 10, "c", "s0", workflow="k", scope="s"),
    ev("child:end", 11, "c", status="ok"),
    ev("budget:update", 12, "s0", spentUsd=1.0, remainingUsd=2.0),
    ev("run:end", 13, "s0", status="ok"),
    ev("log", 14, "a", level="info", msg="m"),
    ev("run:start", 4294967296, "s9", workflow="w", resumed=True),
    ev("agent:start", 15, "b", "gone", replayed=True),
    ev("determinism:warning", 16, "a", category="clock", file="f.py", line=3),
]


def _sdk_request_of(stream: list[dict[str, Any]], settled: Any) -> ExportTraceServiceRequest:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=_RESOURCE, span_limits=_UNLIMITED, id_generator=RulvarIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    export_events(
        stream,
        provider.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, semconv.INSTRUMENTATION_VERSION, schema_url=semconv.SCHEMA_URL
        ),
        outcome=settled,
        run_id="r1",
    )
    return encode_spans(memory.get_finished_spans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(_WELL_FORMED), max_size=50),
    st.sampled_from([None, RunOutcome(status="ok"), RuntimeError("rejected")]),
)
def test_any_order_of_events_exports_the_same_spans_on_both_paths(
    stream: list[dict[str, Any]], settled: Any
) -> None:
    expected = _sdk_request_of(stream, settled)
    kept = Batches()
    export_events_direct(
        stream, kept, outcome=settled, resource=_RESOURCE, id_generator=RulvarIdGenerator(), run_id="r1"
    )
    if not kept.batches:
        assert not expected.resource_spans
        return
    batch = EncodedBatch([r for b in kept.batches for r in b.records], kept.batches[0].header)
    assert batch.request() == expected
    assert parse_otlp_json_line(batch.otlp_json()) == expected


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["sk-" + "z" * 24, "\x1b[31mred\n"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _hostile(draw: st.DrawFn) -> dict[str, Any]:
    event = dict(draw(st.sampled_from(_WELL_FORMED)))
    for key, value in draw(
        st.dictionaries(
            # Not ts: a stream with no usable time is stamped with the wall clock, which differs
            # between two exports by design.
            st.sampled_from(["status", "outcome", "usage", "error", "model", "toolName", "costUsd", "seq"])
            | st.text(max_size=8).filter(lambda key: key != "ts"),
            _VALUES,
            max_size=4,
        )
    ).items():
        event[key] = value
    return event


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_hostile(), max_size=30))
def test_hostile_field_values_export_the_same_spans_on_both_paths(stream: list[dict[str, Any]]) -> None:
    expected = _sdk_request_of(stream, None)
    kept = Batches()
    export_events_direct(stream, kept, resource=_RESOURCE, id_generator=RulvarIdGenerator(), run_id="r1")
    records = [r for b in kept.batches for r in b.records]
    if not records:
        assert not expected.resource_spans
        return
    batch = EncodedBatch(records, kept.batches[0].header)
    assert batch.request() == expected
    assert parse_otlp_json_line(batch.otlp_json()) == expected
