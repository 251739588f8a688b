"""``StreamedRun``: a run handle that reads its events once and keeps none of them.

:func:`~rulvar_otel.core.handle.handle_from_events` buffers every event so several consumers
can iterate it; an export has one consumer, and a million-event stream must not sit in memory.
A ``StreamedRun`` remembers only the last ``run:end`` it passed (for the derived outcome) and
the run id. Synchronous sources can be drained without an event loop (:meth:`iter_sync`), which
is what lets one Ctrl-C interrupt a blocked read.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from rulvar_otel.core.handle import EventLike, RunOutcome, as_wire, event_field, outcome_from_run_end
from rulvar_otel.errors import SourceError

__all__ = ["StreamedRun"]

Listener = Callable[[EventLike], object]


class StreamedRun:
    """A :class:`~rulvar_otel.core.handle.RunHandle` over ``events``, iterated once, nothing kept.

    ``outcome`` is what ``result`` settles with (a :class:`RunOutcome`, its JSON, or an exception
    to reject with); without one, the result is derived from the last ``run:end`` read, once the
    stream was read to its end.
    """

    def __init__(
        self,
        events: Iterable[EventLike] | AsyncIterable[EventLike],
        outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
        *,
        run_id: str | None = None,
    ) -> None:
        self._sync: Iterator[EventLike] | None = None
        self._async: AsyncIterable[EventLike] | None = None
        if isinstance(events, AsyncIterable):
            self._async = events
        else:
            self._sync = iter(events)
        if isinstance(outcome, Mapping):
            outcome = RunOutcome.model_validate(outcome)
        self._outcome = outcome
        self._run_id = run_id
        self._peeked: list[EventLike] = []
        self._started = False
        self._exhausted = False
        self._listeners: dict[str, list[Listener]] = {}
        self.last_run_end: Mapping[str, Any] | None = None

    @property
    def is_sync(self) -> bool:
        """Whether the source is a plain iterable (drainable without an event loop)."""
        return self._sync is not None

    @property
    def run_id(self) -> str:
        if self._run_id is None and self._sync is not None and not self._started and not self._peeked:
            # Reads one event ahead; it is handed out first when the stream is iterated.
            first = next(self._sync, None)
            if first is not None:
                self._peeked.append(first)
                self._see_run_id(first)
        return self._run_id or ""

    def _see_run_id(self, event: EventLike) -> None:
        if self._run_id is None:
            rid = event_field(event, "runId")
            if isinstance(rid, str):
                self._run_id = rid

    def _record(self, event: EventLike) -> None:
        self._see_run_id(event)
        kind = event_field(event, "type")
        if kind == "run:end":
            self.last_run_end = as_wire(event)
        if self._listeners:
            for callback in (*self._listeners.get(str(kind), ()), *self._listeners.get("*", ())):
                try:
                    callback(event)
                except Exception:  # noqa: BLE001 - a listener never affects the stream
                    pass

    def _claim(self) -> None:
        if self._started:
            raise SourceError("a streamed run can be iterated only once")
        self._started = True

    def iter_sync(self) -> Iterator[EventLike]:
        """The events, synchronously (only for a synchronous source)."""
        if self._sync is None:
            raise TypeError("this run wraps an async source; iterate run.events instead")
        self._claim()
        return self._iter_sync(self._sync)

    def _iter_sync(self, source: Iterator[EventLike]) -> Iterator[EventLike]:
        while self._peeked:
            event = self._peeked.pop()
            self._record(event)
            yield event
        for event in source:
            self._record(event)
            yield event
        self._exhausted = True

    @property
    def events(self) -> AsyncIterator[EventLike]:
        self._claim()
        return self._iter_async()

    async def _iter_async(self) -> AsyncIterator[EventLike]:
        if self._sync is not None:
            for event in self._iter_sync(self._sync):
                yield event
            return
        assert self._async is not None
        async for event in self._async:
            self._record(event)
            yield event
        self._exhausted = True

    @property
    def given_outcome(self) -> RunOutcome | BaseException | None:
        """The outcome the run was created with, ``None`` when it is derived from the stream."""
        return self._outcome

    def outcome_now(self) -> RunOutcome | BaseException:
        """How the run settled as known now: the given outcome, else the last ``run:end`` read."""
        if self._outcome is not None:
            return self._outcome
        return outcome_from_run_end(self.last_run_end)

    @property
    def result(self) -> Awaitable[RunOutcome]:
        return self._result()

    async def _result(self) -> RunOutcome:
        outcome = self.outcome_now()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def on(self, type: str, callback: Listener) -> Callable[[], None]:  # noqa: A002 - protocol name
        """Call ``callback`` for each later event of ``type`` (``"*"`` for every type)."""
        self._listeners.setdefault(type, []).append(callback)

        def off() -> None:
            listeners = self._listeners.get(type, [])
            if callback in listeners:
                listeners.remove(callback)

        return off
