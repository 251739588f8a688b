"""The SDK floors: the cheapest way to make exactly the spans the exporter makes, through the same SDK.

:func:`capture` exports a stream once into memory and turns the finished spans into a
:class:`Script` (names, parents, attributes, span events with their timestamps, status, start and
end times). :func:`replay` makes those spans again with one ``start_span`` (all attributes at
start), the ``add_event`` calls, one ``set_status`` and one ``end`` per span: no event parsing, no
state machine, no masking. The exporter's time over the floor's is the price of the mapping itself.

:func:`capture_metrics` does the same for metrics: it records every instrument call the metrics
recorder makes on a meter (``add`` and ``record``, with their attributes and exemplar contexts),
and :func:`replay_metrics` makes exactly those calls on real SDK instruments, without any fold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import metrics as metrics_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, Status, Tracer

from rulvar_otel.otel import export_events

__all__ = [
    "DiscardExporter",
    "MetricCall",
    "Script",
    "capture",
    "capture_metrics",
    "new_tracer",
    "replay",
    "replay_calls",
    "replay_metrics",
    "signature",
]


class DiscardExporter(SpanExporter):
    """Accepts every span and keeps none: the processor's hand-off without any I/O."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def new_tracer(exporter: SpanExporter | None = None) -> tuple[TracerProvider, Tracer]:
    """The provider both sides use: the CLI's span limits (no event-count cap), a simple processor."""
    provider = TracerProvider(span_limits=SpanLimits(max_events=SpanLimits.UNSET))
    provider.add_span_processor(SimpleSpanProcessor(exporter or DiscardExporter()))
    return provider, provider.get_tracer("rulvar-otel-bench")


class _StartOrder(SpanProcessor):
    def __init__(self) -> None:
        self.order: list[int] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.order.append(span.get_span_context().span_id)


@dataclass(frozen=True)
class ScriptSpan:
    name: str
    parent: int  # index into Script.spans, -1 for the root
    attributes: dict[str, Any]
    start: int
    end: int
    events: tuple[tuple[str, dict[str, Any], int], ...]
    status: Status
    has_children: bool


@dataclass(frozen=True)
class Script:
    spans: tuple[ScriptSpan, ...]
    span_events: int


def capture(events: Sequence[Mapping[str, Any]]) -> tuple[Script, list[ReadableSpan]]:
    """Export ``events`` once into memory; the script of the spans in start order, and the spans."""
    memory = InMemorySpanExporter()
    provider, tracer = new_tracer(memory)
    order = _StartOrder()
    provider.add_span_processor(order)
    export_events(events, tracer)
    provider.shutdown()
    finished = {s.context.span_id: s for s in memory.get_finished_spans() if s.context is not None}
    index = {span_id: i for i, span_id in enumerate(order.order)}
    out: list[ScriptSpan] = []
    span_events = 0
    parents = {s.parent.span_id for s in finished.values() if s.parent is not None}
    for span_id in order.order:
        span = finished[span_id]
        parent = index[span.parent.span_id] if span.parent is not None else -1
        recorded = tuple((e.name, dict(e.attributes or {}), e.timestamp) for e in span.events)
        span_events += len(recorded)
        out.append(
            ScriptSpan(
                name=span.name,
                parent=parent,
                attributes=dict(span.attributes or {}),
                start=span.start_time or 0,
                end=span.end_time or 0,
                events=recorded,
                status=span.status,
                has_children=span_id in parents,
            )
        )
    return Script(tuple(out), span_events), list(memory.get_finished_spans())


def replay(script: Script, tracer: Tracer) -> int:
    """Make the script's spans through ``tracer``; parents start before their children."""
    # Only parents keep a context (of the span context alone, like the exporter's ended parents),
    # so the floor holds no more live objects than the exporter does.
    contexts: dict[int, Context] = {}
    set_in = trace.set_span_in_context
    start_span = tracer.start_span
    root = Context()
    for index, item in enumerate(script.spans):
        context = contexts[item.parent] if item.parent >= 0 else root
        span = start_span(item.name, context=context, attributes=item.attributes, start_time=item.start)
        for name, attributes, timestamp in item.events:
            span.add_event(name, attributes, timestamp)
        span.set_status(item.status)
        span.end(item.end)
        if item.has_children:
            contexts[index] = set_in(NonRecordingSpan(span.get_span_context()))
    return len(script.spans)


def signature(spans: Sequence[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Spans as comparable tuples, ids replaced by the parent's name path (ids are random)."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def path(span: ReadableSpan) -> tuple[str, ...]:
        names: list[str] = []
        node: ReadableSpan | None = span
        while node is not None:
            names.append(node.name)
            node = by_id.get(node.parent.span_id) if node.parent is not None else None
        return tuple(reversed(names))

    rows = [
        (
            path(s),
            s.start_time,
            s.end_time,
            sorted((s.attributes or {}).items()),
            [(e.name, sorted((e.attributes or {}).items()), e.timestamp) for e in s.events],
            s.status.status_code,
            s.status.description,
        )
        for s in spans
    ]
    rows.sort(key=repr)
    return rows


@dataclass(frozen=True)
class MetricCall:
    instrument: int  # index into the captured instrument definitions
    value: float
    attributes: Mapping[str, Any] | None
    context: Context | None


class _Calls:
    def __init__(self, calls: list[MetricCall], index: int) -> None:
        self._calls = calls
        self._index = index

    def add(self, amount: float, attributes: Any = None, context: Context | None = None) -> None:
        self._calls.append(MetricCall(self._index, amount, attributes, context))


# The API's instrument classes, so the recorder drives each as it drives a real one.
class _CaptureCounter(_Calls, metrics_api.Counter):
    pass


class _CaptureUpDownCounter(_Calls, metrics_api.UpDownCounter):
    pass


class _CaptureHistogram(_Calls, metrics_api.Histogram):
    def record(self, amount: float, attributes: Any = None, context: Context | None = None) -> None:
        self.add(amount, attributes, context)


_Instrument = _CaptureCounter | _CaptureUpDownCounter | _CaptureHistogram
_KINDS: Final = {
    "create_counter": _CaptureCounter,
    "create_up_down_counter": _CaptureUpDownCounter,
    "create_histogram": _CaptureHistogram,
}


class _CaptureMeter:
    """Stands in for a meter: hands out instruments that only remember how they are called."""

    def __init__(self) -> None:
        self.definitions: list[tuple[str, str, dict[str, Any]]] = []
        self.calls: list[MetricCall] = []

    def _make(self, kind: str, name: str, **kwargs: Any) -> _Instrument:
        self.definitions.append((kind, name, kwargs))
        return _KINDS[kind](self.calls, len(self.definitions) - 1)

    def create_counter(self, name: str, **kwargs: Any) -> _Instrument:
        return self._make("create_counter", name, **kwargs)

    def create_up_down_counter(self, name: str, **kwargs: Any) -> _Instrument:
        return self._make("create_up_down_counter", name, **kwargs)

    def create_histogram(self, name: str, **kwargs: Any) -> _Instrument:
        return self._make("create_histogram", name, **kwargs)

    def create_observable_gauge(self, name: str, **kwargs: Any) -> None:
        return None  # the recorder's collect hook: it never reports a value


def capture_metrics(events: Sequence[Mapping[str, Any]]) -> _CaptureMeter:
    """Export ``events`` once with metrics on a capturing meter; its definitions and calls."""
    meter = _CaptureMeter()
    _, tracer = new_tracer()
    export_events(events, tracer, meter=meter)  # type: ignore[arg-type]
    return meter


def replay_metrics(captured: _CaptureMeter, meter: Any) -> list[tuple[Any, float, Any, Context | None]]:
    """The captured calls bound to instruments like the captured ones on ``meter`` (SDK ones)."""
    instruments = [getattr(meter, kind)(name, **kwargs) for kind, name, kwargs in captured.definitions]
    methods = [
        i.record if kind == "create_histogram" else i.add
        for i, (kind, _, _) in zip(instruments, captured.definitions, strict=True)
    ]
    return [(methods[c.instrument], c.value, c.attributes, c.context) for c in captured.calls]


def replay_calls(calls: list[tuple[Any, float, Any, Context | None]]) -> int:
    """Make the calls :func:`replay_metrics` bound, in order: the SDK's own cost of the metrics."""
    for method, value, attributes, context in calls:
        method(value, attributes, context=context)
    return len(calls)
