"""The metric registry's own rules, and metric folds over the reference streams against numbers
computed by hand per stream (quota, errors, exposure drain, orchestrator share, tools)."""

from __future__ import annotations

from typing import Any

import pytest

from rulvar_otel.core.events import KNOWN_EVENT_TYPES
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import REGISTRY, definition
from rulvar_otel.otel.metrics.registry import FINISH, InstrumentKind
from rulvar_otel.testing import metric_points
from tests._support import (
    attrs,
    build_stream,
    count_and_sum,
    feed,
    fold_reference,
    phase_attributes,
    run_settled_key,
)

approx = pytest.approx

RUN = sc.METRIC_RUNS_SETTLED


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


def test_histograms_use_the_registry_buckets(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "minimal")
    point = next(iter(data[sc.METRIC_INVOCATION_TOKEN_USAGE].values()))
    assert len(point[2]) == len(definition(sc.METRIC_INVOCATION_TOKEN_USAGE).buckets or ()) + 1


# --- folds per stream (numbers by hand from the JSONL) ------------------------------------------


def test_minimal(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "minimal")
    assert data[RUN] == {run_settled_key("review", "ok"): 1}
    run_attrs = attrs({sc.WORKFLOW: "review", sc.STATUS: "ok"})
    assert count_and_sum(data[sc.METRIC_RUN_DURATION][run_attrs]) == (1, approx(0.024))  # .323 - .299
    assert count_and_sum(data[sc.METRIC_RUN_COST][run_attrs]) == (1, 0.0)
    ref = "fake:fake-model"
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert count_and_sum(
        tokens[attrs(phase_attributes("review", ref, "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]
    ) == (1, 4)
    assert count_and_sum(
        tokens[attrs(phase_attributes("review", ref, "loop", **{sc.GEN_AI_TOKEN_TYPE: "output"}))]
    ) == (1, 2)
    assert count_and_sum(
        data[sc.METRIC_INVOCATION_DURATION][attrs(phase_attributes("review", ref, "loop"))]
    ) == (
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
    assert count_and_sum(data[sc.METRIC_AGENT_DURATION][agent]) == (1, approx(0.008))  # .320 - .312
    assert data[sc.METRIC_SPEND] == {attrs(phase_attributes("review", ref, "loop")): 0}
    workflow = attrs({sc.WORKFLOW: "review"})
    assert data[sc.METRIC_ABANDONED_COST] == {workflow: 0}
    assert data[sc.METRIC_RECLAIMED_COST] == {workflow: 0}
    assert data[sc.METRIC_NET_LOST_COST] == {workflow: 0}
    # Not orchestrated, no spawn: the per-run ratios are undefined, so nothing is recorded.
    for absent in (sc.METRIC_ORCHESTRATOR_SHARE, sc.METRIC_LEDGER_OPS_PER_SPAWN, sc.METRIC_AGENT_ERRORS):
        assert absent not in data


def test_quota_is_throttling_not_failure(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "quota")
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
    assert data[RUN] == {run_settled_key("throttled", "ok"): 1}
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert count_and_sum(
        tokens[attrs(phase_attributes("throttled", "fake:model", "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]
    ) == (1, 12)
    assert data[sc.METRIC_SPEND] == {
        attrs(phase_attributes("throttled", "fake:model", "loop")): approx(0.000082)
    }


def test_an_unrelated_error_after_a_quota_denial_is_an_error_not_exhaustion(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
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


def test_exposure_drained(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "exposure-drained")
    wait = attrs(
        {
            sc.WORKFLOW: "rulvar-orchestrate",
            sc.EXPOSURE_SCOPE: "root",
            sc.WILL_WAIT: False,
            sc.GEN_AI_REQUEST_MODEL: "model",
        }
    )
    assert data[sc.METRIC_EXPOSURE_WAITS] == {wait: 1}
    assert data[RUN] == {run_settled_key("rulvar-orchestrate", "exhausted", "partial"): 1}
    failed_phase = attrs(
        phase_attributes("rulvar-orchestrate", "fake:model", "orchestrate", **{sc.ERROR_TYPE: "_OTHER"})
    )
    assert count_and_sum(data[sc.METRIC_INVOCATION_DURATION][failed_phase]) == (1, approx(0.001))
    share = attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SHARE_SOURCE: "cost_report"})
    assert count_and_sum(data[sc.METRIC_ORCHESTRATOR_SHARE][share]) == (1, 0.0)


def test_error(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "error")
    base = {sc.AGENT_TYPE: "flaky", sc.ERROR_TYPE: "agent", sc.ERROR_CLASS: "error"}
    assert data[sc.METRIC_AGENT_ERRORS] == {
        attrs({sc.WORKFLOW: "fragile", **base, sc.WILL_RETRY: True}): 1,
        attrs({sc.WORKFLOW: "fragile", **base, sc.WILL_RETRY: False}): 1,
    }
    assert data[RUN] == {run_settled_key("fragile", "error"): 1}
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


def test_orchestrate_share_from_the_cost_report(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "orchestrate")
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert share.keys() == {attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SHARE_SOURCE: "cost_report"})}
    assert count_and_sum(next(iter(share.values()))) == (1, approx(0.03))
    assert data[sc.METRIC_SPAWNS_ADMITTED] == {
        attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SPAWN_VERDICT: "admit", sc.AGENT_TYPE: "worker"}): 3
    }
    assert count_and_sum(
        data[sc.METRIC_LEDGER_OPS_PER_SPAWN][attrs({sc.WORKFLOW: "rulvar-orchestrate"})]
    ) == (1, 0.0)
    assert count_and_sum(data[sc.METRIC_WAKE_RENDER_SIZE][attrs({sc.WORKFLOW: "rulvar-orchestrate"})]) == (
        1,
        744,
    )

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
    assert count_and_sum(
        tokens[
            attrs(
                phase_attributes(
                    "rulvar-orchestrate", "fake:model", "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}
                )
            )
        ]
    ) == (3, 120)
    assert count_and_sum(
        tokens[
            attrs(
                phase_attributes(
                    "rulvar-orchestrate", "fake:model", "loop", **{sc.GEN_AI_TOKEN_TYPE: "output"}
                )
            )
        ]
    ) == (3, 36)
    assert count_and_sum(
        tokens[
            attrs(
                phase_attributes(
                    "rulvar-orchestrate", "fake:model", "orchestrate", **{sc.GEN_AI_TOKEN_TYPE: "input"}
                )
            )
        ]
    ) == (
        1,
        50,
    )
    assert data[sc.METRIC_SPEND] == {
        attrs(phase_attributes("rulvar-orchestrate", "fake:model", "loop")): approx(0.00048),
        attrs(phase_attributes("rulvar-orchestrate", "fake:model", "orchestrate")): approx(0.0003),
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


def test_orchestrate_share_without_an_outcome_is_the_last_budget_event(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "orchestrate", with_outcome=False)
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert share.keys() == {
        attrs({sc.WORKFLOW: "rulvar-orchestrate", sc.SHARE_SOURCE: "orchestrator_budget"})
    }
    assert count_and_sum(next(iter(share.values()))) == (1, approx(0.012))
    # Without a CostReport, abandoned comes from the envelope: gross 0.00078 - net 0.00078 = 0.
    assert data[sc.METRIC_ABANDONED_COST] == {attrs({sc.WORKFLOW: "rulvar-orchestrate"}): 0}


def test_tools_by_outcome_guard_and_decider(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "tools")

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
    assert count_and_sum(data[sc.METRIC_TOOL_DURATION][tool("search", "ok", "none", "default")]) == (
        4,
        approx(0.094),
    )
