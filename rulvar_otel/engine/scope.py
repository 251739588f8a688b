"""Where workflow code is running: the scope (positional keys, spans, phase) and the control signals.

Every ``ctx`` operation takes the next positional key of its kind in the current scope; that key
is how a re-executed workflow body finds the journaled fact of the same operation. The current
scope travels in a context variable, so concurrent branches each see their own.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from rulvar_otel.errors import WorkflowError

__all__ = [
    "CURRENT_SCOPE",
    "AgentAbortError",
    "ReplayedCancellation",
    "RunSuspended",
    "Scope",
]


@dataclass
class Scope:
    """One level of workflow code: the root body, a parallel branch, a child workflow, a phase."""

    # The segment this code runs in, compared by identity only (so ``ctx`` refuses a foreign run).
    run: object
    path: str
    span_id: str
    parent_span_id: str | None
    phase: str | None
    workflow: str
    counters: dict[str, int] = field(default_factory=dict[str, int])

    def next_key(self, kind: str) -> tuple[str, int]:
        """The journal key of this scope's next ``kind`` operation, and its ordinal."""
        ordinal = self.counters.get(kind, 0)
        self.counters[kind] = ordinal + 1
        return f"{self.path}|{kind}#{ordinal}", ordinal

    def nested_path(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    @property
    def in_child_workflow(self) -> bool:
        return self.path.startswith("wf:") or "/wf:" in self.path


CURRENT_SCOPE: ContextVar[Scope | None] = ContextVar("rulvar_scope", default=None)


class RunSuspended(BaseException):
    """Unwinds a workflow parked on an open suspension (not an Exception: never swallowed)."""


class ReplayedCancellation(BaseException):
    """A dry-run replayed an agent the original segment cancelled."""


class AgentAbortError(Exception):
    """Ends an agent with status ``error`` carrying ``cause`` (already announced on the stream)."""

    def __init__(self, cause: WorkflowError) -> None:
        super().__init__(str(cause))
        self.cause = cause
