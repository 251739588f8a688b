"""Workflows: a named ``async def body(ctx, args)``, and the ``@workflow(name)`` decorator."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rulvar_otel.errors import ConfigError

if TYPE_CHECKING:
    from rulvar_otel.engine.context import Context

__all__ = ["Workflow", "WorkflowFn", "check_workflow", "workflow"]

WorkflowFn = Callable[["Context", Any], Awaitable[Any]]


class Workflow:
    """A named workflow: an ``async def body(ctx, args)``."""

    def __init__(self, name: str, fn: WorkflowFn) -> None:
        if not name:
            raise ConfigError("a workflow needs a non-empty name")
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"workflow {name!r} must be an 'async def' function")
        self.name = name
        self.fn = fn

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"


def workflow(name: str) -> Callable[[WorkflowFn], Workflow]:
    """Register an ``async def body(ctx, args)`` as a workflow named ``name``."""

    def wrap(fn: WorkflowFn) -> Workflow:
        return Workflow(name, fn)

    return wrap


def check_workflow(wf: object) -> Workflow:
    """``wf`` itself when it is a :class:`Workflow`, else a ConfigError saying how to make one."""
    if not isinstance(wf, Workflow):
        raise ConfigError(
            f"expected a Workflow (decorate the body with @workflow(name)), got {type(wf).__name__}"
        )
    return wf
