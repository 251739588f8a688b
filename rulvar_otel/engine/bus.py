"""The per-segment event bus: numbering, masking, the gapless buffer, listeners.

Every event goes through :meth:`EventBus.emit`, which stamps the envelope (``seq`` from the
segment base, ``ts`` from the clock), masks secrets (unless the engine opted out), appends the
event to the buffer every iterator reads, and then calls the listeners. A listener that raises
never reaches the run: the event still reaches every other listener and iterator, each failing
listener is logged once (the listeners' policy, see ``core.run_source.Listeners``), and one
masked ``log`` event per segment announces the isolation in the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from rulvar_otel.core.events import EventModel, Log
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.core.run_source import Listeners

__all__ = ["EventBus", "EventStream", "format_ts"]

E = TypeVar("E", bound=EventModel)

# Fields the catalog types as ``number | null``: None is sent as an explicit null, not dropped.
_NULLABLE: dict[str, frozenset[str]] = {"budget:update": frozenset({"remaining_usd"})}
Listener = Callable[[Any], object]


def format_ts(moment: datetime) -> str:
    """ISO 8601 with milliseconds and ``Z``, the wire form of ``ts``."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class EventStream:
    """An async iterable over a bus: each iteration starts at the first event (the whole stream)."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus

    def __aiter__(self) -> AsyncIterator[EventModel]:
        return self._bus.iterate()


class EventBus:
    def __init__(
        self,
        run_id: str,
        *,
        base: int,
        masker: SecretMasker | None,
        clock: Callable[[], datetime],
        root_span: str,
    ) -> None:
        self.run_id = run_id
        self._next_seq = base
        self._masker = masker
        self._clock = clock
        self._root_span = root_span
        self._events: list[EventModel] = []
        self._closed = False
        self._changed = asyncio.Event()
        self._listeners = Listeners(masker)
        self._warned = False

    @property
    def events(self) -> list[EventModel]:
        return self._events

    @property
    def closed(self) -> bool:
        return self._closed

    def emit(
        self,
        cls: type[E],
        span_id: str,
        parent_span_id: str | None = None,
        *,
        replayed: bool = False,
        **body: Any,
    ) -> E:
        """Stamp, mask, buffer and deliver one event; returns it (the masked model)."""
        if self._closed:
            raise RuntimeError("the event bus of this segment is closed")
        nullable = _NULLABLE.get(str(cls.model_fields["type"].default), frozenset())
        fields = {k: v for k, v in body.items() if v is not None or k in nullable}
        if self._masker is not None:
            fields = self._masker.mask_deep(fields)
        envelope: dict[str, Any] = {
            "run_id": self._masker.mask(self.run_id) if self._masker is not None else self.run_id,
            "seq": self._next_seq,
            "ts": format_ts(self._clock()),
            "span_id": span_id,
        }
        if parent_span_id is not None:
            envelope["parent_span_id"] = parent_span_id
        if replayed:
            envelope["replayed"] = True
        self._next_seq += 1
        event = cls(**envelope, **fields)
        self._events.append(event)
        self._changed.set()
        self._deliver(event)
        return event

    def _deliver(self, event: EventModel) -> None:
        if not self._listeners:
            return
        failure = self._listeners.dispatch(event, event.type)
        if failure is not None and not self._warned:
            # Set first: the warning's own delivery may throw again and must not recurse.
            self._warned = True
            self.emit(
                Log,
                self._root_span,
                level="warn",
                msg=f"an event listener raised {type(failure).__name__} on {event.type!r}: {failure}; "
                "the listener was isolated",
            )

    def on(self, kind: str, callback: Listener) -> Callable[[], None]:
        return self._listeners.on(kind, callback)

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    async def iterate(self) -> AsyncIterator[EventModel]:
        index = 0
        while True:
            while index < len(self._events):
                yield self._events[index]
                index += 1
            if self._closed:
                return
            self._changed.clear()
            if index < len(self._events) or self._closed:
                continue
            await self._changed.wait()
