"""Progress as a pure fold: the state a progress view shows, and the plain line printer.

:class:`ProgressState` folds a run's events into what an operator watches (the run header, one
row per agent, phases, children; the rows and formatters live in ``_progress_rows``, and agents
pair through the shared :class:`~rulvar_otel.core.lifecycle.AgentLifecycle`).
:class:`ProgressLines` and :func:`render_progress` turn the same events into one plain line per
lifecycle fact, for pipes and CI logs. All are pure: no clock, no terminal, no I/O.

Every dynamic string that reaches a line or a row passes :meth:`SecretMasker.clean` (sanitize,
then mask, as the export does), so one event can never become two lines, restyle a terminal or
show a key glued to an escape sequence. Content (log text, stream deltas, error messages,
prompts) is never shown: a log line shows its level, an error its code, a stream delta only its
size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from rulvar_otel.core._outcome import as_wire_dict
from rulvar_otel.core._progress_rows import (
    AgentRow,
    ChildRow,
    PhaseRow,
    format_duration,
    format_tokens,
    format_usd,
)
from rulvar_otel.core.handle import EventLike, RunOutcome
from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.masking import SecretMasker, default_masker
from rulvar_otel.core.wire import WireEvent, as_int, as_number, as_str, ts_seconds

__all__ = [
    "AgentRow",
    "ChildRow",
    "PhaseRow",
    "ProgressLines",
    "ProgressState",
    "format_duration",
    "format_tokens",
    "format_usd",
    "render_progress",
]


# A tool call's outcomes that count as failed or denied.
_FAILED_TOOL: Final = ("error", "denied")
# Distinct texts whose clean form is remembered; past this the memo starts over.
_CLEAN_MEMO_LIMIT: Final = 4096


class ProgressState:
    """The fold behind every progress view: feed events with :meth:`apply`, read the fields.

    Tolerant by design: a recognized event with a missing or mistyped field degrades its own row
    (a ``-`` in a column) instead of raising, because a view must never stop the run it watches.
    """

    def __init__(
        self,
        masker: SecretMasker | None = None,
        *,
        ceiling_usd: float | None = None,
        summary_only: bool = False,
    ) -> None:
        self._masker = masker or default_masker()
        self._cleaned: dict[str, str] = {}  # text -> its clean form (see clean)
        # ``summary_only``: fold just what the run lines, the counts and the summary read (run,
        # phases, agent statuses, tokens, spend, tool counts), skipping rows' roles, tools, waits,
        # children and logs, which only the tree and the per-fact lines show.
        self._handlers = _SUMMARY_HANDLERS if summary_only else _HANDLERS
        # The last ``ts`` read and its value: a stream's events share stamps in bursts.
        self._ts_raw: object = None
        self._ts_value: float | None = None
        self.run_id: str | None = None
        self.workflow: str | None = None
        self.status: str = "running"
        self.completion: str | None = None
        self.settled: bool | None = None
        self.settled_reason: str | None = None
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.last_ts: float | None = None
        self.segments = 0
        self.spent_usd: float | None = None
        self.remaining_usd: float | None = None
        self.committed_reserve_usd: float | None = None
        self.total_usd: float | None = None
        self.ceiling_usd = ceiling_usd
        self._ceiling_given = ceiling_usd is not None
        self.phases: dict[str, PhaseRow] = {}
        self.agents: dict[str, AgentRow] = {}
        self._lifecycle: AgentLifecycle[None] = AgentLifecycle()  # rows stay in `agents`
        self.children: dict[str, ChildRow] = {}
        self.waiting: dict[str, str] = {}  # span id -> what it waits on (external key, tool approval)
        self.tool_calls = 0
        self.tool_failures = 0
        self.quota_denials = 0
        self.warnings = 0
        self.events = 0
        self.span_ids: set[str] | None = set() if summary_only else None  # distinct, for counts
        # How the run settled, once a drain finished this fold (None while it runs).
        self.outcome: RunOutcome | BaseException | None = None

    def clean(self, value: object) -> str:
        """Sanitize, then mask, one dynamic value for a terminal (the export's own discipline).

        Remembered per text (bounded): statuses, roles and models repeat on every agent.
        """
        text = value if isinstance(value, str) else str(value)
        memo = self._cleaned
        cleaned = memo.get(text)
        if cleaned is None:
            if len(memo) >= _CLEAN_MEMO_LIMIT:
                memo.clear()
            cleaned = memo[text] = self._masker.clean(text)
        return cleaned

    def agent_name(self, wire: Mapping[str, Any]) -> str:
        label = as_str(wire.get("label"))
        agent_type = as_str(wire.get("agentType"))
        name = label or agent_type or "(anon)"  # as the span name says it
        return self.clean(name)

    def _agent(self, wire: WireEvent, span_id: str) -> AgentRow:
        row = self.agents.get(span_id)
        if row is None:
            row = AgentRow(span_id, as_str(wire.get("parentSpanId")), self.agent_name(wire))
            self.agents[span_id] = row
        return row

    def feed(self, event: Mapping[str, Any]) -> None:
        """Fold one wire-form event (the drain's :class:`~rulvar_otel.core.drain.Sink` protocol)."""
        self.apply(event)

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        """Keep how the run settled; a rejection with no ``run:end`` seen marks the run failed."""
        self.outcome = outcome
        if isinstance(outcome, BaseException) and self.status == "running":
            self.status = "error"

    def apply(self, event: EventLike) -> Mapping[str, Any]:
        """Fold one event; returns its wire form (callers reuse it)."""
        wire = event if type(event) is dict else as_wire_dict(event)
        self.apply_all((wire,))
        return wire

    def apply_all(self, events: Iterable[EventLike]) -> None:
        """Fold events in order: :meth:`apply` for each, in one loop (a view folding a batch).

        The counters and the last ``ts`` live in locals while the loop runs (no handler reads
        them) and are stored once it ends.
        """
        handlers = self._handlers
        # The summary counts tool calls and failed ones, nothing else of a tool: in line here.
        counts_tools = handlers is _SUMMARY_HANDLERS
        seen = self.span_ids
        ts_raw, ts, last_ts = self._ts_raw, self._ts_value, self.last_ts
        count = calls = failures = 0
        try:
            for event in events:
                wire: WireEvent = event if type(event) is dict else as_wire_dict(event)  # type: ignore[assignment]
                count += 1
                span = wire.get("spanId")
                if seen is not None and type(span) is str:
                    seen.add(span)
                raw_ts = wire.get("ts")
                if raw_ts is not ts_raw and not (type(raw_ts) is str and raw_ts == ts_raw):
                    ts = ts_seconds(raw_ts)
                    ts_raw = raw_ts
                    if ts is not None and (last_ts is None or ts > last_ts):
                        last_ts = ts
                if self.run_id is None and isinstance(wire.get("runId"), str):
                    self.run_id = self.clean(wire["runId"])
                kind = wire.get("type")
                if not isinstance(kind, str):
                    continue
                if counts_tools and kind == "tool:start":
                    calls += 1
                    continue
                if counts_tools and kind == "tool:end":
                    failures += wire.get("outcome") in _FAILED_TOOL
                    continue
                handler = handlers.get(kind)
                if handler is not None:
                    replayed = wire.get("replayed") is True
                    handler(self, wire, span if isinstance(span, str) else "", ts, replayed)
        finally:
            self._ts_raw, self._ts_value, self.last_ts = ts_raw, ts, last_ts
            self.events += count
            self.tool_calls += calls
            self.tool_failures += failures

    # -- handlers ------------------------------------------------------------------------------

    def _run_start(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        self.segments += 1
        if isinstance(wire.get("workflow"), str):
            self.workflow = self.clean(wire["workflow"])
        if self.started_at is None:
            self.started_at = ts
        self.status = "running"
        self.ended_at = None

    def _run_end(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        status = as_str(wire.get("status"))
        self.status = self.clean(status) if status else "unknown"
        completion = as_str(wire.get("completion"))
        self.completion = self.clean(completion) if completion else None
        self.settled = wire.get("settled") is not False
        reason = as_str(wire.get("settledReason"))
        self.settled_reason = self.clean(reason) if reason else None
        self.total_usd = as_number(wire.get("totalUsd"))
        self.ended_at = ts
        # A suspension is a pause: rows still running stay running for the resumed segment.
        if status != "suspended":
            for row in self.agents.values():
                if not row.done:
                    row.status = "unsettled"
                    row.ended_at = ts

    def _phase_start(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        name = as_str(wire.get("phase"))
        self.phases[span_id] = PhaseRow(
            span_id, self.clean(name) if name is not None else "phase", as_str(wire.get("parentSpanId")), ts
        )

    def _budget(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        spent = as_number(wire.get("spentUsd"))
        remaining = as_number(wire.get("remainingUsd"))
        if spent is not None:
            self.spent_usd = spent
        self.remaining_usd = remaining
        self.committed_reserve_usd = as_number(wire.get("committedReserveUsd"))
        # Without an explicit ceiling, spent + remaining is the budget the engine enforces.
        if not self._ceiling_given and spent is not None and remaining is not None:
            self.ceiling_usd = (
                spent + remaining if self.ceiling_usd is None else max(self.ceiling_usd, spent + remaining)
            )

    def _agent_queued(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        row = self._agent(wire, span_id)
        if row.started_at is None:
            row.status = "queued"
        row.replayed = row.replayed or replayed

    def _agent_start(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        if self._lifecycle.start(wire) is None:
            return  # a re-emitted or legacy repeat of its opener never restarts the row
        row = self._agent(wire, span_id)
        row.name = self.agent_name(wire)
        row.status = "running"
        row.started_at = ts
        row.ended_at = None  # set only when an agent:end without a start came first
        model = as_str(wire.get("model"))
        row.model = self.clean(model) if model else None
        role = as_str(wire.get("role"))
        row.role = self.clean(role) if role else None
        row.replayed = replayed

    def _phase_open(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        row = self._agent(wire, span_id)
        role = as_str(wire.get("role"))
        invocation = as_int(wire.get("invocation"))
        clean_role = self.clean(role) if role else "phase"
        row.active_role = clean_role
        row.retrying = False
        if invocation is not None:
            row.open_phases[invocation] = clean_role

    def _phase_close(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        row = self._agent(wire, span_id)
        role = as_str(wire.get("role"))
        clean_role = self.clean(role) if role else "phase"
        invocation = as_int(wire.get("invocation"))
        if invocation is not None:
            row.open_phases.pop(invocation, None)
        duration = as_number(wire.get("durationMs"))
        if duration is not None:
            row.role_seconds[clean_role] = row.role_seconds.get(clean_role, 0.0) + duration / 1000
        usage = wire.get("usage")
        if isinstance(usage, Mapping) and not row.done:
            # Running totals until agent:end brings the authoritative whole.
            row.input_tokens = (row.input_tokens or 0) + (as_int(usage.get("inputTokens")) or 0)
            row.output_tokens = (row.output_tokens or 0) + (as_int(usage.get("outputTokens")) or 0)
        cost = as_number(wire.get("costUsd"))
        if cost is not None and not row.done:
            row.cost_usd = (row.cost_usd or 0.0) + cost
        row.active_role = next(reversed(row.open_phases.values()), None) if row.open_phases else None

    def _agent_end(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        if self._lifecycle.end(wire) is None and self._lifecycle.closed(span_id):
            return  # a repeated closer: the row already shows the span's end
        # An end without a start still shows what it says (a view attached mid-run sees these).
        row = self._agent(wire, span_id)
        status = as_str(wire.get("status"))
        row.status = self.clean(status) if status else "unknown"
        row.ended_at = ts
        if row.started_at is None:
            row.started_at = ts
        usage = wire.get("usage")
        if type(usage) is dict or isinstance(usage, Mapping):
            row.input_tokens = as_int(usage.get("inputTokens"))
            row.output_tokens = as_int(usage.get("outputTokens"))
        cost = as_number(wire.get("costUsd"))
        if cost is not None:
            row.cost_usd = cost
        error = wire.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("code"), str):
            row.error_code = self.clean(error["code"])
        row.active_role = None
        row.current_tool = None
        row.open_phases.clear()
        row.retrying = False
        self.waiting.pop(span_id, None)

    def _agent_error(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        row = self._agent(wire, span_id)
        error = wire.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("code"), str):
            row.error_code = self.clean(error["code"])
        row.retrying = wire.get("willRetry") is True

    def _agent_stream(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        delta = wire.get("delta")
        if isinstance(delta, str) and span_id in self.agents:
            self.agents[span_id].stream_chars += len(delta)

    def _quota(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        self.quota_denials += 1

    def _tool_start(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        self.tool_calls += 1
        name = as_str(wire.get("toolName"))
        if span_id in self.agents:
            self.agents[span_id].current_tool = self.clean(name) if name else "tool"

    def _tool_end(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        if wire.get("outcome") in _FAILED_TOOL:
            self.tool_failures += 1
        if span_id in self.agents:
            self.agents[span_id].current_tool = None
        self.waiting.pop(span_id, None)

    def _child_start(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        workflow = as_str(wire.get("workflow"))
        scope = as_str(wire.get("scope"))
        self.children[span_id] = ChildRow(
            span_id,
            self.clean(workflow) if workflow else "child",
            self.clean(scope) if scope else None,
            as_str(wire.get("parentSpanId")),
            started_at=ts,
        )

    def _child_end(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        row = self.children.get(span_id)
        if row is None:
            self._child_start(wire, span_id, ts, replayed)
            row = self.children[span_id]
        status = as_str(wire.get("status"))
        row.status = self.clean(status) if status else "unknown"
        row.ended_at = ts

    def _external(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        key = as_str(wire.get("key"))
        self.waiting[span_id] = "external " + (self.clean(key) if key else "?")

    def _approval(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        tool = as_str(wire.get("toolName"))
        self.waiting[span_id] = "approval " + (self.clean(tool) if tool else "?")

    def _log(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        if wire.get("level") in ("warn", "error"):
            self.warnings += 1

    # -- the summary-only fold's cheaper forms -------------------------------------------------

    def _touch_agent(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        self._agent(wire, span_id)  # the row exists (and counts) as the full fold would make it

    def _phase_close_counts(self, wire: WireEvent, span_id: str, ts: float | None, replayed: bool) -> None:
        row = self._agent(wire, span_id)
        if row.done:
            return
        usage = wire.get("usage")
        if type(usage) is dict or isinstance(usage, Mapping):
            row.input_tokens = (row.input_tokens or 0) + (as_int(usage.get("inputTokens")) or 0)
            row.output_tokens = (row.output_tokens or 0) + (as_int(usage.get("outputTokens")) or 0)
        cost = as_number(wire.get("costUsd"))
        if cost is not None:
            row.cost_usd = (row.cost_usd or 0.0) + cost

    # -- reading -------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.status not in ("running", "suspended")

    def wall_seconds(self) -> float | None:
        """Run start to run end (or to the latest event while running)."""
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else self.last_ts
        return None if end is None else end - self.started_at

    def agent_seconds(self, row: AgentRow) -> float | None:
        if row.started_at is None:
            return None
        end = row.ended_at if row.ended_at is not None else self.last_ts
        return None if end is None else end - row.started_at

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.agents.values():
            counts[row.status] = counts.get(row.status, 0) + 1
        return counts

    def total_tokens(self) -> tuple[int, int]:
        inp = sum(row.input_tokens or 0 for row in self.agents.values())
        out = sum(row.output_tokens or 0 for row in self.agents.values())
        return inp, out


_Handler = Any
_HANDLERS: Final[dict[str, _Handler]] = {
    "run:start": ProgressState._run_start,
    "run:end": ProgressState._run_end,
    "phase:start": ProgressState._phase_start,
    "budget:update": ProgressState._budget,
    "agent:queued": ProgressState._agent_queued,
    "agent:start": ProgressState._agent_start,
    "agent:phase:start": ProgressState._phase_open,
    "agent:phase:end": ProgressState._phase_close,
    "agent:end": ProgressState._agent_end,
    "agent:error": ProgressState._agent_error,
    "agent:stream": ProgressState._agent_stream,
    "quota:denied": ProgressState._quota,
    "tool:start": ProgressState._tool_start,
    "tool:end": ProgressState._tool_end,
    "child:start": ProgressState._child_start,
    "child:end": ProgressState._child_end,
    "external:waiting": ProgressState._external,
    "approval:pending": ProgressState._approval,
    "log": ProgressState._log,
}
_SUMMARY_HANDLERS: Final[dict[str, _Handler]] = {
    **{kind: _HANDLERS[kind] for kind in ("run:start", "run:end", "phase:start", "budget:update")},
    **{kind: _HANDLERS[kind] for kind in ("agent:queued", "agent:start", "agent:end")},
    "agent:phase:start": ProgressState._touch_agent,
    "agent:phase:end": ProgressState._phase_close_counts,
    "agent:error": ProgressState._touch_agent,
    # tool:start and tool:end only count: apply_all does that in line.
}


class ProgressLines:
    """Incremental plain-line printer: :meth:`lines` gives the lines one event adds.

    Budget lines are throttled on the events' own clock (at most one per ``budget_interval_s``
    of stream time, plus the first), so the output stays deterministic for a given stream.
    """

    def __init__(
        self,
        masker: SecretMasker | None = None,
        *,
        budget_interval_s: float = 5.0,
        state: ProgressState | None = None,
    ) -> None:
        self.state = state if state is not None else ProgressState(masker)
        self._budget_interval = budget_interval_s
        self._last_budget_ts: float | None = None
        self._last_budget_spent: float | None = None

    def lines(self, event: EventLike) -> list[str]:
        st = self.state
        wire = st.apply(event)
        kind = wire.get("type")
        span = wire.get("spanId")
        span_id = span if isinstance(span, str) else ""
        tag = " (replayed)" if wire.get("replayed") is True else ""
        if kind == "run:start":
            resumed = " (resumed)" if wire.get("resumed") is True else ""
            return [f"run {st.run_id or '?'} {st.workflow or '?'} started{resumed}"]
        if kind == "run:end":
            return [self._run_end_line(wire)]
        if kind == "phase:start":
            row = st.phases.get(span_id)
            return [f"phase {row.name if row else '?'}"]
        if kind == "agent:start":
            agent = st.agents.get(span_id)
            if agent is None:
                return []
            model = f" {agent.model}" if agent.model else ""
            role = f" {agent.role}" if agent.role else ""
            return [f"agent {agent.name} started{model}{role}{tag}"]
        if kind == "agent:end":
            agent = st.agents.get(span_id)
            if agent is None:
                return []
            parts = [f"agent {agent.name} {agent.status}", format_duration(st.agent_seconds(agent))]
            if agent.input_tokens is not None or agent.output_tokens is not None:
                parts.append(
                    f"in {format_tokens(agent.input_tokens)} out {format_tokens(agent.output_tokens)}"
                )
            parts.append(format_usd(agent.cost_usd))
            if agent.error_code:
                parts.append(f"error {agent.error_code}")
            return ["  ".join(parts) + tag]
        if kind == "agent:error":
            agent = st.agents.get(span_id)
            name = agent.name if agent else st.agent_name(wire)
            code = agent.error_code if agent and agent.error_code else "?"
            retry = "retrying" if wire.get("willRetry") is True else "final"
            return [f"agent {name} error {code} ({retry})"]
        if kind == "quota:denied":
            reason = as_str(wire.get("reason"))
            after = as_number(wire.get("retryAfterMs"))
            extra = f" {st.clean(reason)}" if reason else ""
            extra += f" retry in {format_duration(after / 1000)}" if after is not None else ""
            return [f"agent {st.agent_name(wire)} quota wait{extra}"]
        if kind == "budget:exposure-wait":
            verb = "waits on in-flight exposure" if wire.get("willWait") is True else "exposure drained"
            return [f"agent {st.agent_name(wire)} {verb}"]
        if kind == "tool:end":
            outcome = as_str(wire.get("outcome"))
            tool = as_str(wire.get("toolName"))
            guard = as_str(wire.get("guard"))
            text = f"tool {st.clean(tool) if tool else '?'} {st.clean(outcome) if outcome else '?'}"
            duration = as_number(wire.get("durationMs"))
            if duration is not None:
                text += f" {format_duration(duration / 1000)}"
            if guard:
                text += f" guard {st.clean(guard)}"
            return [text + tag]
        if kind == "child:start":
            child = st.children[span_id]
            return [f"child {child.workflow} started{tag}"]
        if kind == "child:end":
            child = st.children[span_id]
            return [f"child {child.workflow} {child.status}{tag}"]
        if kind == "external:waiting":
            return [f"waiting on {st.waiting.get(span_id, 'external')}{tag}"]
        if kind == "approval:pending":
            return [f"waiting on {st.waiting.get(span_id, 'approval')}{tag}"]
        if kind == "log" and wire.get("level") in ("warn", "error"):
            # The message is content; the level and where it came from are not.
            return [f"log {wire.get('level')}"]
        if kind == "budget:update":
            return self._budget_line(wire)
        return []

    def _budget_line(self, wire: Mapping[str, Any]) -> list[str]:
        st = self.state
        ts = ts_seconds(wire.get("ts"))
        spent = st.spent_usd
        if spent is None or spent == self._last_budget_spent:
            return []
        if (
            self._last_budget_ts is not None
            and ts is not None
            and ts - self._last_budget_ts < self._budget_interval
        ):
            return []
        self._last_budget_ts = ts
        self._last_budget_spent = spent
        ceiling = f" / {format_usd(st.ceiling_usd)}" if st.ceiling_usd is not None else ""
        return [f"budget {format_usd(spent)}{ceiling}"]

    def _run_end_line(self, wire: Mapping[str, Any]) -> str:
        st = self.state
        parts = [f"run {st.run_id or '?'} {st.status}"]
        if st.completion:
            parts.append(f"completion={st.completion}")
        parts.append(format_duration(st.wall_seconds()))
        parts.append(format_usd(st.total_usd))
        if st.settled is False:
            parts.append("settled=false (outcome withheld)" if st.settled_reason is None else "superseded")
        if st.status == "suspended":
            parts.append("(resume continues the run)")
        return "  ".join(parts)


def render_progress(
    events: Iterable[EventLike],
    *,
    masker: SecretMasker | None = None,
    budget_interval_s: float = 5.0,
) -> Iterator[str]:
    """One plain line per lifecycle fact, masked and terminal-safe, for pipes and logs."""
    printer = ProgressLines(masker, budget_interval_s=budget_interval_s)
    for event in events:
        yield from printer.lines(event)
