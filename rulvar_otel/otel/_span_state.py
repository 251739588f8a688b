"""The span mapper's records: span kinds, the per-span record, and the tables keyed by kind.

:class:`MappedSpan` is what :class:`~rulvar_otel.otel._mapper.SpanMapper` keeps for each span it
starts, and :func:`end_span` / :func:`expand_context` are how a record ends and how an ended one is
parented again. What stays of an ended span is small and invisible to the garbage collector: a
keyed one becomes a :data:`RetiredSpan` tuple (:func:`retire`, rebuilt by :func:`keyed`), a closed
invocation a string key (:class:`InvocationSpans`). The state machine itself (which spans are
open, when they end) stays in the mapper.
"""

from __future__ import annotations

import math
from typing import Final, TypeAlias

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    Span,
    SpanContext,
)

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._deferred import DeferredSpan, EndQueue
from rulvar_otel.otel._records import SAMPLED, SpanRecord

# What a mapped span holds while it is open: the host tracer's span, the direct path's record, or
# a span that starts in the tracer at its end (see _deferred).
LiveSpan: TypeAlias = Span | SpanRecord | DeferredSpan

__all__ = [
    "AGENT",
    "CHILD",
    "IDENTITY_PREFIX",
    "INVOCATION",
    "InvocationKey",
    "InvocationSpans",
    "LiveSpan",
    "OPENINFERENCE_KIND",
    "PHASE",
    "RUN",
    "SCOPE_TYPES",
    "TOOL",
    "MappedSpan",
    "RetiredSpan",
    "child_context",
    "end_span",
    "expand_context",
    "full_context",
    "invocation_key",
    "keyed",
    "kept_context",
    "retire",
    "span_ids",
    "template_shape",
]

# INVALID_TRACE_ID and INVALID_SPAN_ID (both 0 in the API), a literal compared natively.
_INVALID_ID: Final = 0

# The span kinds: Final literals, so compiled code compares native ints (no module lookup).
RUN: Final = 0
PHASE: Final = 1
AGENT: Final = 2
INVOCATION: Final = 3
TOOL: Final = 4
CHILD: Final = 5
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
        "deferred",
        "desc_end",
        "ended",
        "events_end",
        "has_invocations",
        "key",
        "kind",
        "parent",
        "pending_end",
        "segment",
        "span",
        "start_ns",
    )

    def __init__(
        self,
        span: LiveSpan | None,
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
        self.key: str | None = None  # the spanId the mapper keys it by, if any
        self.deferred: DeferredSpan | None = None  # a span that starts at its end (see _deferred)


# An ended keyed span as the mapper keeps it: (span id, kind, start, segment, parent's key). A tuple
# of atoms is not tracked by the garbage collector, so the ended spans of a long stream add nothing
# to a full collection's walk; the rare late lookup gets a record rebuilt from it (see keyed).
RetiredSpan: TypeAlias = tuple[int, int, int, int, str | None]


def retire(table: dict[str, MappedSpan | RetiredSpan], rec: MappedSpan, template: SpanContext | None) -> None:
    """Once ``rec`` has ended, ``table`` keeps a RetiredSpan for it where it can.

    Ended records never change again, so a copy serves a late child or a repeated opener as well
    as the original; the copy finds its parent by key, so only a parent with a key can be left.
    A context that is the export's ``template`` itself is kept by its span id too: expanded
    against the template, it is that context again.
    """
    key = rec.key
    context = rec.context
    parent = rec.parent
    if key is None or not rec.ended:
        return
    if context is template and template is not None:
        context = template.span_id
    if not isinstance(context, int):
        return
    if parent is None:
        table[key] = (context, rec.kind, rec.start_ns, rec.segment, None)
    elif parent.key is not None:
        table[key] = (context, rec.kind, rec.start_ns, rec.segment, parent.key)


def _revived(key: str, kept: RetiredSpan, parent: MappedSpan | None) -> MappedSpan:
    """An ended record rebuilt from what :func:`retire` kept, under ``parent`` (its key's record)."""
    rec = MappedSpan(None, kept[0], kept[1], kept[2], parent, kept[3])
    rec.ended = True
    rec.key = key
    return rec


def _ended_invocation() -> MappedSpan:
    rec = MappedSpan(None, INVALID_SPAN_CONTEXT, INVOCATION, 0, None, -1)
    rec.ended = True
    return rec


# What InvocationSpans.get answers for a closed key: "opened and ended" is all a later duplicate
# needs to know, and dropping the record keeps memory bounded by open spans for invocations.
_ENDED_INVOCATION: Final = _ended_invocation()


InvocationKey: TypeAlias = "str | tuple[str, object]"


def invocation_key(span_key: str, invocation: object) -> InvocationKey:
    """An invocation's key: one string, equal exactly when the ``(span_key, invocation)`` tuples
    are equal; the tuple itself for a value with no such form (a fractional or non-finite float).

    A string key is hashed and compared in the dict's fast path, and a dict of strings is not
    tracked by the garbage collector: a long stream's closed invocations cost it nothing.
    """
    prefix = f"{len(span_key)}:{span_key}"
    if type(invocation) is str:
        return f"{prefix}s{invocation}"
    if invocation is None:
        return prefix + "n"
    # 1, 1.0 and True are equal (and hash alike) as tuple members: one form for all three.
    if type(invocation) is int or type(invocation) is bool:
        return f"{prefix}i{int(invocation)}"
    if type(invocation) is float and math.isfinite(invocation) and invocation.is_integer():
        return f"{prefix}i{int(invocation)}"
    return (span_key, invocation)


class InvocationSpans:
    """Invocation spans by :func:`invocation_key`: the open ones' records, and the closed keys."""

    __slots__ = ("_closed", "open")

    def __init__(self) -> None:
        self.open: dict[InvocationKey, MappedSpan] = {}
        self._closed: dict[InvocationKey, None] = {}

    def get(self, key: InvocationKey) -> MappedSpan | None:
        """The open record ``key`` names, _ENDED_INVOCATION once closed, or None."""
        rec = self.open.get(key)
        if rec is not None:
            return rec
        return _ENDED_INVOCATION if key in self._closed else None

    def close(self, key: InvocationKey) -> None:
        """``key``'s span has ended: only the key stays."""
        if key in self.open:
            del self.open[key]  # compiled, `del` is a C call; `pop` is a method call
        self._closed[key] = None


def keyed(table: dict[str, MappedSpan | RetiredSpan], span_id: str) -> MappedSpan | None:
    """The span ``table`` keys by ``span_id``; an ended one rebuilt from its RetiredSpan (for a
    late child or a repeated opener), with its retired parents, walking up without recursion."""
    found = table.get(span_id)
    if found is None or isinstance(found, MappedSpan):
        return found
    chain: list[tuple[str, RetiredSpan]] = [(span_id, found)]
    parent: MappedSpan | None = None
    parent_key = found[4]
    while parent_key is not None:
        above = table[parent_key]
        if isinstance(above, MappedSpan):
            parent = above
            break
        chain.append((parent_key, above))
        parent_key = above[4]
    for key, kept in reversed(chain):
        parent = _revived(key, kept, parent)
    return parent


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


def _undefer(rec: MappedSpan) -> None:
    """Asked for its context, a deferred span starts in the tracer now (see _deferred)."""
    deferred = rec.deferred
    if deferred is not None:
        rec.context = deferred.get_span_context()
        rec.deferred = None


def full_context(rec: MappedSpan, template: SpanContext | None) -> SpanContext:
    """``rec``'s context in full; an open span keeps it so (a span id is expanded once)."""
    if rec.deferred is not None:
        _undefer(rec)
    context = rec.context
    if isinstance(context, SpanContext):
        return context
    full = expand_context(rec, template)
    if not rec.ended:
        rec.context = full
    return full


def span_ids(rec: MappedSpan, template_trace_id: int) -> tuple[int, int] | None:
    """``rec``'s (trace id, span id) as :func:`expand_context` would give them, without building a
    SpanContext (a metric exemplar needs the two ids only); None for an invalid span.

    ``template_trace_id`` is the export template's trace id, read once by the caller (a
    SpanContext's fields are interpreted properties: costly per event).
    """
    if rec.deferred is not None:
        _undefer(rec)
    ctx = rec.context
    if type(ctx) is int:  # kept by its span id (the usual case): compiled, no module lookup
        return (template_trace_id, ctx) if template_trace_id != _INVALID_ID and ctx != _INVALID_ID else None
    if isinstance(ctx, SpanContext):
        return (ctx.trace_id, ctx.span_id) if ctx.is_valid else None
    return None


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
        if parent.deferred is not None:
            _undefer(parent)  # a parent waiting for its batch starts before its first child
        # An ended parent (or a record, which is no OTel span) stands in by its context.
        live = parent.span
        if type(live) is DeferredSpan:
            live = live.span  # the tracer's span, if it is still held
        span = live if isinstance(live, Span) else NonRecordingSpan(expand_context(parent, template))
        context = parent.child_context = trace.set_span_in_context(span)
    return context


def end_span(
    rec: MappedSpan, span: LiveSpan, ns: int, template: SpanContext | None, queue: EndQueue | None
) -> None:
    """End ``span`` (``rec.span``) at ``ns``, kept within its start and span events; with a
    ``queue``, a started span ends in the queue's next flush, in order (see _deferred).

    Ended records keep little: the SDK span is released, and a context in the shape of the export's
    ``template`` shrinks to its span id (see :func:`expand_context`).
    """
    if ns < rec.start_ns:
        ns = rec.start_ns  # a clock step backwards must not make a negative duration
    if ns < rec.events_end:
        ns = rec.events_end  # nor leave one of its span events outside it
    if type(span) is DeferredSpan:
        span.end(ns)  # compiled: a native call
    elif queue is not None:
        queue.end_later(span, ns)
    else:
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
