"""The span mapper's records: span kinds, the per-span record, and the tables keyed by kind.

:class:`MappedSpan` is what :class:`~rulvar_otel.otel._mapper.SpanMapper` keeps for each span it
starts, and :func:`end_span` / :func:`expand_context` are how a record ends and how an ended one is
parented again. The state machine itself (which spans are open, when they end) stays in the mapper.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, Span, SpanContext

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._records import SAMPLED, SpanRecord

# What a mapped span holds while it is open: the host tracer's span, or the direct path's record.
LiveSpan: TypeAlias = Span | SpanRecord

__all__ = [
    "AGENT",
    "CHILD",
    "ENDED_INVOCATION",
    "IDENTITY_PREFIX",
    "INVOCATION",
    "LiveSpan",
    "OPENINFERENCE_KIND",
    "PHASE",
    "RUN",
    "SCOPE_TYPES",
    "TOOL",
    "MappedSpan",
    "child_context",
    "end_span",
    "expand_context",
    "full_context",
    "kept_context",
    "template_shape",
]

RUN, PHASE, AGENT, INVOCATION, TOOL, CHILD = range(6)
# docs/otel-mapping.md#openinference-span-kinds
OPENINFERENCE_KIND: Final = {
    RUN: sc.OPENINFERENCE_CHAIN,
    PHASE: sc.OPENINFERENCE_CHAIN,
    CHILD: sc.OPENINFERENCE_CHAIN,
    AGENT: sc.OPENINFERENCE_AGENT,
    INVOCATION: sc.OPENINFERENCE_LLM,
    TOOL: sc.OPENINFERENCE_TOOL,
}
SCOPE_TYPES: Final = {PHASE: "phase:start", CHILD: "child:start", AGENT: "agent:start"}
IDENTITY_PREFIX: Final = {RUN: "run:", PHASE: "phase:", CHILD: "child:", AGENT: "agent:"}


class MappedSpan:
    """One span of this export. Ended spans keep only what parenting and replay checks need."""

    __slots__ = (
        "child_context",
        "context",
        "desc_end",
        "ended",
        "events_end",
        "has_invocations",
        "kind",
        "parent",
        "pending_end",
        "segment",
        "span",
        "start_ns",
    )

    def __init__(
        self,
        span: LiveSpan,
        context: SpanContext | int,
        kind: int,
        start_ns: int,
        parent: MappedSpan | None,
        segment: int,
    ) -> None:
        self.span: LiveSpan | None = span
        # ``span``'s context. A context shaped like the export's first one is kept as its span id
        # (see expand_context): once ended, and for a direct-path record from its start.
        self.context: SpanContext | int = context
        self.kind = kind
        self.start_ns = start_ns
        self.parent = parent
        self.segment = segment
        self.ended = False
        self.desc_end = 0  # latest end among descendants (phases end there)
        self.events_end = 0  # latest time of its own span events: it never ends before them
        self.has_invocations = False  # an agent with invocation children reports rulvar.usage.*
        self.pending_end: int | None = None  # a leftover of an earlier segment, ended at finish
        # The context children start in, built once per parent (and rebuilt once it has ended).
        self.child_context: Context | None = None


def _ended_invocation() -> MappedSpan:
    rec = MappedSpan(NonRecordingSpan(INVALID_SPAN_CONTEXT), INVALID_SPAN_CONTEXT, INVOCATION, 0, None, -1)
    rec.span = None
    rec.ended = True
    return rec


# What a closed invocation's key maps to: "opened and ended" is all a later duplicate needs to know,
# and dropping the record keeps memory bounded by open spans for invocations.
ENDED_INVOCATION: Final = _ended_invocation()


def expand_context(rec: MappedSpan, template: SpanContext | None) -> SpanContext:
    """``rec``'s span context, rebuilt from the export's template if it was shrunk to a span id."""
    ctx = rec.context
    if isinstance(ctx, SpanContext):
        return ctx
    assert template is not None  # only compacted against a template
    return SpanContext(
        template.trace_id,
        ctx,
        is_remote=template.is_remote,
        trace_flags=template.trace_flags,
        trace_state=template.trace_state,
    )


def full_context(rec: MappedSpan, template: SpanContext | None) -> SpanContext:
    """``rec``'s context in full; an open span keeps it so (a span id is expanded once)."""
    context = rec.context
    if isinstance(context, SpanContext):
        return context
    full = expand_context(rec, template)
    if not rec.ended:
        rec.context = full
    return full


def template_shape(template: SpanContext) -> tuple[int, object]:
    """The trace id and tracestate a record must have to be kept by its span id (see
    :func:`kept_context`); ``(-1, None)`` when no record can (a remote or unsampled template)."""
    if template.trace_flags == SAMPLED and not template.is_remote:
        return template.trace_id, template.trace_state
    return -1, None


def kept_context(span: LiveSpan, trace_id: int, state: object) -> SpanContext | int:
    """What a mapped span keeps of ``span``'s context: a record in the template's shape
    (``template_shape``) its span id alone, its SpanContext made only if something asks."""
    if type(span) is SpanRecord and span.trace_id == trace_id and span.trace_state is state:
        return span.span_id
    return span.get_span_context()


def child_context(parent: MappedSpan, template: SpanContext | None) -> Context:
    """The context ``parent``'s children start in, built once per parent (and once more after it
    ended: the ended span's context then stands for it)."""
    context = parent.child_context
    if context is None:
        # An ended parent (or a record, which is no OTel span) stands in by its context.
        live = parent.span
        span = live if isinstance(live, Span) else NonRecordingSpan(expand_context(parent, template))
        context = parent.child_context = trace.set_span_in_context(span)
    return context


def end_span(rec: MappedSpan, span: LiveSpan, ns: int, template: SpanContext | None) -> None:
    """End ``span`` (``rec.span``) at ``ns``, kept within its start and span events.

    Ended records keep little: the SDK span is released, and a context in the shape of the export's
    ``template`` shrinks to its span id (see :func:`expand_context`).
    """
    if ns < rec.start_ns:
        ns = rec.start_ns  # a clock step backwards must not make a negative duration
    if ns < rec.events_end:
        ns = rec.events_end  # nor leave one of its span events outside it
    span.end(end_time=ns)
    rec.ended = True
    rec.span = None  # the context is all a late child needs
    rec.child_context = None
    # Tool and invocation records are never parents and are dropped once ended: nothing to shrink.
    ctx = rec.context
    if (
        template is not None
        and rec.kind != TOOL
        and rec.kind != INVOCATION
        and isinstance(ctx, SpanContext)
        and ctx is not template
        and ctx.trace_id == template.trace_id
        and ctx.trace_flags == template.trace_flags
        and ctx.is_remote == template.is_remote
        and ctx.trace_state is template.trace_state
    ):
        rec.context = ctx.span_id
    # Every raise of a desc_end reaches all ancestors, so an ancestor's desc_end is never below
    # its descendant's: the first one already at ns or later ends the walk.
    parent = rec.parent
    while parent is not None and parent.desc_end < ns:
        parent.desc_end = ns
        parent = parent.parent
