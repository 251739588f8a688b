"""The WorkflowEvent model: frozen pydantic models, one discriminated union, tolerant parsing.

Field names are snake_case in Python and camelCase on the wire (``model_dump(by_alias=True)``
gives the wire form back). Unknown fields are kept on every model (``model_extra``); an unknown
``type`` parses into :class:`UnknownEvent`, which keeps every field. A known type whose body is
wrong raises :class:`EventError` naming the field: the typed surface promises typed values.

This module is the public surface and the parser; the models themselves live by family in
``_events_envelope`` (the envelope and nested bodies), ``_events_run`` (run, agent, tool,
determinism) and ``_events_adaptive`` (adaptive orchestration, plan, accounting).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, TypeAlias, Union, get_args

import orjson
from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from rulvar_otel.core._events_adaptive import (
    AdmissionLeaseLost,
    EscalationDecided,
    EscalationRaised,
    GuardOscillation,
    JournalCompat,
    LedgerOp,
    NodeCancelled,
    NodeLinked,
    NodeParked,
    OrchestratorAcceptance,
    OrchestratorBudget,
    OrchestratorWoke,
    PlanRevised,
    ResolutionApplied,
    ResolutionSuperseded,
    SpawnAdmitted,
    SpawnRejected,
    StallDetected,
    TerminationConfigDrift,
    TerminationDebit,
    TerminationDenied,
    VerifyFailed,
)
from rulvar_otel.core._events_envelope import (
    EventModel,
    ExplorationSummary,
    ToolBudgetSummary,
    UnknownEvent,
    Usage,
    WireError,
)
from rulvar_otel.core._events_run import (
    AgentEnd,
    AgentError,
    AgentPhaseEnd,
    AgentPhaseStart,
    AgentQueued,
    AgentSchemaRetry,
    AgentStart,
    AgentStream,
    ApprovalPending,
    BudgetExposureWait,
    BudgetUpdate,
    ChildEnd,
    ChildStart,
    ControlWire,
    DeterminismWarning,
    ExternalWaiting,
    Log,
    PhaseStart,
    QuotaDenied,
    RunEnd,
    RunStart,
    ToolEnd,
    ToolStart,
)
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

# An event in either form a consumer meets: a typed model, or its wire-form mapping.

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

# Every known model, read off the union: adding an event type is its model plus one union member.
_KNOWN: Final[tuple[type[EventModel], ...]] = tuple(
    get_args(member)[0]
    for member in get_args(get_args(WorkflowEvent)[0])
    if get_args(member)[0] is not UnknownEvent
)
_MODEL_BY_TYPE: Final[dict[str, type[EventModel]]] = {
    model.model_fields["type"].default: model for model in _KNOWN
}
KNOWN_EVENT_TYPES: Final = frozenset(_MODEL_BY_TYPE)

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
