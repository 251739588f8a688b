"""The wire vocabulary's leaf: envelope field names, and the typed readers every fold uses.

Events travel as typed models or as wire-form mappings (camelCase JSON, as recorded); every
consumer reads the wire form (``rulvar_otel.core.handle.as_wire`` turns either form into one).
:func:`ts_ns` reads an envelope ``ts``, and :func:`as_str`, :func:`as_int` and :func:`as_number`
read a field's value only when it has the type the catalog gives it (``None`` otherwise, never an
exception).

Event type names are written as their literals (``"run:end"``), as in the contract and in each
model's ``type`` field; the catalog is the event model's union. This module imports nothing of the
package, so the event model and any layer can use it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

__all__ = ["ENVELOPE_FIELDS", "WireEvent", "as_int", "as_number", "as_str", "ts_ns", "ts_seconds"]

# The envelope every event carries (some optional): never content, never a span event attribute.
ENVELOPE_FIELDS: Final = frozenset({"runId", "seq", "ts", "spanId", "parentSpanId", "replayed", "type"})

# An event's wire form as the folds hold it (the drain hands over dicts): compiled, a dict's
# ``get`` is a direct lookup where a ``Mapping``'s is a method call.
WireEvent: TypeAlias = dict[str, Any]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


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


def ts_seconds(value: object) -> float | None:
    """Epoch seconds of an envelope ``ts`` (None when absent or malformed)."""
    ns = ts_ns(value)
    return None if ns is None else ns / 1e9


def as_str(value: object) -> str | None:
    """``value`` when it is a string."""
    return value if isinstance(value, str) else None


def as_int(value: object) -> int | None:
    """``value`` when it is an int (a bool is not)."""
    if type(value) is int:
        return value  # type: ignore[return-value]
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_number(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (a bool is not a number)."""
    cls = type(value)
    if (
        cls is not float
        and cls is not int
        and (value is None or isinstance(value, bool) or not isinstance(value, (int, float)))
    ):
        return None
    try:
        result = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int past a float's range
        return None
    # Finite exactly when x - x is 0: for an infinity or a NaN it is NaN.
    return result if result - result == 0.0 else None
