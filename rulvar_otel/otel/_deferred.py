"""Spans of a recorded stream handed to the host's tracer when they end, in batches.

A tool or invocation span has no children: while it is open nothing needs its context unless
somebody asks for it (a metric's exemplar). :class:`DeferredSpan` keeps what the mapper does to
such a span (attributes, span events, status) and starts the tracer's span only at its end, with
every attribute in the one ``start_span`` call; setting attributes on a started SDK span costs a
lock and a cleaning pass per call. An agent span waits the same way until it ends or its first
child starts (which starts it first: ``parent_ref``), and keeps its context once made, for a late
child. :class:`EndQueue` keeps the ended waiting spans, and the ends of the spans started at once
(runs, phases), in stream order, and hands them to the tracer in one loop every ``limit``
entries: mapping a batch of events and then making a batch of spans keeps each loop's code and
data in the caches, where alternating event by event evicts both.

The tracer sees the same spans (names, parents, attributes in the same order, span events,
status, start and end times), ending in the same order; only when it sees them changes. Asking a
deferred span for its context starts it at once; from then on it passes every call on, and its
end still waits for its turn. A metrics recorder beside the mapper reads its exemplars' spans
after each batch (``after_flush``), when the batch's spans keep their contexts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from time import time_ns
from typing import Any, Final, Protocol, cast

from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN_CONTEXT, Span, SpanContext, Status, StatusCode
from opentelemetry.util.types import Attributes, AttributeValue

from rulvar_otel.otel._records import update_as_sdk
from rulvar_otel.otel.ids import SPAN_IDENTITY

__all__ = ["DeferredSpan", "EndQueue"]

_log = logging.getLogger("rulvar_otel")
_NO_CONTEXT: Final = INVALID_SPAN_CONTEXT  # a C static when compiled: no module lookup per call

_StatusCall = tuple["Status | StatusCode", "str | None"]
# A started span's attributes: never written (calls then pass on, or drop once it is let go).
_HANDED_OVER: Final[dict[str, Any]] = {}


class EndQueue:
    """What waits for the tracer, in stream order: ended leaves, and the ends of started spans.

    ``full`` once ``limit`` entries wait: the mapper then calls :meth:`flush` before its next
    event (an event's own leaf can still be asked for its context). Keeping ends in the same queue
    keeps their order: the tracer sees every span end where the stream ends it, children first.
    """

    __slots__ = ("after_flush", "full", "keep_contexts", "limit", "ready", "resolve", "waiting")

    def __init__(self, limit: int, resolve: Callable[[Any, Any], Context] | None = None) -> None:
        self.limit = limit
        # How a span whose parent waits too finds its context: resolve(parent, template), which
        # starts the parent first (the mapper's child_context).
        self.resolve = resolve
        # A DeferredSpan, or a started span followed by its end time: flat, no tuple per entry.
        self.ready: list[object] = []
        self.waiting = 0
        self.full = False
        # Set by a metrics recorder reading its exemplars' spans once their batch is made.
        self.keep_contexts = False  # a leaf made in a batch keeps its context
        self.after_flush: Callable[[], None] | None = None  # called at the end of every flush

    def ended(self, leaf: DeferredSpan) -> None:
        self.ready.append(leaf)
        self.waiting += 1
        if self.waiting >= self.limit:
            self.full = True

    def end_later(self, span: _Ending, end_ns: int) -> None:
        """End a started span in the next flush, after what ended before it."""
        ready = self.ready
        ready.append(span)
        ready.append(end_ns)
        self.waiting += 1
        if self.waiting >= self.limit:
            self.full = True

    def flush(self) -> None:
        """Make every waiting leaf's span and end every waiting span, in order. A span the
        tracer fails on costs that span alone."""
        ready = self.ready
        self.ready = []
        self.waiting = 0
        self.full = False
        at, count = 0, len(ready)
        keep = self.keep_contexts
        while at < count:
            item = ready[at]
            at += 1
            try:
                if type(item) is DeferredSpan:
                    if not item.made:
                        # The made span is not kept: it is the tracer's from its end on.
                        made = item.make()
                        if keep or item.keeps:
                            item.kept = made.get_span_context()
                    elif (started := item.span) is not None:
                        started.end(item.end_ns)  # started for its context once it had ended
                else:
                    end_ns = ready[at]
                    at += 1
                    cast("_Ending", item).end(cast("int", end_ns))
            except Exception:  # noqa: BLE001 - the host's tracer must not cost the batch
                _log.debug("a span could not be made or ended", exc_info=True)
        after = self.after_flush
        if after is not None:
            try:
                after()
            except Exception:  # noqa: BLE001 - metrics never cost the spans
                _log.debug("the span batch's listener failed", exc_info=True)


class _Ending(Protocol):
    def end(self, end_time: int | None = None) -> None: ...


class DeferredSpan:
    """A span not yet started in the host's tracer (see the module docstring)."""

    __slots__ = (
        "attributes",
        "context",
        "description",
        "end_ns",
        "events",
        "identity",
        "keeps",
        "kept",
        "made",
        "name",
        "parent_ref",
        "parent_template",
        "queue",
        "span",
        "start_ns",
        "start_span",
        "status",
        "statuses",
    )

    def __init__(
        self,
        start_span: Callable[..., Span],
        queue: EndQueue,
        name: str,
        context: Context | None,
        attributes: dict[str, Any],  # the mapper's own: it hands the dict over
        start_ns: int,
        identity: tuple[str, str] | None,
        keeps: bool = False,
    ) -> None:
        self.start_span = start_span  # the tracer's start_span, bound once per export
        self.queue = queue
        self.name = name
        self.context = context  # the parent's context the span starts in (None: see parent_ref)
        # A parent that waits too, and the export's template: the context is the queue's
        # resolve(parent, template) when this span starts (two slots, no tuple per span).
        self.parent_ref: Any = None
        self.parent_template: Any = None
        self.keeps = keeps  # a span that may have children: made in a batch, it keeps its context
        self.attributes = attributes
        self.start_ns = start_ns
        self.identity = identity  # SPAN_IDENTITY's value while the span starts, if ids read it
        # Span events flat, (name, attributes, timestamp) after another: no tuple for the collector.
        self.events: list[Any] | None = None
        self.status: Status | StatusCode | None = None  # the first set_status call, flat
        self.description: str | None = None
        self.statuses: list[_StatusCall] | None = None  # any later ones (rare)
        self.end_ns = -1  # set once ended
        self.made = False  # its span started (and ended, if it had); calls then pass on or drop
        self.span: Span | None = None  # the tracer's span, once started
        self.kept: SpanContext | None = None  # its context, made in a batch that keeps contexts

    # --- the part of the Span API the mapper uses ---------------------------------------------

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        span = self.span
        if span is not None:
            span.set_attribute(key, value)
            return
        if self.made:
            return  # made in a batch and let go: as on an ended SDK span, nothing changes
        # As the SDK's attribute mapping: setting a key again moves it to the end.
        attributes = self.attributes
        if key in attributes:
            del attributes[key]
        attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        span = self.span
        if span is not None:
            span.set_attributes(attributes)
            return
        if self.made:
            return
        update_as_sdk(self.attributes, attributes)

    def add_event(self, name: str, attributes: Attributes = None, timestamp: int | None = None) -> None:
        span = self.span
        if span is not None:
            span.add_event(name, attributes, timestamp)
            return
        if self.made:
            return
        events = self.events
        if events is None:
            events = self.events = []
        events.append(name)
        events.append(attributes)
        events.append(timestamp)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        span = self.span
        if span is not None:
            span.set_status(status, description)
            return
        if self.made:
            return
        # Kept as calls: the SDK decides which one stands (OK is final, UNSET never overwrites).
        if self.status is None:
            self.status = status
            self.description = description
            return
        statuses = self.statuses
        if statuses is None:
            statuses = self.statuses = []
        statuses.append((status, description))

    def end(self, end_time: int | None = None) -> None:
        if self.end_ns >= 0:
            return  # ended already: as the SDK, a second end changes nothing
        self.end_ns = end_time if end_time is not None else time_ns()
        span = self.span
        if span is not None:
            self.queue.end_later(span, self.end_ns)  # started for its context: ends in order
        else:
            self.queue.ended(self)

    def get_span_context(self) -> SpanContext:
        span = self.span
        if span is None:
            if self.made:  # made in a batch and let go: the tracer has it
                kept = self.kept
                return kept if kept is not None else _NO_CONTEXT
            span = self.span = self.start()  # if it has ended, its end waits in the queue
        return span.get_span_context()

    # --- making the tracer's span --------------------------------------------------------------

    def start(self) -> Span:
        """Start the tracer's span with everything kept so far."""
        self.made = True
        context = self.context
        parent = self.parent_ref
        if context is None and parent is not None and (resolve := self.queue.resolve) is not None:
            context = resolve(parent, self.parent_template)
            self.parent_ref = self.parent_template = None
        identity = self.identity
        token = SPAN_IDENTITY.set(identity) if identity is not None else None
        try:
            span = self.start_span(
                self.name, context=context, attributes=self.attributes, start_time=self.start_ns
            )
        finally:
            if token is not None:
                SPAN_IDENTITY.reset(token)
        # The tracer holds them now: a span kept for its context (an agent) keeps no more.
        self.attributes = _HANDED_OVER
        self.context = None
        events = self.events
        if events is not None:
            for at in range(0, len(events), 3):
                span.add_event(events[at], events[at + 1], events[at + 2])
            self.events = None
        first = self.status
        if first is not None:
            span.set_status(first, self.description)
            statuses = self.statuses
            if statuses is not None:
                for status, description in statuses:
                    span.set_status(status, description)
                self.statuses = None
            self.status = None
        return span

    def make(self) -> Span:
        """Start and end the span of an ended leaf (the caller keeps it, if it needs it)."""
        span = self.start()
        span.end(self.end_ns)
        return span
