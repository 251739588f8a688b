"""Runs whose whole body is one orchestration: :func:`orchestrate` and its workflow.

Kept apart from the orchestration package so that package never needs the engine or the
workflow context (the engine's run imports it): dependencies stay one way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rulvar_otel.engine._orchestrate import OrchestrateOptions
from rulvar_otel.engine.workflow import Workflow, workflow

if TYPE_CHECKING:
    from rulvar_otel.engine.context import Context
    from rulvar_otel.engine.engine import Engine, EngineRunHandle

__all__ = ["ORCHESTRATE_WORKFLOW", "orchestrate", "orchestration_workflow"]

ORCHESTRATE_WORKFLOW = "rulvar-orchestrate"


def orchestration_workflow(options: OrchestrateOptions | None = None) -> Workflow:
    """The workflow :func:`orchestrate` runs (pass the same one to ``engine.resume``)."""

    @workflow(ORCHESTRATE_WORKFLOW)
    async def _orchestrate(ctx: Context, args: Any) -> Any:
        goal = args.get("goal") if isinstance(args, dict) else None
        return await ctx.orchestrate(str(goal or ""), options)

    return _orchestrate


def orchestrate(
    engine: Engine,
    goal: str,
    options: OrchestrateOptions | None = None,
    *,
    run_id: str | None = None,
    budget_usd: float | None = None,
) -> EngineRunHandle:
    """Start a run whose body is one orchestration of ``goal``; returns its handle at once."""
    return engine.run(orchestration_workflow(options), {"goal": goal}, run_id=run_id, budget_usd=budget_usd)
