"""Event times for the span mapper: each ``ts`` parsed once, checked on its own.

OTLP carries times as unsigned 64-bit nanoseconds since 1970; one time outside that range fails
the encoder for the whole batch it lands in. :class:`EventClock` therefore checks every event's
``ts`` by itself, replaces an unusable one with the previous usable time, and reports it by the
event's position and ``seq`` (never its value). See docs/otel-mapping.md#timestamps.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from typing import Any, Final

from rulvar_otel.core.wire import ts_ns as parse_ts_ns

__all__ = ["MAX_OTLP_NS", "EventClock", "export_time_ns", "held_copy"]

_log = logging.getLogger("rulvar_otel")

MAX_OTLP_NS: Final = 2**64 - 1
# Diagnostics logged one by one; the rest are counted in the summary.
_WARNINGS: Final = 5
_CACHE_LIMIT: Final = 65536


class EventClock:
    """The time of each event, in nanoseconds; ``None`` until the first usable ``ts``.

    ``cache`` maps every usable ``ts`` string seen to its time, so the mapper's hot path can look
    a repeated stamp up itself and only call :meth:`time` for a new one.
    """

    __slots__ = ("bad", "cache", "last_ns")

    def __init__(self) -> None:
        self.cache: dict[str, int] = {}
        self.last_ns: int | None = None
        self.bad = 0  # events whose ts was not a string, malformed or out of range

    def time(self, event: Mapping[str, Any], ordinal: int) -> int | None:
        """The event's time; an unusable ts takes the previous usable one (None before the first).

        ``ordinal`` is the event's 1-based position in the stream, for the diagnostic.
        """
        ts = event.get("ts")
        if isinstance(ts, str):
            ns = self.cache.get(ts)
            if ns is None:
                ns = parse_ts_ns(ts)
                if ns is not None and 0 <= ns <= MAX_OTLP_NS:
                    if len(self.cache) >= _CACHE_LIMIT:
                        self.cache.clear()
                    self.cache[ts] = ns
                else:
                    self._report(event, ordinal, "out of range" if ns is not None else "malformed")
                    ns = None
            if ns is not None:
                self.last_ns = ns
                return ns
        elif ts is not None:
            self._report(event, ordinal, "not a string")
        # Never the export time, never 1970: the previous usable time.
        return self.last_ns

    def _report(self, event: Mapping[str, Any], ordinal: int, why: str) -> None:
        self.bad += 1
        if self.bad <= _WARNINGS:
            seq = event.get("seq")
            where = f" (seq {seq})" if type(seq) is int else ""
            _log.warning(
                "event %d%s has an unusable ts (%s); it takes the time of the %s",
                ordinal,
                where,
                why,
                "previous event" if self.last_ns is not None else "first event with a usable ts",
            )

    def summarize(self) -> None:
        """Log the count of unusable times beyond those named one by one."""
        if self.bad > _WARNINGS:
            _log.warning(
                "%d events in all had an unusable ts (the first %d are named above)",
                self.bad,
                _WARNINGS,
            )


def export_time_ns(untimed: int) -> int:
    """The last resort for a stream with no usable ts at all: the time of export, said aloud."""
    _log.warning("%d events arrived without any usable ts; they are stamped with the export time", untimed)
    return time.time_ns()


def held_copy(event: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of an event that must wait for a usable time, read once it has one.

    The host may refill the same dict (and its nested values) for the next event meanwhile; the
    wait is bounded, so copying every held event whole stays cheap.
    """
    try:
        return copy.deepcopy(dict(event))
    except Exception:  # noqa: BLE001 - a value that cannot be copied is held as it is
        return dict(event)
