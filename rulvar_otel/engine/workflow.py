"""Workflows: a named ``async def body(ctx, args)``, and the ``@workflow(name)`` decorator.

They are defined beside the :class:`~rulvar_otel.engine.context.Context` their body receives (a
workflow's type names the context, and ``ctx.workflow`` runs a workflow), and importable from here.
"""

from rulvar_otel.engine.context import Workflow, WorkflowFn, check_workflow, workflow

__all__ = ["Workflow", "WorkflowFn", "check_workflow", "workflow"]
