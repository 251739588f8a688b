"""One way to drain a run: every consumer of a run's events is a :class:`Sink` that ``drain`` feeds.

A sink takes wire-form events one at a time (``feed``) and is finished once with how the run
settled (``finish``). The span mapper, the metrics recorder, the reducers and the progress state
are sinks. :func:`drain` (a live or recorded :class:`RunHandle`) and :func:`drain_events` (a
recorded stream, synchronously) are the only places that read a source, turn the result into an
outcome and survive a broken source; so every sink sees the same events and the same outcome.

:class:`FanOut` feeds several sinks as one, the way the OTel SDK's multi span processor fans out:
one failing sink never costs the others an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from rulvar_otel.core.handle import EventLike, RunHandle, RunOutcome, as_wire, outcome_from_run_end

__all__ = ["Drained", "FanOut", "FoldSink", "Sink", "drain", "drain_events"]

_log = logging.getLogger("rulvar_otel")

Outcome = RunOutcome | BaseException | None
_R = TypeVar("_R")
# What stops a drain before the run settles: the sinks end what they started, then it propagates.
_INTERRUPTS: tuple[type[BaseException], ...] = (asyncio.CancelledError, KeyboardInterrupt)


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
    """

    outcome: RunOutcome | BaseException
    events: int
    source_error: Exception | None = None
    last_run_end: Mapping[str, Any] | None = None


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


def _snapshot(event: EventLike) -> Mapping[str, Any]:
    """The event's wire form as it is now, owned by the drain.

    Sinks keep events past ``feed`` (metrics batches, agents waiting for their end, events
    waiting for a first usable ``ts``), and a host may hand over one dict it refills for every
    event: the top level is copied as it is read (nested values are not, for speed).
    """
    if type(event) is dict:  # parsed JSON: skip the Mapping ABC check on the hot path
        return event.copy()
    wire = as_wire(event)
    return wire if isinstance(event, BaseModel) else dict(wire)  # a model's dump is already a copy


def _finish(sink: Sink, outcome: RunOutcome | BaseException) -> None:
    try:
        sink.finish(outcome)
    except Exception:  # noqa: BLE001 - a sink's failure never reaches the host
        _log.debug("%s failed to finish", type(sink).__name__, exc_info=True)


async def drain(handle: RunHandle, *sinks: Sink) -> Drained:
    """Feed every event of ``handle`` to ``sinks``, then finish them with the run's outcome.

    Never raises for a broken source or a rejecting result: the stream ends where the source
    failed (``source_error``), and a rejection is the outcome the sinks are finished with.
    Cancelled (or interrupted) before the run settled, it finishes the sinks with the
    ``CancelledError`` as the outcome, so what they had started ends unsettled, and re-raises it.
    """
    try:
        return await _drain(handle, sinks)
    except _INTERRUPTS as stop:
        for sink in sinks:
            _finish(sink, stop)
        raise


async def _drain(handle: RunHandle, sinks: tuple[Sink, ...]) -> Drained:
    feeds = tuple(sink.feed for sink in sinks)
    count = 0
    last_run_end: Mapping[str, Any] | None = None
    source_error: Exception | None = None
    try:
        async for event in handle.events:
            wire = _snapshot(event)
            count += 1
            if wire.get("type") == "run:end":
                last_run_end = wire
            for feed in feeds:
                try:
                    feed(wire)
                except Exception:  # noqa: BLE001 - sinks never raise by contract; a bug costs one event
                    _log.debug("a sink failed on event %s", count, exc_info=True)
    except Exception as exc:  # noqa: BLE001 - a broken source ends the stream, not the host
        source_error = exc
        _log.warning("the event stream failed: %s", type(exc).__name__)
    outcome: RunOutcome | BaseException
    try:
        outcome = await handle.result
    except Exception as exc:  # noqa: BLE001 - a rejection is how the run settled
        outcome = exc
    for sink in sinks:
        _finish(sink, outcome)
    return Drained(outcome, count, source_error, last_run_end)


def drain_events(events: Iterable[EventLike], *sinks: Sink, outcome: Outcome = None) -> Drained:
    """:func:`drain` for a recorded stream, synchronously.

    Without ``outcome``, the run counts as ok exactly when its last ``run:end`` says ``ok`` and
    is settled. A source that raises ends the stream as in :func:`drain`.
    """
    feeds = tuple(sink.feed for sink in sinks)
    count = 0
    last_run_end: Mapping[str, Any] | None = None
    source_error: Exception | None = None
    try:
        for event in events:
            wire = _snapshot(event)
            count += 1
            if wire.get("type") == "run:end":
                last_run_end = wire
            # The sinks in line, not through a FanOut: one call less per event.
            for feed in feeds:
                try:
                    feed(wire)
                except Exception:  # noqa: BLE001
                    _log.debug("a sink failed on event %s", count, exc_info=True)
    except Exception as exc:  # noqa: BLE001
        source_error = exc
        _log.warning("the event stream failed: %s", type(exc).__name__)
    settled: RunOutcome | BaseException = (
        outcome if outcome is not None else outcome_from_run_end(last_run_end)
    )
    for sink in sinks:
        _finish(sink, settled)
    return Drained(settled, count, source_error, last_run_end)
