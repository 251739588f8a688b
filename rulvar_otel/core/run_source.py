"""Where a run's events come from when nothing is live: listeners and the recorded run.

:class:`Listeners` is the one ``on(type, callback)`` registry every handle uses (recorded runs,
the server follower, the engine's bus), with one failure policy: a listener that raises never
breaks the stream, and each failing listener is logged once through the package logger, its text
masked. :class:`RecordedRun` is the handle over a recorded stream (a list, an iterator, an async
iterator): buffered, so several consumers may iterate it and ``result`` drains what is left, or
unbuffered, read once with nothing kept (a million-event export must not sit in memory).
:class:`SyncRunHandle` is what a drain needs to read a recorded run without an event loop.

This module imports neither pydantic nor asyncio when it loads: the CLI's start-up reaches it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard, runtime_checkable

from rulvar_otel.core._run_record import RecordingReader, RunRecord, kind_and_run_id

if TYPE_CHECKING:
    from asyncio import Lock

    from rulvar_otel.core._outcome import EventLike, RunOutcome
    from rulvar_otel.core.masking import SecretMasker

__all__ = ["Listeners", "RecordedRun", "RunHandle", "SyncRunHandle", "as_sync_handle"]

_log = logging.getLogger("rulvar_otel")

Listener = Callable[[Any], object]
_NOTHING: Final = object()  # no event peeked


class Listeners:
    """Callbacks by event type (``"*"``: every type), called in registration order.

    A callback that raises is isolated: the others still get the event, the stream goes on, and
    the first failure of each callback is logged (masked) through the ``rulvar_otel`` logger.
    :meth:`dispatch` returns the first failure of that event, for callers that report it further.
    """

    __slots__ = ("_by_type", "_logged", "_masker", "registered")

    def __init__(self, masker: SecretMasker | None = None) -> None:
        self._by_type: dict[str, list[Listener]] = {}
        self._logged: set[int] = set()  # ids of callbacks whose failure was logged
        self._masker = masker
        # Whether any callback was ever registered: a plain field, read for every event.
        self.registered = False

    def __bool__(self) -> bool:
        return self.registered  # a type whose listeners all went off stays, empty: harmless

    def on(self, type: str, callback: Listener) -> Callable[[], None]:  # noqa: A002 - the handle's name
        """Call ``callback`` for every later event of ``type``; returns the ``off`` for it."""
        self._by_type.setdefault(type, []).append(callback)
        self.registered = True
        return lambda: self.off(type, callback)

    def off(self, type: str, callback: Listener) -> None:  # noqa: A002
        """Stop calling ``callback`` for ``type`` (nothing happens when it is not registered)."""
        bucket = self._by_type.get(type, [])
        if callback in bucket:
            bucket.remove(callback)

    def dispatch(self, event: object, kind: str | None) -> BaseException | None:
        """Call the listeners of ``kind`` and of ``"*"`` with ``event``; the first failure, if any.

        ``kind`` is the event's type, ``None`` for an item without one (only ``"*"`` sees it).
        """
        by_type = self._by_type
        every = by_type.get("*", ())
        callbacks = (*by_type.get(kind, ()), *every) if kind is not None else (*every,)
        failure: BaseException | None = None
        for callback in callbacks:  # a snapshot: a callback may call its own off
            try:
                callback(event)
            except Exception as exc:  # noqa: BLE001 - listener code never reaches the stream
                failure = failure or exc
                self._log_once(callback, exc, kind)
        return failure

    def _log_once(self, callback: Listener, exc: BaseException, kind: str | None) -> None:
        if id(callback) in self._logged:
            return
        self._logged.add(id(callback))
        masker = self._masker
        if masker is None:
            from rulvar_otel.core.masking import default_masker

            masker = self._masker = default_masker()
        text = f"an event listener raised {type(exc).__name__} on {kind!r}: {exc}; the listener was isolated"
        _log.warning("%s", masker.clean(text))


@runtime_checkable
class RunHandle(Protocol):
    """A run being observed: live from an engine or server, or recorded."""

    @property
    def run_id(self) -> str: ...

    @property
    def events(self) -> AsyncIterable[EventLike]: ...

    @property
    def result(self) -> Awaitable[RunOutcome]: ...

    def on(self, type: str, callback: Listener) -> Callable[[], None]: ...  # noqa: A002 - the seed's name


class SyncRunHandle(RunHandle, Protocol):
    """A recorded run: a :class:`RunHandle` whose outcome is known without awaiting and whose
    events, from a plain iterable, can be read without an event loop."""

    @property
    def is_sync(self) -> bool: ...

    @property
    def given_outcome(self) -> RunOutcome | BaseException | None: ...

    def iter_sync(self) -> Iterator[EventLike]: ...

    def outcome_now(self) -> RunOutcome | BaseException: ...


_SYNC_MEMBERS: Final = ("is_sync", "given_outcome", "iter_sync", "outcome_now")


def as_sync_handle(handle: object) -> TypeGuard[SyncRunHandle]:
    """Whether ``handle`` is a recorded run (:class:`SyncRunHandle`).

    Looked up on the class: probing the instance would evaluate ``events`` or ``result``.
    """
    cls = type(handle)
    return all(getattr(cls, name, None) is not None for name in _SYNC_MEMBERS)


class RecordedRun:
    """A :class:`~rulvar_otel.core.handle.RunHandle` over a recorded stream.

    ``outcome`` is what ``result`` settles with (a ``RunOutcome``, its JSON, or an exception to
    reject with); without one it is derived from the last ``run:end`` read (see
    :func:`~rulvar_otel.core.handle.outcome_from_run_end`). ``buffered`` keeps every event read,
    so ``events`` can be iterated by several consumers and ``result`` reads the rest of the
    stream first; unbuffered, the stream is iterated once, nothing is kept, and ``result`` is
    what the events read so far say. Listeners see each event when it is first read.

    ``run_id`` is the given id, else the first ``runId`` read. Before anything was read from a
    plain iterable it looks at the first event, which is kept aside, unseen by listeners and
    consumers, until the iteration reaches it: the stream itself is never read ahead.
    """

    def __init__(
        self,
        events: Iterable[EventLike] | AsyncIterable[EventLike],
        outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
        run_id: str | None = None,
        *,
        buffered: bool = True,
    ) -> None:
        self._sync: Iterator[EventLike] | None = None
        self._async_source: AsyncIterable[EventLike] | None = None
        self._async: AsyncIterator[EventLike] | None = None
        if isinstance(events, AsyncIterable):
            self._async_source = events
        else:
            self._sync = iter(events)
        if isinstance(outcome, Mapping):
            from rulvar_otel.core._outcome import RunOutcome

            outcome = RunOutcome.model_validate(outcome)
        self._outcome: RunOutcome | BaseException | None = outcome
        self._peeked: object = _NOTHING
        self._done = False
        self._claimed = False
        self._lock: Lock | None = None
        self._listeners = Listeners()
        # The run id, the buffer and the last run:end, kept as each event is read.
        self._rec = RunRecord(run_id, buffered, self._listeners)

    # -- what the run is ------------------------------------------------------------------------

    @property
    def is_sync(self) -> bool:
        """Whether the source is a plain iterable (readable without an event loop)."""
        return self._sync is not None

    @property
    def buffered(self) -> bool:
        return self._rec.buffer is not None

    @property
    def run_id(self) -> str:
        claimed = self._claimed and self._rec.buffer is None  # an unbuffered stream being read
        unread = self._peeked is _NOTHING and not (claimed or self._rec.buffer or self._done)
        if self._rec.run_id is None and self._sync is not None and unread:
            self._peek()
        return self._rec.run_id or ""

    def _peek(self) -> None:
        assert self._sync is not None
        first = next(self._sync, _NOTHING)
        if first is _NOTHING:
            self._done = True
            return
        self._peeked = first
        if self._rec.run_id is None:
            rid = kind_and_run_id(first)[1]
            if isinstance(rid, str):
                self._rec.run_id = rid

    @property
    def given_outcome(self) -> RunOutcome | BaseException | None:
        """The outcome the run was created with, ``None`` when it is derived from the stream."""
        return self._outcome

    def outcome_now(self) -> RunOutcome | BaseException:
        """How the run settled as known now: the given outcome, else the last ``run:end`` read."""
        if self._outcome is not None:
            return self._outcome
        from rulvar_otel.core._outcome import outcome_from_run_end

        return outcome_from_run_end(self.last_run_end)

    @property
    def result(self) -> Awaitable[RunOutcome]:
        return self._result()

    async def _result(self) -> RunOutcome:
        if self._outcome is None and self._rec.buffer is not None:
            while await self._pull():
                pass
        outcome = self.outcome_now()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def on(self, type: str, callback: Listener) -> Callable[[], None]:  # noqa: A002 - protocol name
        """Call ``callback`` for each later event of ``type`` (``"*"`` for every type)."""
        return self._listeners.on(type, callback)

    # -- reading ----------------------------------------------------------------------------------

    @property
    def last_run_end(self) -> Mapping[str, Any] | None:
        """The last ``run:end`` read (its wire form)."""
        return self._rec.last_run_end

    def _next_sync(self) -> object:
        """The next event of the sync source (the peeked one first), recorded; ``_NOTHING`` at its end."""
        event = self._peeked
        if event is _NOTHING:
            if self._done:
                return _NOTHING
            assert self._sync is not None
            event = next(self._sync, _NOTHING)
            if event is _NOTHING:
                self._done = True
                return _NOTHING
        else:
            self._peeked = _NOTHING
        self._rec.record(event)  # type: ignore[arg-type]
        return event

    async def _pull(self) -> bool:
        """Read one more event into the buffer; False at the stream's end."""
        if self._sync is not None:
            return self._next_sync() is not _NOTHING
        if self._done:
            return False
        if self._lock is None:
            import asyncio

            self._lock = asyncio.Lock()
        async with self._lock:
            if self._async is None:
                assert self._async_source is not None
                self._async = aiter(self._async_source)
            try:
                self._rec.record(await anext(self._async))
            except StopAsyncIteration:
                self._done = True
                return False
            return True

    def _claim(self) -> None:
        if self._rec.buffer is None and self._claimed:
            from rulvar_otel.errors import SourceError

            raise SourceError("a streamed run can be iterated only once")
        self._claimed = True

    def iter_sync(self) -> Iterator[EventLike]:
        """The events, synchronously (only for a plain-iterable source)."""
        if self._sync is None:
            raise TypeError("this run wraps an async source; iterate run.events instead")
        self._claim()
        return self._iter_sync() if self._rec.buffer is not None else self._iter_unbuffered()

    def _iter_unbuffered(self) -> Iterator[EventLike]:
        """An unbuffered stream read once (an export): past a peeked first event, each event is
        recorded as it is read, without ``_next_sync``'s peek and end checks."""
        assert self._sync is not None
        if self._peeked is not _NOTHING or self._done:
            return self._peeked_first()
        return RecordingReader(self._sync, self._rec, self._mark_done)

    def _peeked_first(self) -> Iterator[EventLike]:
        event = self._next_sync()
        if event is _NOTHING:
            return
        yield event  # type: ignore[misc]
        assert self._sync is not None
        yield from RecordingReader(self._sync, self._rec, self._mark_done)

    def _mark_done(self) -> None:
        self._done = True

    def _iter_sync(self) -> Iterator[EventLike]:
        buffer = self._rec.buffer
        index = 0
        while True:
            if buffer is not None and index < len(buffer):
                yield buffer[index]
                index += 1
                continue
            event = self._next_sync()
            if event is _NOTHING:
                return
            index += 1
            yield event  # type: ignore[misc]

    @property
    def events(self) -> AsyncIterator[EventLike]:
        self._claim()
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[EventLike]:
        if self._sync is not None:
            for event in self._iter_sync():
                yield event
            return
        buffer = self._rec.buffer
        if buffer is None:
            assert self._async_source is not None
            async for event in self._async_source:
                self._rec.record(event)
                yield event
            self._done = True
            return
        index = 0
        while True:
            if index < len(buffer):
                yield buffer[index]
                index += 1
            elif not await self._pull() and index >= len(buffer):
                return
