"""Every attribute, span-event and metric name the package emits, in one place.

Dashboards, alert rules, collector configs and tests read names from here, so nothing can query a
name the exporter does not write. ``gen_ai.*``, ``error.type`` and ``code.*`` names follow the
OpenTelemetry semantic conventions release :data:`SEMCONV_VERSION` and, for what the GenAI
conventions added since (``invoke_workflow``, the agent-level metrics), their own repository at
:data:`GENAI_CONVENTIONS_COMMIT` (the GenAI part is flagged "development" upstream, so the
mapping may change in a minor release of this package);
``openinference.*`` names follow the OpenInference conventions Phoenix and Arize read. The
mapping itself is documented in ``docs/otel-mapping.md``.
"""

from __future__ import annotations

from typing import Final

from rulvar_otel._version import __version__

# Attribute (and metric) names are declared ``NAME: Final = "..."``; every other constant here (a
# value, a version, a table) carries an explicit type, ``Final[...]``, so tools that list the
# names we emit by reading this module (tests/test_collector_config.py) see only names.

# --- every span -------------------------------------------------------------------------------
RUN_ID: Final = "rulvar.run_id"
ENTRY_SEQ: Final = "rulvar.entry_seq"  # the opening event's telemetry seq, never a journal ref
SCOPE: Final = "rulvar.scope"
REPLAYED: Final = "rulvar.replayed"
STATUS: Final = "rulvar.status"
PARENT_INFERRED: Final = "rulvar.parent.inferred"
PARENT_SPAN_ID: Final = "rulvar.parent_span_id"
END_INFERRED: Final = "rulvar.span.end_inferred"
# A span still open when its run suspended: ended there, UNSET (the run is waiting, not failing).
SUSPENDED: Final = "rulvar.suspended"

# --- agent and invocation spans ---------------------------------------------------------------
AGENT_TYPE: Final = "rulvar.agent_type"
AGENT_ROLE: Final = "rulvar.agent.role"  # the Rulvar role (loop, extract, ...)
MODEL_REF: Final = "rulvar.model_ref"  # the masked ``adapterId:model`` ref, whole
# An agent span with invocation children carries its totals under these names, so summing
# gen_ai.usage.* over a trace counts every token once (docs/otel-mapping.md#token-usage-on-one-level).
RULVAR_USAGE_INPUT_TOKENS: Final = "rulvar.usage.input_tokens"
RULVAR_USAGE_OUTPUT_TOKENS: Final = "rulvar.usage.output_tokens"
RULVAR_USAGE_CACHE_READ_INPUT_TOKENS: Final = "rulvar.usage.cache_read.input_tokens"
RULVAR_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "rulvar.usage.cache_creation.input_tokens"
RULVAR_USAGE_REASONING_OUTPUT_TOKENS: Final = "rulvar.usage.reasoning.output_tokens"
INVOCATION: Final = "rulvar.invocation"
COST_USD: Final = "rulvar.cost_usd"
RETRY_COUNT: Final = "rulvar.retry_count"
RETRIES: Final = "rulvar.retries"
EXPLORATION_PREFIX: Final = "rulvar.exploration."
EXPLORATION_FIELDS: Final = (
    ("toolCallsUsed", "rulvar.exploration.tool_calls_used"),
    ("distinctSignatures", "rulvar.exploration.distinct_signatures"),
    ("repeatedCalls", "rulvar.exploration.repeated_calls"),
    ("duplicateResultCalls", "rulvar.exploration.duplicate_result_calls"),
    ("deniedRepeats", "rulvar.exploration.denied_repeats"),
)

# --- tool spans -------------------------------------------------------------------------------
TOOL_NAME: Final = "rulvar.tool_name"
TOOL_CALL_ID: Final = "rulvar.tool.call_id"
TOOL_GUARD: Final = "rulvar.tool.guard"

# --- run span terminal facts ------------------------------------------------------------------
RUN_COMPLETION: Final = "rulvar.run.completion"
RUN_CHILD_STATUS_COUNTS: Final = "rulvar.run.childStatusCounts"
RUN_DEGRADED_REASONS: Final = "rulvar.run.degradedReasons"
RUN_SALVAGED_PARTIAL: Final = "rulvar.run.salvagedPartialChildren"
RUN_SALVAGED_TERMINAL_OUTPUT: Final = "rulvar.run.salvagedTerminalOutputChildren"
RUN_ACCEPTANCE_CHILDREN: Final = "rulvar.run.acceptanceChildren"
RUN_TOTAL_USD: Final = "rulvar.run.total_usd"
RUN_AGENTS_SPAWNED: Final = "rulvar.run.agents_spawned"
RUN_SETTLED: Final = "rulvar.run.settled"
RUN_SETTLED_REASON: Final = "rulvar.run.settled_reason"
# run:end field -> attribute, JSON-encoded compactly
RUN_JSON_FACTS: Final = (
    ("childStatusCounts", RUN_CHILD_STATUS_COUNTS),
    ("degradedReasons", RUN_DEGRADED_REASONS),
    ("salvagedPartialChildren", RUN_SALVAGED_PARTIAL),
    ("salvagedTerminalOutputChildren", RUN_SALVAGED_TERMINAL_OUTPUT),
    ("acceptanceChildren", RUN_ACCEPTANCE_CHILDREN),
)

# --- span events ------------------------------------------------------------------------------
EVENT_FIELD_PREFIX: Final = "rulvar.event."
DETERMINISM_CATEGORY: Final = "rulvar.determinism.category"
DETERMINISM_PROVENANCE: Final = "rulvar.determinism.provenance"
# code.filepath / code.lineno are the names the reference exports (deprecated by the convention);
# code.file.path / code.line.number are their current convention names, set beside them.
CODE_FILEPATH: Final = "code.filepath"
CODE_LINENO: Final = "code.lineno"
CODE_FILE_PATH: Final = "code.file.path"
CODE_LINE_NUMBER: Final = "code.line.number"

# --- OpenTelemetry GenAI semantic conventions -------------------------------------------------
# The schema followed: the last semantic-conventions release that still carries the GenAI
# conventions (they have since moved to their own repository, which publishes no schema yet).
SEMCONV_VERSION: Final[str] = "1.41.0"
SCHEMA_URL: Final[str] = "https://opentelemetry.io/schemas/" + SEMCONV_VERSION
# The GenAI conventions' own repository, pinned at the commit whose names, units and advisory
# buckets this module and the metric registry follow (invoke_workflow, the agent-level metrics).
GENAI_CONVENTIONS_REPOSITORY: Final[str] = "open-telemetry/semantic-conventions-genai"
GENAI_CONVENTIONS_COMMIT: Final[str] = "e57c543b4889619eb2a05702471937db5119165d"

GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_WORKFLOW_NAME: Final = "gen_ai.workflow.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
# The convention is renaming cache_creation to cache_write; we emit the name current releases of
# the convention define and will follow the rename when it stabilises.
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
# gen_ai.operation.name values
GEN_AI_OPERATION_INVOKE_AGENT: Final[str] = "invoke_agent"
GEN_AI_OPERATION_CHAT: Final[str] = "chat"
GEN_AI_OPERATION_EXECUTE_TOOL: Final[str] = "execute_tool"
GEN_AI_OPERATION_INVOKE_WORKFLOW: Final[str] = "invoke_workflow"
# Adapter id (lower-cased) -> the convention's well-known gen_ai.provider.name value. An adapter id
# that is not listed is exported as it is (masked). The well-known values map to themselves.
GEN_AI_PROVIDER_NAMES: Final[dict[str, str]] = {
    **{
        value: value
        for value in (
            "anthropic",
            "aws.bedrock",
            "azure.ai.inference",
            "azure.ai.openai",
            "cohere",
            "deepseek",
            "gcp.gemini",
            "gcp.gen_ai",
            "gcp.vertex_ai",
            "groq",
            "ibm.watsonx.ai",
            "mistral_ai",
            "openai",
            "perplexity",
            "x_ai",
        )
    },
    "bedrock": "aws.bedrock",
    "aws-bedrock": "aws.bedrock",
    "amazon-bedrock": "aws.bedrock",
    "azure": "azure.ai.openai",
    "azure-openai": "azure.ai.openai",
    "azure-ai-inference": "azure.ai.inference",
    "gemini": "gcp.gemini",
    "google": "gcp.gemini",
    "google-ai": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "vertexai": "gcp.vertex_ai",
    "vertex-ai": "gcp.vertex_ai",
    "google-vertex": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "mistralai": "mistral_ai",
    "xai": "x_ai",
    "x-ai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
    "ibm-watsonx": "ibm.watsonx.ai",
}
# error.type when a failed span has no code (the convention's fallback value).
ERROR_TYPE: Final = "error.type"
ERROR_TYPE_OTHER: Final[str] = "_OTHER"

# --- OpenInference (Phoenix, Arize) -----------------------------------------------------------
# On by default; ``conventions=()`` on to_otel/export_events/create_mapper switches them off.
CONVENTION_OPENINFERENCE: Final[str] = "openinference"
CONVENTIONS: Final[frozenset[str]] = frozenset({CONVENTION_OPENINFERENCE})
DEFAULT_CONVENTIONS: Final[frozenset[str]] = frozenset({CONVENTION_OPENINFERENCE})
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OPENINFERENCE_CHAIN: Final[str] = "CHAIN"  # run, phase and child-workflow spans
OPENINFERENCE_AGENT: Final[str] = "AGENT"
OPENINFERENCE_LLM: Final[str] = "LLM"  # invocation spans
OPENINFERENCE_TOOL: Final[str] = "TOOL"
# A resource attribute (set on the TracerProvider, not by the mapper): the Phoenix project.
OPENINFERENCE_PROJECT_NAME: Final = "openinference.project.name"

# --- resource ---------------------------------------------------------------------------------
DEFAULT_SERVICE_NAME: Final = "rulvar"
INSTRUMENTATION_SCOPE: Final = "rulvar_otel"
INSTRUMENTATION_VERSION: Final[str] = __version__

# --- metrics ----------------------------------------------------------------------------------
# Instrument names and the metric-only attribute keys. Definitions (kind, unit, buckets, the
# attribute set and the fold that records each) live in rulvar_otel.otel.metrics.registry; the
# Prometheus series names are derived there.
METRIC_RUNS_SETTLED: Final = "rulvar.runs.settled"
METRIC_RUN_DURATION: Final = "rulvar.run.duration"
METRIC_RUN_COST: Final = "rulvar.run.cost"
METRIC_AGENT_INVOCATIONS: Final = "rulvar.agent.invocations"
METRIC_AGENT_DURATION: Final = "rulvar.agent.duration"
METRIC_AGENT_ERRORS: Final = "rulvar.agent.errors"
METRIC_TOOL_CALLS: Final = "rulvar.tool.calls"
METRIC_TOOL_DURATION: Final = "rulvar.tool.duration"
METRIC_QUOTA_DENIALS: Final = "rulvar.quota.denials"
METRIC_EXPOSURE_WAITS: Final = "rulvar.budget.exposure_waits"
METRIC_SPAWNS_ADMITTED: Final = "rulvar.spawns.admitted"
METRIC_SPAWNS_REJECTED: Final = "rulvar.spawns.rejected"
METRIC_DETERMINISM_WARNINGS: Final = "rulvar.determinism.warnings"
METRIC_SPEND: Final = "rulvar.spend"
METRIC_LEDGER_OPS: Final = "rulvar.ledger.ops"
METRIC_LEDGER_OPS_PER_SPAWN: Final = "rulvar.ledger.ops_per_spawn"
METRIC_WAKE_RENDER_SIZE: Final = "rulvar.orchestrator.wake.render_size"
METRIC_ESCALATIONS: Final = "rulvar.escalations"
METRIC_ORCHESTRATOR_SHARE: Final = "rulvar.orchestrator.share"
METRIC_ABANDONED_COST: Final = "rulvar.plan.abandoned.cost"
METRIC_RECLAIMED_COST: Final = "rulvar.plan.reclaimed.cost"
METRIC_NET_LOST_COST: Final = "rulvar.plan.net_lost.cost"
METRIC_INVOCATION_TOKEN_USAGE: Final = "rulvar.invocation.token.usage"
METRIC_INVOCATION_DURATION: Final = "rulvar.invocation.duration"
# Per provider request, by the GenAI conventions: recorded where the engine calls the provider.
GEN_AI_CLIENT_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
GEN_AI_CLIENT_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
# Agent-level metrics of the GenAI conventions, folded from the stream like the rulvar.* ones.
GEN_AI_INVOKE_AGENT_DURATION: Final = "gen_ai.invoke_agent.duration"
GEN_AI_EXECUTE_TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
GEN_AI_INVOKE_WORKFLOW_DURATION: Final = "gen_ai.invoke_workflow.duration"
GEN_AI_INVOKE_AGENT_INFERENCE_CALLS: Final = "gen_ai.invoke_agent.inference_calls"
GEN_AI_INVOKE_AGENT_TOOL_CALLS: Final = "gen_ai.invoke_agent.tool_calls"

# Metric-only attribute keys (span attributes above are reused where the fact is the same).
WORKFLOW: Final = "rulvar.workflow"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
TOOL_DECIDED_BY: Final = "rulvar.tool.decided_by"
WILL_RETRY: Final = "rulvar.will_retry"
WILL_WAIT: Final = "rulvar.will_wait"
EXPOSURE_SCOPE: Final = "rulvar.exposure.scope"
ERROR_CLASS: Final = "rulvar.error.class"
QUOTA_DIMENSION: Final = "rulvar.quota.dimension"
SPAWN_VERDICT: Final = "rulvar.spawn.verdict"
SPAWN_CODE: Final = "rulvar.spawn.code"
ESCALATION_KIND: Final = "rulvar.escalation.kind"
LEDGER_OP: Final = "rulvar.ledger.op"
SHARE_SOURCE: Final = "rulvar.orchestrator.share_source"
# The one series past an instrument's label-set limit, as the OTel SDK names it (both pipelines).
METRIC_OVERFLOW: Final = "otel.metric.overflow"
# Distinct attribute sets kept per instrument before the overflow series: the SDK's default.
DEFAULT_METRIC_CARDINALITY_LIMIT: Final[int] = 2000

# Attributes whose value differs on every span (an encoder gains nothing by remembering them).
UNIQUE_VALUE_KEYS: Final[frozenset[str]] = frozenset(
    {ENTRY_SEQ, PARENT_SPAN_ID, TOOL_CALL_ID, GEN_AI_TOOL_CALL_ID}
)
