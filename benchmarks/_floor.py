"""The SDK floor: the cheapest way to make exactly the spans the exporter makes, through the same SDK.

:func:`capture` exports a stream once into memory and turns the finished spans into a
:class:`Script` (names, parents, attributes, span events with their timestamps, status, start and
end times). :func:`replay` makes those spans again with one ``start_span`` (all attributes at
start), the ``add_event`` calls, one ``set_status`` and one ``end`` per span: no event parsing, no
state machine, no masking. The exporter's time over the floor's is the price of the mapping itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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

__all__ = ["DiscardExporter", "Script", "capture", "new_tracer", "replay", "signature"]


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
