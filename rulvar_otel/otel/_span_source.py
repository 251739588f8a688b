"""Which span an event belongs to: what the span mapper tells the metrics fed beside it.

A histogram observation's exemplar names the span of its event. :class:`EventSpans` is the span
mapper's base: it remembers the span the last fed event opened, closed or was attached to, and
the run's first span, and gives either as a context (the SDK recorder), as two ids (the direct
aggregator) or, on a recorded export whose leaf spans wait for their batch (see ``_deferred``),
as a reference read after the batch is made: asking for a waiting leaf's context would start it
on its own, out of its batch.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.trace import SpanContext

from rulvar_otel.otel._deferred import EndQueue
from rulvar_otel.otel._span_state import MappedSpan, expand_context, full_context, span_ids

__all__ = ["EventSpans"]


class EventSpans:
    """The span mapper's record of which span each event belongs to (see the module docstring)."""

    def __init__(self, ends: EndQueue | None) -> None:
        self._ends = ends  # the recorded export's queue of span ends (None: spans start at once)
        # The span the last fed event opened, closed or was attached to: its metrics' exemplar.
        self._event_span: MappedSpan | None = None
        self._first_run: MappedSpan | None = None
        self._template: SpanContext | None = None  # the first span's context: compact contexts
        self._template_trace = 0  # the template's trace id, read once (0: none yet)

    def event_span_context(self) -> SpanContext | None:
        """The span the last fed event opened, closed or was attached to (None when none)."""
        return full_context(rec, self._template) if (rec := self._event_span) is not None else None

    def event_span_ids(self) -> tuple[int, int] | None:
        """:meth:`event_span_context` as (trace id, span id), building no context (None: none, invalid)."""
        return span_ids(rec, self._template_trace) if (rec := self._event_span) is not None else None

    def run_span_context(self) -> SpanContext | None:
        """The first run span's context (the per-run metrics' exemplar), None before one opens."""
        return expand_context(rec, self._template) if (rec := self._first_run) is not None else None

    def event_span_ref(self) -> MappedSpan | None:
        """The last fed event's span, to be read by :meth:`span_context_of` (None when none)."""
        return self._event_span

    def span_context_of(self, ref: MappedSpan) -> SpanContext:
        """The context of a span :meth:`event_span_ref` gave (a leaf still waiting starts now)."""
        return full_context(ref, self._template)

    def span_made(self, ref: MappedSpan) -> bool:
        """Whether reading ``ref``'s context starts no span (it started, or its batch was made)."""
        deferred = ref.deferred
        return deferred is None or deferred.made

    def after_each_batch(self, callback: Callable[[], None]) -> bool:
        """Call ``callback`` right after each batch of spans reaches the tracer, on the feeding
        thread; every span made in it keeps its context. One callback: a later one replaces it.
        False: this export makes no batches."""
        ends = self._ends
        if ends is None:
            return False
        ends.after_flush = callback
        ends.keep_contexts = True
        return True
