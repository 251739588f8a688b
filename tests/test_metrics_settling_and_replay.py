"""Metric folds at the edges of a run: replayed history, unsettled, superseded and truncated
terminals, determinism warnings, the adaptive stream, several runs, and ``record_metrics`` over a handle."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.errors import ConfigError, RunRejectedError
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import record_metrics
from rulvar_otel.testing import metric_points
from tests._support import (
    adaptive_outcome,
    adaptive_stream,
    attrs,
    build_stream,
    count_and_sum,
    events,
    feed,
    fold_reference,
    outcome,
    phase_attributes,
    run_settled_key,
    unsettled_quota_stream,
)

approx = pytest.approx

RUN = sc.METRIC_RUNS_SETTLED


def test_replayed_history_never_counts_twice(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "suspension-dryrun")
    # Every agent, phase and tool event of the dry run is replayed: only the terminal counts.
    for absent in (
        sc.METRIC_INVOCATION_TOKEN_USAGE,
        sc.METRIC_INVOCATION_DURATION,
        sc.METRIC_AGENT_INVOCATIONS,
        sc.METRIC_TOOL_CALLS,
        sc.METRIC_SPEND,
    ):
        assert absent not in data, absent
    assert data[RUN] == {run_settled_key("hitl", "ok"): 1}


def test_replayed_phase_durations_never_enter_histograms(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    stream = events("minimal")
    for event in stream:
        if event["type"].startswith("agent:"):
            event["replayed"] = True
            if event["type"] == "agent:phase:end":
                event["durationMs"] = 0
    feed(meter, stream, outcome("minimal"))
    data = metric_points(reader)
    assert sc.METRIC_INVOCATION_DURATION not in data and sc.METRIC_AGENT_DURATION not in data


def test_unsettled_terminal(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "unsettled")
    assert data[RUN] == {run_settled_key("demo", "ok", settled=False): 1}


def test_a_superseded_terminal_keeps_its_reason_and_any_other_reason_is_bounded(
    meter_and_reader: Any,
) -> None:
    meter, reader = meter_and_reader
    for run_id, reason in (("syn-sup", "superseded"), ("syn-odd", "a long free-text reason")):
        end = {"type": "run:end", "status": "ok", "totalUsd": 0, "settled": False, "settledReason": reason}
        start = {"type": "run:start", "workflow": "w", "resumed": True}
        feed(meter, build_stream(run_id, [(0.0, "s0", start), (1.0, "s0", end)]))
    assert metric_points(reader)[RUN] == {
        run_settled_key("w", "ok", settled=False, reason="superseded"): 1,
        run_settled_key("w", "ok", settled=False, reason="other"): 1,
    }


def test_determinism(meter_and_reader: Any) -> None:
    data = fold_reference(meter_and_reader, "determinism")
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


def test_truncated_stream_counts_the_known_outcome(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    feed(meter, events("minimal")[:-1], outcome("minimal"))
    data = metric_points(reader)
    assert data[RUN] == {run_settled_key("review", "ok"): 1}
    assert sc.METRIC_RUN_DURATION not in data  # no run:end, no wall time


def test_adaptive_stream_without_an_outcome(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    feed(meter, adaptive_stream())
    data = metric_points(reader)
    planner = attrs({sc.WORKFLOW: "planner"})
    assert count_and_sum(data[sc.METRIC_LEDGER_OPS_PER_SPAWN][planner]) == (1, 2.0)  # 4 ops / 2 spawns
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
    assert count_and_sum(data[sc.METRIC_WAKE_RENDER_SIZE][planner]) == (1, 3000)
    budget_share = attrs({sc.WORKFLOW: "planner", sc.SHARE_SOURCE: "orchestrator_budget"})
    assert count_and_sum(data[sc.METRIC_ORCHESTRATOR_SHARE][budget_share]) == (1, approx(0.2))
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
    assert data[RUN] == {run_settled_key("planner", "ok", "partial"): 1}
    assert count_and_sum(data[sc.METRIC_RUN_DURATION][attrs({sc.WORKFLOW: "planner", sc.STATUS: "ok"})]) == (
        1,
        approx(10.0),
    )

    def agent(kind: str, status: str, model: str) -> Any:
        return attrs(
            {sc.WORKFLOW: "planner", sc.AGENT_TYPE: kind, sc.STATUS: status, sc.GEN_AI_REQUEST_MODEL: model}
        )

    durations = data[sc.METRIC_AGENT_DURATION]
    assert count_and_sum(durations[agent("researcher", "error", "small")]) == (1, approx(1.5))
    assert count_and_sum(durations[agent("writer", "ok", "small")]) == (1, approx(3.0))
    assert count_and_sum(durations[agent("unknown", "ok", "big")]) == (1, approx(8.9))
    op = data[sc.METRIC_INVOCATION_DURATION]
    assert count_and_sum(
        op[attrs(phase_attributes("planner", "acme:small", "loop", **{sc.ERROR_TYPE: "_OTHER"}))]
    ) == (
        1,
        approx(1.5),
    )
    assert count_and_sum(op[attrs(phase_attributes("planner", "acme:small", "loop"))]) == (1, approx(2.5))
    tokens = data[sc.METRIC_INVOCATION_TOKEN_USAGE]
    assert count_and_sum(
        tokens[attrs(phase_attributes("planner", "acme:small", "loop", **{sc.GEN_AI_TOKEN_TYPE: "input"}))]
    ) == (2, 100)
    assert count_and_sum(
        tokens[
            attrs(phase_attributes("planner", "acme:big", "orchestrate", **{sc.GEN_AI_TOKEN_TYPE: "output"}))
        ]
    ) == (
        1,
        120,
    )


def test_adaptive_stream_with_the_cost_report(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    feed(meter, adaptive_stream(), adaptive_outcome())
    data = metric_points(reader)
    report_share = attrs({sc.WORKFLOW: "planner", sc.SHARE_SOURCE: "cost_report"})
    assert data[sc.METRIC_ORCHESTRATOR_SHARE].keys() == {report_share}
    assert count_and_sum(data[sc.METRIC_ORCHESTRATOR_SHARE][report_share]) == (1, approx(0.3))
    assert data[sc.METRIC_ABANDONED_COST] == {attrs({sc.WORKFLOW: "planner"}): approx(0.5)}


def test_runs_accumulate_across_recorders(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    feed(meter, events("quota"), outcome("quota"))
    feed(meter, events("quota"), outcome("quota"))
    feed(meter, unsettled_quota_stream(), None)
    data = metric_points(reader)
    assert data[RUN][run_settled_key("throttled", "ok")] == 2
    assert data[RUN][run_settled_key("solo", "ok", settled=False)] == 1
    denial = {
        sc.GEN_AI_REQUEST_MODEL: "model",
        sc.GEN_AI_PROVIDER_NAME: "fake",
        sc.QUOTA_DIMENSION: "tokens",
    }
    assert data[sc.METRIC_QUOTA_DENIALS][attrs({sc.WORKFLOW: "throttled", **denial})] == 4


# --- record_metrics over a handle ---------------------------------------------------------------


async def test_record_metrics_over_a_handle(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    await record_metrics(handle_from_events(events("orchestrate"), outcome("orchestrate")), meter)
    data = metric_points(reader)
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert math.isclose(count_and_sum(next(iter(share.values())))[1], 0.03)


async def test_record_metrics_survives_a_rejecting_result(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    rejected = outcome("unsettled")
    assert isinstance(rejected, RunRejectedError)
    await record_metrics(handle_from_events(events("unsettled"), rejected), meter)
    assert metric_points(reader)[RUN] == {run_settled_key("demo", "ok", settled=False): 1}


async def test_record_metrics_refuses_a_bad_pattern_before_recording(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    with pytest.raises(ConfigError, match="patterns"):
        await record_metrics(handle_from_events(events("minimal")), meter, patterns=["("])
    assert metric_points(reader) == {}
