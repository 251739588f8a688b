"""One drain's pass over its source: every event is copied once and handed to every sink, in order.

:class:`DrainPass` is the per-event part of :mod:`rulvar_otel.core.drain` (compiled with the
mapper: it runs once per event, for every consumer). The drain module keeps what runs once per
run: settling the outcome, the async read, meeting an interrupt, the report (``Drained``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Protocol, cast

from rulvar_otel.core._outcome import EventLike, RunOutcome, as_wire, is_event_model

__all__ = ["DrainPass", "snapshot"]

_log = logging.getLogger("rulvar_otel")

_END: Final = object()


# drain.Sink's shape, without its runtime_checkable (a compiled module cannot hold one; drain
# imports this module, so it cannot import drain's).
class _Sink(Protocol):
    def feed(self, event: Mapping[str, Any]) -> None: ...

    def finish(self, outcome: RunOutcome | BaseException | None) -> object: ...


class _Hook(Protocol):
    requested: bool
    reading: bool


def snapshot(event: EventLike) -> dict[str, Any]:
    """The event's wire form as it is now, owned by the drain.

    Sinks keep events past ``feed`` (metrics batches, agents waiting for their end, events
    waiting for a first usable ``ts``), and a host may hand over one dict it refills for every
    event: the top level is copied as it is read (nested values are not, for speed).
    """
    if type(event) is dict:  # parsed JSON: skip the Mapping ABC check on the hot path
        parsed: dict[str, Any] = event
        return parsed.copy()
    wire = as_wire(event)
    if type(wire) is dict and is_event_model(event):
        return cast("dict[str, Any]", wire)  # a model's dump is already a copy
    return dict(wire)


class DrainPass:
    """One drain: every event goes through :meth:`take`, whichever loop reads the source.

    ``interrupts`` is the drain's :class:`~rulvar_otel.core.drain.Interrupts` (``requested``
    ends the stream before the next read; ``reading`` is set while a read blocks). ``owned``:
    the source is a list or tuple, whose dicts no producer refills while the drain runs, so
    they are read as they are (:func:`snapshot` copies every other event).
    """

    def __init__(self, sinks: tuple[_Sink, ...], interrupts: _Hook | None, owned: bool = False) -> None:
        self.sinks = sinks
        self.owned = owned
        # Bound once: this runs per event.
        self.feeds: tuple[Callable[[Mapping[str, Any]], None], ...] = tuple(sink.feed for sink in sinks)
        self.interrupts = interrupts
        self.count = 0
        self.last_run_end: Mapping[str, Any] | None = None
        self.source_error: Exception | None = None
        self.interrupted = False

    def take(self, event: EventLike) -> None:
        wire = cast("dict[str, Any]", event) if self.owned and type(event) is dict else snapshot(event)
        self.count += 1
        if wire.get("type") == "run:end":
            self.last_run_end = wire
        for feed in self.feeds:
            try:
                feed(wire)
            except Exception:  # noqa: BLE001 - sinks never raise by contract; a bug costs one event
                _log.debug("a sink failed on event %s", self.count, exc_info=True)

    def read_sync(self, events: Iterator[EventLike]) -> None:
        hook = self.interrupts
        try:
            if hook is None:
                for event in events:
                    self.take(event)
                return
            while not hook.requested:
                hook.reading = True
                item: object = next(events, _END)  # an interrupt raised here leaves ``reading`` set
                hook.reading = False
                if item is _END:
                    return
                self.take(item)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - a broken source ends the stream, not the host
            self.broke(exc)

    def broke(self, exc: Exception) -> None:
        self.source_error = exc
        _log.warning("the event stream failed: %s", type(exc).__name__)

    def finish_sinks(self, outcome: RunOutcome | BaseException) -> None:
        """Finish every sink with ``outcome``; a sink's failure never reaches the host."""
        for sink in self.sinks:
            try:
                sink.finish(outcome)
            except Exception:  # noqa: BLE001
                _log.debug("%s failed to finish", type(sink).__name__, exc_info=True)
