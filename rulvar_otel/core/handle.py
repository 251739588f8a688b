"""Run handles: the one shape every consumer (exporter, metrics, renderers) reads a run through.

A handle has a ``run_id``, an async iterable of events (gapless from creation), a ``result`` that
resolves with the :class:`RunOutcome` or rejects, and ``on(type, callback)`` for callbacks from
registration onward. :func:`handle_from_events` wraps a recorded stream (a
:class:`~rulvar_otel.core.run_source.RecordedRun`, still importable here as ``RecordedRunHandle``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping
from typing import Any

from rulvar_otel.core._outcome import (
    EventLike,
    RunOutcome,
    as_wire,
    as_wire_dict,
    event_field,
    outcome_from_json,
    outcome_from_run_end,
)
from rulvar_otel.core.run_source import RecordedRun, RunHandle

__all__ = [
    "EventLike",
    "as_wire",
    "as_wire_dict",
    "RecordedRunHandle",
    "RunHandle",
    "RunOutcome",
    "event_field",
    "handle_from_events",
    "outcome_from_json",
    "outcome_from_run_end",
]


# The handle over a recorded stream, under its older name.
RecordedRunHandle = RecordedRun


def handle_from_events(
    events: Iterable[EventLike] | AsyncIterable[EventLike],
    outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
    *,
    run_id: str | None = None,
) -> RecordedRun:
    """Wrap a recorded stream as a buffered :class:`~rulvar_otel.core.run_source.RecordedRun`.

    ``outcome`` is what ``result`` settles with: a :class:`RunOutcome` (or its JSON), or an
    exception it rejects with. Without one, the result is derived from the stream: resolved with
    the last ``run:end``'s status, rejected when that terminal says ``settled: false`` or is
    missing.
    """
    return RecordedRun(events, outcome, run_id)
