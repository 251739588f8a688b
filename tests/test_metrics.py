"""Metric folds over the reference streams, against numbers computed by hand per stream."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.events import KNOWN_EVENT_TYPES
from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.core.masking import MASKED_SECRET, compile_secret_masker
from rulvar_otel.errors import ConfigError, RunRejectedError
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import REGISTRY, MetricsRecorder, definition, record_metrics
from rulvar_otel.otel.metrics.registry import FINISH, InstrumentKind
from rulvar_otel.testing import metric_points
from tests._support import (
    adaptive_outcome,
    adaptive_stream,
    attrs,
    build_stream,
    events,
    feed,
    outcome,
    unsettled_quota_stream,
)

approx = pytest.approx


@pytest.fixture
def setup() -> Iterator[tuple[Any, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider.get_meter("rulvar_otel"), reader
    provider.shutdown()


def _fold(setup: tuple[Any, InMemoryMetricReader], name: str, with_outcome: bool = True) -> dict[str, Any]:
    meter, reader = setup
    result: Any = outcome(name) if with_outcome else None
    feed(meter, events(name), result)
    return metric_points(reader)


RUN = sc.METRIC_RUNS_SETTLED


def _run_key(
    workflow: str, status: str, completion: str = "none", settled: bool = True, reason: str = "none"
) -> Any:
    return attrs(
        {
            sc.WORKFLOW: workflow,
            sc.STATUS: status,
            sc.RUN_COMPLETION: completion,
            sc.RUN_SETTLED: settled,
            sc.RUN_SETTLED_REASON: reason,
        }
    )


def _phase(workflow: str, model: str, role: str, **extra: Any) -> dict[str, Any]:
    return {
        sc.WORKFLOW: workflow,
        sc.GEN_AI_REQUEST_MODEL: model.partition(":")[2],
        sc.GEN_AI_PROVIDER_NAME: model.partition(":")[0],
        sc.AGENT_ROLE: role,
        **extra,
    }


def _hist(point: Any) -> tuple[int, float]:
    count, total, _ = point
    return count, total


# --- the registry itself ----------------------------------------------------------------------


def test_registry_names_series_and_labels_are_unique_and_bounded() -> None:
    names = [d.name for d in REGISTRY]
    assert len(names) == len(set(names))
    series = [s for d in REGISTRY for s in d.prometheus_series]
    assert len(series) == len(set(series))
    semconv_values = {v for k, v in vars(sc).items() if k.isupper() and isinstance(v, str)}
    for entry in REGISTRY:
        assert entry.name in semconv_values, entry.name
        assert entry.description and entry.source and entry.unit
        assert sc.RUN_ID not in entry.attributes and sc.TOOL_CALL_ID not in entry.attributes
        assert sc.ENTRY_SEQ not in entry.attributes and sc.SCOPE not in entry.attributes
        assert set(entry.attributes) <= semconv_values, entry.name
        assert len(set(entry.prometheus_labels)) == len(entry.attributes)
        for kind in entry.on:
            assert kind == FINISH or kind in KNOWN_EVENT_TYPES, (entry.name, kind)
        if entry.kind is InstrumentKind.HISTOGRAM:
            assert entry.buckets is not None and list(entry.buckets) == sorted(set(entry.buckets))
        else:
            assert entry.buckets is None


def test_prometheus_names_follow_the_exporter_rules() -> None:
    assert definition(sc.METRIC_RUNS_SETTLED).prometheus_name == "rulvar_runs_settled_total"
    assert definition(sc.METRIC_SPEND).prometheus_name == "rulvar_spend_usd_total"
    assert definition(sc.METRIC_NET_LOST_COST).prometheus_series == ("rulvar_plan_net_lost_cost_usd",)
    assert definition(sc.METRIC_INVOCATION_DURATION).prometheus_series == (
        "rulvar_invocation_duration_seconds_bucket",
        "rulvar_invocation_duration_seconds_sum",
        "rulvar_invocation_duration_seconds_count",
    )
    assert definition(sc.METRIC_INVOCATION_TOKEN_USAGE).prometheus_name == "rulvar_invocation_token_usage"
    assert definition(sc.METRIC_EXPOSURE_WAITS).prometheus_labels == (
        "rulvar_workflow",
        "rulvar_exposure_scope",
        "rulvar_will_wait",
        "gen_ai_request_model",
    )
    with pytest.raises(KeyError):
        definition("no.such.metric")


def test_histograms_use_the_registry_buckets(setup: Any) -> None:
    data = _fold(setup, "minimal")
    point = next(iter(data[sc.METRIC_INVOCATION_TOKEN_USAGE].values()))
    assert len(point[2]) == len(definition(sc.METRIC_INVOCATION_TOKEN_USAGE).buckets or ()) + 1


# --- folds per stream (numbers by hand from the JSONL) ------------------------------------------


def test_minimal(setup: Any) -> None:
    data = _fold(setup, "minimal")
    assert data[RUN] == {_run_key("review", "ok"): 1}
    run_attrs = attrs({sc.WORKFLOW: "review", sc.STATUS: "ok"})
    assert _hist(data[sc.METRIC_RUN_DURATION][run_attrs]) == (1, approx(0.024))  # .323 - .299
    assert _hist(data[sc.METRIC_RUN_COST][run_attrs]) == (1, 0.0)
    ref = "fake:fake-model"
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert _hist(tokens[attrs(_phase("review", ref, "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]) == (1, 4)
    assert _hist(tokens[attrs(_phase("review", ref, "loop", **{sc.GEN_AI_TOKEN_TYPE: "output"}))]) == (1, 2)
    assert _hist(data[sc.METRIC_INVOCATION_DURATION][attrs(_phase("review", ref, "loop"))]) == (
        1,
        approx(0.006),
    )
    agent = attrs(
        {
            sc.WORKFLOW: "review",
            sc.AGENT_TYPE: "unknown",
            sc.STATUS: "ok",
            sc.GEN_AI_REQUEST_MODEL: "fake-model",
        }
    )
    assert data[sc.METRIC_AGENT_INVOCATIONS] == {agent: 1}
    assert _hist(data[sc.METRIC_AGENT_DURATION][agent]) == (1, approx(0.008))  # .320 - .312
    assert data[sc.METRIC_SPEND] == {attrs(_phase("review", ref, "loop")): 0}
    workflow = attrs({sc.WORKFLOW: "review"})
    assert data[sc.METRIC_ABANDONED_COST] == {workflow: 0}
    assert data[sc.METRIC_RECLAIMED_COST] == {workflow: 0}
    assert data[sc.METRIC_NET_LOST_COST] == {workflow: 0}
    # Not orchestrated, no spawn: the per-run ratios are undefined, so nothing is recorded.
    for absent in (sc.METRIC_ORCHESTRATOR_SHARE, sc.METRIC_LEDGER_OPS_PER_SPAWN, sc.METRIC_AGENT_ERRORS):
        assert absent not in data


def test_quota_is_throttling_not_failure(setup: Any) -> None:
    data = _fold(setup, "quota")
    denial = attrs(
        {
            sc.WORKFLOW: "throttled",
            sc.GEN_AI_REQUEST_MODEL: "model",
            sc.GEN_AI_PROVIDER_NAME: "fake",
            sc.QUOTA_DIMENSION: "tokens",
        }
    )
    assert data[sc.METRIC_QUOTA_DENIALS] == {denial: 2}
    assert sc.METRIC_AGENT_ERRORS not in data
    assert data[RUN] == {_run_key("throttled", "ok"): 1}
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert _hist(
        tokens[attrs(_phase("throttled", "fake:model", "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]
    ) == (1, 12)
    assert data[sc.METRIC_SPEND] == {attrs(_phase("throttled", "fake:model", "loop")): approx(0.000082)}


def test_an_unrelated_error_after_a_quota_denial_is_an_error_not_exhaustion(setup: Any) -> None:
    meter, reader = setup
    agent = {"agentType": "writer", "model": "acme:small", "role": "loop"}
    invalid = {"code": "invalid_request", "message": "bad schema", "retryable": False}
    exhausted = {"code": "quota_exhausted", "message": "denied", "retryable": False}
    stream = build_stream(
        "syn-misfire",
        [
            (0.0, "s0", {"type": "run:start", "workflow": "w", "resumed": False}),
            (0.1, "s1", {"type": "agent:start", **agent}),
            (0.1, "s1", {"type": "agent:phase:start", **agent, "invocation": 1}),
            (0.2, "s1", {"type": "quota:denied", "agentType": "writer", "model": "acme:small",
                         "reason": "tokensPerMinute 10 exhausted", "willRetry": True}),
            (0.3, "s1", {"type": "agent:error", "agentType": "writer", "error": invalid, "willRetry": False}),
            (0.4, "s1", {"type": "agent:phase:end", **agent, "invocation": 1, "durationMs": 300,
                         "outcome": "error"}),
            (0.5, "s1", {"type": "agent:end", "agentType": "writer", "status": "error", "entryRef": 1}),
            (0.6, "s2", {"type": "agent:start", **agent}),
            (0.7, "s2", {"type": "quota:denied", "agentType": "writer", "model": "acme:small",
                         "reason": "tokensPerMinute 10 exhausted", "willRetry": True}),
            (0.8, "s2", {"type": "agent:error", "agentType": "writer", "error": exhausted,
                         "willRetry": False}),
            (0.9, "s2", {"type": "agent:end", "agentType": "writer", "status": "error", "entryRef": 2}),
            (1.0, "s0", {"type": "run:end", "status": "error", "totalUsd": 0}),
        ],
    )  # fmt: skip
    feed(meter, stream)

    def err(code: str, cls: str) -> Any:
        return attrs(
            {
                sc.WORKFLOW: "w",
                sc.AGENT_TYPE: "writer",
                sc.ERROR_TYPE: code,
                sc.WILL_RETRY: False,
                sc.ERROR_CLASS: cls,
            }
        )

    assert metric_points(reader)[sc.METRIC_AGENT_ERRORS] == {
        err("invalid_request", "error"): 1,
        err("quota_exhausted", "quota_exhausted"): 1,
    }


def test_exposure_drained(setup: Any) -> None:
    data = _fold(setup, "exposure-drained")
    wait = attrs(
        {
            sc.WORKFLOW: "rulvar-orchestrate",
            sc.EXPOSURE_SCOPE: "root",
            sc.WILL_WAIT: False,
            sc.GEN_AI_REQUEST_MODEL: "model",
        }
    )
    assert data[sc.METRIC_EXPOSURE_WAITS] == {wait: 1}
    assert data[RUN] == {_run_key("rulvar-orchestrate", "exhausted", "partial"): 1}
    failed_phase = attrs(
        _phase("rulvar-orchestrate", "fake:model", "orchestrate", **{sc.ERROR_TYPE: "_OTHER"})
    )
    assert _hist(data[sc.METRIC_INVOCATION_DURATION][failed_phase]) == (1, approx(0.001))
    share = attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SHARE_SOURCE: "cost_report"})
    assert _hist(data[sc.METRIC_ORCHESTRATOR_SHARE][share]) == (1, 0.0)


def test_error(setup: Any) -> None:
    data = _fold(setup, "error")
    base = {sc.AGENT_TYPE: "flaky", sc.ERROR_TYPE: "agent", sc.ERROR_CLASS: "error"}
    assert data[sc.METRIC_AGENT_ERRORS] == {
        attrs({sc.WORKFLOW: "fragile", **base, sc.WILL_RETRY: True}): 1,
        attrs({sc.WORKFLOW: "fragile", **base, sc.WILL_RETRY: False}): 1,
    }
    assert data[RUN] == {_run_key("fragile", "error"): 1}
    assert data[sc.METRIC_AGENT_INVOCATIONS] == {
        attrs(
            {
                sc.WORKFLOW: "fragile",
                sc.AGENT_TYPE: "unknown",
                sc.STATUS: "ok",
                sc.GEN_AI_REQUEST_MODEL: "fake-model",
            }
        ): 1,
        attrs(
            {
                sc.WORKFLOW: "fragile",
                sc.AGENT_TYPE: "flaky",
                sc.STATUS: "error",
                sc.GEN_AI_REQUEST_MODEL: "fake-model",
            }
        ): 1,
    }


def test_orchestrate_share_from_the_cost_report(setup: Any) -> None:
    data = _fold(setup, "orchestrate")
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert share.keys() == {attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SHARE_SOURCE: "cost_report"})}
    assert _hist(next(iter(share.values()))) == (1, approx(0.03))
    assert data[sc.METRIC_SPAWNS_ADMITTED] == {
        attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SPAWN_VERDICT: "admit", sc.AGENT_TYPE: "worker"}): 3
    }
    assert _hist(data[sc.METRIC_LEDGER_OPS_PER_SPAWN][attrs({sc.WORKFLOW: "rulvar-orchestrate"})]) == (1, 0.0)
    assert _hist(data[sc.METRIC_WAKE_RENDER_SIZE][attrs({sc.WORKFLOW: "rulvar-orchestrate"})]) == (1, 744)

    def tool(name: str, decided_by: str = "default") -> Any:
        return attrs(
            {
                sc.WORKFLOW: "rulvar-orchestrate",
                sc.TOOL_NAME: name,
                sc.STATUS: "ok",
                sc.TOOL_GUARD: "none",
                sc.TOOL_DECIDED_BY: decided_by,
            }
        )

    assert data[sc.METRIC_TOOL_CALLS] == {
        tool("spawn_agent"): 3,
        tool("wait_for_events"): 1,
        tool("await_all"): 1,
        tool("finish", "none"): 1,
    }
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert _hist(
        tokens[attrs(_phase("rulvar-orchestrate", "fake:model", "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]
    ) == (3, 120)
    assert _hist(
        tokens[attrs(_phase("rulvar-orchestrate", "fake:model", "loop", **{sc.GEN_AI_TOKEN_TYPE: "output"}))]
    ) == (3, 36)
    assert _hist(
        tokens[
            attrs(
                _phase("rulvar-orchestrate", "fake:model", "orchestrate", **{sc.GEN_AI_TOKEN_TYPE: "input"})
            )
        ]
    ) == (
        1,
        50,
    )
    assert data[sc.METRIC_SPEND] == {
        attrs(_phase("rulvar-orchestrate", "fake:model", "loop")): approx(0.00048),
        attrs(_phase("rulvar-orchestrate", "fake:model", "orchestrate")): approx(0.0003),
    }
    assert data[sc.METRIC_AGENT_INVOCATIONS] == {
        attrs(
            {
                sc.WORKFLOW: "rulvar-orchestrate",
                sc.AGENT_TYPE: "worker",
                sc.STATUS: "ok",
                sc.GEN_AI_REQUEST_MODEL: "model",
            }
        ): 3,
        attrs(
            {
                sc.WORKFLOW: "rulvar-orchestrate",
                sc.AGENT_TYPE: "unknown",
                sc.STATUS: "ok",
                sc.GEN_AI_REQUEST_MODEL: "model",
            }
        ): 1,
    }


def test_orchestrate_share_without_an_outcome_is_the_last_budget_event(setup: Any) -> None:
    data = _fold(setup, "orchestrate", with_outcome=False)
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert share.keys() == {
        attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SHARE_SOURCE: "orchestrator_budget"})
    }
    assert _hist(next(iter(share.values()))) == (1, approx(0.012))
    # Without a CostReport, abandoned comes from the envelope: gross 0.00078 - net 0.00078 = 0.
    assert data[sc.METRIC_ABANDONED_COST] == {attrs({sc.WORKFLOW: "rulvar-orchestrate"}): 0}


def test_tools_by_outcome_guard_and_decider(setup: Any) -> None:
    data = _fold(setup, "tools")

    def tool(name: str, outcome: str, guard: str, decided_by: str) -> Any:
        return attrs(
            {
                sc.WORKFLOW: "tooling",
                sc.TOOL_NAME: name,
                sc.STATUS: outcome,
                sc.TOOL_GUARD: guard,
                sc.TOOL_DECIDED_BY: decided_by,
            }
        )

    assert data[sc.METRIC_TOOL_CALLS] == {
        tool("search", "ok", "none", "default"): 4,
        tool("fetch", "error", "none", "default"): 1,
        tool("rm_rf", "denied", "none", "deny-rule"): 1,
        tool("search", "denied", "repeated-signature", "none"): 1,
        tool("lookup", "denied", "per-tool-cap", "none"): 1,
    }
    # 42 + 5 + 6 + 41 ms
    assert _hist(data[sc.METRIC_TOOL_DURATION][tool("search", "ok", "none", "default")]) == (4, approx(0.094))


def test_replayed_history_never_counts_twice(setup: Any) -> None:
    data = _fold(setup, "suspension-dryrun")
    # Every agent, phase and tool event of the dry run is replayed: only the terminal counts.
    for absent in (
        sc.METRIC_INVOCATION_TOKEN_USAGE,
        sc.METRIC_INVOCATION_DURATION,
        sc.METRIC_AGENT_INVOCATIONS,
        sc.METRIC_TOOL_CALLS,
        sc.METRIC_SPEND,
    ):
        assert absent not in data, absent
    assert data[RUN] == {_run_key("hitl", "ok"): 1}


def test_replayed_phase_durations_never_enter_histograms(setup: Any) -> None:
    meter, reader = setup
    stream = events("minimal")
    for event in stream:
        if event["type"].startswith("agent:"):
            event["replayed"] = True
            if event["type"] == "agent:phase:end":
                event["durationMs"] = 0
    feed(meter, stream, outcome("minimal"))
    data = metric_points(reader)
    assert sc.METRIC_INVOCATION_DURATION not in data and sc.METRIC_AGENT_DURATION not in data


def test_unsettled_terminal(setup: Any) -> None:
    data = _fold(setup, "unsettled")
    assert data[RUN] == {_run_key("demo", "ok", settled=False): 1}


def test_a_superseded_terminal_keeps_its_reason_and_any_other_reason_is_bounded(setup: Any) -> None:
    meter, reader = setup
    for run_id, reason in (("syn-sup", "superseded"), ("syn-odd", "a long free-text reason")):
        end = {"type": "run:end", "status": "ok", "totalUsd": 0, "settled": False, "settledReason": reason}
        start = {"type": "run:start", "workflow": "w", "resumed": True}
        feed(meter, build_stream(run_id, [(0.0, "s0", start), (1.0, "s0", end)]))
    assert metric_points(reader)[RUN] == {
        _run_key("w", "ok", settled=False, reason="superseded"): 1,
        _run_key("w", "ok", settled=False, reason="other"): 1,
    }


def test_determinism(setup: Any) -> None:
    data = _fold(setup, "determinism")
    wf = "nondeterministic"
    assert data[sc.METRIC_DETERMINISM_WARNINGS] == {
        attrs(
            {sc.WORKFLOW: wf, sc.DETERMINISM_CATEGORY: "bare-date-now", sc.DETERMINISM_PROVENANCE: "workflow"}
        ): 1,
        attrs(
            {
                sc.WORKFLOW: wf,
                sc.DETERMINISM_CATEGORY: "bare-math-random",
                sc.DETERMINISM_PROVENANCE: "workflow",
            }
        ): 1,
    }


def test_truncated_stream_counts_the_known_outcome(setup: Any) -> None:
    meter, reader = setup
    feed(meter, events("minimal")[:-1], outcome("minimal"))
    data = metric_points(reader)
    assert data[RUN] == {_run_key("review", "ok"): 1}
    assert sc.METRIC_RUN_DURATION not in data  # no run:end, no wall time


def test_adaptive_stream_without_an_outcome(setup: Any) -> None:
    meter, reader = setup
    feed(meter, adaptive_stream())
    data = metric_points(reader)
    planner = attrs({sc.WORKFLOW: "planner"})
    assert _hist(data[sc.METRIC_LEDGER_OPS_PER_SPAWN][planner]) == (1, 2.0)  # 4 ops / 2 spawns
    assert data[sc.METRIC_LEDGER_OPS] == {
        attrs({sc.WORKFLOW: "planner", sc.LEDGER_OP: "brief_set"}): 1,
        attrs({sc.WORKFLOW: "planner", sc.LEDGER_OP: "fact_add"}): 3,
    }
    assert data[sc.METRIC_ESCALATIONS] == {
        attrs({sc.WORKFLOW: "planner", sc.AGENT_TYPE: "researcher", sc.ESCALATION_KIND: "scope_bigger"}): 1,
        attrs(
            {sc.WORKFLOW: "planner", sc.AGENT_TYPE: "unknown", sc.ESCALATION_KIND: "blocked_with_evidence"}
        ): 1,
    }
    assert _hist(data[sc.METRIC_WAKE_RENDER_SIZE][planner]) == (1, 3000)
    budget_share = attrs({sc.WORKFLOW: "planner", sc.SHARE_SOURCE: "orchestrator_budget"})
    assert _hist(data[sc.METRIC_ORCHESTRATOR_SHARE][budget_share]) == (1, approx(0.2))
    assert data[sc.METRIC_ABANDONED_COST] == {planner: approx(0.5)}  # envelope 0.512 - 0.012
    assert data[sc.METRIC_RECLAIMED_COST] == {planner: approx(0.25)}
    assert data[sc.METRIC_NET_LOST_COST] == {planner: approx(0.25)}
    assert data[sc.METRIC_SPAWNS_ADMITTED] == {
        attrs({sc.WORKFLOW: "planner", sc.SPAWN_VERDICT: "admit", sc.AGENT_TYPE: "researcher"}): 1,
        attrs({sc.WORKFLOW: "planner", sc.SPAWN_VERDICT: "reuse_full", sc.AGENT_TYPE: "writer"}): 1,
    }
    assert data[sc.METRIC_SPAWNS_REJECTED] == {
        attrs({sc.WORKFLOW: "planner", sc.SPAWN_CODE: "budget_exhausted", sc.AGENT_TYPE: "researcher"}): 1
    }
    small = {sc.GEN_AI_REQUEST_MODEL: "small", sc.GEN_AI_PROVIDER_NAME: "acme"}
    assert data[sc.METRIC_QUOTA_DENIALS] == {
        attrs({sc.WORKFLOW: "planner", **small, sc.QUOTA_DIMENSION: "requests"}): 2,
        attrs({sc.WORKFLOW: "planner", **small, sc.QUOTA_DIMENSION: "tokens"}): 1,
    }

    def err(agent: str, code: str, retry: bool, cls: str) -> Any:
        return attrs(
            {
                sc.WORKFLOW: "planner",
                sc.AGENT_TYPE: agent,
                sc.ERROR_TYPE: code,
                sc.WILL_RETRY: retry,
                sc.ERROR_CLASS: cls,
            }
        )

    assert data[sc.METRIC_AGENT_ERRORS] == {
        err("researcher", "quota_exhausted", False, "quota_exhausted"): 1,
        err("writer", "quota", True, "quota_throttle"): 1,
        err("writer", "agent", True, "error"): 1,
        err("writer", "agent", False, "error"): 1,
    }
    assert data[sc.METRIC_EXPOSURE_WAITS] == {
        attrs(
            {
                sc.WORKFLOW: "planner",
                sc.EXPOSURE_SCOPE: "child",
                sc.WILL_WAIT: True,
                sc.GEN_AI_REQUEST_MODEL: "big",
            }
        ): 1
    }
    assert data[RUN] == {_run_key("planner", "ok", "partial"): 1}
    assert _hist(data[sc.METRIC_RUN_DURATION][attrs({sc.WORKFLOW: "planner", sc.STATUS: "ok"})]) == (
        1,
        approx(10.0),
    )

    def agent(kind: str, status: str, model: str) -> Any:
        return attrs(
            {sc.WORKFLOW: "planner", sc.AGENT_TYPE: kind, sc.STATUS: status, sc.GEN_AI_REQUEST_MODEL: model}
        )

    durations = data[sc.METRIC_AGENT_DURATION]
    assert _hist(durations[agent("researcher", "error", "small")]) == (1, approx(1.5))
    assert _hist(durations[agent("writer", "ok", "small")]) == (1, approx(3.0))
    assert _hist(durations[agent("unknown", "ok", "big")]) == (1, approx(8.9))
    op = data[sc.METRIC_INVOCATION_DURATION]
    assert _hist(op[attrs(_phase("planner", "acme:small", "loop", **{sc.ERROR_TYPE: "_OTHER"}))]) == (
        1,
        approx(1.5),
    )
    assert _hist(op[attrs(_phase("planner", "acme:small", "loop"))]) == (1, approx(2.5))
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert _hist(
        tokens[attrs(_phase("planner", "acme:small", "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]
    ) == (2, 100)
    assert _hist(
        tokens[attrs(_phase("planner", "acme:big", "orchestrate", **{sc.GEN_AI_TOKEN_TYPE: "output"}))]
    ) == (
        1,
        120,
    )


def test_adaptive_stream_with_the_cost_report(setup: Any) -> None:
    meter, reader = setup
    feed(meter, adaptive_stream(), adaptive_outcome())
    data = metric_points(reader)
    report_share = attrs({sc.WORKFLOW: "planner", sc.SHARE_SOURCE: "cost_report"})
    assert data[sc.METRIC_ORCHESTRATOR_SHARE].keys() == {report_share}
    assert _hist(data[sc.METRIC_ORCHESTRATOR_SHARE][report_share]) == (1, approx(0.3))
    assert data[sc.METRIC_ABANDONED_COST] == {attrs({sc.WORKFLOW: "planner"}): approx(0.5)}


def test_runs_accumulate_across_recorders(setup: Any) -> None:
    meter, reader = setup
    feed(meter, events("quota"), outcome("quota"))
    feed(meter, events("quota"), outcome("quota"))
    feed(meter, unsettled_quota_stream(), None)
    data = metric_points(reader)
    assert data[RUN][_run_key("throttled", "ok")] == 2
    assert data[RUN][_run_key("solo", "ok", settled=False)] == 1
    denial = {
        sc.GEN_AI_REQUEST_MODEL: "model",
        sc.GEN_AI_PROVIDER_NAME: "fake",
        sc.QUOTA_DIMENSION: "tokens",
    }
    assert data[sc.METRIC_QUOTA_DENIALS][attrs({sc.WORKFLOW: "throttled", **denial})] == 4


# --- masking and cardinality ------------------------------------------------------------------

SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0"


def _all_attribute_values(reader: InMemoryMetricReader) -> list[Any]:
    return [value for series in metric_points(reader).values() for key in series for _, value in key]


@pytest.mark.parametrize(
    ("ref", "model", "provider"),
    [
        ("openai:gpt-4o-mini", "gpt-4o-mini", "openai"),
        ("gemini:gemini-2.5-pro", "gemini-2.5-pro", "gcp.gemini"),
        ("acme:small", "small", "acme"),
        ("bare-model", "bare-model", "unknown"),
        ("acme:", "unknown", "acme"),
    ],
)
def test_model_labels_are_the_spans_model_id_and_provider(
    setup: Any, ref: str, model: str, provider: str
) -> None:
    # The same gen_ai.request.model / gen_ai.provider.name values the spans carry, so the
    # dashboards' model variable matches the spanmetrics dimension and span attributes.
    meter, reader = setup
    agent = {"agentType": "a", "model": ref, "role": "loop"}
    stream = build_stream(
        "syn-model",
        [
            (0.0, "s0", {"type": "run:start", "workflow": "w"}),
            (0.1, "s1", {"type": "quota:denied", "agentType": "a", "model": ref, "reason": "tokens"}),
            (
                0.2,
                "s1",
                {"type": "agent:phase:end", **agent, "durationMs": 5, "costUsd": 0.5, "outcome": "ok"},
            ),
        ],
    )
    feed(meter, stream)
    data = metric_points(reader)
    assert data[sc.METRIC_SPEND] == {attrs(_phase("w", f"{provider}:{model}", "loop")): 0.5}
    assert set(data[sc.METRIC_QUOTA_DENIALS]) == {
        attrs(
            {
                sc.WORKFLOW: "w",
                sc.GEN_AI_REQUEST_MODEL: model,
                sc.GEN_AI_PROVIDER_NAME: provider,
                sc.QUOTA_DIMENSION: "tokens",
            }
        )
    }


def test_every_string_attribute_is_masked(setup: Any) -> None:
    meter, reader = setup
    stream = events("orchestrate") + events("tools") + events("quota")
    for event in stream:
        for field in ("model", "toolName", "agentType", "workflow", "decidedBy", "verdict"):
            if isinstance(event.get(field), str):
                event[field] = f"{event[field]}-{SECRET}"
    feed(meter, stream, None, compile_secret_masker([r"worker"]))
    values = [v for v in _all_attribute_values(reader) if isinstance(v, str)]
    assert values and not any(SECRET in v for v in values)
    assert any(MASKED_SECRET in v for v in values)
    assert not any("worker" in v for v in values)  # the host pattern applied too
    # The provider is derived from the masked ref: the adapter id survives, the key does not.
    assert "fake" in values


def test_no_unbounded_value_becomes_an_attribute(setup: Any) -> None:
    meter, reader = setup
    stream = adaptive_stream("run-id-that-must-not-appear")
    feed(meter, stream, adaptive_outcome())
    values = {str(v) for v in _all_attribute_values(reader)}
    for event in stream:
        for unbounded in ("runId", "spanId", "ts", "toolCallId", "logicalTaskId"):
            if unbounded in event:
                assert str(event[unbounded]) not in values, unbounded
    for series in metric_points(reader).values():
        for key in series:
            assert {k for k, _ in key} <= {a for d in REGISTRY for a in d.attributes}


def test_long_attribute_values_are_truncated(setup: Any) -> None:
    meter, reader = setup
    stream = events("tools")
    for event in stream:
        if "toolName" in event:
            event["toolName"] = "t" * 5000
    feed(meter, stream, outcome("tools"))
    assert max(len(v) for v in _all_attribute_values(reader) if isinstance(v, str)) <= 128


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_field_names = st.sampled_from(
    [
        "type", "spanId", "ts", "model", "role", "usage", "costUsd", "durationMs", "outcome", "status",
        "agentType", "error", "willRetry", "willWait", "scope", "toolName", "guard", "decidedBy",
        "renderSize", "orchestratorShare", "reclaimedUsd", "logicalTaskId", "workflow", "envelope",
        "totalUsd", "completion", "settled", "replayed", "reason", "verdict", "code", "kind", "op",
    ]
)  # fmt: skip
_event = st.dictionaries(_field_names, _json, max_size=10) | st.fixed_dictionaries(
    {"type": st.sampled_from(sorted(KNOWN_EVENT_TYPES))},
    optional={"spanId": _json, "ts": _json, "usage": _json},
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stream=st.lists(_event | _json, max_size=12),
    result=st.none() | st.just(RuntimeError("rejected")) | st.builds(lambda: adaptive_outcome()),
)
def test_recorder_never_raises(setup: Any, stream: list[Any], result: Any) -> None:
    meter, _ = setup
    recorder = MetricsRecorder(meter)
    for event in stream:
        recorder.observe(event)
    recorder.finish(result)
    recorder.finish(result)  # idempotent


# --- record_metrics over a handle ---------------------------------------------------------------


async def test_record_metrics_over_a_handle(setup: Any) -> None:
    meter, reader = setup
    await record_metrics(handle_from_events(events("orchestrate"), outcome("orchestrate")), meter)
    data = metric_points(reader)
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert math.isclose(_hist(next(iter(share.values())))[1], 0.03)


async def test_record_metrics_survives_a_rejecting_result(setup: Any) -> None:
    meter, reader = setup
    rejected = outcome("unsettled")
    assert isinstance(rejected, RunRejectedError)
    await record_metrics(handle_from_events(events("unsettled"), rejected), meter)
    assert metric_points(reader)[RUN] == {_run_key("demo", "ok", settled=False): 1}


async def test_record_metrics_refuses_a_bad_pattern_before_recording(setup: Any) -> None:
    meter, reader = setup
    with pytest.raises(ConfigError, match="patterns"):
        await record_metrics(handle_from_events(events("minimal")), meter, patterns=["("])
    assert metric_points(reader) == {}
