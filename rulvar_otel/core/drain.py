"""One way to drain a run: every consumer of a run's events is a :class:`Sink` that ``drain`` feeds.

A sink takes wire-form events one at a time (``feed``) and is finished once with how the run
settled (``finish``). The span mapper, the metrics recorder, the reducers and the progress state
are sinks. :func:`drain` (a live or recorded :class:`RunHandle`), :func:`drain_run` (a recorded
run, synchronously) and :func:`drain_events` (a plain stream, synchronously) share the one loop
that reads a source, turns the result into an outcome, survives a broken source and meets Ctrl-C
(:class:`Interrupts`); so every sink sees the same events and the same outcome.

:class:`FanOut` feeds several sinks as one, the way the OTel SDK's multi span processor fans out:
one failing sink never costs the others an event.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterable, Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from rulvar_otel.core._drain_pass import DrainPass
from rulvar_otel.core.handle import EventLike, RunHandle, RunOutcome, outcome_from_run_end
from rulvar_otel.core.run_source import SyncRunHandle, as_sync_handle

__all__ = ["Drained", "FanOut", "FoldSink", "Interrupts", "Sink", "drain", "drain_events", "drain_run"]

_log = logging.getLogger("rulvar_otel")

Outcome = RunOutcome | BaseException | None
_R = TypeVar("_R")


def _interrupts() -> tuple[type[BaseException], ...]:
    """What stops a drain before the run settles: the sinks end what they started, then it propagates.

    asyncio's cancellation counts once asyncio is loaded (nothing can raise it before, and a
    synchronous export does not pay asyncio's import).
    """
    aio = sys.modules.get("asyncio")
    return (KeyboardInterrupt,) if aio is None else (aio.CancelledError, KeyboardInterrupt)


@runtime_checkable
class Sink(Protocol):
    """A consumer of one run's events. ``feed`` must not raise for any event shape."""

    def feed(self, event: Mapping[str, Any]) -> None: ...

    def finish(self, outcome: RunOutcome | BaseException | None) -> object: ...


@dataclass(frozen=True, slots=True)
class Drained:
    """What draining a run found: its outcome, how many events came, and whether the source broke.

    ``outcome`` is the run's result, or the exception it rejected with; for a recorded stream
    without a given outcome it is read from the last ``run:end`` (see
    :func:`~rulvar_otel.core.handle.outcome_from_run_end`). ``source_error`` is the exception
    that ended the stream early, if one did: the sinks were finished all the same.
    ``interrupted``: an interrupt the drain's :class:`Interrupts` absorbed ended the stream.
    """

    outcome: RunOutcome | BaseException
    events: int
    source_error: Exception | None = None
    last_run_end: Mapping[str, Any] | None = None
    interrupted: bool = False


class FanOut:
    """Several sinks fed as one, in order; a sink that raises is logged and the others go on."""

    __slots__ = ("_feeds", "_sinks")

    def __init__(self, sinks: Iterable[Sink]) -> None:
        self._sinks: tuple[Sink, ...] = tuple(sinks)
        self._feeds = tuple(sink.feed for sink in self._sinks)  # bound once: this runs per event

    @property
    def sinks(self) -> tuple[Sink, ...]:
        return self._sinks

    def feed(self, event: Mapping[str, Any]) -> None:
        for feed in self._feeds:
            try:
                feed(event)
            except Exception:  # noqa: BLE001 - one consumer never costs another an event
                _log.debug("a sink failed on an event", exc_info=True)

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        for sink in self._sinks:
            try:
                sink.finish(outcome)
            except Exception:  # noqa: BLE001
                _log.debug("%s failed to finish", type(sink).__name__, exc_info=True)


class FoldSink(Generic[_R]):
    """A fold written as a generator, as a :class:`Sink`: ``feed`` events, ``finish``, read ``result``.

    The generator receives wire-form events and returns its result when sent ``None`` (the
    reducers are written this way), so ``drain`` can feed it beside the other consumers.
    """

    __slots__ = ("_fold", "result")

    def __init__(self, fold: Generator[None, Mapping[str, Any] | None, _R]) -> None:
        self._fold: Generator[None, Mapping[str, Any] | None, _R] | None = fold
        self.result: _R | None = None
        next(fold)

    def feed(self, event: Mapping[str, Any]) -> None:
        if self._fold is not None:
            self._fold.send(event)

    def finish(self, outcome: object = None) -> _R:
        """End the fold (idempotent) and return its result; the outcome does not change it."""
        if self._fold is not None:
            fold, self._fold = self._fold, None
            try:
                fold.send(None)
            except StopIteration as done:
                self.result = done.value
        assert self.result is not None
        return self.result


class Interrupts:
    """How a drain meets Ctrl-C or cancellation (``KeyboardInterrupt``, ``CancelledError``).

    This base policy absorbs nothing: the sinks are finished with the stop as the outcome, so
    what they had started ends unsettled, and it propagates. A subclass whose :meth:`absorb` takes a
    stop ends the stream there instead: the drain does not wait for the run's result and reports
    ``interrupted``. ``requested`` (set by a signal handler, say) ends the stream before the next
    read; ``reading`` is true while the drain waits on a synchronous source.
    """

    __slots__ = ("reading", "requested")

    def __init__(self) -> None:
        self.requested = False
        self.reading = False

    def absorb(self, stop: BaseException) -> bool:
        """Whether ``stop`` ends the stream (True) or the drain (False: it is re-raised)."""
        return False


async def _read_async(run: DrainPass, events: AsyncIterable[EventLike]) -> None:
    hook = run.interrupts
    try:
        async for event in events:
            run.take(event)
            if hook is not None and hook.requested:
                return
    except Exception as exc:  # noqa: BLE001 - a broken source ends the stream, not the host
        run.broke(exc)


def _stopped(run: DrainPass, stop: BaseException) -> None:
    """An interrupt reached the drain: absorbed, or the sinks are finished and it re-raises."""
    hook = run.interrupts
    if isinstance(hook, Interrupts) and hook.absorb(stop):
        run.interrupted = True
        return
    run.finish_sinks(stop)
    raise stop


def _done(run: DrainPass, outcome: RunOutcome | BaseException) -> Drained:
    if run.interrupts is not None and run.interrupts.requested:
        run.interrupted = True
    run.finish_sinks(outcome)
    return Drained(outcome, run.count, run.source_error, run.last_run_end, run.interrupted)


async def _result(handle: RunHandle) -> RunOutcome | BaseException:
    try:
        return await handle.result
    except Exception as exc:  # noqa: BLE001 - a rejection is how the run settled
        return exc


async def drain(
    handle: RunHandle,
    *sinks: Sink,
    interrupts: Interrupts | None = None,
    settle_broken: bool = True,
) -> Drained:
    """Feed every event of ``handle`` to ``sinks``, then finish them with the run's outcome.

    Never raises for a broken source or a rejecting result: the stream ends where the source
    failed (``source_error``), and a rejection is the outcome the sinks are finished with; with
    ``settle_broken=False`` a broken stream's result is not awaited (the source error is the
    outcome). A recorded run (:class:`~rulvar_otel.core.run_source.SyncRunHandle`) settles with
    what it knows at the stream's end, and one over a plain iterable is read without awaiting.
    Cancelled (or interrupted) before the run settled, it finishes the sinks with the
    ``CancelledError`` as the outcome, so what they had started ends unsettled, and re-raises it,
    unless ``interrupts`` absorbs it (see :class:`Interrupts`).
    """
    if as_sync_handle(handle) and handle.is_sync:
        return drain_run(handle, *sinks, interrupts=interrupts)
    run = DrainPass(sinks, interrupts)
    recorded = handle if as_sync_handle(handle) else None
    outcome: RunOutcome | BaseException
    try:
        await _read_async(run, handle.events)
        if recorded is not None:
            outcome = recorded.outcome_now()
        elif run.source_error is not None and not settle_broken:
            outcome = run.source_error
        else:
            outcome = await _result(handle)
    except _interrupts() as stop:
        _stopped(run, stop)
        outcome = recorded.outcome_now() if recorded is not None else stop
    return _done(run, outcome)


def drain_run(handle: SyncRunHandle, *sinks: Sink, interrupts: Interrupts | None = None) -> Drained:
    """:func:`drain` for a recorded run over a plain iterable, without an event loop.

    The outcome is the run's as known at the end of what was read (``outcome_now``).
    """
    return _drain_sync(DrainPass(sinks, interrupts), handle.iter_sync(), lambda _: handle.outcome_now())


def drain_events(
    events: Iterable[EventLike],
    *sinks: Sink,
    outcome: Outcome = None,
    interrupts: Interrupts | None = None,
) -> Drained:
    """:func:`drain` for a recorded stream, synchronously.

    Without ``outcome``, the run counts as ok exactly when its last ``run:end`` says ``ok`` and
    is settled. A source that raises ends the stream as in :func:`drain`. The dicts of a list or
    tuple are read as they are, not copied: sinks may keep them (an open agent's opener), so
    they must not change while a sink that was fed them is still in use.
    """

    def settle(run: DrainPass) -> RunOutcome | BaseException:
        return outcome if outcome is not None else outcome_from_run_end(run.last_run_end)

    owned = type(events) is list or type(events) is tuple
    return _drain_sync(DrainPass(sinks, interrupts, owned), iter(events), settle)


def _drain_sync(
    run: DrainPass, events: Iterator[EventLike], settle: Callable[[DrainPass], RunOutcome | BaseException]
) -> Drained:
    try:
        run.read_sync(events)
    except _interrupts() as stop:
        _stopped(run, stop)
    return _done(run, settle(run))
