"""The one registry of metric definitions.

Every metric the package records is defined here once: its OpenTelemetry name, instrument kind,
unit, description, its (low-cardinality) attribute set, explicit histogram buckets, the Prometheus
series it becomes, and the fold that records it. The recorder, the Grafana dashboards, the
Prometheus alert rules and the collector configs are all generated from, or tested against, this
table, so a dashboard can never query a series the recorder does not write.

A fold is a pure function of the per-run :class:`FoldState` and one wire-form event (or, for the
per-run metrics, of the state at the end of the run) returning ``(value, attribute values)``
observations, the values in the order of the definition's attributes (so no fold can add an
undeclared key). Folds never see replayed events (``replayed: true`` restates history a live
export already counted) and never put ``run_id`` or another unbounded value into an attribute;
the recorder masks every string attribute value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeAlias, TypeVar

from rulvar_otel.core.events import parse_ts_ns
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._attributes import provider_name

__all__ = [
    "ADVANCE_TYPES",
    "FINISH",
    "REGISTRY",
    "SPAN_METRICS",
    "SPAN_METRICS_DIMENSIONS",
    "SPAN_METRICS_DURATION_UNIT",
    "SPAN_METRICS_NAMESPACE",
    "CollectorSeries",
    "AttrValue",
    "Fold",
    "FoldState",
    "InstrumentKind",
    "MetricDefinition",
    "Observation",
    "definition",
    "prometheus_label",
]

_T = TypeVar("_T")

AttrValue: TypeAlias = str | bool
# (value, attribute values in the order of the definition's `attributes`; None: absent)
Observation: TypeAlias = tuple[float, tuple[AttrValue | None, ...]]
Fold: TypeAlias = Callable[["FoldState", Mapping[str, Any]], Sequence[Observation]]

# Pseudo event type of the per-run folds: they run once, when the run's outcome is known.
FINISH: Final = "(finish)"

UNKNOWN: Final = "unknown"
NONE: Final = "none"


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


@dataclass(frozen=True, slots=True)
class MetricDefinition:
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

    @property
    def prometheus_name(self) -> str:
        """The series name without the histogram suffixes (``_total`` included for counters)."""
        base = self.name.replace(".", "_")
        suffix = _prometheus_unit(self.unit)
        if suffix and not base.endswith("_" + suffix):
            base = f"{base}_{suffix}"
        if self.kind is InstrumentKind.COUNTER:
            base = f"{base}_total"
        return base

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


# --- per-run fold state -----------------------------------------------------------------------


# The helpers below run for every observed event: exact-type checks first (parsed JSON only
# holds plain str, int, float and dict), the general isinstance checks second.


def _str(value: Any, default: str = UNKNOWN) -> str:
    if value.__class__ is str:
        return value or default  # type: ignore[no-any-return]
    return value if isinstance(value, str) and value != "" else default


def _num(value: Any) -> float | None:
    cls = value.__class__
    if (
        cls is not float
        and cls is not int
        and (isinstance(value, bool) or not isinstance(value, int | float))
    ):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


_ts = parse_ts_ns  # the one reading of an envelope ts: exact integer nanoseconds, UTC if naive


def _seconds(start: int, end: int) -> float:
    # Integer nanoseconds subtract exactly; only the difference becomes a float.
    return max((end - start) / 1e9, 0.0)


def _mapping(value: Any) -> Mapping[str, Any]:
    if value.__class__ is dict:
        return value  # type: ignore[no-any-return]
    return value if isinstance(value, Mapping) else {}


@dataclass(slots=True)
class _AgentSpan:
    start_ts: int | None
    model: str
    agent_type: str


# Event types FoldState.advance reads; together with the definitions' `on` types they are all the
# recorder ever looks at (anything else is skipped after one dict lookup).
ADVANCE_TYPES: Final = frozenset(
    {
        "run:start", "run:end", "agent:start", "agent:end", "spawn:admitted", "ledger:op",
        "node:linked", "orchestrator:budget", "orchestrator:woke",
    }
)  # fmt: skip


@dataclass(slots=True)
class FoldState:
    """What one run's folds remember between events. Bounded by the run's own size."""

    masker: SecretMasker
    workflow: str = UNKNOWN
    run_start_ts: int | None = None
    agents: dict[str, _AgentSpan] = field(default_factory=dict)
    task_agent_type: dict[str, str] = field(default_factory=dict)  # logicalTaskId -> agentType
    ledger_ops: int = 0
    spawns_admitted: int = 0
    reclaimed_usd: float = 0.0
    orchestrated: bool = False
    last_budget_share: float | None = None
    last_run_end: Mapping[str, Any] | None = None
    terminal_recorded: bool = False
    outcome: RunOutcome | BaseException | None = None
    # The attribute tuple several definitions read from one event, built once for that event
    # (holding the event also keeps its id from being reused by the next one). `advance` drops
    # it: the same object observed again later must be read against the state of that time.
    _shared_event: object = None
    _shared_build: object = None
    _shared_value: Any = None

    def shared(self, event: Mapping[str, Any], build: Callable[[FoldState, Mapping[str, Any]], _T]) -> _T:
        """``build(self, event)``, computed once per event however many folds ask for it."""
        if self._shared_event is not event or self._shared_build is not build:
            self._shared_value = build(self, event)
            self._shared_event = event
            self._shared_build = build
        return self._shared_value  # type: ignore[no-any-return]

    def model(self, value: Any) -> tuple[str, str]:
        """``(gen_ai.request.model, gen_ai.provider.name)`` of a model ref, as the spans carry them.

        The model id after the adapter prefix and the adapter's well-known provider name (else the
        adapter id), both split from the *masked* ref so a credential cannot leak through the
        split; a ref without a prefix is the model itself, provider ``unknown``.
        """
        ref = self.masker.clean(_str(value))
        adapter, colon, model_id = ref.partition(":")
        if not colon:
            return ref, UNKNOWN
        return model_id or UNKNOWN, provider_name(adapter) if adapter else UNKNOWN

    def advance(self, event: Mapping[str, Any]) -> None:
        """Move the state past one live event (called after that event's folds ran)."""
        self._shared_event = None
        kind = event.get("type")
        span = event.get("spanId")
        span_key = span if isinstance(span, str) else ""
        if kind == "run:start":
            self.workflow = _str(event.get("workflow"), self.workflow)
            self.run_start_ts = _ts(event.get("ts"))
        elif kind == "agent:start":
            self.agents[span_key] = _AgentSpan(
                _ts(event.get("ts")), self.model(event.get("model"))[0], _agent_type(event)
            )
            if event.get("role") == "orchestrate":
                self.orchestrated = True
        elif kind == "agent:end":
            self.agents.pop(span_key, None)
        elif kind == "spawn:admitted":
            self.spawns_admitted += 1
            task = event.get("logicalTaskId")
            if isinstance(task, str):
                self.task_agent_type[task] = _agent_type(event)
        elif kind == "ledger:op":
            self.ledger_ops += 1
        elif kind == "node:linked":
            self.reclaimed_usd += max(_num(event.get("reclaimedUsd")) or 0.0, 0.0)
        elif kind == "orchestrator:budget":
            self.orchestrated = True
            share = _num(event.get("orchestratorShare"))
            if share is not None:
                self.last_budget_share = share
        elif kind == "orchestrator:woke":
            self.orchestrated = True
        elif kind == "run:end":
            self.last_run_end = event
            self.terminal_recorded = True
            envelope = _mapping(event.get("envelope"))
            self.workflow = _str(envelope.get("workflow"), self.workflow)

    # --- values the per-run folds share ---

    def cost_report(self) -> Mapping[str, Any]:
        if isinstance(self.outcome, RunOutcome):
            return _mapping(self.outcome.cost)
        return {}

    def abandoned_usd(self) -> float | None:
        """CostReport ``abandoned.usd``; without a report, the envelope's gross minus net."""
        report = self.cost_report()
        usd = _num(_mapping(report.get("abandoned")).get("usd"))
        if usd is not None:
            return max(usd, 0.0)
        envelope: Mapping[str, Any] = {}
        if isinstance(self.outcome, RunOutcome):
            envelope = _mapping(self.outcome.envelope)
        if not envelope and self.last_run_end is not None:
            envelope = _mapping(self.last_run_end.get("envelope"))
        gross, net = _num(envelope.get("grossUsd")), _num(envelope.get("totalUsd"))
        if gross is None or net is None:
            return None
        return max(gross - net, 0.0)


def _agent_type(event: Mapping[str, Any]) -> str:
    return _str(event.get("agentType"))


def _workflow(state: FoldState, event: Mapping[str, Any]) -> str:
    if event.get("type") == "run:end":
        return _str(_mapping(event.get("envelope")).get("workflow"), state.workflow)
    return state.workflow


# --- folds ------------------------------------------------------------------------------------
#
# Each observation's attribute values are a tuple in the order of the definition's `attributes`
# (None: the attribute is absent), so a fold cannot add an undeclared key and the recorder can
# use the tuple itself as the key of its per-attribute-set caches.


def _run_terminal(event: Mapping[str, Any]) -> tuple[str, str, bool]:
    status = _str(event.get("status"))
    completion = _str(event.get("completion"), NONE)
    return status, completion, event.get("settled") is not False


def _settled_reason(event: Mapping[str, Any], settled: bool) -> str:
    # Bounded: the one reason the catalog defines, "other" for any other text.
    reason = event.get("settledReason")
    if settled or not isinstance(reason, str) or not reason:
        return NONE
    return reason if reason == "superseded" else "other"


def _fold_runs_settled(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    if event.get("type") == "run:end":
        status, completion, settled = _run_terminal(event)
        workflow = _workflow(state, event)
        reason = _settled_reason(event, settled)
    else:
        # No run:end on the stream (a truncated stream): the known outcome settles the run.
        if state.terminal_recorded or not isinstance(state.outcome, RunOutcome):
            return ()
        status = _str(state.outcome.status)
        completion = _str(state.outcome.completion, NONE)
        settled, reason = True, NONE
        workflow = _str(_mapping(state.outcome.envelope).get("workflow"), state.workflow)
    return ((1, (workflow, status, completion, settled, reason)),)


def _fold_run_duration(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    end = _ts(event.get("ts"))
    if end is None or state.run_start_ts is None:
        return ()
    status, _, _ = _run_terminal(event)
    return ((_seconds(state.run_start_ts, end), (_workflow(state, event), status)),)


def _fold_run_cost(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    usd = _num(event.get("totalUsd"))
    if usd is None:
        usd = _num(_mapping(event.get("envelope")).get("totalUsd"))
    if usd is None or usd < 0:
        return ()
    status, _, _ = _run_terminal(event)
    return ((usd, (_workflow(state, event), status)),)


def _build_phase_attrs(state: FoldState, event: Mapping[str, Any]) -> tuple[str, str, str, str]:
    model, provider = state.model(event.get("model"))
    return state.workflow, model, provider, _str(event.get("role"))


def _phase_attrs(state: FoldState, event: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return state.shared(event, _build_phase_attrs)


def _fold_invocation_tokens(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    usage = _mapping(event.get("usage"))
    base = _phase_attrs(state, event)
    out: list[Observation] = []
    for token_type, key in (("input", "inputTokens"), ("output", "outputTokens")):
        tokens = _num(usage.get(key))
        if tokens is not None and tokens >= 0:
            out.append((tokens, (*base, token_type)))
    return out


def _fold_invocation_duration(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    millis = _num(event.get("durationMs"))
    if millis is None or millis < 0:
        return ()
    # The phase event names no error class; the convention's fallback value says so.
    error = None if event.get("outcome") in ("ok", None) else "_OTHER"
    return ((millis / 1000.0, (*_phase_attrs(state, event), error)),)


def _fold_spend(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    usd = _num(event.get("costUsd"))
    if usd is None or usd < 0:
        return ()
    return ((usd, _phase_attrs(state, event)),)


def _build_agent_end_attrs(state: FoldState, event: Mapping[str, Any]) -> tuple[str, str, str, str]:
    span = state.agents.get(_str(event.get("spanId"), ""))
    return (
        state.workflow,
        _agent_type(event),
        _str(event.get("status")),
        span.model if span is not None else UNKNOWN,
    )


def _agent_end_attrs(state: FoldState, event: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return state.shared(event, _build_agent_end_attrs)


def _fold_agent_invocations(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((1, _agent_end_attrs(state, event)),)


def _fold_agent_duration(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    span = state.agents.get(_str(event.get("spanId"), ""))
    end = _ts(event.get("ts"))
    if span is None or span.start_ts is None or end is None:
        return ()
    return ((_seconds(span.start_ts, end), _agent_end_attrs(state, event)),)


# The code of the error the engine raises when the quota limiter denied a call more times than
# its denial budget allows: the one agent:error that ends a run of quota denials.
QUOTA_EXHAUSTED_CODE: Final = "quota_exhausted"


def _error_class(state: FoldState, event: Mapping[str, Any]) -> str:
    """Classify an agent:error so throttling is never read as failure.

    ``quota_throttle``: the legacy twin of a healthy quota wait (the limiter's error that will
    retry). ``quota_exhausted``: the engine's exhaustion error, the terminal error that ends a
    run of quota denials (code ``quota_exhausted``, or the limiter's own error without a retry).
    ``error``: every other failure, also one that follows a denial on the same span: an
    ``invalid_request`` after a healthy wait is a real failure, not exhaustion.
    """
    error = _mapping(event.get("error"))
    from_limiter = _mapping(error.get("data")).get("source") == "quota-limiter"
    will_retry = event.get("willRetry") is True
    if from_limiter and will_retry:
        return "quota_throttle"
    if not will_retry and (from_limiter or error.get("code") == QUOTA_EXHAUSTED_CODE):
        return "quota_exhausted"
    return "error"


def _fold_agent_errors(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    error = _mapping(event.get("error"))
    return (
        (
            1,
            (
                state.workflow,
                _agent_type(event),
                _str(error.get("code")),
                event.get("willRetry") is True,
                _error_class(state, event),
            ),
        ),
    )


def _build_tool_attrs(state: FoldState, event: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    return (
        state.workflow,
        _str(event.get("toolName")),
        _str(event.get("outcome")),
        _str(event.get("guard"), NONE),
        _str(event.get("decidedBy"), NONE),
    )


def _fold_tool_calls(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((1, state.shared(event, _build_tool_attrs)),)


def _fold_tool_duration(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    millis = _num(event.get("durationMs"))
    if millis is None or millis < 0:
        return ()
    return ((millis / 1000.0, state.shared(event, _build_tool_attrs)),)


def _quota_dimension(reason: Any) -> str:
    # The limiter names the window it denied ('tokensPerMinute 1800000 exhausted'); only its
    # dimension is bounded enough to be a label.
    text = reason.lower() if isinstance(reason, str) else ""
    if "token" in text:
        return "tokens"
    if "request" in text:
        return "requests"
    return UNKNOWN


def _fold_quota_denials(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    model, provider = state.model(event.get("model"))
    return ((1, (state.workflow, model, provider, _quota_dimension(event.get("reason")))),)


def _fold_exposure_waits(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return (
        (
            1,
            (
                state.workflow,
                _str(event.get("scope")),
                event.get("willWait") is True,
                state.model(event.get("model"))[0],
            ),
        ),
    )


def _fold_spawns_admitted(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((1, (state.workflow, _str(event.get("verdict")), _agent_type(event))),)


def _fold_spawns_rejected(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((1, (state.workflow, _str(event.get("code")), _agent_type(event))),)


def _fold_determinism(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((1, (state.workflow, _str(event.get("category")), _str(event.get("provenance")))),)


def _fold_ledger_ops(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((1, (state.workflow, _str(event.get("op")))),)


def _fold_ledger_ops_per_spawn(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    if state.spawns_admitted == 0:
        return ()  # undefined without a spawn; a zero would read as "spawns wrote nothing"
    return ((state.ledger_ops / state.spawns_admitted, (state.workflow,)),)


def _fold_render_size(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    size = _num(event.get("renderSize"))
    if size is None or size < 0:
        return ()
    return ((size, (state.workflow,)),)


def _fold_escalations(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    task = event.get("logicalTaskId")
    agent_type = state.task_agent_type.get(task, UNKNOWN) if isinstance(task, str) else UNKNOWN
    return ((1, (state.workflow, agent_type, _str(event.get("kind")))),)


def _fold_orchestrator_share(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    orchestrator = _mapping(state.cost_report().get("orchestrator"))
    share = _num(orchestrator.get("share"))
    spent = _num(orchestrator.get("spentUsd")) or 0.0
    if share is not None and (state.orchestrated or spent > 0):
        return ((share, (state.workflow, "cost_report")),)
    if state.orchestrated and state.last_budget_share is not None:
        return ((state.last_budget_share, (state.workflow, "orchestrator_budget")),)
    return ()


def _fold_abandoned(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    usd = state.abandoned_usd()
    return () if usd is None else ((usd, (state.workflow,)),)


def _fold_reclaimed(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    return ((state.reclaimed_usd, (state.workflow,)),)


def _fold_net_lost(state: FoldState, event: Mapping[str, Any]) -> Sequence[Observation]:
    usd = state.abandoned_usd()
    return () if usd is None else ((usd - state.reclaimed_usd, (state.workflow,)),)


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

_C, _H, _U = InstrumentKind.COUNTER, InstrumentKind.HISTOGRAM, InstrumentKind.UP_DOWN_COUNTER
_PHASE_ATTRS: Final = (sc.WORKFLOW, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_PROVIDER_NAME, sc.AGENT_ROLE)
_TOOL_ATTRS: Final = (sc.WORKFLOW, sc.TOOL_NAME, sc.STATUS, sc.TOOL_GUARD, sc.TOOL_DECIDED_BY)
_AGENT_ATTRS: Final = (sc.WORKFLOW, sc.AGENT_TYPE, sc.STATUS, sc.GEN_AI_REQUEST_MODEL)

REGISTRY: Final[tuple[MetricDefinition, ...]] = (
    # --- the five documented metrics ---
    MetricDefinition(
        sc.METRIC_LEDGER_OPS_PER_SPAWN, _H, "1",
        "Authored ledger:op count divided by spawn:admitted count, one observation per run with "
        "at least one admitted spawn.",
        (sc.WORKFLOW,), (FINISH,), _fold_ledger_ops_per_spawn, OPS_PER_SPAWN_BUCKETS,
        "per run: live `ledger:op` count / live `spawn:admitted` count (absent when no spawn)",
    ),
    MetricDefinition(
        sc.METRIC_LEDGER_OPS, _C, "{op}", "Shared-ledger writes by operation.",
        (sc.WORKFLOW, sc.LEDGER_OP), ("ledger:op",), _fold_ledger_ops, None,
        "one per live `ledger:op`",
    ),
    MetricDefinition(
        sc.METRIC_WAKE_RENDER_SIZE, _H, "{char}",
        "Rendered wake digest size of each orchestrator wake turn.",
        (sc.WORKFLOW,), ("orchestrator:woke",), _fold_render_size, RENDER_SIZE_BUCKETS,
        "`orchestrator:woke` `renderSize`",
    ),
    MetricDefinition(
        sc.METRIC_ESCALATIONS, _C, "{escalation}",
        "Escalations raised by workers; divide by spawns admitted per agent type for the rate.",
        (sc.WORKFLOW, sc.AGENT_TYPE, sc.ESCALATION_KIND), ("escalation:raised",), _fold_escalations, None,
        "one per live `escalation:raised`; agent type from the `spawn:admitted` of the same "
        "`logicalTaskId` (`unknown` when none was seen)",
    ),
    MetricDefinition(
        sc.METRIC_ORCHESTRATOR_SHARE, _H, "1",
        "Orchestrator share of run spend, one observation per orchestrated run.",
        (sc.WORKFLOW, sc.SHARE_SOURCE), (FINISH,), _fold_orchestrator_share, SHARE_BUCKETS,
        "per orchestrated run: CostReport `orchestrator.share` when the outcome is known "
        "(`share_source=cost_report`), else the last `orchestrator:budget` `orchestratorShare` "
        "(`share_source=orchestrator_budget`)",
    ),
    MetricDefinition(
        sc.METRIC_ABANDONED_COST, _C, "usd",
        "Spend under subtrees the orchestrator abandoned (in grossUsd, not in totalUsd).",
        (sc.WORKFLOW,), (FINISH,), _fold_abandoned, None,
        "per run: CostReport `abandoned.usd`; without a report, envelope `grossUsd - totalUsd`",
    ),
    MetricDefinition(
        sc.METRIC_RECLAIMED_COST, _C, "usd", "Spend recovered by linking re-added tasks to donors.",
        (sc.WORKFLOW,), (FINISH,), _fold_reclaimed, None,
        "per run: sum of live `node:linked` `reclaimedUsd`",
    ),
    MetricDefinition(
        sc.METRIC_NET_LOST_COST, _U, "usd", "Abandoned minus reclaimed spend: the net cost of churn.",
        (sc.WORKFLOW,), (FINISH,), _fold_net_lost, None,
        "per run: abandoned minus reclaimed (may be negative)",
    ),
    # --- invocations (one agent phase activation: several provider requests and the tool calls
    # between them; the per-request gen_ai.client.* metrics are the engine's, where it calls) ---
    MetricDefinition(
        sc.METRIC_INVOCATION_TOKEN_USAGE, _H, "{token}",
        "Tokens used per invocation (one agent phase activation, all of its provider requests).",
        (*_PHASE_ATTRS, sc.GEN_AI_TOKEN_TYPE), ("agent:phase:end",), _fold_invocation_tokens,
        TOKEN_BUCKETS, "live `agent:phase:end` `usage.inputTokens` / `usage.outputTokens`",
    ),
    MetricDefinition(
        sc.METRIC_INVOCATION_DURATION, _H, "s",
        "Wall time of each invocation, its provider requests and tool calls included.",
        (*_PHASE_ATTRS, sc.ERROR_TYPE), ("agent:phase:end",), _fold_invocation_duration,
        AGENT_DURATION_BUCKETS, "live `agent:phase:end` `durationMs` (replayed pairs carry 0)",
    ),
    # --- operational ---
    MetricDefinition(
        sc.METRIC_RUNS_SETTLED, _C, "{run}",
        "Run terminals by status, completion claim and settled flag (settled=false: nothing "
        "durable records the terminal).",
        (sc.WORKFLOW, sc.STATUS, sc.RUN_COMPLETION, sc.RUN_SETTLED, sc.RUN_SETTLED_REASON),
        ("run:end", FINISH), _fold_runs_settled, None,
        "one per `run:end` (completion `none` when no claim was made; settled reason `superseded`, "
        "`other` or `none`); a stream without one counts the known outcome at finish",
    ),
    MetricDefinition(
        sc.METRIC_RUN_DURATION, _H, "s", "Wall time of a run segment, run:start to run:end.",
        (sc.WORKFLOW, sc.STATUS), ("run:end",), _fold_run_duration, RUN_DURATION_BUCKETS,
        "`run:end` `ts` minus the latest `run:start` `ts`",
    ),
    MetricDefinition(
        sc.METRIC_RUN_COST, _H, "usd", "Settled net cost (totalUsd) of each run terminal.",
        (sc.WORKFLOW, sc.STATUS), ("run:end",), _fold_run_cost, USD_BUCKETS,
        "`run:end` `totalUsd`",
    ),
    MetricDefinition(
        sc.METRIC_SPEND, _C, "usd", "Spend by model and agent role, as it happens.",
        _PHASE_ATTRS, ("agent:phase:end",), _fold_spend, None, "live `agent:phase:end` `costUsd`",
    ),
    MetricDefinition(
        sc.METRIC_AGENT_INVOCATIONS, _C, "{invocation}", "Agent dispatches settled, by status.",
        _AGENT_ATTRS, ("agent:end",), _fold_agent_invocations, None,
        "one per live `agent:end`; model from the span's `agent:start`",
    ),
    MetricDefinition(
        sc.METRIC_AGENT_DURATION, _H, "s", "Wall time of an agent dispatch, start to end.",
        _AGENT_ATTRS, ("agent:end",), _fold_agent_duration, AGENT_DURATION_BUCKETS,
        "live `agent:end` `ts` minus its live `agent:start` `ts`",
    ),
    MetricDefinition(
        sc.METRIC_AGENT_ERRORS, _C, "{error}",
        "Live attempt failures; error.class separates quota throttling and quota exhaustion "
        "from real failures.",
        (sc.WORKFLOW, sc.AGENT_TYPE, sc.ERROR_TYPE, sc.WILL_RETRY, sc.ERROR_CLASS), ("agent:error",),
        _fold_agent_errors, None,
        "one per `agent:error`; class `quota_exhausted` for the engine's exhaustion error (code "
        "`quota_exhausted`, or the limiter's error without retry), `quota_throttle` for the legacy "
        "limiter twin that will retry, else `error` (also after a denial)",
    ),
    MetricDefinition(
        sc.METRIC_TOOL_CALLS, _C, "{call}", "Tool calls settled, by tool, outcome, guard and decider.",
        _TOOL_ATTRS, ("tool:end",), _fold_tool_calls, None, "one per live `tool:end`",
    ),
    MetricDefinition(
        sc.METRIC_TOOL_DURATION, _H, "s", "Tool execution time.",
        _TOOL_ATTRS, ("tool:end",), _fold_tool_duration, TOOL_DURATION_BUCKETS,
        "live `tool:end` `durationMs`",
    ),
    MetricDefinition(
        sc.METRIC_QUOTA_DENIALS, _C, "{denial}",
        "Pre-wire quota denials: healthy throttling that will retry, never a failure.",
        (sc.WORKFLOW, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_PROVIDER_NAME, sc.QUOTA_DIMENSION),
        ("quota:denied",),
        _fold_quota_denials, None,
        "one per `quota:denied`; dimension (tokens/requests) classified from the limiter's reason",
    ),
    MetricDefinition(
        sc.METRIC_EXPOSURE_WAITS, _C, "{wait}",
        "In-flight exposure cap refusals; will_wait=false is the drained arm (a real terminal).",
        (sc.WORKFLOW, sc.EXPOSURE_SCOPE, sc.WILL_WAIT, sc.GEN_AI_REQUEST_MODEL),
        ("budget:exposure-wait",),
        _fold_exposure_waits, None, "one per `budget:exposure-wait`",
    ),
    MetricDefinition(
        sc.METRIC_SPAWNS_ADMITTED, _C, "{spawn}", "Spawns admission admitted, by verdict.",
        (sc.WORKFLOW, sc.SPAWN_VERDICT, sc.AGENT_TYPE), ("spawn:admitted",), _fold_spawns_admitted, None,
        "one per live `spawn:admitted`",
    ),
    MetricDefinition(
        sc.METRIC_SPAWNS_REJECTED, _C, "{spawn}", "Spawns admission rejected, by rejection code.",
        (sc.WORKFLOW, sc.SPAWN_CODE, sc.AGENT_TYPE), ("spawn:rejected",), _fold_spawns_rejected, None,
        "one per live `spawn:rejected`",
    ),
    MetricDefinition(
        sc.METRIC_DETERMINISM_WARNINGS, _C, "{warning}",
        "Bare clock/random calls observed in a run (provenance workflow is the one to fix).",
        (sc.WORKFLOW, sc.DETERMINISM_CATEGORY, sc.DETERMINISM_PROVENANCE), ("determinism:warning",),
        _fold_determinism, None, "one per `determinism:warning` (re-fires on replay by design)",
    ),
)  # fmt: skip


def definition(name: str) -> MetricDefinition:
    """The registry entry named ``name`` (KeyError when there is none)."""
    for entry in REGISTRY:
        if entry.name == name:
            return entry
    raise KeyError(name)


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
