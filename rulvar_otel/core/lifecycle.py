"""The agent lifecycle: the one place that pairs ``agent:start`` with ``agent:end``.

Every consumer that needs to know which agents a stream opened and closed (the span mapper, the
progress view, the invocation table, the metric folds, the critical path) asks an
:class:`AgentLifecycle` instead of keeping its own map, so they all pair the same way:

- an agent span is named by its ``spanId`` (a missing or non-string one is the empty id);
- one opener per ``spanId``: the first ``agent:start`` opens it; a repeat (an older engine's
  per-phase ``agent:start``, a replayed re-emission) changes nothing, whether the span is still
  open or already closed;
- an ``agent:end`` closes the open span it names and returns the record its start made;
- an ``agent:end`` naming no open span (never opened, or already closed) returns ``None`` and
  changes nothing, so a later ``agent:start`` for that id still opens it;
- ``replayed`` is the opener's own flag; a repeat never changes it.

Each record has a ``payload`` slot where a consumer keeps what it built for the span (its OTel
span, its progress row, its table row), so no consumer needs a second map keyed by span id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from rulvar_otel.core.wire import as_str, ts_ns

__all__ = ["AgentLifecycle", "AgentSpan"]

P = TypeVar("P")


@dataclass(slots=True, eq=False)
class AgentSpan(Generic[P]):
    """What an ``agent:start`` said, as read from the wire (nothing masked here)."""

    span_id: str
    parent_span_id: str | None
    agent_type: str | None
    label: str | None
    role: str | None
    model: str | None
    ts: object  # the opener's raw ``ts``; start_ns reads it only when asked
    replayed: bool
    open: bool = True
    payload: P | None = None  # what the consumer built for this span

    @property
    def start_ns(self) -> int | None:
        """Epoch nanoseconds of the opener's ``ts`` (None when absent or malformed)."""
        return ts_ns(self.ts)


def _span_key(event: Mapping[str, Any]) -> str:
    """The id an agent event names: its ``spanId``, or the empty id when it has none."""
    span_id = event.get("spanId")
    return span_id if isinstance(span_id, str) else ""


class AgentLifecycle(Generic[P]):
    """Agent spans by ``spanId``: the open ones, and the closed ones (so a repeat stays a repeat)."""

    __slots__ = ("_closed", "_open")

    def __init__(self) -> None:
        self._open: dict[str, AgentSpan[P]] = {}
        self._closed: dict[str, AgentSpan[P]] = {}

    def __len__(self) -> int:
        """How many agent spans are open."""
        return len(self._open)

    def start(self, event: Mapping[str, Any]) -> AgentSpan[P] | None:
        """Open the span an ``agent:start`` names; ``None`` for a repeat of an opened one."""
        key = _span_key(event)
        if key in self._open or key in self._closed:
            return None
        record: AgentSpan[P] = AgentSpan(
            key,
            as_str(event.get("parentSpanId")),
            as_str(event.get("agentType")),
            as_str(event.get("label")),
            as_str(event.get("role")),
            as_str(event.get("model")),
            event.get("ts"),
            event.get("replayed") is True,
        )
        self._open[key] = record
        return record

    def end(self, event: Mapping[str, Any]) -> AgentSpan[P] | None:
        """Close the open span an ``agent:end`` names; the record its start made, or ``None``."""
        key = _span_key(event)
        record = self._open.pop(key, None)
        if record is not None:
            record.open = False
            self._closed[key] = record
        return record

    def get(self, span_id: object) -> AgentSpan[P] | None:
        """The open agent span ``span_id`` names."""
        return self._open.get(span_id if isinstance(span_id, str) else "")

    def opened(self, span_id: object) -> AgentSpan[P] | None:
        """The agent span ``span_id`` names, open or closed; ``None`` if no start opened it."""
        key = span_id if isinstance(span_id, str) else ""
        record = self._open.get(key)
        return record if record is not None else self._closed.get(key)

    def closed(self, span_id: object) -> bool:
        """Whether an ``agent:end`` already closed the span ``span_id`` names."""
        return (span_id if isinstance(span_id, str) else "") in self._closed
