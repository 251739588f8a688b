"""What a recorded run notes of each event it reads: its buffer, first run id, last ``run:end``.

:class:`RunRecord` is the per-event part of :class:`~rulvar_otel.core.run_source.RecordedRun`
(compiled with the mapper: a million-event export records a million events), and
:class:`RecordingReader` is an unbuffered read that records each event as it passes, with no
generator frame between the source and the drain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from rulvar_otel.core._outcome import as_wire, event_field

__all__ = ["RecordingReader", "RunRecord", "kind_and_run_id"]


class _Listeners(Protocol):
    registered: bool

    def dispatch(self, event: object, kind: str | None) -> BaseException | None: ...


def kind_and_run_id(event: object) -> tuple[str | None, object]:
    """An event's ``type`` (``None`` unless a string) and its ``runId``, in either form."""
    if isinstance(event, Mapping):
        kind = event.get("type")
        return (kind if isinstance(kind, str) else None), event.get("runId")
    kind = event_field(event, "type")  # type: ignore[arg-type]
    return (kind if isinstance(kind, str) else None), event_field(event, "runId")  # type: ignore[arg-type]


class RunRecord:
    """The run id (given, else the first read), the last ``run:end`` read (its wire form), the
    events read when ``buffered``; each event goes to the ``listeners`` of its type."""

    def __init__(self, run_id: str | None, buffered: bool, listeners: _Listeners) -> None:
        self.run_id = run_id
        self.buffer: list[Any] | None = [] if buffered else None
        self.last_run_end: Mapping[str, Any] | None = None
        self.listeners = listeners

    def record(self, event: object) -> None:
        if self.buffer is not None:
            self.buffer.append(event)
        if type(event) is dict:  # parsed JSON: the common case
            parsed: dict[str, Any] = event
            raw_kind = parsed.get("type")
            kind = raw_kind if isinstance(raw_kind, str) else None
            if self.run_id is None:
                rid = parsed.get("runId")
                if isinstance(rid, str):
                    self.run_id = rid
            if kind == "run:end":
                self.last_run_end = parsed
        else:
            kind, rid = kind_and_run_id(event)
            if self.run_id is None and isinstance(rid, str):
                self.run_id = rid
            if kind == "run:end":
                self.last_run_end = event if isinstance(event, Mapping) else as_wire(event)  # type: ignore[arg-type]
        listeners = self.listeners
        if listeners.registered:
            listeners.dispatch(event, kind)


class RecordingReader:
    """An iterator over ``source`` that records each event on ``record`` before handing it on;
    ``on_end`` is called once the source is exhausted."""

    def __init__(self, source: Iterator[Any], record: RunRecord, on_end: Callable[[], None]) -> None:
        self._source = source
        self._record = record
        self._on_end = on_end

    def __iter__(self) -> RecordingReader:
        return self

    def __next__(self) -> Any:
        try:
            event = next(self._source)
        except StopIteration:
            self._on_end()
            raise
        self._record.record(event)
        return event
