"""Dynamic orchestration: an orchestrator agent proposes, the engine owns the plan and decides.

``ctx.orchestrate(goal, options)`` inside a workflow (``rulvar_otel.engine.orchestrate`` gives a run
of its own).
The orchestrator runs one agent (role ``orchestrate``) per wake turn; its typed tools
(``spawn_agent``, ``wait_for_events``, ``await_all``, ``plan_view``, ``plan_revise``,
``ledger_append``, ``ledger_read``, ``finish``) ask the engine to decide, and every decision is
journaled before its effect, so a dry-run replay re-emits the orchestration with zero model calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rulvar_otel.engine._orchestrate.admission import Limits
from rulvar_otel.engine._orchestrate.options import OrchestrateOptions
from rulvar_otel.errors import ConfigError

if TYPE_CHECKING:
    from rulvar_otel.engine.scope import Scope
    from rulvar_otel.engine.segment import SegmentState

__all__ = ["Limits", "OrchestrateOptions", "run_orchestration"]


async def run_orchestration(
    run: SegmentState, scope: Scope, goal: str, options: OrchestrateOptions | None
) -> dict[str, Any]:
    """Run (or replay) one orchestration in ``scope``; returns its result mapping."""
    from rulvar_otel.engine._orchestrate.orchestrator import Orchestration

    if not isinstance(goal, str) or not goal:
        raise ConfigError("orchestrate needs a non-empty goal")
    key, _ = scope.next_key("orch")
    orchestration = Orchestration(run, scope, goal, options or OrchestrateOptions(), key)
    return await orchestration.execute()
