"""The one registry of metric definitions.

Every metric the package records is defined here once: its OpenTelemetry name, instrument kind,
unit, description, its (low-cardinality) attribute set, explicit histogram buckets, the Prometheus
series it becomes, and the fold that records it. The recorder, the Grafana dashboards, the
Prometheus alert rules and the collector configs are all generated from, or tested against, this
table, so a dashboard can never query a series the recorder does not write. Two smaller tables name
the series written elsewhere that the dashboards read too: :data:`ENGINE_METRICS` (the bundled
engine's per-request ``gen_ai.client.*`` metrics) and :data:`SPAN_METRICS` (the collector's).

This module is the declarative table (plus the small types it needs); the folds it names, and the
per-run :class:`FoldState` they read, live in :mod:`rulvar_otel.otel.metrics._folds`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics._folds import (
    ADVANCE_TYPES,
    AttrValue,
    Fold,
    FoldState,
    Observation,
    fold_abandoned,
    fold_agent_duration,
    fold_agent_errors,
    fold_agent_invocations,
    fold_determinism,
    fold_escalations,
    fold_exposure_waits,
    fold_invocation_duration,
    fold_invocation_tokens,
    fold_ledger_ops,
    fold_ledger_ops_per_spawn,
    fold_net_lost,
    fold_orchestrator_share,
    fold_quota_denials,
    fold_reclaimed,
    fold_render_size,
    fold_run_cost,
    fold_run_duration,
    fold_runs_settled,
    fold_spawns_admitted,
    fold_spawns_rejected,
    fold_spend,
    fold_tool_calls,
    fold_tool_duration,
)
from rulvar_otel.otel.metrics._folds_genai import (
    fold_execute_tool_duration,
    fold_invoke_agent_duration,
    fold_invoke_agent_inference_calls,
    fold_invoke_agent_tool_calls,
    fold_invoke_workflow_duration,
)

__all__ = [
    "ADVANCE_TYPES",
    "ENGINE_METRICS",
    "FINISH",
    "REGISTRY",
    "SPAN_METRICS",
    "SPAN_METRICS_DIMENSIONS",
    "SPAN_METRICS_DURATION_UNIT",
    "SPAN_METRICS_NAMESPACE",
    "CollectorSeries",
    "AttrValue",
    "EngineSeries",
    "Fold",
    "FoldState",
    "InstrumentKind",
    "MetricDefinition",
    "Observation",
    "definition",
    "prometheus_label",
]

# Pseudo event type of the per-run folds: they run once, when the run's outcome is known.
FINISH: Final = "(finish)"


class InstrumentKind(StrEnum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    UP_DOWN_COUNTER = "updowncounter"


# Units are UCUM-style, as OpenTelemetry expects. Annotations in braces ({run}) carry no
# Prometheus suffix; "s" becomes "_seconds"; "usd" (no UCUM currency exists) stays "_usd".
_PROMETHEUS_UNIT: Final[dict[str, str]] = {"s": "seconds", "usd": "usd", "1": "", "By": "bytes"}


def _prometheus_unit(unit: str) -> str:
    if unit.startswith("{") and unit.endswith("}"):
        return ""
    return _PROMETHEUS_UNIT.get(unit, unit)


def prometheus_label(attribute: str) -> str:
    """The Prometheus label an OTel attribute key becomes (every non-alphanumeric run is ``_``)."""
    out = []
    previous_underscore = False
    for char in attribute:
        if char.isascii() and char.isalnum():
            out.append(char)
            previous_underscore = False
        elif not previous_underscore:
            out.append("_")
            previous_underscore = True
    return "".join(out)


def _prometheus_name(name: str, unit: str, kind: InstrumentKind) -> str:
    base = name.replace(".", "_")
    suffix = _prometheus_unit(unit)
    if suffix and not base.endswith("_" + suffix):
        base = f"{base}_{suffix}"
    if kind is InstrumentKind.COUNTER:
        base = f"{base}_total"
    return base


class _PrometheusNaming:
    """The Prometheus series an OTel metric becomes, for every kind of definition below."""

    __slots__ = ()
    name: str
    unit: str
    kind: InstrumentKind
    attributes: tuple[str, ...]

    @property
    def prometheus_name(self) -> str:
        """The series name without the histogram suffixes (``_total`` included for counters)."""
        return _prometheus_name(self.name, self.unit, self.kind)

    @property
    def prometheus_series(self) -> tuple[str, ...]:
        """Every series the OTel Prometheus exporter writes for this metric."""
        base = self.prometheus_name
        if self.kind is InstrumentKind.HISTOGRAM:
            return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
        return (base,)

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        return tuple(prometheus_label(a) for a in self.attributes)


@dataclass(frozen=True, slots=True)
class MetricDefinition(_PrometheusNaming):
    """One metric: everything a recorder, a dashboard or an alert needs to agree on."""

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    attributes: tuple[str, ...]
    on: tuple[str, ...]  # event types the fold reads, or (FINISH,)
    fold: Fold = field(repr=False, compare=False)
    buckets: tuple[float, ...] | None = None
    source: str = ""  # which fold over which input (prose, rendered into the docs)


# --- buckets ----------------------------------------------------------------------------------

# The GenAI semantic conventions' advisory token buckets: an invocation's tokens are a few requests'.
TOKEN_BUCKETS: Final = (
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
    4194304.0, 16777216.0, 67108864.0,
)  # fmt: skip
# An invocation (model requests plus the tool calls between them) and an agent dispatch run
# seconds to an hour; a run minutes to hours.
AGENT_DURATION_BUCKETS: Final = (
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)  # fmt: skip
RUN_DURATION_BUCKETS: Final = (
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0,
)  # fmt: skip
TOOL_DURATION_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip
USD_BUCKETS: Final = (
    0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
)  # fmt: skip
SHARE_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
RENDER_SIZE_BUCKETS: Final = (
    256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0, 131072.0,
)  # fmt: skip
OPS_PER_SPAWN_BUCKETS: Final = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0)

# The GenAI conventions' advisory buckets for the request duration (seconds); the token buckets
# are TOKEN_BUCKETS above.
REQUEST_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
# The GenAI conventions' advisory buckets for the agent-level metrics (semconv.GENAI_CONVENTIONS_COMMIT):
# an agent invocation's duration, a tool execution's (the client-operation buckets), and the calls
# one agent invocation makes. The workflow duration takes the agent's: a workflow is agents.
INVOKE_AGENT_DURATION_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6,
)  # fmt: skip
CALLS_PER_INVOCATION_BUCKETS: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)

_C, _H, _U = InstrumentKind.COUNTER, InstrumentKind.HISTOGRAM, InstrumentKind.UP_DOWN_COUNTER
_PHASE_ATTRS: Final = (sc.WORKFLOW, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_PROVIDER_NAME, sc.AGENT_ROLE)
_TOOL_ATTRS: Final = (sc.WORKFLOW, sc.TOOL_NAME, sc.STATUS, sc.TOOL_GUARD, sc.TOOL_DECIDED_BY)
_AGENT_ATTRS: Final = (sc.WORKFLOW, sc.AGENT_TYPE, sc.STATUS, sc.GEN_AI_REQUEST_MODEL)
# The convention's attributes, after rulvar.workflow (every dashboard filters by workflow).
_GENAI_AGENT_ATTRS: Final = (
    sc.WORKFLOW,
    sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_AGENT_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_PROVIDER_NAME,
)  # fmt: skip

REGISTRY: Final[tuple[MetricDefinition, ...]] = (
    # --- the five documented metrics ---
    MetricDefinition(
        sc.METRIC_LEDGER_OPS_PER_SPAWN, _H, "1",
        "Authored ledger:op count divided by spawn:admitted count, one observation per run with "
        "at least one admitted spawn.",
        (sc.WORKFLOW,), (FINISH,), fold_ledger_ops_per_spawn, OPS_PER_SPAWN_BUCKETS,
        "per run: live `ledger:op` count / live `spawn:admitted` count (absent when no spawn)",
    ),
    MetricDefinition(
        sc.METRIC_LEDGER_OPS, _C, "{op}", "Shared-ledger writes by operation.",
        (sc.WORKFLOW, sc.LEDGER_OP), ("ledger:op",), fold_ledger_ops, None,
        "one per live `ledger:op`",
    ),
    MetricDefinition(
        sc.METRIC_WAKE_RENDER_SIZE, _H, "{char}",
        "Rendered wake digest size of each orchestrator wake turn.",
        (sc.WORKFLOW,), ("orchestrator:woke",), fold_render_size, RENDER_SIZE_BUCKETS,
        "`orchestrator:woke` `renderSize`",
    ),
    MetricDefinition(
        sc.METRIC_ESCALATIONS, _C, "{escalation}",
        "Escalations raised by workers; divide by spawns admitted per agent type for the rate.",
        (sc.WORKFLOW, sc.AGENT_TYPE, sc.ESCALATION_KIND), ("escalation:raised",), fold_escalations, None,
        "one per live `escalation:raised`; agent type from the `spawn:admitted` of the same "
        "`logicalTaskId` (`unknown` when none was seen)",
    ),
    MetricDefinition(
        sc.METRIC_ORCHESTRATOR_SHARE, _H, "1",
        "Orchestrator share of run spend, one observation per orchestrated run.",
        (sc.WORKFLOW, sc.SHARE_SOURCE), (FINISH,), fold_orchestrator_share, SHARE_BUCKETS,
        "per orchestrated run: CostReport `orchestrator.share` when the outcome is known "
        "(`share_source=cost_report`), else the last `orchestrator:budget` `orchestratorShare` "
        "(`share_source=orchestrator_budget`)",
    ),
    MetricDefinition(
        sc.METRIC_ABANDONED_COST, _C, "usd",
        "Spend under subtrees the orchestrator abandoned (in grossUsd, not in totalUsd).",
        (sc.WORKFLOW,), (FINISH,), fold_abandoned, None,
        "per run: CostReport `abandoned.usd`; without a report, envelope `grossUsd - totalUsd`",
    ),
    MetricDefinition(
        sc.METRIC_RECLAIMED_COST, _C, "usd", "Spend recovered by linking re-added tasks to donors.",
        (sc.WORKFLOW,), (FINISH,), fold_reclaimed, None,
        "per run: sum of live `node:linked` `reclaimedUsd`",
    ),
    MetricDefinition(
        sc.METRIC_NET_LOST_COST, _U, "usd", "Abandoned minus reclaimed spend: the net cost of churn.",
        (sc.WORKFLOW,), (FINISH,), fold_net_lost, None,
        "per run: abandoned minus reclaimed (may be negative)",
    ),
    # --- invocations (one agent phase activation: several provider requests and the tool calls
    # between them; the per-request gen_ai.client.* metrics are the engine's, where it calls) ---
    MetricDefinition(
        sc.METRIC_INVOCATION_TOKEN_USAGE, _H, "{token}",
        "Tokens used per invocation (one agent phase activation, all of its provider requests).",
        (*_PHASE_ATTRS, sc.GEN_AI_TOKEN_TYPE), ("agent:phase:end",), fold_invocation_tokens,
        TOKEN_BUCKETS, "live `agent:phase:end` `usage.inputTokens` / `usage.outputTokens`",
    ),
    MetricDefinition(
        sc.METRIC_INVOCATION_DURATION, _H, "s",
        "Wall time of each invocation, its provider requests and tool calls included.",
        (*_PHASE_ATTRS, sc.ERROR_TYPE), ("agent:phase:end",), fold_invocation_duration,
        AGENT_DURATION_BUCKETS, "live `agent:phase:end` `durationMs` (replayed pairs carry 0)",
    ),
    # --- operational ---
    MetricDefinition(
        sc.METRIC_RUNS_SETTLED, _C, "{run}",
        "Run terminals by status, completion claim and settled flag (settled=false: nothing "
        "durable records the terminal).",
        (sc.WORKFLOW, sc.STATUS, sc.RUN_COMPLETION, sc.RUN_SETTLED, sc.RUN_SETTLED_REASON),
        ("run:end", FINISH), fold_runs_settled, None,
        "one per `run:end` (completion `none` when no claim was made; settled reason `superseded`, "
        "`other` or `none`); a stream without one counts the known outcome at finish",
    ),
    MetricDefinition(
        sc.METRIC_RUN_DURATION, _H, "s", "Wall time of a run segment, run:start to run:end.",
        (sc.WORKFLOW, sc.STATUS), ("run:end",), fold_run_duration, RUN_DURATION_BUCKETS,
        "`run:end` `ts` minus the latest `run:start` `ts`",
    ),
    MetricDefinition(
        sc.METRIC_RUN_COST, _H, "usd", "Settled net cost (totalUsd) of each run terminal.",
        (sc.WORKFLOW, sc.STATUS), ("run:end",), fold_run_cost, USD_BUCKETS,
        "`run:end` `totalUsd`",
    ),
    MetricDefinition(
        sc.METRIC_SPEND, _C, "usd", "Spend by model and agent role, as it happens.",
        _PHASE_ATTRS, ("agent:phase:end",), fold_spend, None, "live `agent:phase:end` `costUsd`",
    ),
    MetricDefinition(
        sc.METRIC_AGENT_INVOCATIONS, _C, "{invocation}", "Agent dispatches settled, by status.",
        _AGENT_ATTRS, ("agent:end",), fold_agent_invocations, None,
        "one per live `agent:end`; model from the span's `agent:start`",
    ),
    MetricDefinition(
        sc.METRIC_AGENT_DURATION, _H, "s", "Wall time of an agent dispatch, start to end.",
        _AGENT_ATTRS, ("agent:end",), fold_agent_duration, AGENT_DURATION_BUCKETS,
        "live `agent:end` `ts` minus its live `agent:start` `ts`",
    ),
    MetricDefinition(
        sc.METRIC_AGENT_ERRORS, _C, "{error}",
        "Live attempt failures; error.class separates quota throttling and quota exhaustion "
        "from real failures.",
        (sc.WORKFLOW, sc.AGENT_TYPE, sc.ERROR_TYPE, sc.WILL_RETRY, sc.ERROR_CLASS), ("agent:error",),
        fold_agent_errors, None,
        "one per `agent:error`; class `quota_exhausted` for the engine's exhaustion error (code "
        "`quota_exhausted`, or the limiter's error without retry), `quota_throttle` for the legacy "
        "limiter twin that will retry, else `error` (also after a denial)",
    ),
    MetricDefinition(
        sc.METRIC_TOOL_CALLS, _C, "{call}", "Tool calls settled, by tool, outcome, guard and decider.",
        _TOOL_ATTRS, ("tool:end",), fold_tool_calls, None, "one per live `tool:end`",
    ),
    MetricDefinition(
        sc.METRIC_TOOL_DURATION, _H, "s", "Tool execution time.",
        _TOOL_ATTRS, ("tool:end",), fold_tool_duration, TOOL_DURATION_BUCKETS,
        "live `tool:end` `durationMs`",
    ),
    MetricDefinition(
        sc.METRIC_QUOTA_DENIALS, _C, "{denial}",
        "Pre-wire quota denials: healthy throttling that will retry, never a failure.",
        (sc.WORKFLOW, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_PROVIDER_NAME, sc.QUOTA_DIMENSION),
        ("quota:denied",),
        fold_quota_denials, None,
        "one per `quota:denied`; dimension (tokens/requests) classified from the limiter's reason",
    ),
    MetricDefinition(
        sc.METRIC_EXPOSURE_WAITS, _C, "{wait}",
        "In-flight exposure cap refusals; will_wait=false is the drained arm (a real terminal).",
        (sc.WORKFLOW, sc.EXPOSURE_SCOPE, sc.WILL_WAIT, sc.GEN_AI_REQUEST_MODEL),
        ("budget:exposure-wait",),
        fold_exposure_waits, None, "one per `budget:exposure-wait`",
    ),
    MetricDefinition(
        sc.METRIC_SPAWNS_ADMITTED, _C, "{spawn}", "Spawns admission admitted, by verdict.",
        (sc.WORKFLOW, sc.SPAWN_VERDICT, sc.AGENT_TYPE), ("spawn:admitted",), fold_spawns_admitted, None,
        "one per live `spawn:admitted`",
    ),
    MetricDefinition(
        sc.METRIC_SPAWNS_REJECTED, _C, "{spawn}", "Spawns admission rejected, by rejection code.",
        (sc.WORKFLOW, sc.SPAWN_CODE, sc.AGENT_TYPE), ("spawn:rejected",), fold_spawns_rejected, None,
        "one per live `spawn:rejected`",
    ),
    # --- the GenAI conventions' agent-level metrics (their names, units and advisory buckets) ---
    MetricDefinition(
        sc.GEN_AI_INVOKE_AGENT_DURATION, _H, "s", "Duration of GenAI agent invocations.",
        (*_GENAI_AGENT_ATTRS, sc.ERROR_TYPE), ("agent:end",), fold_invoke_agent_duration,
        INVOKE_AGENT_DURATION_BUCKETS,
        "live `agent:end` `ts` minus its live `agent:start` `ts` (`error.type` when not ok)",
    ),
    MetricDefinition(
        sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS, _H, "{inference_call}",
        "Number of inference calls made during one agent invocation.",
        _GENAI_AGENT_ATTRS, ("agent:end",), fold_invoke_agent_inference_calls,
        CALLS_PER_INVOCATION_BUCKETS,
        "per live `agent:end`: the live `agent:phase:end` events of that agent",
    ),
    MetricDefinition(
        sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS, _H, "{tool_call}",
        "Number of tool calls made during one agent invocation.",
        _GENAI_AGENT_ATTRS, ("agent:end",), fold_invoke_agent_tool_calls, CALLS_PER_INVOCATION_BUCKETS,
        "per live `agent:end`: the live `tool:end` events of that agent",
    ),
    MetricDefinition(
        sc.GEN_AI_EXECUTE_TOOL_DURATION, _H, "s", "Duration of GenAI tool executions.",
        (sc.WORKFLOW, sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_TOOL_NAME, sc.ERROR_TYPE), ("tool:end",),
        fold_execute_tool_duration, REQUEST_DURATION_BUCKETS,
        "live `tool:end` `durationMs` (`error.type`: its `errorCode` when not ok)",
    ),
    MetricDefinition(
        sc.GEN_AI_INVOKE_WORKFLOW_DURATION, _H, "s", "Duration of GenAI workflow invocations.",
        (sc.WORKFLOW, sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_WORKFLOW_NAME, sc.ERROR_TYPE), ("run:end",),
        fold_invoke_workflow_duration, INVOKE_AGENT_DURATION_BUCKETS,
        "`run:end` `ts` minus the latest `run:start` `ts` (`error.type` when not ok or unsettled)",
    ),
    MetricDefinition(
        sc.METRIC_DETERMINISM_WARNINGS, _C, "{warning}",
        "Bare clock/random calls observed in a run (provenance workflow is the one to fix).",
        (sc.WORKFLOW, sc.DETERMINISM_CATEGORY, sc.DETERMINISM_PROVENANCE), ("determinism:warning",),
        fold_determinism, None, "one per `determinism:warning` (re-fires on replay by design)",
    ),
)  # fmt: skip


def definition(name: str) -> MetricDefinition:
    """The registry entry named ``name`` (KeyError when there is none)."""
    for entry in REGISTRY:
        if entry.name == name:
            return entry
    raise KeyError(name)


# --- series the bundled engine records per provider request -----------------------------------
#
# The GenAI conventions define gen_ai.client.* per provider request, which only the caller making
# the request sees: rulvar_otel.engine.provider_metrics records them when an engine is given a
# meter (`rulvar-otel demo` gives it the export's). No fold writes them and they carry no
# rulvar.workflow. The dashboards read them from here; a test checks these definitions against
# what an engine records.

_REQUEST_ATTRS: Final = (sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_REQUEST_MODEL)


@dataclass(frozen=True, slots=True)
class EngineSeries(_PrometheusNaming):
    """A metric the engine records where it calls a provider (never the recorder's folds)."""

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    attributes: tuple[str, ...]
    buckets: tuple[float, ...]
    source: str  # when one is recorded (prose, rendered into the docs)


ENGINE_METRICS: Final[tuple[EngineSeries, ...]] = (
    EngineSeries(
        sc.GEN_AI_CLIENT_TOKEN_USAGE, InstrumentKind.HISTOGRAM, "{token}",
        "Number of input and output tokens used.",
        (*_REQUEST_ATTRS, sc.GEN_AI_TOKEN_TYPE), TOKEN_BUCKETS,
        "engine: two per answered provider request (token type `input`, `output`)",
    ),
    EngineSeries(
        sc.GEN_AI_CLIENT_OPERATION_DURATION, InstrumentKind.HISTOGRAM, "s", "GenAI operation duration.",
        (*_REQUEST_ATTRS, sc.ERROR_TYPE), REQUEST_DURATION_BUCKETS,
        "engine: one per provider request, answered or failed (`error.type` on a failure)",
    ),
)  # fmt: skip


# --- series the collector derives from our spans ----------------------------------------------
#
# The spanmetrics connector of collector_config/otelcol-agent.yaml turns every span into a call
# count and a duration histogram; the collector's Prometheus exporter names them the way the
# recorder's are named (dots to underscores, the unit, `_total`). The dashboards read them from
# here; a test checks these constants against the shipped connector config.

SPAN_METRICS_NAMESPACE: Final = "traces.span.metrics"
SPAN_METRICS_DURATION_UNIT: Final = "ms"
SPAN_METRICS_DIMENSIONS: Final = (
    sc.AGENT_TYPE, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_OPERATION_NAME, sc.TOOL_NAME, sc.STATUS,
    sc.RUN_SETTLED,
)  # fmt: skip
# The labels the connector sets on every series, before the configured dimensions.
_SPAN_METRICS_BASE_LABELS: Final = ("service_name", "span_name", "span_kind", "status_code")
_PROMETHEUS_UNIT_NAMES: Final = {"ms": "milliseconds", "s": "seconds"}


@dataclass(frozen=True, slots=True)
class CollectorSeries:
    """A metric the collector writes from our spans (never the recorder)."""

    name: str  # the OTel name the connector gives it
    kind: InstrumentKind
    unit: str
    description: str

    @property
    def prometheus_name(self) -> str:
        base = self.name.replace(".", "_")
        suffix = _PROMETHEUS_UNIT_NAMES.get(self.unit, "")
        if suffix:
            base = f"{base}_{suffix}"
        return f"{base}_total" if self.kind is InstrumentKind.COUNTER else base

    @property
    def prometheus_series(self) -> tuple[str, ...]:
        base = self.prometheus_name
        if self.kind is InstrumentKind.HISTOGRAM:
            return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
        return (base,)

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        return (*_SPAN_METRICS_BASE_LABELS, *(prometheus_label(a) for a in SPAN_METRICS_DIMENSIONS))


SPAN_METRICS: Final[tuple[CollectorSeries, ...]] = (
    CollectorSeries(
        f"{SPAN_METRICS_NAMESPACE}.calls", InstrumentKind.COUNTER, "",
        "Spans ended, by service, span name, kind, status code and the configured dimensions.",
    ),
    CollectorSeries(
        f"{SPAN_METRICS_NAMESPACE}.duration", InstrumentKind.HISTOGRAM, SPAN_METRICS_DURATION_UNIT,
        "Span durations (end minus start), by the same labels.",
    ),
)  # fmt: skip
