"""The facts every handle shares: the two event forms, their wire fields, how a run settled.

Events travel as typed models or as wire-form dicts; :func:`event_field` and :func:`as_wire`
read either. :class:`RunOutcome` is a handle's ``result``; :func:`outcome_from_run_end` derives
it from a stream alone. ``core.handle`` is where these are imported from; this module exists so
that the recorded run (``core.run_source``) can use them without importing the handle module.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeAlias

from rulvar_otel.errors import OutcomeError, RunRejectedError, SourceError

if TYPE_CHECKING:
    from rulvar_otel.core.events import EventModel

__all__ = [
    "EventLike",
    "RunOutcome",
    "as_wire",
    "as_wire_dict",
    "event_field",
    "is_event_model",
    "outcome_from_json",
    "outcome_from_run_end",
]

# Events travel either as typed models (the bundled engine) or as wire-form dicts (recorded
# streams, servers): parsing every line into a model would dominate the exporter's cost. The
# alias is written as a string so that a wire-form path never imports the event models.
EventLike: TypeAlias = "EventModel | Mapping[str, Any]"

# JSON nests this deep at most in an outcome (a cycle or a bomb is refused, not recursed into).
_MAX_JSON_DEPTH: Final = 256


def _is_json(value: object, depth: int = 0) -> bool:
    """Whether ``value`` is a JSON value: null, a boolean, a number, a string, or a list or
    object (string keys) of JSON values. NaN and infinities count, as Python's json writes them."""
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if depth >= _MAX_JSON_DEPTH:
        return False
    if isinstance(value, list):
        return all(_is_json(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v, depth + 1) for k, v in value.items())
    return False


def _is_count(value: object) -> bool:
    return isinstance(value, int) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer()
    )


class RunOutcome:
    """How a run settled (``handle.result``): frozen, compared by value; unknown fields are kept.

    ``status`` is required (a string); ``value``, ``error``, ``usage``, ``cost`` and ``envelope``
    are JSON values; ``completion`` a string; ``childStatusCounts`` an object of integer counts.
    Any other keyword is kept as it is, in :attr:`model_extra` and as an attribute. A field of
    the wrong kind raises :class:`~rulvar_otel.errors.OutcomeError` naming it (never its value).
    The class is plain Python, so reading a stream's outcome loads no model library.
    """

    __slots__ = (
        "_extra",
        "childStatusCounts",
        "completion",
        "cost",
        "envelope",
        "error",
        "status",
        "usage",
        "value",
    )

    FIELDS: ClassVar[tuple[str, ...]] = (
        "status",
        "value",
        "error",
        "usage",
        "cost",
        "envelope",
        "completion",
        "childStatusCounts",
    )

    status: str
    value: Any
    error: Any
    usage: Any
    cost: Any
    envelope: Any
    completion: str | None
    childStatusCounts: dict[str, int] | None  # noqa: N815 - wire name

    def __init__(
        self,
        status: str,
        value: Any = None,
        error: Any = None,
        usage: Any = None,
        cost: Any = None,
        envelope: Any = None,
        completion: str | None = None,
        childStatusCounts: Mapping[str, int] | None = None,  # noqa: N803 - wire name
        **extra: Any,
    ) -> None:
        wrong: list[str] = []
        if not isinstance(status, str):
            wrong.append("status")
        given = {"value": value, "error": error, "usage": usage, "cost": cost, "envelope": envelope}
        wrong += [name for name, item in given.items() if not _is_json(item)]
        if completion is not None and not isinstance(completion, str):
            wrong.append("completion")
        counts: dict[str, int] | None = None
        if childStatusCounts is not None:
            if isinstance(childStatusCounts, Mapping) and all(
                isinstance(k, str) and _is_count(v) for k, v in childStatusCounts.items()
            ):
                counts = {k: int(v) for k, v in childStatusCounts.items()}
            else:
                wrong.append("childStatusCounts")
        if wrong:
            raise OutcomeError(f"not a RunOutcome (check {', '.join(wrong)})", tuple(wrong))
        set_field = object.__setattr__
        set_field(self, "status", status)
        for name, item in given.items():
            set_field(self, name, item)
        set_field(self, "completion", completion)
        set_field(self, "childStatusCounts", counts)
        set_field(self, "_extra", dict(extra))

    @classmethod
    def model_validate(cls, data: object) -> RunOutcome:
        """A RunOutcome from its JSON object (a mapping with string keys), or the outcome itself."""
        if isinstance(data, RunOutcome):
            return data
        if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
            raise OutcomeError("not a RunOutcome (check <root>)", ("<root>",))
        if "status" not in data:
            raise OutcomeError("not a RunOutcome (check status)", ("status",))
        return cls(**data)

    @property
    def model_extra(self) -> dict[str, Any]:
        """The fields beyond the known ones, as given."""
        return dict(self._extra)

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        """Every field (the known ones, then the extra ones) as a dict; the known fields already
        hold JSON values, so ``mode="json"`` gives the same dict."""
        return {**{name: getattr(self, name) for name in self.FIELDS}, **self._extra}

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not slots: the extra fields.
        try:
            return object.__getattribute__(self, "_extra")[name]
        except KeyError:
            raise AttributeError(f"RunOutcome has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RunOutcome is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("RunOutcome is frozen")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunOutcome):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]  # compared by value, holding dicts

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.model_dump().items())

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.model_dump().items() if v is not None)
        return f"RunOutcome({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.model_dump(),))


def _rebuild(fields: dict[str, Any]) -> RunOutcome:
    return RunOutcome(**fields)


def is_event_model(event: object) -> bool:
    """Whether ``event`` is a typed event model (pydantic's): none exists unless pydantic is loaded."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(event, pydantic.BaseModel)


def event_field(event: EventLike, wire_name: str) -> Any:
    """Read one wire-named field from either event form (None when absent, or for a non-event)."""
    if isinstance(event, Mapping):
        return event.get(wire_name)
    if not is_event_model(event):
        return None  # a host's stream may carry anything: what is neither form has no fields
    # A model: the envelope fields are plain attributes, no need to dump the whole model for them.
    if wire_name == "type":
        return event.type  # type: ignore[union-attr]
    if wire_name == "runId":
        return event.run_id  # type: ignore[union-attr]
    return _to_wire(event).get(wire_name)  # type: ignore[arg-type]


def as_wire(event: EventLike) -> Mapping[str, Any]:
    """The wire-form mapping of either event form (a mapping is returned as it is).

    Anything else has no wire form: an empty mapping, which every consumer skips.
    """
    if type(event) is dict or isinstance(event, Mapping):
        return event
    return _to_wire(event) if is_event_model(event) else {}


def as_wire_dict(event: EventLike) -> dict[str, Any]:
    """:func:`as_wire` as a plain dict (a mapping that is not one is copied)."""
    wire = as_wire(event)
    return wire if type(wire) is dict else dict(wire)  # type: ignore[return-value]


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
