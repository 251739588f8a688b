"""The wire vocabulary: event type names, envelope field names, and the typed readers every fold uses.

Events travel as typed models or as wire-form mappings (camelCase JSON, as recorded). Every
consumer (span mapper, metrics folds, reducers, progress) reads the wire form through this one
module: :func:`as_wire` turns either form into a mapping, :func:`ts_ns` reads an envelope ``ts``,
and :func:`as_str`, :func:`as_int` and :func:`as_number` read a field's value only when it has the
type the catalog gives it (``None`` otherwise, never an exception).

This module imports nothing from the event model (the model imports it), so any layer can use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from rulvar_otel.core.handle import EventLike

__all__ = [
    "AGENT_END",
    "AGENT_PHASE_END",
    "AGENT_PHASE_START",
    "AGENT_START",
    "AGENT_STREAM",
    "BUDGET_UPDATE",
    "CHILD_END",
    "CHILD_START",
    "ENVELOPE_FIELDS",
    "PHASE_START",
    "RUN_END",
    "RUN_START",
    "TOOL_END",
    "TOOL_START",
    "as_int",
    "as_number",
    "as_str",
    "as_wire",
    "ts_ns",
]

# Event types the folds and the span mapper act on (the full catalog is the event model's union).
RUN_START: Final = "run:start"
RUN_END: Final = "run:end"
PHASE_START: Final = "phase:start"
AGENT_START: Final = "agent:start"
AGENT_END: Final = "agent:end"
AGENT_PHASE_START: Final = "agent:phase:start"
AGENT_PHASE_END: Final = "agent:phase:end"
AGENT_STREAM: Final = "agent:stream"
TOOL_START: Final = "tool:start"
TOOL_END: Final = "tool:end"
CHILD_START: Final = "child:start"
CHILD_END: Final = "child:end"
BUDGET_UPDATE: Final = "budget:update"

# The envelope every event carries (some optional): never content, never a span event attribute.
ENVELOPE_FIELDS: Final = frozenset({"runId", "seq", "ts", "spanId", "parentSpanId", "replayed", "type"})

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def as_wire(event: EventLike) -> Mapping[str, Any]:
    """The wire-form mapping of either event form (a mapping is returned as it is).

    Anything else has no wire form: an empty mapping, which every consumer skips.
    """
    if type(event) is dict or isinstance(event, Mapping):
        return event
    from rulvar_otel.core.events import EventModel, event_to_wire  # the model imports this module

    return event_to_wire(event) if isinstance(event, EventModel) else {}


def ts_ns(value: object) -> int | None:
    """Epoch nanoseconds of an envelope ``ts`` (ISO 8601), exactly; None when absent or malformed.

    A stamp without an offset is read as UTC, never as the local zone: every fold of a stream
    must agree on its times.
    """
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def as_str(value: object) -> str | None:
    """``value`` when it is a string."""
    return value if isinstance(value, str) else None


def as_int(value: object) -> int | None:
    """``value`` when it is an int (a bool is not)."""
    if value.__class__ is int:
        return value  # type: ignore[return-value]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_number(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (a bool is not a number)."""
    cls = value.__class__
    if (
        cls is not float
        and cls is not int
        and (isinstance(value, bool) or not isinstance(value, int | float))
    ):
        return None
    result = float(value)  # type: ignore[arg-type]
    return result if math.isfinite(result) else None
