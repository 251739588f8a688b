"""Pure folds over a run's events: the invocation table here, the critical path re-exported.

:func:`reduce_invocation_table` pairs the agent vocabulary without heuristics (agents through
the shared :class:`~rulvar_otel.core.lifecycle.AgentLifecycle`, one
``agent:phase:start``/``agent:phase:end`` pair per ``(spanId, invocation)``) into per-agent,
per-phase rows and a per-role aggregate.
:func:`reduce_critical_path` folds the same events into the run's wall, the post-fan-in interval
and its decomposition, the synthesize split by purpose, and the candidate milestones; it lives in
:mod:`rulvar_otel.core._critical_path` and is imported from here.

Both are single-pass, order-driven, tolerant of unknown types, missing fields and truncated
streams (a row or phase whose end never arrived stays ``open``). Where the stream cannot support
a figure the field is ``None`` (absent in JSON), never a guess. Wall figures are live fidelity:
a replayed stream re-stamps emission times, so its intervals are degenerate.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from rulvar_otel.core._critical_path import (
    CITATION_JUDGE_LABEL,
    CLAIM_JUDGE_LABEL,
    COORDINATION_ROLE,
    FINAL_COMPOSITION_LABEL,
    SYNTHESIS_NOTE_LABEL,
    SYNTHESIZE_ROLE,
    CriticalPath,
    PostFanInBreakdown,
    SynthesizeClass,
    critical_path_fold,
    reduce_critical_path,
    synthesize_span_class,
    union_length,
)
from rulvar_otel.core._fold_output import FoldOutput, reduce_events, ts_ms
from rulvar_otel.core.drain import FoldSink
from rulvar_otel.core.handle import EventLike
from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.wire import as_int, as_number, as_str

__all__ = [
    "CITATION_JUDGE_LABEL",
    "CLAIM_JUDGE_LABEL",
    "COORDINATION_ROLE",
    "FINAL_COMPOSITION_LABEL",
    "SYNTHESIS_NOTE_LABEL",
    "SYNTHESIZE_ROLE",
    "AgentInvocationRow",
    "CriticalPath",
    "InvocationPhaseRow",
    "InvocationTable",
    "PostFanInBreakdown",
    "RoleBucket",
    "SynthesizeClass",
    "critical_path_fold",
    "invocation_table_fold",
    "reduce_critical_path",
    "reduce_invocation_table",
    "synthesize_span_class",
    "union_length",
]

CostBasis: TypeAlias = Literal["per-call", "aggregate-estimate"]
Usage: TypeAlias = dict[str, int]


class InvocationPhaseRow(FoldOutput):
    """One phase activation (``agent:phase:start``/``agent:phase:end``) of one agent span."""

    invocation: int | None
    role: str | None
    model: str | None
    duration_ms: float | None  # None while open; 0 on replayed rows (reconstructed pairs)
    usage: Usage | None
    cost_usd: float | None
    cost_basis: CostBasis | None
    outcome: str | None
    retries: int | None  # live only: absent means zero or unknown
    replayed: bool
    open: bool


class AgentInvocationRow(FoldOutput):
    """One logical agent span; usage, cost and status come from its ``agent:end`` alone."""

    span_id: str
    parent_span_id: str | None
    agent_type: str | None
    label: str | None
    role: str | None  # the primary role from agent:start
    model: str | None
    status: str | None
    duration_ms: float | None  # agent:start to agent:end (live fidelity)
    usage: Usage | None
    cost_usd: float | None
    cost_basis: CostBasis | None
    usage_approx: bool
    retry_count: int | None
    host_rejected: bool
    tool_budget: dict[str, Any] | None
    replayed: bool
    open: bool
    phases: tuple[InvocationPhaseRow, ...]


class RoleBucket(FoldOutput):
    """The per-role aggregate over completed phase pairs."""

    usage: Usage
    cost_usd: float
    cost_basis: CostBasis
    phases: int


class InvocationTable(FoldOutput):
    agents: tuple[AgentInvocationRow, ...]
    by_role: dict[str, RoleBucket]
    total_cost_usd: float  # sum of agent:end costUsd over settled spans
    open_agents: int
    open_phases: int


# -- helpers -----------------------------------------------------------------------------------


def _basis(value: object) -> CostBasis:
    # A stream recorded before the field existed priced aggregates: absence never claims per-call.
    return "per-call" if value == "per-call" else "aggregate-estimate"


def _usage(value: object) -> Usage | None:
    if not isinstance(value, Mapping):
        return None
    return {k: v for k, v in value.items() if isinstance(k, str) and as_int(v) is not None}


def _add_usage(into: Usage, more: Usage) -> None:
    for key, count in more.items():
        into[key] = into.get(key, 0) + count


# -- folds as drain sinks ----------------------------------------------------------------------


def invocation_table_fold() -> FoldSink[InvocationTable]:
    """The invocation table as a drain sink (its ``result`` once finished)."""
    return FoldSink(_invocation_table())


# -- the invocation table ----------------------------------------------------------------------


@dataclass
class _Phase:
    invocation: int | None
    role: str | None
    model: str | None
    replayed: bool
    duration_ms: float | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    cost_basis: CostBasis | None = None
    outcome: str | None = None
    retries: int | None = None
    open: bool = True

    def freeze(self) -> InvocationPhaseRow:
        return InvocationPhaseRow(
            invocation=self.invocation,
            role=self.role,
            model=self.model,
            duration_ms=self.duration_ms,
            usage=self.usage,
            cost_usd=self.cost_usd,
            cost_basis=self.cost_basis,
            outcome=self.outcome,
            retries=self.retries,
            replayed=self.replayed,
            open=self.open,
        )


@dataclass
class _Agent:
    span_id: str
    parent_span_id: str | None
    agent_type: str | None
    label: str | None
    replayed: bool
    role: str | None = None
    model: str | None = None
    started_ms: float | None = None
    ended_ms: float | None = None
    status: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    cost_basis: CostBasis | None = None
    usage_approx: bool = False
    retry_count: int | None = None
    host_rejected: bool = False
    tool_budget: dict[str, Any] | None = None
    open: bool = True
    phases: list[_Phase] = field(default_factory=list)

    def freeze(self) -> AgentInvocationRow:
        duration = None
        if self.started_ms is not None and self.ended_ms is not None:
            duration = max(0.0, self.ended_ms - self.started_ms)
        return AgentInvocationRow(
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            agent_type=self.agent_type,
            label=self.label,
            role=self.role,
            model=self.model,
            status=self.status,
            duration_ms=duration,
            usage=self.usage,
            cost_usd=self.cost_usd,
            cost_basis=self.cost_basis,
            usage_approx=self.usage_approx,
            retry_count=self.retry_count,
            host_rejected=self.host_rejected,
            tool_budget=self.tool_budget,
            replayed=self.replayed,
            open=self.open,
            phases=tuple(p.freeze() for p in self.phases),
        )


def reduce_invocation_table(events: Iterable[EventLike]) -> InvocationTable:
    """Reduce a run's events (or any prefix of them) to the invocation table.

    The same fold as :func:`invocation_table_fold`, over a recorded stream.

    ``by_role`` aggregates completed phase pairs; a bucket's ``cost_basis`` stays ``per-call``
    only while every pair it folded carried that basis. A live stream and its replayed
    re-emission reduce to identical usage and cost columns (durations and retries are live-only).
    """
    return reduce_events(invocation_table_fold(), events)


# A tuple, not a set: a junk ``type`` (a list, a dict) must compare unequal, not fail to hash.
_AGENT_EVENT_TYPES: Final = ("agent:start", "agent:phase:start", "agent:phase:end", "agent:end")


class _InvocationFold:
    """The invocation table's state while a stream is folded: one method per agent event type."""

    def __init__(self) -> None:
        self.agents: dict[str, _Agent] = {}
        self.lifecycle: AgentLifecycle[None] = AgentLifecycle()  # rows stay in `agents`
        self.open_phases: dict[tuple[str, int | None], _Phase] = {}
        self.buckets: dict[str, tuple[Usage, list[float], list[CostBasis], list[int]]] = {}
        self.total = 0.0

    def row_for(self, wire: Mapping[str, Any], span_id: str) -> _Agent:
        row = self.agents.get(span_id)
        if row is None:
            row = _Agent(
                span_id,
                as_str(wire.get("parentSpanId")),
                as_str(wire.get("agentType")),
                as_str(wire.get("label")),
                wire.get("replayed") is True,
            )
            self.agents[span_id] = row
        return row

    def agent_start(self, wire: Mapping[str, Any], row: _Agent) -> None:
        opened = self.lifecycle.start(wire)
        if opened is None:
            return  # a re-emitted or legacy per-phase repeat of its opener changes nothing
        # A row closed before its start was closed by an agent:end that paired with nothing.
        row.open = True
        row.status = None
        row.ended_ms = None
        row.role = opened.role
        row.model = opened.model
        row.started_ms = ts_ms(opened.ts)
        if row.label is None:
            row.label = opened.label

    def phase_start(self, wire: Mapping[str, Any], row: _Agent) -> None:
        invocation = as_int(wire.get("invocation"))
        phase = _Phase(
            invocation, as_str(wire.get("role")), as_str(wire.get("model")), wire.get("replayed") is True
        )
        row.phases.append(phase)
        self.open_phases[(row.span_id, invocation)] = phase

    def phase_end(self, wire: Mapping[str, Any], row: _Agent) -> None:
        invocation = as_int(wire.get("invocation"))
        found = self.open_phases.pop((row.span_id, invocation), None)
        if found is None:
            # An end without its start (attached mid-stream): keep its facts rather than drop them.
            found = _Phase(
                invocation,
                as_str(wire.get("role")),
                as_str(wire.get("model")),
                wire.get("replayed") is True,
            )
            row.phases.append(found)
        found.open = False
        found.role = as_str(wire.get("role")) or found.role
        found.model = as_str(wire.get("model")) or found.model
        found.duration_ms = as_number(wire.get("durationMs"))
        found.usage = _usage(wire.get("usage"))
        found.cost_usd = as_number(wire.get("costUsd"))
        found.cost_basis = _basis(wire.get("costBasis"))
        found.outcome = as_str(wire.get("outcome"))
        found.retries = as_int(wire.get("retries"))
        self._book_role(found)

    def _book_role(self, phase: _Phase) -> None:
        """Add a completed phase pair to its role's bucket."""
        usage_acc, cost_acc, basis_acc, count_acc = self.buckets.setdefault(
            phase.role or "unknown", ({}, [0.0], ["per-call"], [0])
        )
        _add_usage(usage_acc, phase.usage or {})
        cost_acc[0] += phase.cost_usd or 0.0
        if phase.cost_basis != "per-call" or phase.cost_usd is None:
            basis_acc[0] = "aggregate-estimate"
        count_acc[0] += 1

    def agent_end(self, wire: Mapping[str, Any], row: _Agent) -> None:
        if self.lifecycle.end(wire) is None and self.lifecycle.closed(row.span_id):
            return  # a repeated closer: the span already has its end
        row.open = False
        row.status = as_str(wire.get("status"))
        row.ended_ms = ts_ms(wire.get("ts"))
        row.usage = _usage(wire.get("usage"))
        row.cost_usd = as_number(wire.get("costUsd"))
        row.cost_basis = _basis(wire.get("costBasis"))
        row.usage_approx = wire.get("usageApprox") is True
        row.retry_count = as_int(wire.get("retryCount"))
        row.host_rejected = wire.get("hostRejected") is True
        budget = wire.get("toolBudget")
        row.tool_budget = dict(budget) if isinstance(budget, Mapping) else None
        self.total += row.cost_usd or 0.0
        if row.label is None:
            row.label = as_str(wire.get("label"))

    def table(self) -> InvocationTable:
        by_role = {
            role: RoleBucket(usage=usage, cost_usd=cost[0], cost_basis=basis[0], phases=count[0])
            for role, (usage, cost, basis, count) in self.buckets.items()
        }
        frozen = tuple(row.freeze() for row in self.agents.values())
        return InvocationTable(
            agents=frozen,
            by_role=by_role,
            total_cost_usd=self.total,
            open_agents=sum(1 for row in frozen if row.open),
            open_phases=sum(1 for row in frozen for p in row.phases if p.open),
        )


def _invocation_table() -> Generator[None, Mapping[str, Any] | None, InvocationTable]:
    fold = _InvocationFold()
    while (wire := (yield)) is not None:
        kind = wire.get("type")
        if kind not in _AGENT_EVENT_TYPES:
            continue
        row = fold.row_for(wire, as_str(wire.get("spanId")) or "")
        if kind == "agent:start":
            fold.agent_start(wire, row)
        elif kind == "agent:phase:start":
            fold.phase_start(wire, row)
        elif kind == "agent:phase:end":
            fold.phase_end(wire, row)
        else:
            fold.agent_end(wire, row)
    return fold.table()
