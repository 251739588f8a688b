"""The bundled engine: run Python agent workflows live, journal them, resume and replay them.

Its event stream has the reference engine's shapes, so every consumer (``to_otel``, the progress
view, metrics) treats a bundled run exactly like a Rulvar run. Importing it loads no OpenTelemetry,
network client or terminal library: the OpenAI-compatible adapter imports ``httpx`` on its first
request, and the per-request ``gen_ai.client.*`` metrics load the semantic conventions only when
the engine is given a ``meter``.

Example::

    import asyncio
    from rulvar_otel.engine import InMemoryJournalStore, Reply, ScriptedAdapter, create_engine, workflow

    @workflow("triage")
    async def triage(ctx, args):
        async with ctx.phase("read"):
            return await ctx.agent(f"Summarise: {args['ticket']}", agent_type="reader")

    async def main() -> None:
        store = InMemoryJournalStore()
        engine = create_engine([ScriptedAdapter("demo", script=[Reply("disk full on db-2")])], journal=store)
        handle = engine.run(triage, {"ticket": "PAGE-1"}, run_id="run-1")
        outcome = await handle.result                      # RunOutcome(status="ok", value=...)
        replay = engine.resume("run-1", triage, dry_run=True)   # zero model calls
        assert (await replay.result).value == outcome.value

    asyncio.run(main())

``ctx.agent`` takes an :class:`AgentOptions` (shareable between dispatches) and/or its fields as
keywords. ``ctx.orchestrate(goal, OrchestrateOptions(...))`` (or :func:`orchestrate`) runs a dynamic
orchestration whose plan and decisions the engine owns and journals. Errors a workflow sees are
the :class:`~rulvar_otel.errors.WorkflowError` family.
"""

from rulvar_otel.engine._orchestrate import Limits, OrchestrateOptions
from rulvar_otel.engine.context import Context
from rulvar_otel.engine.cost import AgentRecord, CostReport, Slice, fold_cost_report
from rulvar_otel.engine.engine import Engine, EngineConfig, EngineRunHandle, RetryPolicy, create_engine
from rulvar_otel.engine.journal import (
    InMemoryJournalStore,
    JournalEntry,
    JournalKind,
    JournalStore,
    JsonlJournalStore,
)
from rulvar_otel.engine.limits import (
    ConcurrencyGate,
    ExposureGate,
    QuotaDecision,
    QuotaLimiter,
    ScriptedQuota,
    TokenWindowQuota,
)
from rulvar_otel.engine.model import ModelAdapter, ModelRequest, ModelTurn, TokenCounter, ToolCallRequest
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.engine.orchestration import orchestrate, orchestration_workflow
from rulvar_otel.engine.pricing import Price, PricingTable
from rulvar_otel.engine.scripted import Fail, Hang, Reply, ScriptedAdapter, ScriptTurn, ToolCalls
from rulvar_otel.engine.status import RunStatus
from rulvar_otel.engine.suspension import ResolutionOutcome
from rulvar_otel.engine.tools import Decision, Permissions, Rule, Tool, tool
from rulvar_otel.engine.workflow import Workflow, workflow
from rulvar_otel.errors import (
    AdapterError,
    AgentFailedError,
    BudgetExhaustedError,
    DeadlineExceededError,
    DeterminismError,
    ExposureDrainedError,
    JournalError,
    QuotaExhaustedError,
    ReplayMissError,
    SchemaValidationError,
    WorkflowError,
)

__all__ = [
    "AdapterError",
    "AgentFailedError",
    "AgentOptions",
    "AgentRecord",
    "BudgetExhaustedError",
    "ConcurrencyGate",
    "Context",
    "CostReport",
    "DeadlineExceededError",
    "Decision",
    "DeterminismError",
    "Engine",
    "EngineConfig",
    "EngineRunHandle",
    "ExposureDrainedError",
    "ExposureGate",
    "Fail",
    "Hang",
    "InMemoryJournalStore",
    "JournalEntry",
    "JournalError",
    "JournalKind",
    "JournalStore",
    "JsonlJournalStore",
    "Limits",
    "ModelAdapter",
    "ModelRequest",
    "ModelTurn",
    "OpenAICompatAdapter",
    "OrchestrateOptions",
    "Permissions",
    "Price",
    "PricingTable",
    "QuotaDecision",
    "QuotaExhaustedError",
    "QuotaLimiter",
    "ReplayMissError",
    "Reply",
    "ResolutionOutcome",
    "RetryPolicy",
    "Rule",
    "RunStatus",
    "SchemaValidationError",
    "ScriptTurn",
    "ScriptedAdapter",
    "ScriptedQuota",
    "Slice",
    "TokenCounter",
    "TokenWindowQuota",
    "Tool",
    "ToolCallRequest",
    "ToolCalls",
    "Workflow",
    "WorkflowError",
    "create_engine",
    "fold_cost_report",
    "orchestrate",
    "orchestration_workflow",
    "tool",
    "workflow",
]


def __getattr__(name: str) -> object:
    # The OpenAI-compatible adapter module is light, but keep it out of `import rulvar_otel.engine`.
    if name == "OpenAICompatAdapter":
        from rulvar_otel.engine.adapters.openai_compat import OpenAICompatAdapter

        return OpenAICompatAdapter
    raise AttributeError(name)
