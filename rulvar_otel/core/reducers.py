"""Pure folds over a run's events: the invocation table and the critical path.

:func:`reduce_invocation_table` pairs the agent vocabulary without heuristics (one
``agent:start``/``agent:end`` pair per span, one ``agent:phase:start``/``agent:phase:end`` pair per
``(spanId, invocation)``) into per-agent, per-phase rows and a per-role aggregate.
:func:`reduce_critical_path` folds the same events into the run's wall, the post-fan-in interval
and its decomposition, the synthesize split by purpose, and the candidate milestones.

Both are single-pass, order-driven, tolerant of unknown types, missing fields and truncated
streams (a row or phase whose end never arrived stays ``open``). Where the stream cannot support
a figure the field is ``None`` (absent in JSON), never a guess. Wall figures are live fidelity:
a replayed stream re-stamps emission times, so its intervals are degenerate.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from rulvar_otel.core.drain import FoldSink
from rulvar_otel.core.handle import EventLike
from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.wire import as_int, as_number, as_str, as_wire, ts_ns

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

# The engine's dispatch labels for synthesize-role spans; suffixed variants (``<label>-final``)
# belong to the same class.
FINAL_COMPOSITION_LABEL: Final = "final-composition"
SYNTHESIS_NOTE_LABEL: Final = "synthesis-note"
CLAIM_JUDGE_LABEL: Final = "claim-consistency-judge"
CITATION_JUDGE_LABEL: Final = "citation-entailment-judge"

COORDINATION_ROLE: Final = "orchestrate"
SYNTHESIZE_ROLE: Final = "synthesize"

CostBasis: TypeAlias = Literal["per-call", "aggregate-estimate"]
SynthesizeClass: TypeAlias = Literal["composition", "claim-judge", "citation-judge", "unclassified"]
Usage: TypeAlias = dict[str, int]
_Result = TypeVar("_Result")


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase JSON with absent figures left out (absent, never null)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class InvocationPhaseRow(_Out):
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


class AgentInvocationRow(_Out):
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


class RoleBucket(_Out):
    """The per-role aggregate over completed phase pairs."""

    usage: Usage
    cost_usd: float
    cost_basis: CostBasis
    phases: int


class InvocationTable(_Out):
    agents: tuple[AgentInvocationRow, ...]
    by_role: dict[str, RoleBucket]
    total_cost_usd: float  # sum of agent:end costUsd over settled spans
    open_agents: int
    open_phases: int


class PostFanInBreakdown(_Out):
    """Where the post-fan-in window went: clipped buckets, their exact union, the residue."""

    coordination_model_ms: float
    coordination_model_ms_by_phase: dict[str, float]
    coordination_model_only_ms: float
    coordination_tool_ms: float
    coordination_tool_ms_by_name: dict[str, float]
    coordination_tool_calls_by_name: dict[str, int]
    synthesis_ms: float
    final_composition_ms: float
    semantic_judge_ms: float
    citation_judge_ms: float
    unclassified_synthesis_ms: float
    covered_ms: float
    residue_ms: float
    residue_share: float | None


class CriticalPath(_Out):
    segments: int
    run_wall_ms: float | None
    post_fan_in_ms: float | None
    post_fan_in_share: float | None
    synthesis_ms: float
    synthesis_share: float | None
    final_composition_ms: float
    semantic_judge_ms: float
    draft_judge_ms: float
    final_judge_ms: float
    citation_judge_ms: float
    unclassified_synthesis_ms: float
    composition_spans: int
    judge_spans: int
    citation_judge_spans: int
    unclassified_synthesis_spans: int
    first_candidate_ms: float | None
    last_candidate_ms: float | None
    worker_spans: int
    host_rejected_spans: int
    post_fan_in: PostFanInBreakdown | None


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


def _ts_ms(value: object) -> float | None:
    ns = ts_ns(value)
    return None if ns is None else round(ns / 1e6, 3)


def synthesize_span_class(label: str | None) -> SynthesizeClass:
    """Classify a synthesize-role span by its dispatch label.

    Unlabelled spans read as composition (streams from before the engine labelled its own
    composition dispatches); a present label nobody knows is ``unclassified``, so it can never
    silently inflate the composition figure.
    """
    if not label:
        return "composition"

    def named(base: str) -> bool:
        return label == base or label.startswith(base + "-")

    if named(FINAL_COMPOSITION_LABEL) or named(SYNTHESIS_NOTE_LABEL):
        return "composition"
    if named(CLAIM_JUDGE_LABEL):
        return "claim-judge"
    if named(CITATION_JUDGE_LABEL):
        return "citation-judge"
    return "unclassified"


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of possibly overlapping ``(start, end)`` intervals."""
    total = 0.0
    cur_from: float | None = None
    cur_to = 0.0
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if cur_from is None or start > cur_to:
            if cur_from is not None:
                total += cur_to - cur_from
            cur_from, cur_to = start, end
        elif end > cur_to:
            cur_to = end
    if cur_from is not None:
        total += cur_to - cur_from
    return total


# -- folds as drain sinks ----------------------------------------------------------------------


def invocation_table_fold() -> FoldSink[InvocationTable]:
    """The invocation table as a drain sink (its ``result`` once finished)."""
    return FoldSink(_invocation_table())


def critical_path_fold() -> FoldSink[CriticalPath]:
    """The critical-path reading as a drain sink (its ``result`` once finished)."""
    return FoldSink(_critical_path())


def _reduce(fold: FoldSink[_Result], events: Iterable[EventLike]) -> _Result:
    for event in events:
        fold.feed(as_wire(event))
    return fold.finish()


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
    seen_start: bool = False
    phases: list[_Phase] = field(default_factory=list[_Phase])

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
    return _reduce(invocation_table_fold(), events)


def _invocation_table() -> Generator[None, Mapping[str, Any] | None, InvocationTable]:
    agents: dict[str, _Agent] = {}
    open_phases: dict[tuple[str, int | None], _Phase] = {}
    buckets: dict[str, tuple[Usage, list[float], list[CostBasis], list[int]]] = {}
    total = 0.0

    def row_for(wire: Mapping[str, Any], span_id: str) -> _Agent:
        row = agents.get(span_id)
        if row is None:
            row = _Agent(
                span_id,
                as_str(wire.get("parentSpanId")),
                as_str(wire.get("agentType")),
                as_str(wire.get("label")),
                wire.get("replayed") is True,
            )
            agents[span_id] = row
        return row

    while (wire := (yield)) is not None:
        kind = wire.get("type")
        if kind not in ("agent:start", "agent:phase:start", "agent:phase:end", "agent:end"):
            continue
        span_id = as_str(wire.get("spanId")) or ""
        row = row_for(wire, span_id)
        if kind == "agent:start":
            # One opener per span; a re-emitted or legacy per-phase duplicate changes nothing.
            if not row.seen_start:
                row.seen_start = True
                row.role = as_str(wire.get("role"))
                row.model = as_str(wire.get("model"))
                row.started_ms = _ts_ms(wire.get("ts"))
                if row.label is None:
                    row.label = as_str(wire.get("label"))
        elif kind == "agent:phase:start":
            invocation = as_int(wire.get("invocation"))
            phase = _Phase(
                invocation, as_str(wire.get("role")), as_str(wire.get("model")), wire.get("replayed") is True
            )
            row.phases.append(phase)
            open_phases[(span_id, invocation)] = phase
        elif kind == "agent:phase:end":
            invocation = as_int(wire.get("invocation"))
            found = open_phases.pop((span_id, invocation), None)
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
            role = found.role or "unknown"
            usage_acc, cost_acc, basis_acc, count_acc = buckets.setdefault(
                role, ({}, [0.0], ["per-call"], [0])
            )
            _add_usage(usage_acc, found.usage or {})
            cost_acc[0] += found.cost_usd or 0.0
            if found.cost_basis != "per-call" or found.cost_usd is None:
                basis_acc[0] = "aggregate-estimate"
            count_acc[0] += 1
        else:  # agent:end
            row.open = False
            row.status = as_str(wire.get("status"))
            row.ended_ms = _ts_ms(wire.get("ts"))
            row.usage = _usage(wire.get("usage"))
            row.cost_usd = as_number(wire.get("costUsd"))
            row.cost_basis = _basis(wire.get("costBasis"))
            row.usage_approx = wire.get("usageApprox") is True
            row.retry_count = as_int(wire.get("retryCount"))
            row.host_rejected = wire.get("hostRejected") is True
            budget = wire.get("toolBudget")
            row.tool_budget = dict(budget) if isinstance(budget, Mapping) else None
            total += row.cost_usd or 0.0
            if row.label is None:
                row.label = as_str(wire.get("label"))

    by_role = {
        role: RoleBucket(usage=usage, cost_usd=cost[0], cost_basis=basis[0], phases=count[0])
        for role, (usage, cost, basis, count) in buckets.items()
    }
    frozen = tuple(row.freeze() for row in agents.values())
    return InvocationTable(
        agents=frozen,
        by_role=by_role,
        total_cost_usd=total,
        open_agents=sum(1 for row in frozen if row.open),
        open_phases=sum(1 for row in frozen for p in row.phases if p.open),
    )


# -- the critical path -------------------------------------------------------------------------


def reduce_critical_path(events: Iterable[EventLike]) -> CriticalPath:
    """Fold a run's events into its critical-path reading (see :func:`critical_path_fold`)."""
    return _reduce(critical_path_fold(), events)


def _critical_path() -> Generator[None, Mapping[str, Any] | None, CriticalPath]:
    """Fold a run's events into its critical-path reading.

    Post-fan-in is the interval from the last settled worker span (primary role neither
    ``orchestrate`` nor ``synthesize``) to ``run:end``; ``post_fan_in`` decomposes it into the
    coordinator's model activations and tool executions and the synthesize spans, each clipped to
    the window, with their exact union and the uncovered residue.
    """
    run_start: float | None = None
    run_end: float | None = None
    segments = 0
    agents = AgentLifecycle()
    last_worker_end: float | None = None
    worker_spans = 0
    host_rejected = 0
    synth_ms: dict[SynthesizeClass, float] = {
        "composition": 0.0,
        "claim-judge": 0.0,
        "citation-judge": 0.0,
        "unclassified": 0.0,
    }
    synth_spans: dict[SynthesizeClass, int] = dict.fromkeys(synth_ms, 0)
    draft_judge_ms = 0.0
    final_judge_ms = 0.0
    candidate_ends: list[float] = []
    coord_model: list[tuple[str, float, float]] = []
    coord_tools: list[tuple[str, float, float]] = []
    synth_intervals: list[tuple[SynthesizeClass, float, float]] = []

    while (wire := (yield)) is not None:
        kind = wire.get("type")
        at = _ts_ms(wire.get("ts"))
        if at is None:
            continue
        span_id = as_str(wire.get("spanId")) or ""
        if kind == "run:start":
            segments += 1
            if run_start is None:
                run_start = at
        elif kind == "run:end":
            run_end = at
        elif kind == "agent:start":
            agents.start(wire)
        elif kind in ("agent:phase:end", "tool:end"):
            started = agents.get(span_id)
            if started is None or started.role != COORDINATION_ROLE:
                continue
            duration = as_number(wire.get("durationMs"))
            span = duration if duration is not None and duration > 0 else 0.0
            if kind == "agent:phase:end":
                coord_model.append((as_str(wire.get("role")) or "unknown", at - span, at))
            else:
                coord_tools.append((as_str(wire.get("toolName")) or "unknown", at - span, at))
        elif kind == "agent:end":
            if wire.get("hostRejected") is True:
                host_rejected += 1
            started = agents.end(wire)
            if started is None or started.start_ns is None:
                continue  # an end whose start this stream never saw cannot be placed in time
            started_at = round(started.start_ns / 1e6, 3)
            if started.role == SYNTHESIZE_ROLE:
                wall = max(0.0, at - started_at)
                klass = synthesize_span_class(started.label)
                synth_ms[klass] += wall
                synth_spans[klass] += 1
                if klass == "claim-judge":
                    if started.label == CLAIM_JUDGE_LABEL:
                        draft_judge_ms += wall
                    else:
                        final_judge_ms += wall
                elif klass == "composition":
                    candidate_ends.append(at)
                synth_intervals.append((klass, started_at, at))
            elif started.role != COORDINATION_ROLE:
                worker_spans += 1
                last_worker_end = at if last_worker_end is None else max(last_worker_end, at)

    synthesis_ms = sum(synth_ms.values())
    run_wall = max(0.0, run_end - run_start) if run_start is not None and run_end is not None else None
    post_fan_in_ms: float | None = None
    breakdown: PostFanInBreakdown | None = None
    if run_end is not None and last_worker_end is not None:
        post_fan_in_ms = max(0.0, run_end - last_worker_end)
        breakdown = _decompose(
            min(last_worker_end, run_end), run_end, post_fan_in_ms, coord_model, coord_tools, synth_intervals
        )
    wall_ok = run_wall is not None and run_wall > 0
    return CriticalPath(
        segments=segments,
        run_wall_ms=run_wall,
        post_fan_in_ms=post_fan_in_ms,
        post_fan_in_share=post_fan_in_ms / run_wall
        if wall_ok and run_wall is not None and post_fan_in_ms is not None
        else None,
        synthesis_ms=synthesis_ms,
        synthesis_share=synthesis_ms / run_wall if wall_ok and run_wall is not None else None,
        final_composition_ms=synth_ms["composition"],
        semantic_judge_ms=synth_ms["claim-judge"],
        draft_judge_ms=draft_judge_ms,
        final_judge_ms=final_judge_ms,
        citation_judge_ms=synth_ms["citation-judge"],
        unclassified_synthesis_ms=synth_ms["unclassified"],
        composition_spans=synth_spans["composition"],
        judge_spans=synth_spans["claim-judge"],
        citation_judge_spans=synth_spans["citation-judge"],
        unclassified_synthesis_spans=synth_spans["unclassified"],
        first_candidate_ms=min(candidate_ends) - run_start
        if candidate_ends and run_start is not None
        else None,
        last_candidate_ms=max(candidate_ends) - run_start
        if candidate_ends and run_start is not None
        else None,
        worker_spans=worker_spans,
        host_rejected_spans=host_rejected,
        post_fan_in=breakdown,
    )


def _decompose(
    window_from: float,
    window_to: float,
    post_fan_in_ms: float,
    coord_model: list[tuple[str, float, float]],
    coord_tools: list[tuple[str, float, float]],
    synth_intervals: list[tuple[SynthesizeClass, float, float]],
) -> PostFanInBreakdown:
    def clip(start: float, end: float) -> tuple[float, float] | None:
        # Anything touching the window participates: a zero-length clip still registers its name.
        if end < window_from or start > window_to:
            return None
        return max(start, window_from), min(end, window_to)

    model_clipped: list[tuple[float, float]] = []
    by_phase: dict[str, float] = {}
    for role, start, end in coord_model:
        if (c := clip(start, end)) is not None:
            model_clipped.append(c)
            by_phase[role] = by_phase.get(role, 0.0) + (c[1] - c[0])
    tools_clipped: list[tuple[float, float]] = []
    tool_ms: dict[str, float] = {}
    tool_calls: dict[str, int] = {}
    for name, start, end in coord_tools:
        if (c := clip(start, end)) is not None:
            tools_clipped.append(c)
            tool_ms[name] = tool_ms.get(name, 0.0) + (c[1] - c[0])
            tool_calls[name] = tool_calls.get(name, 0) + 1
    synth_clipped: list[tuple[float, float]] = []
    synth_by_class: dict[SynthesizeClass, float] = {
        "composition": 0.0,
        "claim-judge": 0.0,
        "citation-judge": 0.0,
        "unclassified": 0.0,
    }
    for klass, start, end in synth_intervals:
        if (c := clip(start, end)) is not None:
            synth_clipped.append(c)
            synth_by_class[klass] += c[1] - c[0]
    covered = union_length([*model_clipped, *tools_clipped, *synth_clipped])
    # |model \ tools| as a difference of two unions: never negative, tools nested once.
    model_only = union_length([*model_clipped, *tools_clipped]) - union_length(tools_clipped)
    residue = max(0.0, post_fan_in_ms - covered)
    return PostFanInBreakdown(
        coordination_model_ms=sum(e - s for s, e in model_clipped),
        coordination_model_ms_by_phase=by_phase,
        coordination_model_only_ms=model_only,
        coordination_tool_ms=sum(e - s for s, e in tools_clipped),
        coordination_tool_ms_by_name=tool_ms,
        coordination_tool_calls_by_name=tool_calls,
        synthesis_ms=sum(e - s for s, e in synth_clipped),
        final_composition_ms=synth_by_class["composition"],
        semantic_judge_ms=synth_by_class["claim-judge"],
        citation_judge_ms=synth_by_class["citation-judge"],
        unclassified_synthesis_ms=synth_by_class["unclassified"],
        covered_ms=covered,
        residue_ms=residue,
        residue_share=residue / post_fan_in_ms if post_fan_in_ms > 0 else None,
    )
