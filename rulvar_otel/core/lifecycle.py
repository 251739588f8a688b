"""The agent lifecycle: which agent spans are open, pairing ``agent:start`` with ``agent:end``.

Every fold that needs an agent's opening facts when it ends (its start time for a duration, its
role, model and type for labels) reads them from one :class:`AgentLifecycle` instead of keeping
its own map. The rules are the span mapper's: one opener per ``spanId`` (a re-emitted or legacy
duplicate ``agent:start`` changes nothing while the span is open), an end closes the span it
names and returns the record its start made, an end without a start returns ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rulvar_otel.core.wire import as_str, ts_ns

__all__ = ["AgentLifecycle", "AgentSpan"]


@dataclass(slots=True)
class AgentSpan:
    """What an ``agent:start`` said, as read from the wire (nothing masked here)."""

    span_id: str
    parent_span_id: str | None
    agent_type: str | None
    label: str | None
    role: str | None
    model: str | None
    start_ns: int | None
    replayed: bool


class AgentLifecycle:
    """Open agent spans by ``spanId``; bounded by the agents open at once."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, AgentSpan] = {}

    def __len__(self) -> int:
        return len(self._open)

    def start(self, event: Mapping[str, Any]) -> AgentSpan | None:
        """Open the span an ``agent:start`` names; ``None`` for a duplicate of an open one."""
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else ""
        if key in self._open:
            return None
        record = AgentSpan(
            key,
            as_str(event.get("parentSpanId")),
            as_str(event.get("agentType")),
            as_str(event.get("label")),
            as_str(event.get("role")),
            as_str(event.get("model")),
            ts_ns(event.get("ts")),
            event.get("replayed") is True,
        )
        self._open[key] = record
        return record

    def get(self, span_id: object) -> AgentSpan | None:
        """The open agent span ``span_id`` names."""
        return self._open.get(span_id if isinstance(span_id, str) else "")

    def end(self, event: Mapping[str, Any]) -> AgentSpan | None:
        """Close the span an ``agent:end`` names; the record its start made, or ``None``."""
        span_id = event.get("spanId")
        return self._open.pop(span_id if isinstance(span_id, str) else "", None)
