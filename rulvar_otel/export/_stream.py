"""``StreamedRun``: a run handle that reads its events once and keeps none of them.

:func:`~rulvar_otel.core.handle.handle_from_events` buffers every event so several consumers
can iterate it; an export has one consumer, and a million-event stream must not sit in memory.
A ``StreamedRun`` is the unbuffered :class:`~rulvar_otel.core.run_source.RecordedRun`: it
remembers only the last ``run:end`` it passed (for the derived outcome) and the run id.
Synchronous sources can be drained without an event loop (``iter_sync``), which is what lets one
Ctrl-C interrupt a blocked read.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rulvar_otel.core.run_source import RecordedRun

if TYPE_CHECKING:
    from rulvar_otel.core.handle import EventLike, RunOutcome

__all__ = ["StreamedRun"]


class StreamedRun(RecordedRun):
    """A :class:`~rulvar_otel.core.handle.RunHandle` over ``events``, iterated once, nothing kept.

    ``outcome`` is what ``result`` settles with (a :class:`RunOutcome`, its JSON, or an exception
    to reject with); without one, the result is derived from the last ``run:end`` read.
    """

    def __init__(
        self,
        events: Iterable[EventLike] | AsyncIterable[EventLike],
        outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        super().__init__(events, outcome, run_id, buffered=False)
