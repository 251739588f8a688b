"""How a tool span's end finds its start: by ``toolCallId`` when the events carry one, else the
oldest open start of the same tool under the same owner (first in, first out).

:class:`ToolPairing` holds the two indexes and the ordinal that names id-less tool spans; the
span state machine (``_mapper``) asks it and never reads the indexes itself.
"""

from __future__ import annotations

from collections import deque

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._attributes import Event
from rulvar_otel.otel._span_state import MappedSpan

__all__ = ["ToolPairing", "tool_keys"]


def tool_keys(event: Event) -> tuple[str, str | None]:
    """``(owner key, the key of its toolCallId or None)`` of a tool event.

    The id key is one string, equal exactly when both the owner and the call id are: a string is
    hashed and compared in the dict's fast path, and the collector never tracks it.
    """
    span_id = event.get("spanId")
    owner_key = span_id if isinstance(span_id, str) else ""
    call_id = event.get("toolCallId")
    return owner_key, (f"{len(owner_key)}:{owner_key}{call_id}" if isinstance(call_id, str) else None)


def _fifo_key(owner_key: str, event: Event) -> tuple[str, str]:
    raw_name = event.get("toolName")
    return owner_key, raw_name if isinstance(raw_name, str) else ""


class ToolPairing:
    """The open tool spans, by call id and by (owner, tool name) in start order."""

    __slots__ = ("_by_id", "_fifo", "_ordinal")

    def __init__(self) -> None:
        self._by_id: dict[str, MappedSpan] = {}
        self._fifo: dict[tuple[str, str], deque[MappedSpan]] = {}
        self._ordinal = 0

    def replays_open(self, id_key: str, event: Event) -> bool:
        """Whether ``event`` (a ``tool:start``) replays the start of a tool span still open; that
        span is then marked replayed, and no second one opens."""
        if event.get("replayed") is not True:
            return False
        existing = self._by_id.get(id_key)
        if existing is None or existing.ended or existing.pending_end is not None:
            return False
        if existing.span is not None:
            existing.span.set_attribute(sc.REPLAYED, True)
        return True

    def identity(self, owner_key: str, id_key: str | None, event: Event, with_ids: bool) -> str:
        """The deterministic-id identity of a new tool span (id-less spans are numbered)."""
        if id_key is not None:
            return f"tool:{owner_key}:{event.get('toolCallId')}" if with_ids else ""
        self._ordinal += 1
        return f"tool:{owner_key}:#{self._ordinal}"

    def opened(self, rec: MappedSpan, owner_key: str, id_key: str | None, event: Event) -> None:
        """Index a new tool span under the keys :func:`tool_keys` gave for its start."""
        if id_key is not None:
            self._by_id[id_key] = rec
        else:
            self._fifo.setdefault(_fifo_key(owner_key, event), deque()).append(rec)

    def closing(self, event: Event) -> MappedSpan | None:
        """The open span a ``tool:end`` closes, taken out of the indexes (None: an orphan end)."""
        owner_key, id_key = tool_keys(event)
        rec: MappedSpan | None = None
        if id_key is not None:
            rec = self._by_id.get(id_key)
            if rec is not None:
                del self._by_id[id_key]  # compiled, `del` is a C call; `pop` is a method call
            if rec is not None and (rec.ended or rec.pending_end is not None):
                rec = None
        if rec is None:
            queue = self._fifo.get(_fifo_key(owner_key, event))
            while queue:
                candidate = queue.popleft()
                if not candidate.ended and candidate.pending_end is None:
                    return candidate
        return rec
