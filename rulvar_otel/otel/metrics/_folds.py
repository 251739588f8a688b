"""The fold machinery behind the metric registry: the per-run state and the fold functions.

Owns :class:`FoldState` (what one run's folds remember between events), the fold functions the
registry's definitions name, and the attribute builders several folds share per event. The
definitions themselves (names, kinds, units, attributes, buckets, which fold records what) are the
declarative table in :mod:`rulvar_otel.otel.metrics.registry`, the one place they are read from.

A fold is a pure function of the per-run :class:`FoldState` and one wire-form event (or, for the
per-run metrics, of the state at the end of the run) returning ``(value, attribute values)``
observations, the values in the order of the definition's attributes (so no fold can add an
undeclared key). Folds never see replayed events (``replayed: true`` restates history a live
export already counted) and never put ``run_id`` or another unbounded value into an attribute;
the recorder masks every string attribute value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, TypeVar

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.core.wire import WireEvent
from rulvar_otel.core.wire import as_number as _num
from rulvar_otel.core.wire import ts_ns as _ts
from rulvar_otel.otel._attributes import provider_name
from rulvar_otel.otel._event_facts import EVENT_FACTS

__all__ = [
    "ADVANCE_TYPES",
    "PAIRED_TYPES",
    "NONE",
    "QUOTA_EXHAUSTED_CODE",
    "UNKNOWN",
    "AttrValue",
    "Fold",
    "FoldState",
    "Observation",
    "agent_seconds",
    "fold_abandoned",
    "fold_agent_duration",
    "fold_agent_errors",
    "fold_agent_invocations",
    "fold_determinism",
    "fold_escalations",
    "fold_exposure_waits",
    "fold_invocation_duration",
    "fold_invocation_tokens",
    "fold_ledger_ops",
    "fold_ledger_ops_per_spawn",
    "fold_net_lost",
    "fold_orchestrator_share",
    "fold_quota_denials",
    "fold_reclaimed",
    "fold_render_size",
    "fold_run_cost",
    "fold_run_duration",
    "fold_runs_settled",
    "fold_spawns_admitted",
    "fold_spawns_rejected",
    "fold_spend",
    "fold_tool_calls",
    "fold_tool_duration",
]

_T = TypeVar("_T")

AttrValue: TypeAlias = str | bool
# (value, attribute values in the order of the definition's `attributes`; None: absent)
Observation: TypeAlias = tuple[float, tuple[AttrValue | None, ...]]
Fold: TypeAlias = Callable[["FoldState", WireEvent], tuple[Observation, ...]]

UNKNOWN: Final = "unknown"
NONE: Final = "none"
OTHER: Final = "other"  # a value outside the catalog's enum


# --- per-run fold state -----------------------------------------------------------------------


# The helpers below run for every observed event: exact-type checks first (parsed JSON only
# holds plain str, int, float and dict), the general isinstance checks second.


def _str(value: Any, default: str = UNKNOWN) -> str:
    if type(value) is str:
        return value or default  # type: ignore[no-any-return]
    return value if isinstance(value, str) and value != "" else default


def _seconds(start: int, end: int) -> float:
    # Integer nanoseconds subtract exactly; only the difference becomes a float.
    return max((end - start) / 1e9, 0.0)


def _mapping(value: Any) -> dict[str, Any]:
    # A dict, so compiled code reads it without a method lookup; another mapping is copied.
    if type(value) is dict:
        return value  # type: ignore[no-any-return]
    return dict(value) if isinstance(value, Mapping) else {}


# Event types FoldState.advance reads; together with the definitions' `on` types they are all the
# recorder ever looks at (anything else is skipped after one dict lookup).
ADVANCE_TYPES: Final = frozenset(
    {
        "run:start", "run:end", "agent:start", "agent:end", "spawn:admitted", "ledger:op",
        "node:linked", "orchestrator:budget", "orchestrator:woke", "agent:phase:end", "tool:end",
    }
)  # fmt: skip


# Distinct model refs a fold state remembers the masked split of.
_MODEL_CACHE_LIMIT: Final = 256
# Distinct ts strings a fold state remembers the time of (a stream's events share few stamps).
_TS_CACHE_LIMIT: Final = 1024

# The replayed events FoldState.advance still reads: agent pairing sees the whole stream.
PAIRED_TYPES: Final = frozenset({"agent:start", "agent:end"})


@dataclass(slots=True)
class FoldState:
    """What one run's folds remember between events. Bounded by the run's own size."""

    masker: SecretMasker
    workflow: str = UNKNOWN
    run_start_ts: int | None = None
    agents: AgentLifecycle[None] = field(default_factory=AgentLifecycle)
    task_agent_type: dict[str, str] = field(default_factory=dict)  # logicalTaskId -> agentType
    ledger_ops: int = 0
    spawns_admitted: int = 0
    reclaimed_usd: float = 0.0
    orchestrated: bool = False
    last_budget_share: float | None = None
    last_run_end: WireEvent | None = None
    terminal_recorded: bool = False
    outcome: RunOutcome | BaseException | None = None
    # agent spanId -> [live invocations ended, live tool calls ended] while the agent is open
    agent_calls: dict[str, list[int]] = field(default_factory=dict)
    # What several definitions read from one event (an attribute tuple, a duration), built once
    # for that event: the two builders asked last, with their values (an agent:end's folds ask
    # for three in an order two slots serve without rebuilding; a rebuild would only cost time).
    # Holding the event also keeps its id from being reused by the next one; `advance` drops it:
    # the same object observed again later must be read against the state of that time.
    _shared_event: Any = None
    _first_build: Any = None
    _first_value: Any = None
    _second_build: Any = None
    _second_value: Any = None
    # model ref -> model(ref): a run names a handful of models, on most of its events
    _models: dict[str, tuple[str, str]] = field(default_factory=dict)
    # ts string -> epoch ns: an agent's duration reads two stamps, most of them seen before
    _times: dict[str, int] = field(default_factory=dict)

    def ts(self, value: Any) -> int | None:
        """``ts_ns(value)``, remembered for the strings seen last (parsing one costs a datetime)."""
        known = self._times.get(value) if type(value) is str else None
        if known is None:
            known = _ts(value)
            if known is not None and type(value) is str:
                if len(self._times) >= _TS_CACHE_LIMIT:
                    self._times.clear()  # bounded whatever the stream holds
                self._times[value] = known
        return known

    def shared(self, event: WireEvent, build: Callable[[FoldState, WireEvent], _T]) -> _T:
        """``build(self, event)``, computed once per event however many folds ask for it."""
        if self._shared_event is not event:
            self._shared_event = event
            self._second_build = self._second_value = None
        elif self._first_build is build:
            return self._first_value  # type: ignore[no-any-return]
        elif self._second_build is build:
            return self._second_value  # type: ignore[no-any-return]
        else:
            # A second builder for this event: the first slot's value moves down.
            value = build(self, event)
            self._second_build, self._second_value = self._first_build, self._first_value
            self._first_build, self._first_value = build, value
            return value
        value = build(self, event)
        self._first_build, self._first_value = build, value
        return value

    def model(self, value: Any) -> tuple[str, str]:
        """``(gen_ai.request.model, gen_ai.provider.name)`` of a model ref, as the spans carry them.

        The model id after the adapter prefix and the adapter's well-known provider name (else the
        adapter id), both split from the *masked* ref so a credential cannot leak through the
        split; a ref without a prefix is the model itself, provider ``unknown``.
        """
        raw = _str(value)
        known = self._models.get(raw)
        if known is not None:
            return known
        ref = self.masker.clean(raw)
        adapter, colon, model_id = ref.partition(":")
        if not colon:
            found = (ref, UNKNOWN)
        else:
            found = (model_id or UNKNOWN, provider_name(adapter) if adapter else UNKNOWN)
        if len(self._models) >= _MODEL_CACHE_LIMIT:
            self._models.clear()  # a hostile stream naming endless models cannot grow it
        self._models[raw] = found
        return found

    def advance(self, event: WireEvent) -> None:
        """Move the state past one live event (called after that event's folds ran)."""
        self._shared_event = None
        kind = event.get("type")
        if not isinstance(kind, str):
            return  # no type this reads (and kind is a str below: compiled, a direct comparison)
        # The calls of a live agent first: they are most of a stream's folded events.
        if kind == "agent:phase:end" or kind == "tool:end":
            span_id = event.get("spanId")
            if isinstance(span_id, str) and self.agents.get(span_id) is not None:
                counts = self.agent_calls.get(span_id)
                if counts is None:
                    counts = self.agent_calls[span_id] = [0, 0]
                counts[0 if kind == "agent:phase:end" else 1] += 1
        elif kind == "run:start":
            self.workflow = _str(event.get("workflow"), self.workflow)
            self.run_start_ts = self.ts(event.get("ts"))
        elif kind == "agent:start":
            # Replayed agent:start/agent:end reach here too (and nothing else replayed does): the
            # folds pair agents exactly as every other consumer does, but count only live facts.
            self.agents.start(event)
            if event.get("role") == "orchestrate" and event.get("replayed") is not True:
                self.orchestrated = True
        elif kind == "agent:end":
            self.agents.end(event)
            span_id = event.get("spanId")
            if isinstance(span_id, str):
                self.agent_calls.pop(span_id, None)
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

    def cost_report(self) -> dict[str, Any]:
        if isinstance(self.outcome, RunOutcome):
            return _mapping(self.outcome.cost)
        return {}

    def abandoned_usd(self) -> float | None:
        """CostReport ``abandoned.usd``; without a report, the envelope's gross minus net."""
        report = self.cost_report()
        usd = _num(_mapping(report.get("abandoned")).get("usd"))
        if usd is not None:
            return max(usd, 0.0)
        envelope: dict[str, Any] = {}
        if isinstance(self.outcome, RunOutcome):
            envelope = _mapping(self.outcome.envelope)
        if not envelope and self.last_run_end is not None:
            envelope = _mapping(self.last_run_end.get("envelope"))
        gross, net = _num(envelope.get("grossUsd")), _num(envelope.get("totalUsd"))
        if gross is None or net is None:
            return None
        return max(gross - net, 0.0)


def _agent_type(event: WireEvent) -> str:
    return _str(event.get("agentType"))


def _workflow(state: FoldState, event: WireEvent) -> str:
    if event.get("type") == "run:end":
        return _str(_mapping(event.get("envelope")).get("workflow"), state.workflow)
    return state.workflow


# --- folds ------------------------------------------------------------------------------------
#
# Each observation's attribute values are a tuple in the order of the definition's `attributes`
# (None: the attribute is absent), so a fold cannot add an undeclared key and the recorder can
# use the tuple itself as the key of its per-attribute-set caches.


_RUN_END_FACTS: Final = EVENT_FACTS["run:end"]


def _enum(event: WireEvent, kind: str, field: str, default: str = UNKNOWN) -> str:
    """An enum-valued label: the catalog's values as they are, any other string ``other``."""
    value = _str(event.get(field), default)
    return value if value == default or value in EVENT_FACTS[kind][field].values else OTHER


def _run_terminal(event: WireEvent) -> tuple[str, str, bool]:
    # Bounded like the span's facts: a value outside the catalog's enum is "other", never its text.
    status = _str(event.get("status"))
    if status != UNKNOWN and status not in _RUN_END_FACTS["status"].values:
        status = OTHER
    completion = _str(event.get("completion"), NONE)
    if completion != NONE and completion not in _RUN_END_FACTS["completion"].values:
        completion = OTHER
    return status, completion, event.get("settled") is not False


def _settled_reason(event: WireEvent, settled: bool) -> str:
    # Bounded: the one reason the catalog defines, "other" for any other text.
    reason = event.get("settledReason")
    if settled or not isinstance(reason, str) or not reason:
        return NONE
    return reason if reason == "superseded" else OTHER


def fold_runs_settled(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
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


def fold_run_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    end = state.ts(event.get("ts"))
    if end is None or state.run_start_ts is None:
        return ()
    status, _, _ = _run_terminal(event)
    return ((_seconds(state.run_start_ts, end), (_workflow(state, event), status)),)


def fold_run_cost(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    usd = _num(event.get("totalUsd"))
    if usd is None:
        usd = _num(_mapping(event.get("envelope")).get("totalUsd"))
    if usd is None or usd < 0:
        return ()
    status, _, _ = _run_terminal(event)
    return ((usd, (_workflow(state, event), status)),)


def _build_phase_attrs(state: FoldState, event: WireEvent) -> tuple[str, str, str, str]:
    model, provider = state.model(event.get("model"))
    return state.workflow, model, provider, _str(event.get("role"))


def _phase_attrs(state: FoldState, event: WireEvent) -> tuple[str, str, str, str]:
    return state.shared(event, _build_phase_attrs)


def fold_invocation_tokens(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    usage = _mapping(event.get("usage"))
    workflow, model, provider, role = _phase_attrs(state, event)
    given = _num(usage.get("inputTokens"))
    made = _num(usage.get("outputTokens"))
    read = (given, (workflow, model, provider, role, "input")) if given is not None and given >= 0 else None
    wrote = (made, (workflow, model, provider, role, "output")) if made is not None and made >= 0 else None
    if read is None:
        return () if wrote is None else (wrote,)
    return (read,) if wrote is None else (read, wrote)


def fold_invocation_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    millis = _num(event.get("durationMs"))
    if millis is None or millis < 0:
        return ()
    # The phase event names no error class; the convention's fallback value says so.
    error = None if event.get("outcome") in ("ok", None) else "_OTHER"
    workflow, model, provider, role = _phase_attrs(state, event)  # compiled: no list in between
    return ((millis / 1000.0, (workflow, model, provider, role, error)),)


def fold_spend(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    usd = _num(event.get("costUsd"))
    if usd is None or usd < 0:
        return ()
    return ((usd, _phase_attrs(state, event)),)


def _build_agent_end_attrs(state: FoldState, event: WireEvent) -> tuple[str, str, str, str]:
    span = state.agents.get(event.get("spanId"))
    return (
        state.workflow,
        _agent_type(event),
        _str(event.get("status")),
        state.model(span.model)[0] if span is not None and not span.replayed else UNKNOWN,
    )


def _agent_end_attrs(state: FoldState, event: WireEvent) -> tuple[str, str, str, str]:
    return state.shared(event, _build_agent_end_attrs)


def fold_agent_invocations(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return ((1, _agent_end_attrs(state, event)),)


def _build_agent_seconds(state: FoldState, event: WireEvent) -> float | None:
    span = state.agents.get(event.get("spanId"))
    end = state.ts(event.get("ts"))
    if span is None or span.replayed or end is None:
        return None  # a replayed start's time is a re-stamp, not when the agent began
    start = state.ts(span.ts)
    return None if start is None else _seconds(start, end)


def agent_seconds(state: FoldState, event: WireEvent) -> float | None:
    """How long the agent an ``agent:end`` closes ran (None when its start is not known)."""
    return state.shared(event, _build_agent_seconds)


def fold_agent_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    seconds = agent_seconds(state, event)
    if seconds is None:
        return ()
    return ((seconds, _agent_end_attrs(state, event)),)


# The code of the error the engine raises when the quota limiter denied a call more times than
# its denial budget allows: the one agent:error that ends a run of quota denials.
QUOTA_EXHAUSTED_CODE: Final = "quota_exhausted"


def _error_class(state: FoldState, event: WireEvent) -> str:
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


def fold_agent_errors(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
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


_TOOL_OUTCOMES: Final = EVENT_FACTS["tool:end"]["outcome"].values
_TOOL_GUARDS: Final = EVENT_FACTS["tool:end"]["guard"].values


def _build_tool_attrs(state: FoldState, event: WireEvent) -> tuple[str, str, str, str, str]:
    # _enum for the two enum labels, with their value sets bound once: this runs per tool call.
    outcome = _str(event.get("outcome"))
    guard = _str(event.get("guard"), NONE)
    return (
        state.workflow,
        _str(event.get("toolName")),
        outcome if outcome == UNKNOWN or outcome in _TOOL_OUTCOMES else OTHER,
        guard if guard == NONE or guard in _TOOL_GUARDS else OTHER,
        _str(event.get("decidedBy"), NONE),
    )


def fold_tool_calls(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return ((1, state.shared(event, _build_tool_attrs)),)


def fold_tool_duration(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
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


def fold_quota_denials(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    model, provider = state.model(event.get("model"))
    return ((1, (state.workflow, model, provider, _quota_dimension(event.get("reason")))),)


def fold_exposure_waits(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return (
        (
            1,
            (
                state.workflow,
                _enum(event, "budget:exposure-wait", "scope"),
                event.get("willWait") is True,
                state.model(event.get("model"))[0],
            ),
        ),
    )


def fold_spawns_admitted(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return ((1, (state.workflow, _enum(event, "spawn:admitted", "verdict"), _agent_type(event))),)


def fold_spawns_rejected(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return ((1, (state.workflow, _str(event.get("code")), _agent_type(event))),)


def fold_determinism(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    category = _enum(event, "determinism:warning", "category")
    return ((1, (state.workflow, category, _enum(event, "determinism:warning", "provenance"))),)


def fold_ledger_ops(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return ((1, (state.workflow, _enum(event, "ledger:op", "op"))),)


def fold_ledger_ops_per_spawn(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    if state.spawns_admitted == 0:
        return ()  # undefined without a spawn; a zero would read as "spawns wrote nothing"
    return ((state.ledger_ops / state.spawns_admitted, (state.workflow,)),)


def fold_render_size(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    size = _num(event.get("renderSize"))
    if size is None or size < 0:
        return ()
    return ((size, (state.workflow,)),)


def fold_escalations(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    task = event.get("logicalTaskId")
    agent_type = state.task_agent_type.get(task, UNKNOWN) if isinstance(task, str) else UNKNOWN
    return ((1, (state.workflow, agent_type, _enum(event, "escalation:raised", "kind"))),)


def fold_orchestrator_share(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    orchestrator = _mapping(state.cost_report().get("orchestrator"))
    share = _num(orchestrator.get("share"))
    spent = _num(orchestrator.get("spentUsd")) or 0.0
    if share is not None and (state.orchestrated or spent > 0):
        return ((share, (state.workflow, "cost_report")),)
    if state.orchestrated and state.last_budget_share is not None:
        return ((state.last_budget_share, (state.workflow, "orchestrator_budget")),)
    return ()


def fold_abandoned(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    usd = state.abandoned_usd()
    return () if usd is None else ((usd, (state.workflow,)),)


def fold_reclaimed(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    return ((state.reclaimed_usd, (state.workflow,)),)


def fold_net_lost(state: FoldState, event: WireEvent) -> tuple[Observation, ...]:
    usd = state.abandoned_usd()
    return () if usd is None else ((usd - state.reclaimed_usd, (state.workflow,)),)


# --- the GenAI conventions' agent-level metrics -----------------------------------------------
