"""The span state machine: the one place that knows which spans are open.

:class:`SpanMapper` consumes wire-form events one at a time (``feed``) and is finished once with the
run's outcome (``finish``). It implements the contract in ``docs/otel-mapping.md``; the attribute
values come from the pure generators in ``_attributes``; span records live in ``_span_state``, host
and scope lookups in ``_scopes``, inferred ends in ``_end_inference``, and how (and when) a span
reaches the tracer in ``_opener``; which span an event belongs to (for metrics) in
``_span_source``. Nothing a strange event carries may raise out of ``feed``: a failure on one
event is counted and the stream goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from opentelemetry.trace import INVALID_SPAN_CONTEXT, Link, SpanContext, Tracer

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.otel import _attributes as ax
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._clock import EventClock, export_time_ns, held_copy
from rulvar_otel.otel._deferred import DeferredSpan
from rulvar_otel.otel._end_inference import end_at_suspension, end_unclosed, mark_segment_leftovers
from rulvar_otel.otel._mapper_helpers import (
    MaskMemo,
    closing_status,
    envelope_attributes,
    hashable,
    reads_identity,
    unsettled_message,
)
from rulvar_otel.otel._opener import SpanOpener
from rulvar_otel.otel._parentage import NO_PARENT, Parentage, start_back_link
from rulvar_otel.otel._scopes import hosts_events, innermost_open, innermost_scope
from rulvar_otel.otel._span_source import EventSpans
from rulvar_otel.otel._span_state import (
    AGENT,
    CHILD,
    IDENTITY_PREFIX,
    INVOCATION,
    OPENINFERENCE_KIND,
    PHASE,
    RUN,
    SCOPE_TYPES,
    TOOL,
    InvocationSpans,
    LiveSpan,
    MappedSpan,
    RetiredSpan,
    end_span,
    invocation_key,
    kept_context,
    keyed,
    retire,
    template_shape,
)
from rulvar_otel.otel._tool_pairing import ToolPairing, tool_keys

__all__ = ["SpanMapper"]

_log = logging.getLogger("rulvar_otel")

_OK_VALUES: Final = frozenset({"ok", "skipped"})
# A suspension is waiting, not failing: its closer leaves the status UNSET (docs/otel-mapping.md#suspensions).
_WAITING: Final = "suspended"
# Events before the first usable ts wait for it; past this many they take the wall clock, so a
# stream without any usable ts keeps bounded memory (docs/otel-mapping.md#timestamps).
_UNTIMED_LIMIT: Final = 1024
# A deferred span's context until it starts (a C static when compiled: no module lookup per span).
_NOT_STARTED: Final = INVALID_SPAN_CONTEXT


class SpanMapper(EventSpans):
    """Maps one run's events onto OTel spans. Feed events in stream order, then ``finish``.

    ``end_batch`` (0: off) is for a recorded stream, where no one waits for a span: leaf spans
    start when they end, and ends are handed to the tracer that many at a time, in order.
    """

    def __init__(
        self,
        tracer: Tracer,
        masker: SecretMasker,
        *,
        run_id: str | None = None,
        conventions: Iterable[str] = sc.DEFAULT_CONVENTIONS,
        parentage: Parentage = NO_PARENT,
        end_batch: int = 0,
    ) -> None:
        self._tracer = tracer
        # Parentage from the host: the root's context, and the caller's span to link (link mode).
        self._opener = SpanOpener(tracer, parentage.root_context, end_batch)
        EventSpans.__init__(self, self._opener.ends)
        self._host_link = parentage.link
        self._openinference = sc.CONVENTION_OPENINFERENCE in frozenset(conventions)
        self._identity = reads_identity(tracer)
        self._mask: Callable[[str], str] = MaskMemo(masker.mask_flat, masker.plain_below).__getitem__
        self._run_id = run_id
        self._masked_run_id = self._mask(run_id) if run_id is not None else None
        self._by_span_id: dict[str, MappedSpan | RetiredSpan] = {}  # ended: mostly retired (keyed)
        # Agent spans pair through the one lifecycle every consumer shares; the payload is the span.
        self._agents: AgentLifecycle[MappedSpan] = AgentLifecycle()
        self._invocations = InvocationSpans()
        self._tools = ToolPairing()
        self._open: list[MappedSpan] = []  # start order; ended entries are popped lazily from the top
        # Still-open spans inside a closed scope: they host no more events, but must still be ended.
        self._stranded: list[MappedSpan] = []
        self._open_live = 0  # entries of _open not ended: the list is pruned when mostly ended
        self._scopes: list[MappedSpan] = []  # phase and child spans in start order, lazily popped
        self._phases: list[MappedSpan] = []
        self._leftovers: list[MappedSpan] = []
        # The first span of the export: a stream that starts mid-run still lands in one trace.
        self._anchor: MappedSpan | None = None
        self._template_trace_id = -1  # records of this trace and state: kept by span id
        self._template_state: object = None
        self._current_run: MappedSpan | None = None
        self._segment = -1
        self._clock = EventClock()
        self._ts_cache = self._clock.cache
        self._segment_last_ns = 0
        self._untimed: list[ax.Event] = []  # events before the first usable ts
        self.span_count = 0
        self.event_count = 0
        self.failed_events = 0
        self.finished = False
        # The stream's last run:end, whatever became of it: how the run settled, without a result.
        self.last_run_end: Mapping[str, Any] | None = None

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
        self._event_span = None
        if (ends := self._ends) is not None and ends.full:
            ends.flush()
        try:
            wire = event if type(event) is dict else dict(event)  # see ax.Event
            if self._run_id is None and isinstance(rid := wire.get("runId"), str):
                self._run_id = rid
                self._masked_run_id = self._mask(rid)
            # The common case inline (a ts seen before); _time handles the rest.
            ts = wire.get("ts")
            ns = self._ts_cache.get(ts) if type(ts) is str else None
            if ns is None:
                ns = self._clock.time(wire, self.event_count)
                if ns is None:
                    self._hold_untimed(wire)
                elif self._untimed:
                    self._release_untimed(ns)
            else:
                self._clock.last_ns = ns
            if ns is not None:
                self._map(wire, ns)
        except Exception:  # noqa: BLE001 - a strange event never breaks the host or the export
            self.failed_events += 1
            _log.debug("event %s could not be mapped", self.event_count, exc_info=True)

    def _map(self, event: ax.Event, ns: int) -> None:
        """``event`` to its type's handler: compiled, each test a length check, each call native."""
        kind = event.get("type")
        if type(kind) is not str:
            self._attach_event(event, ns, "(unknown)")
        elif kind == "tool:start":
            self._on_tool_start(event, ns)
        elif kind == "tool:end":
            self._on_tool_end(event, ns)
        elif kind == "agent:phase:start":
            self._on_invocation_start(event, ns)
        elif kind == "agent:phase:end":
            self._on_invocation_end(event, ns)
        elif kind == "agent:start":
            self._on_agent_start(event, ns)
        elif kind == "agent:end":
            self._on_agent_end(event, ns)
        elif kind == "phase:start" or kind == "child:start":
            span_id = event.get("spanId")  # an opener whose spanId has a span already opens nothing
            if isinstance(span_id, str) and (existing := keyed(self._by_span_id, span_id)) is not None:
                self._duplicate_opener(existing, event, ns)
            else:
                self._open_scope(PHASE if kind == "phase:start" else CHILD, event, ns)
        elif kind == "child:end":
            self._on_child_end(event, ns)
        elif kind == "run:start":
            self._on_run_start(event, ns)
        elif kind == "run:end":
            self._on_run_end(event, ns)
        elif kind != "agent:stream":  # stream deltas are content: never span events
            self._attach_event(event, ns, kind)
        self._segment_last_ns = ns

    def _hold_untimed(self, event: ax.Event) -> None:
        """No usable ts yet: the event waits for the first one (never 1970, never a guess)."""
        self._untimed.append(held_copy(event))
        if len(self._untimed) >= _UNTIMED_LIMIT:
            self._release_untimed(export_time_ns(len(self._untimed)))

    def _release_untimed(self, ns: int) -> None:
        held, self._untimed = self._untimed, []
        self._clock.last_ns = ns
        for event in held:
            try:
                self._map(event, ns)
            except Exception:  # noqa: BLE001
                self.failed_events += 1
                _log.debug("a held event could not be mapped", exc_info=True)

    def finish(self, outcome: RunOutcome | BaseException | None) -> int:
        """End every span still open; returns the number of spans created."""
        if self.finished:
            return self.span_count
        self.finished = True
        ok = isinstance(outcome, RunOutcome) and outcome.status == "ok"
        # Cancelled or interrupted before the run settled: an open run span says so.
        unsettled = isinstance(outcome, BaseException) and not isinstance(outcome, Exception)
        try:
            if self._untimed:
                self._release_untimed(export_time_ns(len(self._untimed)))
            last = self._clock.last_ns if self._clock.last_ns is not None else 0
            end_unclosed(
                leftovers=self._leftovers,
                open_stack=self._open,
                stranded=self._stranded,
                phases=self._phases,
                last=last,
                ok=ok,
                end=self._end,
                unsettled=unsettled,
            )
        except Exception:  # noqa: BLE001
            _log.debug("finishing spans failed", exc_info=True)
        if self._ends is not None:
            self._ends.flush()  # whatever failed above: what waits reaches the tracer
        self._clock.summarize()
        return self.span_count

    # --- span lifecycle -------------------------------------------------------------------------

    def _start(
        self,
        kind: int,
        name: str,
        event: ax.Event,
        ns: int,
        parent: MappedSpan | None,
        identity: str,
        attrs: dict[str, ax.AttrValue],
    ) -> MappedSpan:
        """Open a span; ``attrs`` begins with the envelope (:meth:`_envelope`) and is the span's."""
        run_id = self._masked_run_id
        if kind in (AGENT, RUN) and run_id is not None:
            attrs[sc.GEN_AI_CONVERSATION_ID] = run_id
        if self._openinference:
            attrs[sc.OPENINFERENCE_SPAN_KIND] = OPENINFERENCE_KIND[kind]
        links = [Link(self._host_link)] if parent is None and self._host_link is not None else None
        ids = (self._run_id or "", identity) if self._identity else None
        context: SpanContext | int
        if (ends := self._ends) is not None and parent is not None and kind in (TOOL, INVOCATION, AGENT):
            # A recorded stream's leaf or agent starts at its end or its first child's (see _deferred).
            span: LiveSpan = self._opener.defer(
                ends, name, attrs, ns, parent, self._template, ids, kind == AGENT
            )
            context = _NOT_STARTED
        else:
            span = self._opener.start(name, attrs, ns, parent, self._template, ids, links)
            if links is None:
                context = kept_context(span, self._template_trace_id, self._template_state)
            else:  # "link" mode: the caller's trace gets a zero-length span linking to the root
                context = span.get_span_context()
                caller, self._host_link = self._host_link, None
                if caller is not None and start_back_link(
                    self._tracer, caller, context, self._masked_run_id, self._run_id or "", self._identity, ns
                ):
                    self.span_count += 1
        rec = MappedSpan(span, context, kind, ns, parent, self._segment)
        if type(span) is DeferredSpan:
            rec.deferred = span
        self._event_span = rec
        if self._anchor is None and isinstance(context, SpanContext):
            self._anchor, self._template, self._template_trace = rec, context, context.trace_id
            self._template_trace_id, self._template_state = template_shape(context)
        self.span_count += 1
        opened = self._open
        if len(opened) > 2 * self._open_live + 256:
            # Ended spans below the top are dead weight: drop them, keeping the start order.
            opened = self._open = [r for r in opened if not r.ended]
        opened.append(rec)
        self._open_live += 1
        return rec

    def _envelope(self, event: ax.Event) -> dict[str, ax.AttrValue]:
        return envelope_attributes(self._masked_run_id, event, self._mask)

    def _close(
        self,
        rec: MappedSpan,
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
        self._event_span = rec
        ok = waiting = False
        literal: str | None = None
        if isinstance(status, str):
            literal = attributes[sc.STATUS] = self._mask(status)
            ok = status in _OK_VALUES and not force_error
            waiting = status == _WAITING and not force_error
        if not ok and not waiting:
            # Every ERROR span names an error.type; its description is the status literal (#errors).
            code = ax.error_type(error_source, self._mask) if error_source is not None else None
            attributes[sc.ERROR_TYPE] = code if code is not None else sc.ERROR_TYPE_OTHER
            if message is None:
                message = literal
        status = closing_status(ok, waiting, message)
        if type(span) is DeferredSpan:  # compiled: native calls, the attributes in one
            span.set_attributes(attributes)
        elif len(attributes) <= 2:  # every tool closer: set_attribute each is cheaper in the SDK
            for key, value in attributes.items():
                span.set_attribute(key, value)
        else:
            span.set_attributes(attributes)
        if status is not None:
            span.set_status(status)
        end_span(rec, span, ns, self._template, self._ends)  # _end inlined: span is known to be set
        self._open_live -= 1
        retire(self._by_span_id, rec, self._template)

    def _end(self, rec: MappedSpan, ns: int) -> None:
        span = rec.span
        if span is not None:
            end_span(rec, span, ns, self._template, self._ends)
            self._open_live -= 1
            retire(self._by_span_id, rec, self._template)

    # --- lookups --------------------------------------------------------------------------------

    def _parent_for(self, event: ax.Event, attributes: dict[str, ax.AttrValue]) -> MappedSpan | None:
        """Parent of a phase, agent or child span (and of orphaned invocation and tool spans)."""
        parent_id = event.get("parentSpanId")
        if isinstance(parent_id, str):
            found = keyed(self._by_span_id, parent_id)
            if found is not None:
                return found
            attributes[sc.PARENT_SPAN_ID] = self._mask(parent_id)
        # Never-opened or absent parent: group under the innermost open scope, in this trace.
        attributes[sc.PARENT_INFERRED] = True
        scope = innermost_scope(self._scopes, self._current_run)
        if scope is not None:
            return scope
        if self._current_run is not None:
            return self._current_run
        return self._first_run if self._first_run is not None else self._anchor

    def _open_by_span_id(self, event: ax.Event, kind: int) -> MappedSpan | None:
        """The open span of ``kind`` the event's spanId names, for a closer (a RetiredSpan has
        ended: it closes nothing)."""
        span_id = event.get("spanId")
        rec = self._by_span_id.get(span_id) if isinstance(span_id, str) else None
        if not isinstance(rec, MappedSpan) or rec.kind != kind or rec.ended or rec.pending_end is not None:
            return None
        return rec

    def _host_for(self, event: ax.Event) -> MappedSpan | None:
        span_id = event.get("spanId")
        if isinstance(span_id, str):
            rec = self._by_span_id.get(span_id)
            if hosts_events(rec):
                return rec
        return innermost_open(self._open, self._stranded)

    def _attach_event(
        self,
        event: ax.Event,
        ns: int,
        name: str,
        host: MappedSpan | None = None,
        *,
        replayed: bool = False,
    ) -> None:
        if not hosts_events(host):
            host = self._host_for(event)
        if host is None or host.span is None:
            return  # nothing open: there is nowhere to put it
        self._event_span = host
        attrs = ax.event_attributes(event, self._mask)
        if replayed:
            attrs[sc.REPLAYED] = True
        # A span event lies within its span: not before its start, and the span ends after it.
        if ns < host.start_ns:
            ns = host.start_ns
        if ns > host.events_end:
            host.events_end = ns
        host.span.add_event(ax.event_name(name, self._mask), attributes=attrs, timestamp=ns)

    def _duplicate_opener(self, existing: MappedSpan, event: ax.Event, ns: int) -> None:
        """An opener whose span already exists never opens a second one."""
        replayed = event.get("replayed") is True
        if not existing.ended and existing.pending_end is None:
            if replayed and existing.span is not None:
                existing.span.set_attribute(sc.REPLAYED, True)
            return
        name = event.get("type")
        self._attach_event(event, ns, name if isinstance(name, str) else "(unknown)", replayed=replayed)

    # --- handlers -------------------------------------------------------------------------------

    def _end_segment(self) -> None:
        """A new run:start begins a segment: the previous one's leftovers end at its last event."""
        # The open stack (and the stranded list) hold every span still open in this segment.
        still_open = (*self._stranded, *self._open)
        mark_segment_leftovers(still_open, self._segment, self._segment_last_ns, self._leftovers)
        # Keep only stranded spans still to be ended at finish (those opened before any run:start).
        self._stranded = [r for r in self._stranded if not r.ended and r.pending_end is None]

    def _on_run_start(self, event: ax.Event, ns: int) -> None:
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else None
        if key is not None and (existing := keyed(self._by_span_id, key)) is not None:
            self._duplicate_opener(existing, event, ns)
            return
        if self._first_run is not None:
            self._end_segment()
        self._segment += 1
        name = ax.run_span_name(event, self._mask)
        parent = self._first_run if self._first_run is not None else self._anchor
        identity = "run:" + (key or "") if self._identity else ""
        attrs = ax.workflow_open_attributes(event, self._mask, self._envelope(event))
        rec = self._start(RUN, name, event, ns, parent, identity, attrs)
        if key is not None:
            self._by_span_id[key] = rec
            rec.key = key
        if self._first_run is None:
            self._first_run = rec
        self._current_run = rec

    def _on_run_end(self, event: ax.Event, ns: int) -> None:
        self.last_run_end = event
        rec = self._open_by_span_id(event, RUN)
        if rec is None:
            self._attach_event(event, ns, "run:end")
            return
        unsettled = event.get("settled") is False
        message = unsettled_message(event) if unsettled else None
        self._close(
            rec,
            ns,
            ax.run_close_attributes(event, self._mask),
            ax.closer_status(event, "run:end"),
            message=message,
            force_error=unsettled,
            error_source=event,
        )
        if event.get("status") == _WAITING and not unsettled:
            # Everything still open waits with the run: it ends here, UNSET, once and for all.
            end_at_suspension((*self._stranded, *self._open), self._phases, ns, self._end)

    def _on_agent_start(self, event: ax.Event, ns: int) -> None:
        """agent:start pairs through the shared lifecycle; its span is the record's payload."""
        span_id = event.get("spanId")
        agent = self._agents.start(event)
        if agent is not None and (not isinstance(span_id, str) or span_id not in self._by_span_id):
            agent.payload = self._open_scope(AGENT, event, ns)  # the common case: a new agent
            return
        # A repeated opener, or an id a run, phase, child or closed agent's span holds: no span.
        opened = self._agents.get(span_id)
        existing = opened.payload if opened is not None else None
        if existing is None and isinstance(span_id, str):
            existing = keyed(self._by_span_id, span_id)
        if existing is not None:
            self._duplicate_opener(existing, event, ns)
        else:  # the repeat of a closed opener without a spanId: no span to mark
            self._attach_event(event, ns, "agent:start", replayed=event.get("replayed") is True)

    def _open_scope(self, kind: int, event: ax.Event, ns: int) -> MappedSpan:
        """A phase, child or agent span keyed by its spanId, parented by its parentSpanId."""
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else None
        attrs = self._envelope(event)
        if kind == AGENT:
            ax.agent_open_attributes(event, self._mask, attrs)
        elif kind == CHILD:
            ax.workflow_open_attributes(event, self._mask, attrs)
        parent = self._parent_for(event, attrs)
        name = ax.scope_span_name(SCOPE_TYPES[kind], event, self._mask)
        identity = IDENTITY_PREFIX[kind] + (key or "") if self._identity else ""
        rec = self._start(kind, name, event, ns, parent, identity, attrs)
        if key is not None:
            self._by_span_id[key] = rec
            rec.key = key
        if kind != AGENT:
            self._scopes.append(rec)
            if kind == PHASE:
                self._phases.append(rec)
        return rec

    def _on_child_end(self, event: ax.Event, ns: int) -> None:
        rec = self._open_by_span_id(event, CHILD)
        if rec is None:
            self._attach_event(event, ns, "child:end")
            return
        self._close(rec, ns, {}, ax.closer_status(event, "child:end"))

    def _on_agent_end(self, event: ax.Event, ns: int) -> None:
        agent = self._agents.end(event)
        rec = agent.payload if agent is not None else None
        # Paired, but its span may have ended already: as a leftover of an earlier segment.
        if rec is None or rec.ended or rec.pending_end is not None:
            self._attach_event(event, ns, "agent:end")
            return
        attrs = ax.agent_close_attributes(event, had_invocations=rec.has_invocations)
        self._close(rec, ns, attrs, ax.closer_status(event, "agent:end"), error_source=event)

    def _owner(self, span_id: object, event: ax.Event, attrs: dict[str, ax.AttrValue]) -> MappedSpan | None:
        """Invocation and tool spans hang off the span keyed by their spanId (the agent)."""
        if isinstance(span_id, str) and (rec := keyed(self._by_span_id, span_id)) is not None:
            return rec
        return self._parent_for(event, attrs)

    def _on_invocation_start(self, event: ax.Event, ns: int) -> None:
        span_id = event.get("spanId")
        span_key = span_id if isinstance(span_id, str) else ""
        invocation = hashable(event.get("invocation"))
        key = invocation_key(span_key, invocation)
        if (existing := self._invocations.get(key)) is not None:
            self._duplicate_opener(existing, event, ns)
            return
        attrs = ax.invocation_open_attributes(event, self._mask, self._envelope(event))
        parent = self._owner(span_id, event, attrs)
        name = ax.invocation_span_name(event, self._mask)
        identity = f"inv:{span_key}:{invocation}" if self._identity else ""
        rec = self._start(INVOCATION, name, event, ns, parent, identity, attrs)
        self._invocations.open[key] = rec
        if parent is not None and parent.kind == AGENT:
            parent.has_invocations = True

    def _on_invocation_end(self, event: ax.Event, ns: int) -> None:
        span_id = event.get("spanId")
        key = invocation_key(span_id if isinstance(span_id, str) else "", hashable(event.get("invocation")))
        rec = self._invocations.get(key)
        if rec is None or rec.ended or rec.pending_end is not None:
            self._attach_event(event, ns, "agent:phase:end")
            return
        self._close(
            rec,
            ns,
            ax.invocation_close_attributes(event),
            ax.closer_status(event, "agent:phase:end"),
            error_source=event,
        )
        self._invocations.close(key)

    def _on_tool_start(self, event: ax.Event, ns: int) -> None:
        owner_key, id_key = tool_keys(event)
        if id_key is not None and self._tools.replays_open(id_key, event):
            return
        attrs = ax.tool_open_attributes(event, self._mask, self._envelope(event))
        parent = self._owner(event.get("spanId"), event, attrs)
        tool_name = attrs[sc.TOOL_NAME]  # already masked by tool_open_attributes
        identity = self._tools.identity(owner_key, id_key, event, self._identity)
        rec = self._start(TOOL, ax.tool_span_name(tool_name, self._mask), event, ns, parent, identity, attrs)
        self._tools.opened(rec, owner_key, id_key, event)

    def _on_tool_end(self, event: ax.Event, ns: int) -> None:
        rec = self._tools.closing(event)
        if rec is None:
            self._attach_event(event, ns, "tool:end")
            return
        self._close(
            rec,
            ns,
            ax.tool_close_attributes(event, self._mask),
            ax.closer_status(event, "tool:end"),
            error_source=event,
        )
