"""Run handles: the one shape every consumer (exporter, metrics, renderers) reads a run through.

A handle has a ``run_id``, an async iterable of events (gapless from creation), a ``result`` that
resolves with the :class:`RunOutcome` or rejects, and ``on(type, callback)`` for callbacks from
registration onward. :func:`handle_from_events` wraps a recorded stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ConfigDict, JsonValue

from rulvar_otel.errors import RunRejectedError, SourceError

if TYPE_CHECKING:
    from rulvar_otel.core.events import EventModel

__all__ = [
    "EventLike",
    "as_wire",
    "RecordedRunHandle",
    "RunHandle",
    "RunOutcome",
    "event_field",
    "handle_from_events",
    "outcome_from_json",
    "outcome_from_run_end",
]

# Events travel either as typed models (the bundled engine) or as wire-form dicts (recorded
# streams, servers): parsing every line into a model would dominate the exporter's cost. The
# alias is written as a string so that a wire-form path never imports the event models.
EventLike: TypeAlias = "EventModel | Mapping[str, Any]"
Listener: TypeAlias = Callable[[EventLike], object]


class RunOutcome(BaseModel):
    """How a run settled (``handle.result``). Unknown fields are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    status: str
    value: JsonValue = None
    error: JsonValue = None
    usage: JsonValue = None
    cost: JsonValue = None
    envelope: JsonValue = None
    completion: str | None = None
    childStatusCounts: dict[str, int] | None = None  # noqa: N815 - wire name


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


def event_field(event: EventLike, wire_name: str) -> Any:
    """Read one wire-named field from either event form (None when absent, or for a non-event)."""
    if isinstance(event, Mapping):
        return event.get(wire_name)
    if not isinstance(event, BaseModel):
        return None  # a host's stream may carry anything: what is neither form has no fields
    # A model: the envelope fields are plain attributes, no need to dump the whole model for them.
    if wire_name == "type":
        return event.type
    if wire_name == "runId":
        return event.run_id
    return _to_wire(event).get(wire_name)


def as_wire(event: EventLike) -> Mapping[str, Any]:
    """The wire-form mapping of either event form (a mapping is returned as it is).

    Anything else has no wire form: an empty mapping, which every consumer skips.
    """
    if type(event) is dict or isinstance(event, Mapping):
        return event
    return _to_wire(event) if isinstance(event, BaseModel) else {}


def _to_wire(event: EventModel) -> dict[str, Any]:
    # Only a model needs the event module; it is loaded by whoever built the model.
    from rulvar_otel.core.events import event_to_wire

    return event_to_wire(event)


def outcome_from_json(data: Mapping[str, Any]) -> RunOutcome | RunRejectedError:
    """Read a RunOutcome, or the fixtures' ``{"settled": ..., "outcome"|"error": ...}`` wrapper."""
    settled = data.get("settled")
    if settled == "rejected":
        err = data.get("error")
        err_map: Mapping[str, Any] = err if isinstance(err, Mapping) else {}  # pyright: ignore[reportUnknownVariableType]
        return RunRejectedError(
            str(err_map.get("message", "the run's result rejected")),
            name=str(err_map.get("name", "Error")),
            error_code=str(err_map["code"]) if "code" in err_map else None,
        )
    if settled == "resolved" and isinstance(data.get("outcome"), Mapping):
        return RunOutcome.model_validate(data["outcome"])
    return RunOutcome.model_validate(data)


def outcome_from_run_end(
    last_run_end: Mapping[str, Any] | None,
) -> RunOutcome | SourceError | RunRejectedError:
    """How a run settled when only its stream is known (a JSONL file, an SSE tail).

    Resolved with the last ``run:end``'s status, so it counts as ok exactly when that says ``ok``
    and is settled; a ``settled: false`` terminal is the rejection the engine raised beside it, and
    a stream without any ``run:end`` is a :class:`SourceError`. Errors are returned, not raised.
    """
    if last_run_end is None:
        return SourceError("the stream ended without a run:end, and no outcome was given")
    if last_run_end.get("settled") is False:
        superseded = last_run_end.get("settledReason") == "superseded"
        return RunRejectedError(
            "superseded: a successor owns settlement"
            if superseded
            else "settlement failed: nothing durable records this terminal",
            name="SupersededError" if superseded else "SettlementError",
        )
    status = last_run_end.get("status")
    return RunOutcome(
        status=status if isinstance(status, str) else "unknown",
        envelope=last_run_end.get("envelope"),
        completion=c if isinstance(c := last_run_end.get("completion"), str) else None,
    )


class RecordedRunHandle:
    """A handle over a recorded stream (a list, an iterator, or an async iterator of events).

    The stream is read once and buffered as it is read, so ``events`` can be iterated by several
    consumers and ``result`` can be awaited before or after them.
    """

    def __init__(
        self,
        events: Iterable[EventLike] | AsyncIterable[EventLike],
        outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
        run_id: str | None = None,
    ) -> None:
        self._source_sync: Iterator[EventLike] | None = None
        self._source_async: AsyncIterator[EventLike] | None = None
        if isinstance(events, AsyncIterable):
            self._source_async = aiter(events)
        else:
            self._source_sync = iter(events)
        self._buffer: list[EventLike] = []
        self._done = False
        self._listeners: dict[str, list[Listener]] = {}
        self._lock = asyncio.Lock()
        self._last_run_end: Mapping[str, Any] | None = None
        self._run_id = run_id
        if isinstance(outcome, Mapping):
            outcome = RunOutcome.model_validate(outcome)
        self._outcome = outcome

    @property
    def run_id(self) -> str:
        if self._run_id is None:
            if not self._buffer and not self._done and self._source_sync is not None:
                self._pull_sync()
            first = self._buffer[0] if self._buffer else None
            rid = event_field(first, "runId") if first is not None else None
            return rid if isinstance(rid, str) else ""
        return self._run_id

    def _record(self, event: EventLike) -> None:
        self._buffer.append(event)
        if self._run_id is None:
            rid = event_field(event, "runId")
            if isinstance(rid, str):
                self._run_id = rid
        kind = event_field(event, "type")
        if not isinstance(kind, str):
            kind = None  # junk (42, None, an unhashable type): kept in the stream for drain to skip
        elif kind == "run:end":
            self._last_run_end = event if isinstance(event, Mapping) else _to_wire(event)
        for cb in (*self._listeners.get(kind, ()), *self._listeners.get("*", ())):  # type: ignore[arg-type]
            try:
                cb(event)
            except Exception:  # noqa: BLE001 - a listener never affects the stream
                pass

    def _pull_sync(self) -> bool:
        assert self._source_sync is not None
        try:
            self._record(next(self._source_sync))
        except StopIteration:
            self._done = True
            return False
        return True

    async def _pull(self) -> bool:
        if self._done:
            return False
        if self._source_sync is not None:
            return self._pull_sync()
        assert self._source_async is not None
        async with self._lock:
            try:
                self._record(await anext(self._source_async))
            except StopAsyncIteration:
                self._done = True
                return False
            return True

    @property
    def events(self) -> AsyncIterator[EventLike]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[EventLike]:
        index = 0
        while True:
            if index < len(self._buffer):
                yield self._buffer[index]
                index += 1
            elif not await self._pull() and index >= len(self._buffer):
                return

    def iter_sync(self) -> Iterator[EventLike]:
        """Synchronous iteration for sync sources (raises for an async source)."""
        if self._source_async is not None:
            raise TypeError("this handle wraps an async source; iterate handle.events instead")
        index = 0
        while True:
            if index < len(self._buffer):
                yield self._buffer[index]
                index += 1
            elif not self._pull_sync() and index >= len(self._buffer):
                return

    @property
    def result(self) -> Awaitable[RunOutcome]:
        return self._result()

    async def _result(self) -> RunOutcome:
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        if self._outcome is not None:
            return self._outcome
        while await self._pull():
            pass
        outcome = outcome_from_run_end(self._last_run_end)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def settle_now(self) -> RunOutcome | BaseException:
        """The outcome as known right now, without awaiting (used by synchronous exporters)."""
        if self._outcome is not None:
            return self._outcome
        return outcome_from_run_end(self._last_run_end)

    def on(self, type: str, callback: Listener) -> Callable[[], None]:  # noqa: A002 - protocol name
        """Call ``callback`` for each later event of ``type`` (``"*"`` for every type)."""
        self._listeners.setdefault(type, []).append(callback)

        def off() -> None:
            listeners = self._listeners.get(type, [])
            if callback in listeners:
                listeners.remove(callback)

        return off


def handle_from_events(
    events: Iterable[EventLike] | AsyncIterable[EventLike],
    outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
    *,
    run_id: str | None = None,
) -> RecordedRunHandle:
    """Wrap a recorded stream as a :class:`RunHandle`.

    ``outcome`` is what ``result`` settles with: a :class:`RunOutcome` (or its JSON), or an
    exception it rejects with. Without one, the result is derived from the stream: resolved with
    the last ``run:end``'s status, rejected when that terminal says ``settled: false`` or is
    missing.
    """
    return RecordedRunHandle(events, outcome, run_id)
