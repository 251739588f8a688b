"""The folds of the GenAI conventions' agent-level metrics (``gen_ai.invoke_agent.*``,
``gen_ai.execute_tool.duration``, ``gen_ai.invoke_workflow.duration``): pure functions of the
shared :class:`~rulvar_otel.otel.metrics._folds.FoldState`, read by the registry like every fold.
"""

from __future__ import annotations

from typing import Any, Final

from rulvar_otel.core.wire import WireEvent
from rulvar_otel.core.wire import as_number as _num
from rulvar_otel.otel.metrics._folds import (
    UNKNOWN,
    FoldState,
    Observation,
    _mapping,
    _str,
    _workflow,
    agent_seconds,
    fold_run_duration,
)

__all__ = [
    "fold_execute_tool_duration",
    "fold_invoke_agent_duration",
    "fold_invoke_agent_inference_calls",
    "fold_invoke_agent_tool_calls",
    "fold_invoke_workflow_duration",
]


_OK_STATUSES: Final = frozenset({"ok", "skipped"})


def _error_type(event: WireEvent, status_key: str, code: Any) -> str | None:
    """``error.type`` of a closer: None when it succeeded, its code else (``_OTHER`` without one)."""
    if event.get(status_key) in _OK_STATUSES:
        return None
    return _str(code, "_OTHER")


def _agent_name(event: WireEvent) -> str | None:
    agent_type = event.get("agentType")
    return agent_type if isinstance(agent_type, str) and agent_type else None  # as the span's


def _build_invoke_agent_attrs(state: FoldState, event: WireEvent) -> tuple[str, str, str | None, str, str]:
    span = state.agents.get(event.get("spanId"))
    model, provider = (
        state.model(span.model) if span is not None and not span.replayed else (UNKNOWN, UNKNOWN)
    )
    return (state.workflow, "invoke_agent", _agent_name(event), model, provider)


def fold_invoke_agent_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    seconds = agent_seconds(state, event)
    if seconds is None:
        return ()
    error = _error_type(event, "status", _mapping(event.get("error")).get("code"))
    workflow, operation, name, model, provider = state.shared(event, _build_invoke_agent_attrs)
    return ((seconds, (workflow, operation, name, model, provider, error)),)


def _agent_counts(state: FoldState, event: WireEvent) -> list[int] | None:
    span = state.agents.get(event.get("spanId"))
    if span is None or span.replayed:
        return None  # a resumed agent's earlier calls were counted (or replayed) elsewhere
    span_id = event.get("spanId")
    counts = state.agent_calls.get(span_id) if isinstance(span_id, str) else None
    return counts if counts is not None else [0, 0]


def fold_invoke_agent_inference_calls(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    counts = _agent_counts(state, event)
    if counts is None:
        return ()
    return ((counts[0], state.shared(event, _build_invoke_agent_attrs)),)


def fold_invoke_agent_tool_calls(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    counts = _agent_counts(state, event)
    if counts is None:
        return ()
    return ((counts[1], state.shared(event, _build_invoke_agent_attrs)),)


def fold_execute_tool_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    millis = _num(event.get("durationMs"))
    if millis is None or millis < 0:
        return ()
    error = _error_type(event, "outcome", event.get("errorCode"))
    return ((millis / 1000.0, (state.workflow, "execute_tool", _str(event.get("toolName")), error)),)


def fold_invoke_workflow_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    seconds = fold_run_duration(state, event)
    if not seconds:
        return ()
    envelope_error = _mapping(_mapping(event.get("envelope")).get("error"))
    failed = event.get("settled") is False or event.get("status") not in _OK_STATUSES
    error = _str(envelope_error.get("code"), "_OTHER") if failed else None
    workflow = _workflow(state, event)
    return ((seconds[0][0], (workflow, "invoke_workflow", workflow, error)),)
