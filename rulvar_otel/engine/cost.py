"""The CostReport fold and the terminal envelope, computed once at settlement.

Both fold the same per-agent records (journal-backed on replay), in dispatch order, so the report's
``totalUsd``, the ``run:end`` event's ``totalUsd``, the envelope and every agent's ``costUsd`` agree
by construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from rulvar_otel.core.events import Usage
from rulvar_otel.engine.model import add_usage, usage_dict

__all__ = [
    "ROLES",
    "UNJOURNALED_ORDER",
    "AgentRecord",
    "OrchestrationFacts",
    "CostReport",
    "Slice",
    "build_envelope",
    "fold_cost_report",
    "total_usage",
]

ROLES = ("orchestrate", "plan", "loop", "finalize", "extract", "summarize", "synthesize")

# The fold order of an agent whose terminal the journal refused: after every journaled one.
UNJOURNALED_ORDER = 1 << 62


@dataclass(frozen=True)
class Slice:
    """One invocation's (role, model) usage and its per-call priced cost (None: unpriced)."""

    role: str
    model: str
    invocation: int
    usage: Usage
    cost_usd: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "model": self.model,
            "invocation": self.invocation,
            "usage": usage_dict(self.usage),
            "costUsd": self.cost_usd,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Slice:
        cost = data.get("costUsd")
        return cls(
            role=str(data["role"]),
            model=str(data["model"]),
            invocation=int(data["invocation"]),
            usage=Usage.model_validate(data.get("usage") or {}),
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
        )


@dataclass
class AgentRecord:
    """One settled agent's cost facts, as the fold reads them."""

    agent_type: str
    phase: str | None
    scope: str
    slices: list[Slice] = field(default_factory=list[Slice])
    usage_approx: bool = False
    wire_requests: int = 0
    # The terminal journal entry's seq: the fold runs in journal order, so a live run and its
    # replay add the same floats in the same order.
    order: int = 0


@dataclass
class OrchestrationFacts:
    """What the run's orchestrations add to the fold: their own scopes, the abandoned ones, wakes."""

    orchestrator_scopes: set[str] = field(default_factory=set[str])
    abandoned_scopes: set[str] = field(default_factory=set[str])
    wakes: int = 0
    forced_finish: bool = False
    reserve_used_usd: float = 0.0


# The share's denominator floor: a run that spent almost nothing does not read as 100% orchestrator.
_SHARE_FLOOR_USD = 0.01


class _Camel(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)


class UnpricedSlice(_Camel):
    model: str
    usage: Usage


class Abandoned(_Camel):
    usd: float = 0.0
    unpriced: list[UnpricedSlice] = Field(default_factory=list[UnpricedSlice])


class OrchestratorBlock(_Camel):
    spent_usd: float = 0.0
    share: float = 0.0
    wakes: int = 0
    forced_finish: bool = False
    reserve_used_usd: float = 0.0


class CostReport(_Camel):
    """What a settled run cost: ``locally-estimated`` dollars from the caller's pricing table."""

    basis: str = "locally-estimated"
    total_usd: float
    gross_usd: float
    wire_requests: int
    abandoned: Abandoned = Field(default_factory=Abandoned)
    by_model: dict[str, float]
    by_phase: dict[str, float]
    by_agent_type: dict[str, float]
    by_role: dict[str, float]
    by_scope: dict[str, float]
    orchestrator: OrchestratorBlock = Field(default_factory=OrchestratorBlock)
    unpriced: list[UnpricedSlice]
    usage_approx: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def fold_cost_report(
    records: Iterable[AgentRecord], orchestration: OrchestrationFacts | None = None
) -> CostReport:
    """Fold the records; an orchestration's abandoned scopes go to ``abandoned``, not the total."""
    facts = orchestration or OrchestrationFacts()
    abandoned = 0.0
    orchestrator_usd = 0.0
    total = 0.0
    by_model: dict[str, float] = {}
    by_phase: dict[str, float] = {}
    by_agent_type: dict[str, float] = {}
    by_role: dict[str, float] = dict.fromkeys(ROLES, 0.0)
    by_scope: dict[str, float] = {}
    unpriced: list[UnpricedSlice] = []
    approx = False
    wires = 0
    for record in sorted(records, key=lambda r: r.order):
        approx = approx or record.usage_approx
        wires += record.wire_requests
        phase = record.phase or "unknown"
        agent_type = record.agent_type or "unknown"
        scope = record.scope or "root"
        if record.scope in facts.abandoned_scopes:
            abandoned += sum(part.cost_usd or 0.0 for part in record.slices)
            continue
        if record.scope in facts.orchestrator_scopes:
            orchestrator_usd += sum(part.cost_usd or 0.0 for part in record.slices)
        for bucket, name in ((by_phase, phase), (by_agent_type, agent_type), (by_scope, scope)):
            bucket.setdefault(name, 0.0)
        for part in record.slices:
            by_model.setdefault(part.model, 0.0)
            by_role.setdefault(part.role, 0.0)
            if part.cost_usd is None:
                unpriced.append(UnpricedSlice(model=part.model, usage=part.usage))
                continue
            total += part.cost_usd
            by_model[part.model] += part.cost_usd
            by_role[part.role] += part.cost_usd
            by_phase[phase] += part.cost_usd
            by_agent_type[agent_type] += part.cost_usd
            by_scope[scope] += part.cost_usd
    block = OrchestratorBlock()
    if orchestration is not None:
        block = OrchestratorBlock(
            spent_usd=orchestrator_usd,
            share=orchestrator_usd / max(total, _SHARE_FLOOR_USD),
            wakes=facts.wakes,
            forced_finish=facts.forced_finish,
            reserve_used_usd=facts.reserve_used_usd,
        )
    return CostReport(
        total_usd=total,
        gross_usd=total + abandoned,
        abandoned=Abandoned(usd=abandoned),
        orchestrator=block,
        wire_requests=wires,
        by_model=by_model,
        by_phase=by_phase,
        by_agent_type=by_agent_type,
        by_role=by_role,
        by_scope=by_scope,
        unpriced=unpriced,
        usage_approx=True if approx else None,
    )


def total_usage(records: Iterable[AgentRecord]) -> Usage:
    out = Usage()
    for record in records:
        for part in record.slices:
            out = add_usage(out, part.usage)
    return out


def build_envelope(
    *,
    run_id: str,
    workflow: str,
    status: str,
    report: CostReport,
    usage: Usage,
    agents_spawned: int,
    error: Mapping[str, Any] | None,
    completion: str | None,
    settled: bool = True,
) -> dict[str, Any]:
    """The terminal envelope (wire names), assembled once at the settlement chokepoint."""
    envelope: dict[str, Any] = {
        "runId": run_id,
        "workflow": workflow,
        "status": status,
        "settled": settled,
        "totalUsd": report.total_usd,
        "grossUsd": report.gross_usd,
        "costBasis": "locally-estimated",
        "costByModel": dict(report.by_model),
        "usage": usage_dict(usage),
        "usageApprox": bool(report.usage_approx),
        "agentsSpawned": agents_spawned,
        "wireRequests": report.wire_requests,
    }
    if error is not None:
        envelope["error"] = dict(error)
    if completion is not None:
        envelope["completion"] = completion
    return envelope
