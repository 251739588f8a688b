"""The adaptive orchestration, plan and accounting event models (one per wire type).

Plan revisions and node moves, the orchestrator's wakes, budget and acceptance, escalations,
spawn admission, verification, the ledger, stalls and guards, resolutions, termination and
admission facts, journal compatibility. Declarative: each class names its ``type`` literal and its
body fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue

from rulvar_otel.core._events_envelope import Completion, EventModel

__all__ = [
    "AdmissionLeaseLost",
    "EscalationDecided",
    "EscalationRaised",
    "GuardOscillation",
    "JournalCompat",
    "LedgerOp",
    "NodeCancelled",
    "NodeLinked",
    "NodeParked",
    "OrchestratorAcceptance",
    "OrchestratorBudget",
    "OrchestratorWoke",
    "PlanRevised",
    "ResolutionApplied",
    "ResolutionSuperseded",
    "SpawnAdmitted",
    "SpawnRejected",
    "StallDetected",
    "TerminationConfigDrift",
    "TerminationDebit",
    "TerminationDenied",
    "VerifyFailed",
]


# --- adaptive orchestration, plan and accounting --------------------------------------------


class PlanRevised(EventModel):
    type: Literal["plan:revised"] = "plan:revised"
    entry_ref: int
    plan_hash: str
    applied: int
    dropped: int
    revision_units_remaining: int


class NodeParked(EventModel):
    type: Literal["node:parked"] = "node:parked"
    node_id: str
    logical_task_id: str


class NodeCancelled(EventModel):
    type: Literal["node:cancelled"] = "node:cancelled"
    node_id: str
    logical_task_id: str


class NodeLinked(EventModel):
    type: Literal["node:linked"] = "node:linked"
    node_id: str
    logical_task_id: str
    donor_ref: int | str
    reclaimed_usd: float


class OrchestratorWoke(EventModel):
    type: Literal["orchestrator:woke"] = "orchestrator:woke"
    digest_seq: int
    plan_hash: str
    covers_to_ordinal: int
    render_size: int


class OrchestratorBudget(EventModel):
    type: Literal["orchestrator:budget"] = "orchestrator:budget"
    at_cap: bool
    spent_usd: float | None = None
    cap_usd: float | None = None
    finalize_reserve_usd: float | None = None
    run_spent_usd: float | None = None
    run_ceiling_usd: float | None = None
    orchestrator_spent_usd: float | None = None
    orchestrator_cap_usd: float | None = None
    orchestrator_share: float | None = None
    soft_warning: bool | None = None


class OrchestratorAcceptance(EventModel):
    type: Literal["orchestrator:acceptance"] = "orchestrator:acceptance"
    verdict: Literal["accepted", "rejected"]
    completion: Completion
    child_status_counts: dict[str, int]
    min_spawned_children: int | None = None
    spawned_children: int | None = None


class EscalationRaised(EventModel):
    type: Literal["escalation:raised"] = "escalation:raised"
    entry_ref: int
    kind: Literal["scope_bigger", "scope_different", "blocked_with_evidence"]
    logical_task_id: str
    cost_to_date_usd: float


class EscalationDecided(EventModel):
    type: Literal["escalation:decided"] = "escalation:decided"
    entry_ref: int
    decision: Literal["retry", "decompose", "cancel", "accept"]
    by: str
    counts_against_limit: bool


class SpawnAdmitted(EventModel):
    type: Literal["spawn:admitted"] = "spawn:admitted"
    entry_ref: int
    verdict: Literal["admit", "reuse_full", "admit_graft"]
    agent_type: str
    logical_task_id: str | None = None
    spawn_units_after: float | None = None
    reserve_usd: float | None = None


class SpawnRejected(EventModel):
    type: Literal["spawn:rejected"] = "spawn:rejected"
    entry_ref: int | None = None
    code: str
    agent_type: str
    logical_task_id: str | None = None


class VerifyFailed(EventModel):
    type: Literal["verify:failed"] = "verify:failed"
    entry_ref: int
    logical_task_id: str
    rung: int | str
    gate: Literal["mechanical", "judge", "spot-check"]


class LedgerOp(EventModel):
    type: Literal["ledger:op"] = "ledger:op"
    entry_ref: int
    op: Literal["brief_set", "fact_add", "fact_supersede", "lesson_add", "observation_add"]


class StallDetected(EventModel):
    type: Literal["stall:detected"] = "stall:detected"
    logical_task_id: str
    stall_streak: int


class GuardOscillation(EventModel):
    type: Literal["guard:oscillation"] = "guard:oscillation"
    spawn_key_hash: str
    oscillation_count: int
    limit: int


class ResolutionApplied(EventModel):
    type: Literal["resolution:applied"] = "resolution:applied"
    target_ref: int
    entry_ref: int
    by: str


class ResolutionSuperseded(EventModel):
    type: Literal["resolution:superseded"] = "resolution:superseded"
    target_ref: int
    entry_ref: int
    superseded_by: int
    reason: Literal["already_resolved", "target_abandoned"]


class TerminationDebit(EventModel):
    type: Literal["termination:debit"] = "termination:debit"
    entry_ref: int
    counter: str
    remaining: float
    phi: float


class TerminationDenied(EventModel):
    type: Literal["termination:denied"] = "termination:denied"
    entry_ref: int
    counter: str
    code: str


class TerminationConfigDrift(EventModel):
    type: Literal["termination:config-drift"] = "termination:config-drift"
    field: str
    frozen_value: JsonValue = None
    live_value: JsonValue = None


class AdmissionLeaseLost(EventModel):
    type: Literal["admission:lease-lost"] = "admission:lease-lost"
    unit_id: str
    generation: int


class JournalCompat(EventModel):
    type: Literal["journal:compat"] = "journal:compat"
    code: Literal["HASH_VERSION_TOO_OLD", "HASH_VERSION_TOO_NEW"]
    found: int | str
    window: tuple[int, int]
