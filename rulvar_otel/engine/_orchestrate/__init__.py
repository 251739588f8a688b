"""Dynamic orchestration: an orchestrator agent proposes, the engine owns the plan and decides.

``ctx.orchestrate(goal, options)`` inside a workflow, or :func:`orchestrate` for a run of its own.
The orchestrator runs one agent (role ``orchestrate``) per wake turn; its typed tools
(``spawn_agent``, ``wait_for_events``, ``await_all``, ``plan_view``, ``plan_revise``,
``ledger_append``, ``ledger_read``, ``finish``) ask the engine to decide, and every decision is
journaled before its effect, so a dry-run replay re-emits the orchestration with zero model calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rulvar_otel.engine._orchestrate.admission import Limits
from rulvar_otel.engine._orchestrate.options import OrchestrateOptions
from rulvar_otel.engine.workflow import Workflow, workflow
from rulvar_otel.errors import ConfigError

if TYPE_CHECKING:
    from rulvar_otel.engine.context import Context
    from rulvar_otel.engine.engine import Engine, EngineRunHandle
    from rulvar_otel.engine.run import RunSegment
    from rulvar_otel.engine.scope import Scope

__all__ = ["ORCHESTRATE_WORKFLOW", "Limits", "OrchestrateOptions", "orchestrate", "orchestration_workflow"]

ORCHESTRATE_WORKFLOW = "rulvar-orchestrate"


async def run_orchestration(
    run: RunSegment, scope: Scope, goal: str, options: OrchestrateOptions | None
) -> dict[str, Any]:
    """Run (or replay) one orchestration in ``scope``; returns its result mapping."""
    from rulvar_otel.engine._orchestrate.orchestrator import Orchestration

    if not isinstance(goal, str) or not goal:
        raise ConfigError("orchestrate needs a non-empty goal")
    key, _ = scope.next_key("orch")
    orchestration = Orchestration(run, scope, goal, options or OrchestrateOptions(), key)
    return await orchestration.execute()


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
