"""The bundled core engine: run Python agent workflows live, journal them, replay them.

Its event stream has the reference engine's shapes, so every consumer (``to_otel``, the progress
view, metrics) treats a bundled run exactly like a Rulvar run. No OpenTelemetry, network client or
terminal library is imported here; the OpenAI-compatible adapter imports ``httpx`` lazily.
"""

from rulvar_otel.engine.cost import AgentRecord, CostReport, Slice, fold_cost_report
from rulvar_otel.engine.journal import (
    InMemoryJournalStore,
    JournalEntry,
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
from rulvar_otel.engine.model import (
    AdapterError,
    AgentFailedError,
    BudgetExhaustedError,
    DeadlineExceededError,
    DeterminismError,
    ExposureDrainedError,
    ModelAdapter,
    ModelRequest,
    ModelTurn,
    QuotaExhaustedError,
    ReplayMissError,
    SchemaValidationError,
    TokenCounter,
    ToolCallRequest,
    WorkflowError,
)
from rulvar_otel.engine.pricing import Price, PricingTable
from rulvar_otel.engine.runtime import (
    Context,
    Engine,
    EngineRunHandle,
    ResolutionOutcome,
    RetryPolicy,
    Workflow,
    create_engine,
    workflow,
)
from rulvar_otel.engine.scripted import Fail, Hang, Reply, ScriptedAdapter, ScriptTurn, ToolCalls
from rulvar_otel.engine.tools import Decision, Permissions, Rule, Tool, tool

__all__ = [
    "AdapterError",
    "AgentFailedError",
    "AgentRecord",
    "BudgetExhaustedError",
    "DeadlineExceededError",
    "DeterminismError",
    "Context",
    "CostReport",
    "Decision",
    "Engine",
    "EngineRunHandle",
    "ExposureDrainedError",
    "ConcurrencyGate",
    "ExposureGate",
    "Fail",
    "Hang",
    "InMemoryJournalStore",
    "JournalEntry",
    "JournalStore",
    "JsonlJournalStore",
    "ModelAdapter",
    "ModelRequest",
    "ModelTurn",
    "OpenAICompatAdapter",
    "Permissions",
    "Price",
    "PricingTable",
    "QuotaDecision",
    "QuotaExhaustedError",
    "QuotaLimiter",
    "Reply",
    "ReplayMissError",
    "ResolutionOutcome",
    "RetryPolicy",
    "Rule",
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
    "tool",
    "workflow",
]


def __getattr__(name: str) -> object:
    # The OpenAI-compatible adapter module is light, but keep it out of `import rulvar_otel.core`.
    if name == "OpenAICompatAdapter":
        from rulvar_otel.engine.adapters.openai_compat import OpenAICompatAdapter

        return OpenAICompatAdapter
    raise AttributeError(name)
