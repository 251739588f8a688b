"""The run, agent, tool and determinism event models (one frozen pydantic model per wire type).

The run lifecycle (``run:*``, ``phase:start``, ``child:*``, logs, budget and waiting facts), the
agent vocabulary (``agent:*``, quota and exposure waits, ``control:wire``), tool calls and
determinism warnings. Declarative: each class names its ``type`` literal and its body fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from rulvar_otel.core._events_envelope import (
    Completion,
    CostBasis,
    EventModel,
    ExplorationSummary,
    RunStatus,
    ToolBudgetSummary,
    Usage,
    WireError,
)

__all__ = [
    "AgentEnd",
    "AgentError",
    "AgentPhaseEnd",
    "AgentPhaseStart",
    "AgentQueued",
    "AgentSchemaRetry",
    "AgentStart",
    "AgentStream",
    "ApprovalPending",
    "BudgetExposureWait",
    "BudgetUpdate",
    "ChildEnd",
    "ChildStart",
    "ControlWire",
    "DeterminismWarning",
    "ExternalWaiting",
    "Log",
    "PhaseStart",
    "QuotaDenied",
    "RunEnd",
    "RunStart",
    "ToolEnd",
    "ToolStart",
]


# --- core -----------------------------------------------------------------------------------


class RunStart(EventModel):
    type: Literal["run:start"] = "run:start"
    workflow: str
    resumed: bool = False


class RunEnd(EventModel):
    type: Literal["run:end"] = "run:end"
    status: RunStatus
    total_usd: float = 0.0
    usage_approx: bool | None = None
    completion: Completion | None = None
    child_status_counts: dict[str, int] | None = None
    degraded_reasons: list[str] | None = None
    salvaged_partial_children: list[str] | None = None
    salvaged_terminal_output_children: list[str] | None = None
    below_floor_ok_children: list[str] | None = None
    acceptance_children: list[dict[str, JsonValue]] | None = None
    semantic_passes: dict[str, JsonValue] | None = None
    claim_consistency_meta: JsonValue = None
    synthesis_skipped: JsonValue = None
    deliverable_accepted: bool | None = None
    result_available: bool | None = None
    accepted_artifact_ref: int | None = None
    rejected_finish_candidates: list[dict[str, JsonValue]] | None = None
    children_at_failure: dict[str, JsonValue] | None = None
    settled: Literal[False] | None = None
    settled_reason: Literal["superseded"] | None = None
    # Kept as raw JSON here: parse_terminal_envelope is the strict gate for hosts that want it.
    envelope: dict[str, JsonValue] | None = None


class PhaseStart(EventModel):
    type: Literal["phase:start"] = "phase:start"
    phase: str


class Log(EventModel):
    type: Literal["log"] = "log"
    level: Literal["debug", "info", "warn", "error"]
    msg: str
    data: JsonValue = None


class BudgetUpdate(EventModel):
    type: Literal["budget:update"] = "budget:update"
    spent_usd: float
    remaining_usd: float | None = None
    committed_reserve_usd: float = 0.0


class ExternalWaiting(EventModel):
    type: Literal["external:waiting"] = "external:waiting"
    key: str
    entry_ref: int
    prompt: str | None = None
    deadline_at: str | int | None = None


class ApprovalPending(EventModel):
    type: Literal["approval:pending"] = "approval:pending"
    tool_name: str
    entry_ref: int
    deadline_at: str | int | None = None


class ChildStart(EventModel):
    type: Literal["child:start"] = "child:start"
    workflow: str
    scope: str


class ChildEnd(EventModel):
    type: Literal["child:end"] = "child:end"
    workflow: str
    scope: str
    status: str


# --- agent ----------------------------------------------------------------------------------


class _AgentBody(EventModel):
    # Optional: foreign and older emitters omit it on closers; renderers show "(unknown)".
    agent_type: str | None = None
    label: str | None = None


class AgentQueued(_AgentBody):
    type: Literal["agent:queued"] = "agent:queued"


class AgentStart(_AgentBody):
    type: Literal["agent:start"] = "agent:start"
    model: str
    role: str


class AgentPhaseStart(_AgentBody):
    type: Literal["agent:phase:start"] = "agent:phase:start"
    role: str
    model: str
    invocation: int


class AgentPhaseEnd(_AgentBody):
    type: Literal["agent:phase:end"] = "agent:phase:end"
    role: str
    model: str
    invocation: int
    duration_ms: float
    usage: Usage
    cost_usd: float
    cost_basis: CostBasis | None = None
    outcome: Literal["ok", "error"]
    retries: int | None = None


class AgentEnd(_AgentBody):
    type: Literal["agent:end"] = "agent:end"
    status: str
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    cost_basis: CostBasis | None = None
    entry_ref: int | None = None
    error: WireError | None = None
    exploration: ExplorationSummary | None = None
    tool_budget: ToolBudgetSummary | None = None
    host_rejected: bool | None = None
    retry_count: int | None = None
    usage_approx: bool | None = None
    quota_denials: JsonValue = None


class AgentError(_AgentBody):
    type: Literal["agent:error"] = "agent:error"
    error: WireError
    will_retry: bool


class QuotaDenied(_AgentBody):
    type: Literal["quota:denied"] = "quota:denied"
    model: str | None = None
    reason: str | None = None
    retry_after_ms: float | None = None
    will_retry: bool = True


class BudgetExposureWait(_AgentBody):
    type: Literal["budget:exposure-wait"] = "budget:exposure-wait"
    model: str | None = None
    scope: Literal["root", "child"] | None = None
    cap_usd: float | None = None
    spent_usd: float | None = None
    in_flight_usd: float | None = None
    estimate_usd: float | None = None
    will_wait: bool


class AgentSchemaRetry(_AgentBody):
    type: Literal["agent:schema-retry"] = "agent:schema-retry"
    attempt: int
    max_attempts: int


class ControlWire(EventModel):
    type: Literal["control:wire"] = "control:wire"
    control_kind: Literal["countTokens"] = "countTokens"
    model: str
    outcome: Literal["ok", "failed", "denied"]
    input_tokens: int | None = None


class AgentStream(EventModel):
    """A token delta. ``delta`` is content: it never leaves the process."""

    type: Literal["agent:stream"] = "agent:stream"
    delta: str


# --- tool -----------------------------------------------------------------------------------


class ToolStart(EventModel):
    type: Literal["tool:start"] = "tool:start"
    tool_name: str
    tool_call_id: str | None = None
    risk: JsonValue = None


class ToolEnd(EventModel):
    type: Literal["tool:end"] = "tool:end"
    tool_name: str
    tool_call_id: str | None = None
    outcome: Literal["ok", "error", "denied"]
    duration_ms: float = 0.0
    verdict: Literal["allow", "deny", "ask"] | None = None
    decided_by: str | None = None
    rule: JsonValue = None
    advisory: JsonValue = None
    guard: Literal["repeated-signature", "per-tool-cap", "finalization-window"] | None = None
    error_code: str | None = None


# --- determinism ----------------------------------------------------------------------------


class DeterminismWarning(EventModel):
    type: Literal["determinism:warning"] = "determinism:warning"
    category: Literal["bare-date-now", "bare-math-random"]
    provenance: Literal["workflow", "allowlisted"]
    frame: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
