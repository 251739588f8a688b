"""The span state machine: the one place that knows which spans are open.

:class:`SpanMapper` consumes wire-form events one at a time (``feed``) and is finished once with
the run's outcome (``finish``). It implements the contract in ``docs/otel-mapping.md``; the
attribute values come from the pure generators in ``_attributes``. Nothing a strange event carries
may raise out of ``feed``: a failure on one event is counted and the stream goes on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    NoOpTracer,
    Span,
    SpanContext,
    Status,
    StatusCode,
    Tracer,
)

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.otel import _attributes as ax
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._clock import EventClock
from rulvar_otel.otel.ids import SPAN_IDENTITY

__all__ = ["SpanMapper"]

_log = logging.getLogger("rulvar_otel")

SETTLEMENT_FAILED_MESSAGE: Final = (
    "settlement failed: nothing durable records this terminal; resume re-settles"
)
SUPERSEDED_MESSAGE: Final = "superseded: a successor owns settlement; this stale terminal is withheld"

_RUN, _PHASE, _AGENT, _INVOCATION, _TOOL, _CHILD = range(6)
# docs/otel-mapping.md#openinference-span-kinds
_OPENINFERENCE_KIND: Final = {
    _RUN: sc.OPENINFERENCE_CHAIN,
    _PHASE: sc.OPENINFERENCE_CHAIN,
    _CHILD: sc.OPENINFERENCE_CHAIN,
    _AGENT: sc.OPENINFERENCE_AGENT,
    _INVOCATION: sc.OPENINFERENCE_LLM,
    _TOOL: sc.OPENINFERENCE_TOOL,
}
_SCOPE_TYPES: Final = {_PHASE: "phase:start", _CHILD: "child:start", _AGENT: "agent:start"}
_IDENTITY_PREFIX: Final = {_RUN: "run:", _PHASE: "phase:", _CHILD: "child:", _AGENT: "agent:"}
_OK_VALUES: Final = frozenset({"ok", "skipped"})
_STATUS_OK: Final = Status(StatusCode.OK)
_STATUS_ERROR: Final = Status(StatusCode.ERROR)
# Bound on the per-export memo of masked strings (ids, names and statuses repeat in every event).
_MASK_MEMO_LIMIT: Final = 8192
# Events before the first usable ts wait for one (they take its time); past this many, the wait
# ends and they take the wall clock, so a stream without any usable ts keeps bounded memory
# (docs/otel-mapping.md#timestamps).
_UNTIMED_LIMIT: Final = 1024


class _Rec:
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

    def __init__(self, span: Span, kind: int, start_ns: int, parent: _Rec | None, segment: int) -> None:
        self.span: Span | None = span
        # Once ended, a context shaped like the export's first one shrinks to its span id.
        self.context: SpanContext | int = span.get_span_context()
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


def _ended_invocation() -> _Rec:
    rec = _Rec(NonRecordingSpan(INVALID_SPAN_CONTEXT), _INVOCATION, 0, None, -1)
    rec.span = None
    rec.ended = True
    return rec


# What a closed invocation's key maps to: "opened and ended" is all a later duplicate needs to know,
# and dropping the record keeps memory bounded by open spans for invocations.
_ENDED_INVOCATION: Final = _ended_invocation()


class SpanMapper:
    """Maps one run's events onto OTel spans. Feed events in stream order, then ``finish``."""

    def __init__(
        self,
        tracer: Tracer,
        masker: SecretMasker,
        *,
        run_id: str | None = None,
        conventions: Iterable[str] = sc.DEFAULT_CONVENTIONS,
    ) -> None:
        self._tracer = tracer
        self._openinference = sc.CONVENTION_OPENINFERENCE in frozenset(conventions)
        self._identity = _reads_identity(tracer)
        self._mask: Callable[[str], str] = _MaskMemo(masker.mask_flat).__getitem__
        self._run_id = run_id
        self._masked_run_id = self._mask(run_id) if run_id is not None else None
        self._by_span_id: dict[str, _Rec] = {}
        self._invocations: dict[tuple[str, object], _Rec] = {}
        self._tools_by_id: dict[tuple[str, str], _Rec] = {}
        self._tool_fifo: dict[tuple[str, str], deque[_Rec]] = {}
        self._open: list[_Rec] = []  # start order; ended entries are popped lazily from the top
        # Still-open spans inside a closed scope: they host no more events, but must still be ended.
        self._stranded: list[_Rec] = []
        self._open_live = 0  # entries of _open not ended: the list is pruned when mostly ended
        self._scopes: list[_Rec] = []  # phase and child spans in start order, lazily popped
        self._phases: list[_Rec] = []
        self._leftovers: list[_Rec] = []
        self._first_run: _Rec | None = None
        # The first span of the export: a stream that starts mid-run still lands in one trace.
        self._anchor: _Rec | None = None
        self._template: SpanContext | None = None  # the anchor's context, for compact ended spans
        self._current_run: _Rec | None = None
        self._segment = -1
        self._clock = EventClock()
        self._ts_cache = self._clock.cache
        self._segment_last_ns = 0
        self._untimed: list[Mapping[str, Any]] = []  # events before the first usable ts
        self._tool_ordinal = 0
        self.span_count = 0
        self.event_count = 0
        self.failed_events = 0
        self.finished = False
        # The stream's last run:end, whatever became of it: how the run settled, without a result.
        self.last_run_end: Mapping[str, Any] | None = None
        self._handlers: dict[str, Callable[[Mapping[str, Any], int], None]] = {
            "run:start": self._on_run_start,
            "run:end": self._on_run_end,
            "phase:start": partial(self._on_scope_start, _PHASE),
            "agent:start": partial(self._on_scope_start, _AGENT),
            "agent:end": self._on_agent_end,
            "agent:phase:start": self._on_invocation_start,
            "agent:phase:end": self._on_invocation_end,
            "tool:start": self._on_tool_start,
            "tool:end": self._on_tool_end,
            "child:start": partial(self._on_scope_start, _CHILD),
            "child:end": self._on_child_end,
            "agent:stream": _ignore,
        }

    # --- the public surface ---------------------------------------------------------------------

    @property
    def bad_timestamps(self) -> int:
        """Events whose ts was not a string, malformed or out of range (each took another time)."""
        return self._clock.bad

    def feed(self, event: Mapping[str, Any]) -> None:
        """Map one wire-form event. Never raises for any event shape."""
        if self.finished:
            return
        self.event_count += 1
        try:
            if self._run_id is None and isinstance(rid := event.get("runId"), str):
                self._run_id = rid
                self._masked_run_id = self._mask(rid)
            # The common case inline (a ts seen before); _time handles the rest.
            ts = event.get("ts")
            ns = self._ts_cache.get(ts) if type(ts) is str else None
            if ns is None:
                ns = self._clock.time(event, self.event_count)
                if ns is None:
                    self._hold_untimed(event)
                elif self._untimed:
                    self._release_untimed(ns)
            else:
                self._clock.last_ns = ns
            if ns is not None:
                self._map(event, ns)
        except Exception:  # noqa: BLE001 - a strange event never breaks the host or the export
            self.failed_events += 1
            _log.debug("rulvar_otel: event %s could not be mapped", self.event_count, exc_info=True)

    def _map(self, event: Mapping[str, Any], ns: int) -> None:
        kind = event.get("type")
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            self._attach_event(event, ns, kind if isinstance(kind, str) else "(unknown)")
        else:
            handler(event, ns)
        self._segment_last_ns = ns

    def _hold_untimed(self, event: Mapping[str, Any]) -> None:
        """No usable ts yet: the event waits for the first one (never 1970, never a guess)."""
        self._untimed.append(event)
        if len(self._untimed) >= _UNTIMED_LIMIT:
            self._release_untimed(self._wall_clock())

    def _release_untimed(self, ns: int) -> None:
        held, self._untimed = self._untimed, []
        self._clock.last_ns = ns
        for event in held:
            try:
                self._map(event, ns)
            except Exception:  # noqa: BLE001
                self.failed_events += 1
                _log.debug("rulvar_otel: a held event could not be mapped", exc_info=True)

    def _wall_clock(self) -> int:
        """The last resort for a stream with no usable ts at all: the time of export, said aloud."""
        _log.warning(
            "%d events arrived without any usable ts; they are stamped with the export time",
            len(self._untimed),
        )
        return time.time_ns()

    def finish(self, outcome: RunOutcome | BaseException | None) -> int:
        """End every span still open; returns the number of spans created."""
        if self.finished:
            return self.span_count
        self.finished = True
        ok = isinstance(outcome, RunOutcome) and outcome.status == "ok"
        try:
            if self._untimed:
                self._release_untimed(self._wall_clock())
            last = self._clock.last_ns if self._clock.last_ns is not None else 0
            # Leftovers of earlier segments end where their segment ended.
            for rec in self._leftovers:
                if not rec.ended:
                    self._end_inferred(rec, rec.pending_end if rec.pending_end is not None else last, ok)
            # Everything else still open ends at the stream's last event, innermost first.
            for rec in reversed(self._open):
                if not rec.ended and rec.kind != _PHASE:
                    self._end_inferred(rec, last, ok)
            for rec in self._stranded:
                if not rec.ended and rec.kind != _PHASE:
                    self._end_inferred(rec, last, ok)
            # Phases last, deepest first: each ends at the latest of its descendants' ends and its
            # own span events, or at its own start (docs/otel-mapping.md#ending-spans-without-a-closer).
            for rec in reversed(self._phases):
                if not rec.ended:
                    self._end_inferred(rec, max(rec.desc_end, rec.events_end, rec.start_ns), ok)
        except Exception:  # noqa: BLE001
            _log.debug("rulvar_otel: finishing spans failed", exc_info=True)
        self._clock.summarize()
        return self.span_count

    # --- span lifecycle -------------------------------------------------------------------------

    def _start(
        self,
        kind: int,
        name: str,
        event: Mapping[str, Any],
        ns: int,
        parent: _Rec | None,
        identity: str,
        attributes: dict[str, ax.AttrValue],
    ) -> _Rec:
        run_id = self._masked_run_id
        seq = event.get("seq")
        attrs: dict[str, ax.AttrValue]
        if run_id is not None and type(seq) is int:
            attrs = {sc.RUN_ID: run_id, sc.ENTRY_SEQ: seq}  # the usual envelope, in one step
        else:
            attrs = {}
            if run_id is not None:
                attrs[sc.RUN_ID] = run_id
            if type(seq) is int or type(seq) is float:
                attrs[sc.ENTRY_SEQ] = seq
        scope = event.get("scope")
        if isinstance(scope, str):
            attrs[sc.SCOPE] = self._mask(scope)
        if event.get("replayed") is True:
            attrs[sc.REPLAYED] = True
        if attributes:
            attrs.update(attributes)
        if kind in (_AGENT, _RUN) and run_id is not None:
            attrs[sc.GEN_AI_CONVERSATION_ID] = run_id
        if self._openinference:
            attrs[sc.OPENINFERENCE_SPAN_KIND] = _OPENINFERENCE_KIND[kind]
        context: Context | None = Context() if parent is None else parent.child_context
        if context is None and parent is not None:
            context = parent.child_context = trace.set_span_in_context(
                parent.span or NonRecordingSpan(self._span_context(parent))
            )
        if self._identity:
            token = SPAN_IDENTITY.set((self._run_id or "", identity))
            try:
                span = self._tracer.start_span(name, context=context, attributes=attrs, start_time=ns)
            finally:
                SPAN_IDENTITY.reset(token)
        else:
            span = self._tracer.start_span(name, context=context, attributes=attrs, start_time=ns)
        rec = _Rec(span, kind, ns, parent, self._segment)
        if self._anchor is None:
            self._anchor = rec
            if isinstance(rec.context, SpanContext):
                self._template = rec.context
        self.span_count += 1
        opened = self._open
        if len(opened) > 2 * self._open_live + 256:
            # Ended spans below the top are dead weight: drop them, keeping the start order.
            opened = self._open = [r for r in opened if not r.ended]
        opened.append(rec)
        self._open_live += 1
        return rec

    def _close(
        self,
        rec: _Rec,
        ns: int,
        attributes: dict[str, ax.AttrValue],
        status: object,
        *,
        message: str | None = None,
        force_error: bool = False,
        error_source: Mapping[str, Any] | None = None,
    ) -> None:
        """End ``rec`` as its closer says; ``error_source`` names the ``error.type`` of a failure."""
        span = rec.span
        if span is None:
            return
        ok = False
        literal: str | None = None
        if isinstance(status, str):
            literal = attributes[sc.STATUS] = self._mask(status)
            ok = status in _OK_VALUES and not force_error
        if not ok:
            # docs/otel-mapping.md#errors: every ERROR span names an error.type; its status
            # description is the closer's status literal (an enum value, never a message).
            code = ax.error_type(error_source, self._mask) if error_source is not None else None
            attributes[sc.ERROR_TYPE] = code if code is not None else sc.ERROR_TYPE_OTHER
            if message is None:
                message = literal
        # A lone attribute (most tool closers) is cheaper through set_attribute; for more, one
        # set_attributes call takes the SDK's span lock once instead of once per attribute.
        if len(attributes) == 1:
            for key, value in attributes.items():
                span.set_attribute(key, value)
        elif attributes:
            span.set_attributes(attributes)
        if ok:
            span.set_status(_STATUS_OK)
        else:
            span.set_status(_STATUS_ERROR if message is None else Status(StatusCode.ERROR, message))
        self._end(rec, ns)

    def _end(self, rec: _Rec, ns: int) -> None:
        span = rec.span
        if span is None:
            return
        if ns < rec.start_ns:
            ns = rec.start_ns  # a clock step backwards must not make a negative duration
        if ns < rec.events_end:
            ns = rec.events_end  # nor leave one of its span events outside it
        span.end(end_time=ns)
        rec.ended = True
        rec.span = None  # release the SDK span; the context is all a late child needs
        rec.child_context = None
        self._open_live -= 1
        # A context in the export's usual shape keeps only its span id (rebuilt on demand). Tool
        # and invocation records are never parents and are dropped once ended: nothing to shrink.
        ctx = rec.context
        template = self._template
        if (
            template is not None
            and rec.kind != _TOOL
            and rec.kind != _INVOCATION
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

    def _end_inferred(self, rec: _Rec, ns: int, ok: bool) -> None:
        span = rec.span
        if span is None:
            return
        if ok:
            span.set_attribute(sc.END_INFERRED, True)
            span.set_status(_STATUS_OK)
        else:
            span.set_attributes({sc.END_INFERRED: True, sc.ERROR_TYPE: sc.ERROR_TYPE_OTHER})
            span.set_status(_STATUS_ERROR)
        self._end(rec, ns)

    # --- lookups --------------------------------------------------------------------------------

    def _span_context(self, rec: _Rec) -> SpanContext:
        ctx = rec.context
        if isinstance(ctx, SpanContext):
            return ctx
        template = self._template
        assert template is not None  # only compacted against a template
        return SpanContext(
            template.trace_id,
            ctx,
            is_remote=template.is_remote,
            trace_flags=template.trace_flags,
            trace_state=template.trace_state,
        )

    def _innermost_open(self) -> _Rec | None:
        """The most recently started span still open, as a span and as a scope."""
        stack = self._open
        while stack:
            top = stack[-1]
            if top.ended or top.pending_end is not None:
                stack.pop()
            elif _scope_closed(top):
                # Open, but its child workflow or segment has finished: it hosts nothing more
                # (docs/otel-mapping.md#where-a-span-event-lands); it is still ended later.
                self._stranded.append(stack.pop())
            else:
                return top
        return None

    def _innermost_scope(self) -> _Rec | None:
        stack = self._scopes
        while stack and _scope_closed(stack[-1]):
            stack.pop()
        if stack:
            return stack[-1]
        run = self._current_run
        return run if run is not None and not run.ended else None

    def _is_open(self, rec: _Rec | None) -> bool:
        return rec is not None and not rec.ended and rec.pending_end is None

    def _parent_for(self, event: Mapping[str, Any], attributes: dict[str, ax.AttrValue]) -> _Rec | None:
        """Parent of a phase, agent or child span (and of orphaned invocation and tool spans)."""
        parent_id = event.get("parentSpanId")
        if isinstance(parent_id, str):
            found = self._by_span_id.get(parent_id)
            if found is not None:
                return found
            attributes[sc.PARENT_SPAN_ID] = self._mask(parent_id)
        # Never-opened or absent parent: group under the innermost open scope, in this trace.
        attributes[sc.PARENT_INFERRED] = True
        scope = self._innermost_scope()
        if scope is not None:
            return scope
        if self._current_run is not None:
            return self._current_run
        return self._first_run if self._first_run is not None else self._anchor

    def _open_by_span_id(self, event: Mapping[str, Any], kind: int) -> _Rec | None:
        """The open span of ``kind`` the event's spanId names, for a closer."""
        span_id = event.get("spanId")
        rec = self._by_span_id.get(span_id) if isinstance(span_id, str) else None
        if rec is None or rec.kind != kind or rec.ended or rec.pending_end is not None:
            return None
        return rec

    def _host_for(self, event: Mapping[str, Any]) -> _Rec | None:
        span_id = event.get("spanId")
        if isinstance(span_id, str):
            rec = self._by_span_id.get(span_id)
            if rec is not None and not rec.ended and rec.pending_end is None and not _scope_closed(rec):
                return rec
        return self._innermost_open()

    def _attach_event(
        self,
        event: Mapping[str, Any],
        ns: int,
        name: str,
        host: _Rec | None = None,
        *,
        replayed: bool = False,
    ) -> None:
        if host is None or not self._is_open(host) or _scope_closed(host):
            host = self._host_for(event)
        if host is None or host.span is None:
            return  # nothing open: there is nowhere to put it
        attrs = ax.event_attributes(event, self._mask)
        if replayed:
            attrs[sc.REPLAYED] = True
        # Every span event lies within its span: never before its start, and the span's end
        # (closer or inferred) never comes before its latest event.
        if ns < host.start_ns:
            ns = host.start_ns
        if ns > host.events_end:
            host.events_end = ns
        host.span.add_event(self._mask(name), attributes=attrs, timestamp=ns)

    def _duplicate_opener(self, existing: _Rec, event: Mapping[str, Any], ns: int) -> None:
        """An opener whose span already exists never opens a second one."""
        replayed = event.get("replayed") is True
        if self._is_open(existing):
            if replayed and existing.span is not None:
                existing.span.set_attribute(sc.REPLAYED, True)
            return
        name = event.get("type")
        self._attach_event(event, ns, name if isinstance(name, str) else "(unknown)", replayed=replayed)

    # --- handlers -------------------------------------------------------------------------------

    def _end_segment(self) -> None:
        """A new run:start begins a segment: the previous one's leftovers end at its last event."""
        segment = self._segment
        end = self._segment_last_ns
        # The open stack (and the stranded list) hold every span still open in this segment.
        for rec in (*self._stranded, *self._open):
            if (
                not rec.ended
                and rec.pending_end is None
                and rec.segment == segment
                and rec.kind != _PHASE
                and rec.kind != _RUN
            ):
                rec.pending_end = end
                self._leftovers.append(rec)
        # Keep only stranded spans still to be ended at finish (those opened before any run:start).
        self._stranded = [r for r in self._stranded if not r.ended and r.pending_end is None]

    def _on_run_start(self, event: Mapping[str, Any], ns: int) -> None:
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else None
        if key is not None and (existing := self._by_span_id.get(key)) is not None:
            self._duplicate_opener(existing, event, ns)
            return
        if self._first_run is not None:
            self._end_segment()
        self._segment += 1
        name = "run " + ax.text(event.get("workflow"), self._mask)
        parent = self._first_run if self._first_run is not None else self._anchor
        identity = "run:" + (key or "") if self._identity else ""
        rec = self._start(_RUN, self._mask(name), event, ns, parent, identity, {})
        if key is not None:
            self._by_span_id[key] = rec
        if self._first_run is None:
            self._first_run = rec
        self._current_run = rec

    def _on_run_end(self, event: Mapping[str, Any], ns: int) -> None:
        self.last_run_end = event
        rec = self._open_by_span_id(event, _RUN)
        if rec is None:
            self._attach_event(event, ns, "run:end")
            return
        unsettled = event.get("settled") is False
        message = None
        if unsettled:
            message = (
                SUPERSEDED_MESSAGE
                if event.get("settledReason") == "superseded"
                else SETTLEMENT_FAILED_MESSAGE
            )
        self._close(
            rec,
            ns,
            ax.run_close_attributes(event, self._mask),
            event.get("status"),
            message=message,
            force_error=unsettled,
            error_source=event,
        )

    def _on_scope_start(self, kind: int, event: Mapping[str, Any], ns: int) -> None:
        """phase:start, child:start and agent:start: a span keyed by its spanId, parented by parentSpanId."""
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else None
        if key is not None and (existing := self._by_span_id.get(key)) is not None:
            self._duplicate_opener(existing, event, ns)
            return
        attrs = ax.agent_open_attributes(event, self._mask) if kind == _AGENT else {}
        parent = self._parent_for(event, attrs)
        name = ax.scope_span_name(_SCOPE_TYPES[kind], event, self._mask)
        identity = _IDENTITY_PREFIX[kind] + (key or "") if self._identity else ""
        rec = self._start(kind, name, event, ns, parent, identity, attrs)
        if key is not None:
            self._by_span_id[key] = rec
        if kind != _AGENT:
            self._scopes.append(rec)
            if kind == _PHASE:
                self._phases.append(rec)

    def _on_child_end(self, event: Mapping[str, Any], ns: int) -> None:
        rec = self._open_by_span_id(event, _CHILD)
        if rec is None:
            self._attach_event(event, ns, "child:end")
            return
        self._close(rec, ns, {}, event.get("status"))

    def _on_agent_end(self, event: Mapping[str, Any], ns: int) -> None:
        rec = self._open_by_span_id(event, _AGENT)
        if rec is None:
            self._attach_event(event, ns, "agent:end")
            return
        attrs = ax.agent_close_attributes(event, had_invocations=rec.has_invocations)
        self._close(rec, ns, attrs, event.get("status"), error_source=event)

    def _owner(
        self, span_id: object, event: Mapping[str, Any], attrs: dict[str, ax.AttrValue]
    ) -> _Rec | None:
        """Invocation and tool spans hang off the span keyed by their spanId (the agent)."""
        if isinstance(span_id, str) and (rec := self._by_span_id.get(span_id)) is not None:
            return rec
        return self._parent_for(event, attrs)

    def _on_invocation_start(self, event: Mapping[str, Any], ns: int) -> None:
        span_id = event.get("spanId")
        key = (span_id if isinstance(span_id, str) else "", _hashable(event.get("invocation")))
        if (existing := self._invocations.get(key)) is not None:
            self._duplicate_opener(existing, event, ns)
            return
        attrs = ax.invocation_open_attributes(event, self._mask)
        parent = self._owner(span_id, event, attrs)
        name = "invocation " + ax.text(event.get("role"), self._mask)
        identity = f"inv:{key[0]}:{key[1]}" if self._identity else ""
        rec = self._start(_INVOCATION, name, event, ns, parent, identity, attrs)
        self._invocations[key] = rec
        if parent is not None and parent.kind == _AGENT:
            parent.has_invocations = True

    def _on_invocation_end(self, event: Mapping[str, Any], ns: int) -> None:
        span_id = event.get("spanId")
        key = (span_id if isinstance(span_id, str) else "", _hashable(event.get("invocation")))
        rec = self._invocations.get(key)
        if rec is None or not self._is_open(rec):
            self._attach_event(event, ns, "agent:phase:end")
            return
        self._close(rec, ns, ax.invocation_close_attributes(event), event.get("outcome"), error_source=event)
        self._invocations[key] = _ENDED_INVOCATION

    def _on_tool_start(self, event: Mapping[str, Any], ns: int) -> None:
        span_id = event.get("spanId")
        owner_key = span_id if isinstance(span_id, str) else ""
        call_id = event.get("toolCallId")
        id_key = (owner_key, call_id) if isinstance(call_id, str) else None
        if id_key is not None:
            existing = self._tools_by_id.get(id_key)
            if existing is not None and self._is_open(existing) and event.get("replayed") is True:
                if existing.span is not None:
                    existing.span.set_attribute(sc.REPLAYED, True)
                return
        attrs = ax.tool_open_attributes(event, self._mask)
        parent = self._owner(span_id, event, attrs)
        tool_name = ax.text(event.get("toolName"), self._mask)
        if id_key is not None:
            identity = f"tool:{owner_key}:{call_id}" if self._identity else ""
        else:
            self._tool_ordinal += 1
            identity = f"tool:{owner_key}:#{self._tool_ordinal}"
        rec = self._start(_TOOL, "tool " + tool_name, event, ns, parent, identity, attrs)
        if id_key is not None:
            self._tools_by_id[id_key] = rec
        else:
            raw_name = event.get("toolName")
            fifo_key = (owner_key, raw_name if isinstance(raw_name, str) else "")
            self._tool_fifo.setdefault(fifo_key, deque()).append(rec)

    def _on_tool_end(self, event: Mapping[str, Any], ns: int) -> None:
        span_id = event.get("spanId")
        owner_key = span_id if isinstance(span_id, str) else ""
        call_id = event.get("toolCallId")
        rec: _Rec | None = None
        if isinstance(call_id, str):
            rec = self._tools_by_id.pop((owner_key, call_id), None)
            if rec is not None and (rec.ended or rec.pending_end is not None):
                rec = None
        if rec is None:
            raw_name = event.get("toolName")
            queue = self._tool_fifo.get((owner_key, raw_name if isinstance(raw_name, str) else ""))
            while queue:
                candidate = queue.popleft()
                if self._is_open(candidate):
                    rec = candidate
                    break
        if rec is None:
            self._attach_event(event, ns, "tool:end")
            return
        self._close(
            rec,
            ns,
            ax.tool_close_attributes(event, self._mask),
            event.get("outcome"),
            error_source=event,
        )


def _reads_identity(tracer: Tracer) -> bool:
    """Whether span ids may come from :data:`SPAN_IDENTITY`: false only where that is certain.

    No-op tracers make no ids, and the SDK's tracer keeps the id generator its provider had; the
    stock random one never reads the variable. Any other tracer (a proxy, a wrapper, another
    generator) gets the variable set, as ``RulvarIdGenerator`` needs.
    """
    if isinstance(tracer, NoOpTracer):
        return False
    return type(getattr(tracer, "id_generator", None)) is not RandomIdGenerator


def _scope_closed(rec: _Rec) -> bool:
    """Whether ``rec`` lies in a child workflow or segment that has closed (``rec`` included).

    The walk stops at the run span of the segment: later segments hang off the first run span
    for the trace's sake, but the first segment's end does not close them.
    """
    node: _Rec | None = rec
    while node is not None:
        kind = node.kind
        if kind in (_CHILD, _RUN):
            if node.ended or node.pending_end is not None:
                return True
            if kind == _RUN:
                return False
        node = node.parent
    return False


class _MaskMemo(dict[str, str]):
    """``mask`` behind a dict: a repeated string costs one C-level lookup (``__getitem__``), and
    only a new one reaches the masker (``__missing__``)."""

    __slots__ = ("_masker",)

    def __init__(self, mask: Callable[[str], str]) -> None:
        super().__init__()
        self._masker = mask

    def __missing__(self, text: str) -> str:
        out = self._masker(text)
        if len(self) >= _MASK_MEMO_LIMIT:
            self.clear()
        self[text] = out
        return out


def _hashable(value: object) -> object:
    return value if isinstance(value, str | int | float | bool) or value is None else repr(value)


def _ignore(event: Mapping[str, Any], ns: int) -> None:
    """Stream deltas are content: they never become span events."""
