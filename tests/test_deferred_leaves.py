"""A recorded stream's tool and invocation spans reach the host's tracer whole, at their end.

``export_events`` through a tracer defers leaf spans and makes them in batches: the tracer must
still end exactly the spans an unbatched mapping ends, in the same order (children before their
parents), and a leaf asked for its context starts at once, under the id it is exported with.
With a meter, the metrics read their exemplars' spans after each batch: no leaf starts alone.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from rulvar_otel.core.drain import drain_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel import create_mapper, export_events, semconv
from rulvar_otel.otel._deferred import DeferredSpan, EndQueue
from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel.ids import RulvarIdGenerator
from rulvar_otel.otel.metrics import MetricsRecorder
from tests._support import OK_OUTCOME, ev, events, histogram_points, outcome, stream_names

_LEAF_KINDS = {semconv.OPENINFERENCE_TOOL, semconv.OPENINFERENCE_LLM}


class _Calls(SpanProcessor):
    """What a provider's processors are told, in order: ("start" | "end", span id)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.calls.append(("start", span.context.span_id))

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.calls.append(("end", span.context.span_id))


class _Host:
    """A host's SDK provider with deterministic ids, keeping its finished spans and calls."""

    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.calls = _Calls()
        provider = TracerProvider(
            span_limits=SpanLimits(max_events=SpanLimits.UNSET), id_generator=RulvarIdGenerator()
        )
        provider.add_span_processor(self.calls)
        provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer: Tracer = provider.get_tracer("host")

    def ended(self) -> list[tuple[Any, ...]]:
        """Finished spans in end order, with every field a backend reads (attribute order too)."""
        out = []
        for s in self.memory.get_finished_spans():
            assert s.context is not None
            out.append(
                (
                    s.name,
                    s.context.trace_id,
                    s.context.span_id,
                    s.parent.span_id if s.parent is not None else None,
                    list((s.attributes or {}).items()),
                    [(e.name, list((e.attributes or {}).items()), e.timestamp) for e in s.events],
                    s.status.status_code,
                    s.status.description,
                    s.start_time,
                    s.end_time,
                )
            )
        return out

    def leaf_ids(self) -> set[int]:
        return {
            s.context.span_id
            for s in self.memory.get_finished_spans()
            if s.context is not None
            and (s.attributes or {}).get(semconv.OPENINFERENCE_SPAN_KIND) in _LEAF_KINDS
        }


@pytest.mark.parametrize("name", stream_names())
def test_a_recorded_export_ends_the_spans_an_unbatched_mapping_ends_in_the_same_order(name: str) -> None:
    batched, unbatched = _Host(), _Host()
    export_events(events(name), batched.tracer, outcome=outcome(name))
    drain_events(events(name), create_mapper(unbatched.tracer), outcome=outcome(name))
    assert batched.ended() == unbatched.ended()
    # Each leaf reached the processors whole: its start is followed at once by its own end.
    calls = batched.calls.calls
    for at, (kind, span_id) in enumerate(calls):
        if kind == "start" and span_id in batched.leaf_ids():
            assert calls[at + 1] == ("end", span_id)


def test_the_large_stream_defers_thousands_of_leaves_and_still_ends_children_first() -> None:
    host = _Host()
    export_events(events("large"), host.tracer, outcome=outcome("large"))
    leaves = host.leaf_ids()
    assert len(leaves) > 5_000
    # Started late, ended in order: every leaf ends before its parent does.
    ended_at = {span_id: at for at, (kind, span_id) in enumerate(host.calls.calls) if kind == "end"}
    parents = 0
    for s in host.memory.get_finished_spans():
        assert s.context is not None
        if s.context.span_id in leaves:
            assert s.parent is not None
            assert ended_at[s.context.span_id] < ended_at[s.parent.span_id]
            parents += 1
    assert parents == len(leaves)


def _tool_stream() -> list[dict[str, Any]]:
    return [
        ev("run:start", 0, "r", workflow="w"),
        ev("agent:start", 1, "a", "r", agentId="a1"),
        ev("tool:start", 2, "a", toolName="search", toolCallId="c1"),
        ev("tool:end", 3, "a", toolName="search", toolCallId="c1", status="ok"),
        ev("tool:start", 4, "a", toolName="fetch", toolCallId="c2"),
        ev("tool:end", 5, "a", toolName="fetch", toolCallId="c2", status="error"),
        ev("agent:end", 6, "a", status="ok"),
        ev("run:end", 7, "r", status="ok", settled=True),
    ]


def test_a_leaf_asked_for_its_context_starts_at_once_under_the_id_it_is_exported_with() -> None:
    host = _Host()
    mapper = SpanMapper(host.tracer, compile_secret_masker(None), end_batch=64)
    stream = _tool_stream()
    asked: dict[str, int] = {}
    for event in stream:
        mapper.feed(event)
        if event["type"] == "tool:start" and event["toolCallId"] == "c1":
            context = mapper.event_span_context()  # open: started now
            assert context is not None and context.is_valid
            assert host.calls.calls[-1] == ("start", context.span_id)
            asked["open"] = context.span_id
        if event["type"] == "tool:end" and event["toolCallId"] == "c2":
            ids = mapper.event_span_ids()  # ended and waiting: started now, ended in its turn
            assert ids is not None
            assert host.calls.calls[-1] == ("start", ids[1])
            asked["ended"] = ids[1]
    mapper.finish(OK_OUTCOME)
    by_name = {s.name: s for s in host.memory.get_finished_spans()}
    tools = [s for name, s in by_name.items() if "search" in name or "fetch" in name]
    assert len(tools) == 2 and len(host.memory.get_finished_spans()) == 4
    exported = {s.context.span_id for s in tools if s.context is not None}
    assert exported == {asked["open"], asked["ended"]}
    # Asked or not, the spans are the ones an unbatched mapping makes.
    plain = _Host()
    drain_events(_tool_stream(), create_mapper(plain.tracer), outcome=OK_OUTCOME)
    assert host.ended() == plain.ended()


def _late_children() -> list[dict[str, Any]]:
    """Agents ending before their last children (and a nested agent), batches flushed between."""
    return [
        ev("run:start", 0, "r", workflow="w"),
        ev("agent:start", 1, "a", "r", agentId="a1"),
        ev("agent:start", 2, "b", "a", agentId="b1"),
        ev("tool:start", 3, "b", toolName="search", toolCallId="c1"),
        ev("tool:end", 4, "b", toolName="search", toolCallId="c1", status="ok"),
        ev("agent:end", 5, "b", status="ok"),
        ev("agent:end", 6, "a", status="ok"),
        ev("tool:start", 7, "a", toolName="late", toolCallId="c2"),
        ev("tool:end", 8, "a", toolName="late", toolCallId="c2", status="ok"),
        ev("agent:start", 9, "c", "b", agentId="c1"),
        ev("agent:end", 10, "c", status="ok"),
        ev("run:end", 11, "r", status="ok", settled=True),
    ]


@pytest.mark.parametrize("batch", [1, 2, 64])
def test_an_agent_made_in_a_batch_still_parents_its_late_children(batch: int) -> None:
    batched = _Host()
    mapper = SpanMapper(batched.tracer, compile_secret_masker(None), end_batch=batch)
    drain_events(_late_children(), mapper, outcome=OK_OUTCOME)
    plain = _Host()
    drain_events(_late_children(), create_mapper(plain.tracer), outcome=OK_OUTCOME)
    assert batched.ended() == plain.ended()
    spans = batched.memory.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    late = next(s for s in spans if "late" in s.name)
    assert late.parent is not None
    assert by_id[late.parent.span_id].attributes[semconv.OPENINFERENCE_SPAN_KIND] == "AGENT"
    # A parent reaches the processors before its children, made in a batch or not (ends: as above).
    calls = batched.calls.calls
    for s in spans:
        if s.parent is not None and s.parent.span_id in by_id and s.context is not None:
            assert calls.index(("start", s.parent.span_id)) < calls.index(("start", s.context.span_id))


class _FailsOn:
    """A tracer that raises when asked to start one named span."""

    def __init__(self, tracer: Tracer, fragment: str) -> None:
        self._tracer = tracer
        self._fragment = fragment

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._fragment in name:
            raise RuntimeError("the host's tracer broke")
        return self._tracer.start_span(name, *args, **kwargs)


def test_a_tracer_failing_on_one_leaf_costs_that_leaf_alone() -> None:
    host = _Host()
    export_events(_tool_stream(), _FailsOn(host.tracer, "search"), outcome=OK_OUTCOME)  # type: ignore[arg-type]
    names = [s.name for s in host.memory.get_finished_spans()]
    assert len(names) == 3
    assert any("fetch" in n for n in names) and not any("search" in n for n in names)


def _meter() -> tuple[InMemoryMetricReader, Any]:
    reader = InMemoryMetricReader()
    return reader, MeterProvider(metric_readers=[reader]).get_meter("t")


def _metric_names(data: MetricsData | None) -> set[str]:
    assert data is not None
    return {
        found.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for found in scope.metrics
    }


def _exemplar_spans(data: MetricsData | None, metric: str) -> list[int]:
    assert data is not None
    points = histogram_points(data, metric)
    return [ex.span_id for point in points for ex in point.exemplars if ex.span_id is not None]


def _started_alone(host: _Host) -> list[int]:
    """Leaves whose start is not followed at once by their end: started before their batch."""
    calls, leaves = host.calls.calls, host.leaf_ids()
    return [
        span_id
        for at, (kind, span_id) in enumerate(calls)
        if kind == "start" and span_id in leaves and calls[at + 1] != ("end", span_id)
    ]


def test_with_a_meter_the_leaves_still_reach_the_tracer_in_their_batches() -> None:
    host = _Host()
    reader, meter = _meter()
    export_events(events("large"), host.tracer, meter=meter, outcome=outcome("large"))
    leaves = host.leaf_ids()
    assert len(leaves) > 5_000
    # Only the leaves still waiting when run:end folds everything may start before their batch.
    assert len(_started_alone(host)) < 64
    data = reader.get_metrics_data()
    for metric in (semconv.METRIC_TOOL_DURATION, "rulvar.invocation.duration"):
        named = _exemplar_spans(data, metric)
        assert named and set(named) <= leaves, metric


def test_a_collection_on_another_thread_folds_up_to_a_waiting_leaf_and_starts_none() -> None:
    host = _Host()
    reader, meter = _meter()
    mapper = SpanMapper(host.tracer, compile_secret_masker(None), end_batch=64)
    recorder = MetricsRecorder(meter, spans=mapper)
    stream = _tool_stream()
    # A counted event (no exemplar), then the first tool call: its leaf waits for its batch.
    stream.insert(2, ev("budget:exposure-wait", 1, "a", scope="run", willWait=True, model="m"))
    for event in stream:
        if event["type"] == "tool:end":
            event["durationMs"] = 5
    for event in stream[:5]:
        mapper.feed(event)
        recorder.feed(event)
    before = list(host.calls.calls)
    collected: list[MetricsData | None] = []
    reading = threading.Thread(target=lambda: collected.append(reader.get_metrics_data()))
    reading.start()
    reading.join(timeout=10)
    assert host.calls.calls == before  # the collection started no span
    assert collected
    # Folded up to the waiting leaf's event: the counter before it, no tool metric yet.
    seen = _metric_names(collected[0])
    assert semconv.METRIC_EXPOSURE_WAITS in seen
    assert not seen & {semconv.METRIC_TOOL_DURATION, semconv.METRIC_TOOL_CALLS}
    for event in stream[5:]:
        mapper.feed(event)
        recorder.feed(event)
    mapper.finish(OK_OUTCOME)
    recorder.finish(OK_OUTCOME)
    tools = {
        s.context.span_id
        for s in host.memory.get_finished_spans()
        if s.context is not None and ("search" in s.name or "fetch" in s.name)
    }
    assert len(tools) == 2
    # Every observation is there in the end, each naming its exported tool span.
    assert sorted(_exemplar_spans(reader.get_metrics_data(), semconv.METRIC_TOOL_DURATION)) == sorted(tools)


_KEYS = st.sampled_from(["a", "b", "c"])
_VALUES = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans())
_STATUSES = st.sampled_from(
    [Status(StatusCode.OK), Status(StatusCode.ERROR, "bad"), Status(StatusCode.UNSET), StatusCode.ERROR]
)
_CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("set_attribute"), _KEYS, _VALUES),
        st.tuples(st.just("set_attributes"), st.dictionaries(_KEYS, _VALUES, max_size=3)),
        st.tuples(st.just("add_event"), st.text(max_size=3), st.integers(0, 10)),
        st.tuples(st.just("set_status"), _STATUSES),
    ),
    max_size=12,
)


def _apply(span: Any, calls: list[tuple[Any, ...]]) -> None:
    for call in calls:
        if call[0] == "set_attribute":
            span.set_attribute(call[1], call[2])
        elif call[0] == "set_attributes":
            span.set_attributes(call[1])
        elif call[0] == "add_event":
            span.add_event(call[1], {"n": call[2]}, 100 + call[2])
        else:
            span.set_status(call[1])
    span.end(200)


@settings(max_examples=200, deadline=None)
@given(start=st.dictionaries(_KEYS, _VALUES, max_size=3), calls=_CALLS)
def test_a_deferred_span_ends_as_the_sdk_span_the_same_calls_make(
    start: dict[str, Any], calls: list[tuple[Any, ...]]
) -> None:
    direct, deferred = _Host(), _Host()
    _apply(direct.tracer.start_span("leaf", attributes=start, start_time=50), calls)
    queue = EndQueue(1)
    leaf = DeferredSpan(deferred.tracer.start_span, queue, "leaf", Context(), dict(start), 50, None)
    _apply(leaf, calls)
    assert queue.full
    queue.flush()
    # Roots without an identity get random ids: all else must match.
    assert [s[:1] + s[3:] for s in deferred.ended()] == [s[:1] + s[3:] for s in direct.ended()]
