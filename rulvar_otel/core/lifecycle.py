"""The agent lifecycle: the one place that pairs ``agent:start`` with ``agent:end``.

Every consumer that needs to know which agents a stream opened and closed (the span mapper, the
progress view, the invocation table, the metric folds, the critical path) asks an
:class:`AgentLifecycle` instead of pairing by a map of its own, so they all pair the same way:

- an agent span is named by its ``spanId`` (a missing or non-string one is the empty id);
- one opener per ``spanId``: the first ``agent:start`` opens it; a repeat (an older engine's
  per-phase ``agent:start``, a replayed re-emission) changes nothing, whether the span is still
  open or already closed;
- an ``agent:end`` closes the open span it names and returns the record its start made;
- an ``agent:end`` naming no open span (never opened, or already closed) returns ``None`` and
  changes nothing, so a later ``agent:start`` for that id still opens it;
- ``replayed`` is the opener's own flag; a repeat never changes it.

Each record has a ``payload`` slot where a consumer can keep what it built for the span while it
is open (the span mapper keeps the agent's OTel span there) and get it back from the ``agent:end``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from rulvar_otel.core.wire import as_str, ts_ns

__all__ = ["AgentLifecycle", "AgentSpan"]

P = TypeVar("P")


class AgentSpan(Generic[P]):
    """One agent span: what its ``agent:start`` said (read from the wire, nothing masked here).

    The opener's facts are read from the event when asked, so opening a span costs one small
    object; the record holds the event only while the span is open and a consumer keeps it.
    """

    __slots__ = ("event", "open", "payload", "span_id")

    def __init__(self, span_id: str, event: Mapping[str, Any]) -> None:
        self.span_id = span_id
        self.event = event  # the agent:start that opened the span
        self.open = True
        self.payload: P | None = None  # what the consumer built for this span

    @property
    def parent_span_id(self) -> str | None:
        return as_str(self.event.get("parentSpanId"))

    @property
    def agent_type(self) -> str | None:
        return as_str(self.event.get("agentType"))

    @property
    def label(self) -> str | None:
        return as_str(self.event.get("label"))

    @property
    def role(self) -> str | None:
        return as_str(self.event.get("role"))

    @property
    def model(self) -> str | None:
        return as_str(self.event.get("model"))

    @property
    def ts(self) -> object:
        """The opener's raw ``ts``."""
        return self.event.get("ts")

    @property
    def start_ns(self) -> int | None:
        """Epoch nanoseconds of the opener's ``ts`` (None when absent or malformed)."""
        return ts_ns(self.event.get("ts"))

    @property
    def replayed(self) -> bool:
        """Whether the opener was replayed (a repeat never changes it)."""
        return self.event.get("replayed") is True


class AgentLifecycle(Generic[P]):
    """Open agent spans by ``spanId``, and the ids of closed ones (so a repeat stays a repeat).

    A closed span's record is released at its end (the caller holds it from then on); only its id
    stays, so the memory of a long run grows by one id per agent, not by one record. The ids are
    a dict's keys, not a set's: a dict of strings is not tracked by the garbage collector.
    """

    __slots__ = ("_closed", "_open")

    def __init__(self) -> None:
        self._open: dict[str, AgentSpan[P]] = {}
        self._closed: dict[str, None] = {}

    def __len__(self) -> int:
        """How many agent spans are open."""
        return len(self._open)

    def start(self, event: Mapping[str, Any]) -> AgentSpan[P] | None:
        """Open the span an ``agent:start`` names; ``None`` for a repeat of an opened one."""
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else ""
        if key in self._open or key in self._closed:
            return None
        record: AgentSpan[P] = AgentSpan(key, event)
        self._open[key] = record
        return record

    def end(self, event: Mapping[str, Any]) -> AgentSpan[P] | None:
        """Close the open span an ``agent:end`` names; the record its start made, or ``None``."""
        span_id = event.get("spanId")
        key = span_id if isinstance(span_id, str) else ""
        record = self._open.get(key)
        if record is not None:
            del self._open[key]  # compiled, `del` is a C call; `pop` is a method call
            record.open = False
            self._closed[key] = None
        return record

    def get(self, span_id: object) -> AgentSpan[P] | None:
        """The open agent span ``span_id`` names."""
        return self._open.get(span_id if isinstance(span_id, str) else "")

    def closed(self, span_id: object) -> bool:
        """Whether an ``agent:end`` already closed the span ``span_id`` names."""
        return (span_id if isinstance(span_id, str) else "") in self._closed
