"""The WorkflowEvent model: frozen pydantic models, one discriminated union, tolerant parsing.

Field names are snake_case in Python and camelCase on the wire (``model_dump(by_alias=True)``
gives the wire form back). Unknown fields are kept on every model (``model_extra``); an unknown
``type`` parses into :class:`UnknownEvent`, which keeps every field. A known type whose body is
wrong raises :class:`EventError` naming the field: the typed surface promises typed values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeAlias, Union

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from rulvar_otel.core.wire import ENVELOPE_FIELDS
from rulvar_otel.core.wire import ts_ns as parse_ts_ns
from rulvar_otel.errors import EventError

__all__ = [
    "ENVELOPE_FIELDS",
    "KNOWN_EVENT_TYPES",
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
    "EscalationDecided",
    "EscalationRaised",
    "EventModel",
    "ExplorationSummary",
    "ExternalWaiting",
    "GuardOscillation",
    "JournalCompat",
    "LedgerOp",
    "Log",
    "NodeCancelled",
    "NodeLinked",
    "NodeParked",
    "OrchestratorAcceptance",
    "OrchestratorBudget",
    "OrchestratorWoke",
    "PhaseStart",
    "PlanRevised",
    "QuotaDenied",
    "ResolutionApplied",
    "ResolutionSuperseded",
    "RunEnd",
    "RunStart",
    "SpawnAdmitted",
    "SpawnRejected",
    "StallDetected",
    "TerminationConfigDrift",
    "TerminationDebit",
    "TerminationDenied",
    "AdmissionLeaseLost",
    "ToolBudgetSummary",
    "ToolEnd",
    "ToolStart",
    "UnknownEvent",
    "Usage",
    "VerifyFailed",
    "WireError",
    "WorkflowEvent",
    "event_to_wire",
    "parse_event",
    "parse_ts_ns",
]


RunStatus: TypeAlias = Literal["ok", "error", "cancelled", "exhausted", "suspended"]
Completion: TypeAlias = Literal["complete", "partial", "rejected"]
CostBasis: TypeAlias = Literal["per-call", "aggregate-estimate"]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="allow",
        alias_generator=to_camel,
        populate_by_name=True,
        ser_json_inf_nan="constants",
    )


class Usage(_Model):
    """Token counts of one call, phase, agent or run (cache counts are subsets of input)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None
    cache_write5m_tokens: int | None = Field(default=None, alias="cacheWrite5mTokens")
    cache_write1h_tokens: int | None = Field(default=None, alias="cacheWrite1hTokens")


class WireError(_Model):
    """The typed error shape every surface carries. ``message`` is content: never exported."""

    code: str
    message: str
    retryable: bool
    data: JsonValue = None


class ExplorationSummary(_Model):
    tool_calls_used: int = 0
    distinct_signatures: int = 0
    repeated_calls: int = 0
    duplicate_result_calls: int = 0
    denied_repeats: int = 0
    by_tool: dict[str, int] = Field(default_factory=dict[str, int])
    denied_tool_cap: int | None = None
    tool_units_used: float | None = None


class ToolBudgetSummary(_Model):
    used: int = 0
    cap: int | None = None
    units_used: float | None = None
    units_max: float | None = None
    extensions_granted: int | None = None
    notices_fired: list[int] | None = None
    finalization_reserve_used: bool | None = None
    finalization_window_entered: bool | None = None
    limiter: Literal["maxToolCalls", "toolUnits"] | None = None


class EventModel(_Model):
    """The envelope every event shares."""

    run_id: str
    seq: int
    ts: str
    span_id: str
    parent_span_id: str | None = None
    replayed: bool | None = None
    type: str


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


class UnknownEvent(EventModel):
    """An event of a type this version does not know; every field is kept in ``model_extra``."""


_KNOWN: tuple[type[EventModel], ...] = (
    RunStart, RunEnd, PhaseStart, Log, BudgetUpdate, ExternalWaiting, ApprovalPending, ChildStart,
    ChildEnd, AgentQueued, AgentStart, AgentPhaseStart, AgentPhaseEnd, AgentEnd, AgentError,
    QuotaDenied, BudgetExposureWait, AgentSchemaRetry, ControlWire, AgentStream, ToolStart, ToolEnd,
    DeterminismWarning, PlanRevised, NodeParked, NodeCancelled, NodeLinked, OrchestratorWoke,
    OrchestratorBudget, OrchestratorAcceptance, EscalationRaised, EscalationDecided, SpawnAdmitted,
    SpawnRejected, VerifyFailed, LedgerOp, StallDetected, GuardOscillation, ResolutionApplied,
    ResolutionSuperseded, TerminationDebit, TerminationDenied, TerminationConfigDrift,
    AdmissionLeaseLost, JournalCompat,
)  # fmt: skip

_MODEL_BY_TYPE: Final[dict[str, type[EventModel]]] = {
    model.model_fields["type"].default: model for model in _KNOWN
}
KNOWN_EVENT_TYPES: Final = frozenset(_MODEL_BY_TYPE)
_UNKNOWN_TAG: Final = "\x00unknown"


def _discriminate(value: Any) -> str:
    tag = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    return tag if isinstance(tag, str) and tag in _MODEL_BY_TYPE else _UNKNOWN_TAG


WorkflowEvent: TypeAlias = Annotated[
    Union[  # noqa: UP007 - a runtime union of annotated members
        Annotated[RunStart, Tag("run:start")],
        Annotated[RunEnd, Tag("run:end")],
        Annotated[PhaseStart, Tag("phase:start")],
        Annotated[Log, Tag("log")],
        Annotated[BudgetUpdate, Tag("budget:update")],
        Annotated[ExternalWaiting, Tag("external:waiting")],
        Annotated[ApprovalPending, Tag("approval:pending")],
        Annotated[ChildStart, Tag("child:start")],
        Annotated[ChildEnd, Tag("child:end")],
        Annotated[AgentQueued, Tag("agent:queued")],
        Annotated[AgentStart, Tag("agent:start")],
        Annotated[AgentPhaseStart, Tag("agent:phase:start")],
        Annotated[AgentPhaseEnd, Tag("agent:phase:end")],
        Annotated[AgentEnd, Tag("agent:end")],
        Annotated[AgentError, Tag("agent:error")],
        Annotated[QuotaDenied, Tag("quota:denied")],
        Annotated[BudgetExposureWait, Tag("budget:exposure-wait")],
        Annotated[AgentSchemaRetry, Tag("agent:schema-retry")],
        Annotated[ControlWire, Tag("control:wire")],
        Annotated[AgentStream, Tag("agent:stream")],
        Annotated[ToolStart, Tag("tool:start")],
        Annotated[ToolEnd, Tag("tool:end")],
        Annotated[DeterminismWarning, Tag("determinism:warning")],
        Annotated[PlanRevised, Tag("plan:revised")],
        Annotated[NodeParked, Tag("node:parked")],
        Annotated[NodeCancelled, Tag("node:cancelled")],
        Annotated[NodeLinked, Tag("node:linked")],
        Annotated[OrchestratorWoke, Tag("orchestrator:woke")],
        Annotated[OrchestratorBudget, Tag("orchestrator:budget")],
        Annotated[OrchestratorAcceptance, Tag("orchestrator:acceptance")],
        Annotated[EscalationRaised, Tag("escalation:raised")],
        Annotated[EscalationDecided, Tag("escalation:decided")],
        Annotated[SpawnAdmitted, Tag("spawn:admitted")],
        Annotated[SpawnRejected, Tag("spawn:rejected")],
        Annotated[VerifyFailed, Tag("verify:failed")],
        Annotated[LedgerOp, Tag("ledger:op")],
        Annotated[StallDetected, Tag("stall:detected")],
        Annotated[GuardOscillation, Tag("guard:oscillation")],
        Annotated[ResolutionApplied, Tag("resolution:applied")],
        Annotated[ResolutionSuperseded, Tag("resolution:superseded")],
        Annotated[TerminationDebit, Tag("termination:debit")],
        Annotated[TerminationDenied, Tag("termination:denied")],
        Annotated[TerminationConfigDrift, Tag("termination:config-drift")],
        Annotated[AdmissionLeaseLost, Tag("admission:lease-lost")],
        Annotated[JournalCompat, Tag("journal:compat")],
        Annotated[UnknownEvent, Tag(_UNKNOWN_TAG)],
    ],
    Discriminator(_discriminate),
]

_ADAPTER: Final[TypeAdapter[WorkflowEvent]] = TypeAdapter(WorkflowEvent)


def parse_event(value: Mapping[str, Any] | str | bytes | EventModel) -> WorkflowEvent:
    """Parse one event from a dict, a JSON text, or pass a model through.

    Raises :class:`EventError` naming the field and the defect when ``value`` is not JSON, not an
    object, lacks an envelope field, or carries a known type with an invalid body.
    """
    if isinstance(value, EventModel):
        return value  # type: ignore[return-value]
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise EventError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, Mapping):
        raise EventError(f"an event must be a JSON object, got {type(value).__name__}")
    try:
        return _ADAPTER.validate_python(value)
    except ValidationError as exc:
        raise EventError(_describe(value, exc)) from exc


def _describe(value: Mapping[str, Any], exc: ValidationError) -> str:
    kind = value.get("type")
    parts: list[str] = []
    for err in exc.errors(include_url=False)[:5]:
        # Drop the union tag from the location: the type is named once, up front.
        loc = [str(p) for p in err["loc"] if str(p) != kind and str(p) != _UNKNOWN_TAG]
        parts.append(f"{'.'.join(loc) or '<event>'}: {err['msg']}")
    return f"invalid {kind!r} event: " + "; ".join(parts)


def event_to_wire(event: EventModel | Mapping[str, Any]) -> dict[str, Any]:
    """The wire (camelCase JSON) form of an event, unknown fields included."""
    if isinstance(event, EventModel):
        # exclude_unset keeps a parsed event byte-faithful (explicit nulls stay, absent stays
        # absent); the type literal is a default, so it is put back explicitly.
        wire = event.model_dump(by_alias=True, exclude_unset=True, mode="json")
        wire["type"] = event.type
        return wire
    return dict(event)
