"""The facts every handle shares: the two event forms, their wire fields, how a run settled.

Events travel as typed models or as wire-form dicts; :func:`event_field` and :func:`as_wire`
read either. :class:`RunOutcome` is a handle's ``result``; :func:`outcome_from_run_end` derives
it from a stream alone. ``core.handle`` is where these are imported from; this module exists so
that the recorded run (``core.run_source``) can use them without importing the handle module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import BaseModel, ConfigDict, JsonValue

from rulvar_otel.errors import RunRejectedError, SourceError

if TYPE_CHECKING:
    from rulvar_otel.core.events import EventModel

__all__ = ["EventLike", "RunOutcome", "as_wire", "event_field", "outcome_from_json", "outcome_from_run_end"]

# Events travel either as typed models (the bundled engine) or as wire-form dicts (recorded
# streams, servers): parsing every line into a model would dominate the exporter's cost. The
# alias is written as a string so that a wire-form path never imports the event models.
EventLike: TypeAlias = "EventModel | Mapping[str, Any]"


class RunOutcome(BaseModel):
    """How a run settled (``handle.result``). Unknown fields are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    status: str
    value: JsonValue = None
    error: JsonValue = None
    usage: JsonValue = None
    cost: JsonValue = None
    envelope: JsonValue = None
    completion: str | None = None
    childStatusCounts: dict[str, int] | None = None  # noqa: N815 - wire name


def event_field(event: EventLike, wire_name: str) -> Any:
    """Read one wire-named field from either event form (None when absent, or for a non-event)."""
    if isinstance(event, Mapping):
        return event.get(wire_name)
    if not isinstance(event, BaseModel):
        return None  # a host's stream may carry anything: what is neither form has no fields
    # A model: the envelope fields are plain attributes, no need to dump the whole model for them.
    if wire_name == "type":
        return event.type
    if wire_name == "runId":
        return event.run_id
    return _to_wire(event).get(wire_name)


def as_wire(event: EventLike) -> Mapping[str, Any]:
    """The wire-form mapping of either event form (a mapping is returned as it is).

    Anything else has no wire form: an empty mapping, which every consumer skips.
    """
    if type(event) is dict or isinstance(event, Mapping):
        return event
    return _to_wire(event) if isinstance(event, BaseModel) else {}


def _to_wire(event: EventModel) -> dict[str, Any]:
    # Only a model needs the event module; it is loaded by whoever built the model.
    from rulvar_otel.core.events import event_to_wire

    return event_to_wire(event)


def outcome_from_json(data: Mapping[str, Any]) -> RunOutcome | RunRejectedError:
    """Read a RunOutcome, or the fixtures' ``{"settled": ..., "outcome"|"error": ...}`` wrapper."""
    settled = data.get("settled")
    if settled == "rejected":
        err = data.get("error")
        err_map: Mapping[str, Any] = err if isinstance(err, Mapping) else {}  # pyright: ignore[reportUnknownVariableType]
        return RunRejectedError(
            str(err_map.get("message", "the run's result rejected")),
            name=str(err_map.get("name", "Error")),
            error_code=str(err_map["code"]) if "code" in err_map else None,
        )
    if settled == "resolved" and isinstance(data.get("outcome"), Mapping):
        return RunOutcome.model_validate(data["outcome"])
    return RunOutcome.model_validate(data)


def outcome_from_run_end(
    last_run_end: Mapping[str, Any] | None,
) -> RunOutcome | SourceError | RunRejectedError:
    """How a run settled when only its stream is known (a JSONL file, an SSE tail).

    Resolved with the last ``run:end``'s status, so it counts as ok exactly when that says ``ok``
    and is settled; a ``settled: false`` terminal is the rejection the engine raised beside it, and
    a stream without any ``run:end`` is a :class:`SourceError`. Errors are returned, not raised.
    """
    if last_run_end is None:
        return SourceError("the stream ended without a run:end, and no outcome was given")
    if last_run_end.get("settled") is False:
        superseded = last_run_end.get("settledReason") == "superseded"
        return RunRejectedError(
            "superseded: a successor owns settlement"
            if superseded
            else "settlement failed: nothing durable records this terminal",
            name="SupersededError" if superseded else "SettlementError",
        )
    status = last_run_end.get("status")
    return RunOutcome(
        status=status if isinstance(status, str) else "unknown",
        envelope=last_run_end.get("envelope"),
        completion=c if isinstance(c := last_run_end.get("completion"), str) else None,
    )
