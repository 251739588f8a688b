"""A run span from a server's terminal facts alone (``GET /runs/:id``), dated only by facts.

Used by :mod:`rulvar_otel.sources.sse` for a run that is not live on the server: no event will
ever stream, so the run span is built from the status body, on the run's own root span id, and
stamped with a time the server gave (its ``startedAt``/``endedAt``, else the creation time a
ULID run id encodes), never with the moment of reading.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from rulvar_otel.core.handle import RunOutcome

__all__ = ["ROOT_SPAN_ID", "terminal_facts_events", "ulid_time"]

_CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
# Rulvar names a run's root span s0 (every segment of a resumed run keeps it as the anchor).
ROOT_SPAN_ID: Final = "s0"


def ulid_time(run_id: str) -> datetime | None:
    """The creation time a ULID run id encodes (its first 48 bits, milliseconds), else None."""
    if not _ULID.fullmatch(run_id):
        return None
    millis = 0
    for char in run_id[:10]:
        millis = millis * 32 + _CROCKFORD.index(char)
    return datetime.fromtimestamp(millis / 1000, UTC)


def _iso_ms(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _status_time(body: Mapping[str, Any], key: str) -> datetime | None:
    value = body.get(key)
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def terminal_facts_events(
    run_id: str, outcome: RunOutcome, status: Mapping[str, Any] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A run span's worth of events built from ``GET /runs/:id`` alone, and where its time came from.

    A run that is not live in the server's process never streams an event, but its terminal facts
    (status, envelope, completion) are still worth a span. The pair uses the run's own root span
    id (``s0``), so under deterministic ids the span has the id a full export of the run gives.
    Only facts the server gave are used: the status body's ``startedAt``/``endedAt`` when it
    carries them, else the creation time a ULID run id encodes (the span then has no duration:
    nothing dates the run's end). When no fact dates the run, no events are built and the time
    source is ``None``: a span stamped with the moment of reading would be invented.
    """
    body = status or {}
    started = _status_time(body, "startedAt")
    source = "status" if started is not None else None
    if started is None and (started := ulid_time(run_id)) is not None:
        source = "run id"
    if started is None:
        return [], None
    ended = _status_time(body, "endedAt")
    if ended is None or ended < started:
        ended = started
    extra = outcome.model_extra or {}
    workflow = extra.get("workflow")
    base = {"runId": run_id, "spanId": ROOT_SPAN_ID}
    end: dict[str, Any] = {
        **base,
        "seq": 1,
        "ts": _iso_ms(ended),
        "type": "run:end",
        "status": outcome.status,
    }
    envelope = outcome.envelope
    if isinstance(envelope, Mapping):
        end["envelope"] = dict(envelope)
        if isinstance(total := envelope.get("totalUsd"), int | float):
            end["totalUsd"] = total
        if not isinstance(workflow, str) and isinstance(envelope.get("workflow"), str):
            workflow = envelope["workflow"]
    if outcome.completion is not None:
        end["completion"] = outcome.completion
    start = {**base, "seq": 0, "ts": _iso_ms(started), "type": "run:start", "workflow": workflow}
    start["resumed"] = False
    return [start, end], source
