"""How the span mapper's spans reach the tracer, and when.

:class:`SpanOpener` starts a mapped span in one of three ways: as a child record on the direct
path's recorder (no context object), through the host's tracer at once, or, for a leaf or an agent
of a recorded stream, as a :class:`~rulvar_otel.otel._deferred.DeferredSpan` made when it ends or
its first child starts (the queue it waits in keeps the order spans end in: see ``end_span``).
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.context import Context
from opentelemetry.trace import Link, NoOpTracer, Span, SpanContext, Tracer

from rulvar_otel.otel._attributes import AttrValue
from rulvar_otel.otel._deferred import DeferredSpan, EndQueue
from rulvar_otel.otel._records import RecordingTracer, SpanRecord
from rulvar_otel.otel._span_state import LiveSpan, MappedSpan, child_context
from rulvar_otel.otel.ids import SPAN_IDENTITY

__all__ = ["SpanOpener"]


class SpanOpener:
    """Starts the mapper's spans in its tracer; ``end_batch`` > 0 defers leaves and hands ends
    over that many at a time (see _deferred)."""

    __slots__ = ("_recorder", "_root_context", "_start_span", "_tracer", "ends")

    def __init__(self, tracer: Tracer, root_context: Context, end_batch: int) -> None:
        self._tracer = tracer
        self._start_span: Callable[..., Span] = tracer.start_span  # bound once: deferred spans call it
        # The direct path's recorder: a child of a live record starts without any context object.
        self._recorder = tracer.recorder if isinstance(tracer, RecordingTracer) else None
        self._root_context = root_context  # the context a span without a parent starts in
        # A no-op tracer makes nothing: nothing to wait for.
        defers = end_batch > 0 and self._recorder is None and not isinstance(tracer, NoOpTracer)
        self.ends = EndQueue(end_batch, child_context) if defers else None

    def context_for(self, parent: MappedSpan | None, template: SpanContext | None) -> Context:
        """The context a child of ``parent`` (the root, for None) starts in."""
        if parent is None:
            return self._root_context
        return child_context(parent, template)

    def start(
        self,
        name: str,
        attrs: dict[str, AttrValue],
        ns: int,
        parent: MappedSpan | None,
        template: SpanContext | None,
        identity: tuple[str, str] | None,
        links: list[Link] | None,
    ) -> LiveSpan:
        """Start a span now; ``identity`` is SPAN_IDENTITY's value meanwhile (when ids read it)."""
        token = SPAN_IDENTITY.set(identity) if identity is not None else None
        try:
            live = parent.span if parent is not None else None
            if self._recorder is not None and type(live) is SpanRecord and links is None:
                return self._recorder.start_under(name, live, attrs, ns)
            return self._tracer.start_span(
                name, context=self.context_for(parent, template), attributes=attrs, links=links, start_time=ns
            )
        finally:
            if token is not None:
                SPAN_IDENTITY.reset(token)

    def defer(
        self,
        ends: EndQueue,
        name: str,
        attrs: dict[str, AttrValue],
        ns: int,
        parent: MappedSpan,
        template: SpanContext | None,
        identity: tuple[str, str] | None,
        keeps: bool = False,
    ) -> DeferredSpan:
        """A span made when it ends, or when its first child is (``ends`` is :attr:`ends`).

        ``keeps``: the span may have children (an agent), so it keeps its context once made.
        """
        if parent.deferred is None:
            context = child_context(parent, template)
            return DeferredSpan(self._start_span, ends, name, context, attrs, ns, identity, keeps)
        # The parent waits too: it starts when this span does, just before it.
        span = DeferredSpan(self._start_span, ends, name, None, attrs, ns, identity, keeps)
        span.parent_ref = parent
        span.parent_template = template
        return span
