"""The reducers over the reference streams and hand-built ones, figures computed by hand."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rulvar_otel.core.events import parse_event
from rulvar_otel.core.reducers import (
    reduce_critical_path,
    reduce_invocation_table,
    synthesize_span_class,
    union_length,
)
from tests._support import events, stream_names

RUN = "r-synth"


def _ev(seq: int, ms: int, span: str, kind: str, **body: Any) -> dict[str, Any]:
    # ms is an offset from 12:00:00.000 on a fixed day: hand arithmetic stays readable.
    ts = f"2026-01-01T12:{ms // 60000:02d}:{(ms // 1000) % 60:02d}.{ms % 1000:03d}Z"
    return {"runId": RUN, "seq": seq, "ts": ts, "spanId": span, "type": kind, **body}


def test_phases_rows_pair_by_invocation_and_sum_to_the_agent_total() -> None:
    table = reduce_invocation_table(events("phases"))
    assert [row.span_id for row in table.agents] == ["s2"]
    row = table.agents[0]
    assert row.open is False and row.status == "ok" and row.role == "loop"
    assert [(p.invocation, p.role, p.model) for p in row.phases] == [
        (1, "loop", "fake:model"),
        (2, "summarize", "fake:summary"),
        (3, "summarize", "fake:summary"),
        (4, "finalize", "fake:final"),
        (5, "extract", "fake:extract"),
    ]
    # The file's phase:end durations: loop 3, summarize 1 and 0, finalize 1, extract 0.
    assert [p.duration_ms for p in row.phases] == [3.0, 1.0, 0.0, 1.0, 0.0]
    # 240010 + 10 + 10 + 30 + 7 input tokens, the agent:end total.
    assert sum((p.usage or {})["inputTokens"] for p in row.phases) == 240067
    assert row.usage is not None and row.usage["inputTokens"] == 240067
    assert row.usage["outputTokens"] == 25 + 5 + 5 + 12 + 3 == 50
    # agent:start at .444 and agent:end at .449.
    assert row.duration_ms == 5.0
    summarize = table.by_role["summarize"]
    assert summarize.phases == 2
    assert summarize.usage["inputTokens"] == 20 and summarize.usage["outputTokens"] == 10
    assert summarize.cost_usd == pytest.approx(0.00006 + 0.00006)
    assert summarize.cost_basis == "per-call"
    assert set(table.by_role) == {"loop", "summarize", "finalize", "extract"}
    assert sum(b.cost_usd for b in table.by_role.values()) == pytest.approx(row.cost_usd)
    assert table.total_cost_usd == pytest.approx(0.240567)
    assert table.open_agents == 0 and table.open_phases == 0


def test_error_stream_keeps_retries_and_the_error_status() -> None:
    table = reduce_invocation_table(events("error"))
    flaky = next(row for row in table.agents if row.agent_type == "flaky")
    assert flaky.status == "error"
    assert flaky.retry_count == 1
    assert flaky.usage_approx is True
    assert flaky.phases[0].outcome == "error" and flaky.phases[0].retries == 1


def test_a_missing_cost_basis_never_claims_per_call() -> None:
    # synthetic-invocation-phases carries no costBasis field anywhere.
    table = reduce_invocation_table(events("synthetic-invocation-phases"))
    row = table.agents[0]
    assert row.cost_basis == "aggregate-estimate"
    assert {b.cost_basis for b in table.by_role.values()} == {"aggregate-estimate"}
    assert row.retry_count is not None
    # One aggregate-estimate pair degrades a per-call bucket.
    evs = events("phases")
    for event in evs:
        if event["type"] == "agent:phase:end" and event["invocation"] == 3:
            del event["costBasis"]
    degraded = reduce_invocation_table(evs)
    assert degraded.by_role["summarize"].cost_basis == "aggregate-estimate"
    assert degraded.by_role["loop"].cost_basis == "per-call"


def test_live_and_replayed_emissions_reduce_to_identical_usage_and_cost() -> None:
    live = reduce_invocation_table(events("suspension-live")).agents[0]
    replayed_table = reduce_invocation_table(events("suspension-dryrun"))
    replayed = replayed_table.agents[0]
    assert replayed.replayed is True and live.replayed is False
    assert (replayed.usage, replayed.cost_usd, replayed.cost_basis) == (
        live.usage,
        live.cost_usd,
        live.cost_basis,
    )
    assert [(p.role, p.model, p.usage, p.cost_usd) for p in replayed.phases] == [
        (p.role, p.model, p.usage, p.cost_usd) for p in live.phases
    ]
    # Retries are live-only telemetry: absent on the replayed pair, never invented.
    assert replayed.phases[0].retries is None


def test_typed_events_reduce_like_wire_dicts() -> None:
    wire = events("tools")
    typed = [parse_event(e) for e in wire]
    assert reduce_invocation_table(typed) == reduce_invocation_table(wire)
    assert reduce_critical_path(typed) == reduce_critical_path(wire)


def test_truncated_stream_leaves_rows_and_phases_open() -> None:
    table = reduce_invocation_table(events("synthetic-truncated-ok"))
    (row,) = table.agents
    assert row.open is True and row.status is None and row.usage is None and row.cost_usd is None
    assert row.duration_ms is None
    assert row.phases[0].open is True and row.phases[0].duration_ms is None
    assert table.open_agents == 1 and table.open_phases == 1
    path = reduce_critical_path(events("synthetic-truncated-ok"))
    assert path.run_wall_ms is None and path.post_fan_in_ms is None and path.post_fan_in is None
    assert path.post_fan_in_share is None and path.synthesis_share is None


def test_legacy_duplicate_agent_start_keeps_the_first_opener() -> None:
    table = reduce_invocation_table(events("synthetic-pre-rv207-duplicate-agent-start"))
    (row,) = table.agents
    assert row.role == "loop" and row.model == "fake:model"
    assert row.duration_ms == 69.0  # .001 -> .070, not the duplicate's .050


def test_orchestrate_critical_path_by_hand() -> None:
    path = reduce_critical_path(events("orchestrate"))
    # run:start .609, run:end .620; the last worker (s16) settles at .619.
    assert path.run_wall_ms == 11.0
    assert path.post_fan_in_ms == 1.0
    assert path.post_fan_in_share == pytest.approx(1 / 11)
    assert path.worker_spans == 3
    assert path.synthesis_ms == 0.0 and path.composition_spans == 0
    assert path.first_candidate_ms is None and path.last_candidate_ms is None
    assert path.segments == 1
    breakdown = path.post_fan_in
    assert breakdown is not None
    # Coordinator tools touching [.619, .620]: await_all ending .619, finish ending .620 (1 ms).
    assert breakdown.coordination_tool_calls_by_name == {"await_all": 1, "finish": 1}
    assert breakdown.coordination_tool_ms_by_name == {"await_all": 0.0, "finish": 1.0}
    assert breakdown.coordination_model_ms_by_phase == {"orchestrate": 1.0}
    # The finish tool runs inside the orchestrate activation: no model-only time is left.
    assert breakdown.coordination_model_only_ms == 0.0
    assert breakdown.covered_ms == 1.0 and breakdown.residue_ms == 0.0


def _synthesis_stream() -> list[dict[str, Any]]:
    """A coordinator, two workers, then six synthesize spans of every class, hand timed (ms)."""
    evs = [
        _ev(0, 0, "s0", "run:start", workflow="wf", resumed=False),
        _ev(1, 0, "c", "agent:start", parentSpanId="s0", agentType="", model="m", role="orchestrate"),
        _ev(2, 100, "w1", "agent:start", parentSpanId="s0", agentType="worker", model="m", role="loop"),
        _ev(3, 150, "w2", "agent:start", parentSpanId="s0", agentType="worker", model="m", role="loop"),
        _ev(4, 900, "w1", "agent:end", agentType="worker", status="ok", usage={}, costUsd=0.1, entryRef=1),
        _ev(5, 1000, "w2", "agent:end", agentType="worker", status="ok", usage={}, costUsd=0.1, entryRef=2),
        # Composition 1000 -> 1400 (unlabelled), note 1400 -> 1500.
        _ev(6, 1000, "y1", "agent:start", agentType="s", model="m", role="synthesize"),
        _ev(7, 1400, "y1", "agent:end", agentType="s", status="ok", usage={}, costUsd=0, entryRef=3),
        _ev(
            8, 1400, "y2", "agent:start", agentType="s", label="synthesis-note", model="m", role="synthesize"
        ),
        _ev(9, 1500, "y2", "agent:end", agentType="s", status="ok", usage={}, costUsd=0, entryRef=4),
        # Claim judge draft 1500 -> 1600, final pass 1600 -> 1650.
        _ev(
            10,
            1500,
            "j1",
            "agent:start",
            agentType="s",
            label="claim-consistency-judge",
            model="m",
            role="synthesize",
        ),
        _ev(11, 1600, "j1", "agent:end", agentType="s", status="ok", usage={}, costUsd=0, entryRef=5),
        _ev(
            12,
            1600,
            "j2",
            "agent:start",
            agentType="s",
            label="claim-consistency-judge-final",
            model="m",
            role="synthesize",
        ),
        _ev(13, 1650, "j2", "agent:end", agentType="s", status="ok", usage={}, costUsd=0, entryRef=6),
        # Citation judge 1650 -> 1700, an unknown label 1700 -> 1720.
        _ev(
            14,
            1650,
            "k1",
            "agent:start",
            agentType="s",
            label="citation-entailment-judge",
            model="m",
            role="synthesize",
        ),
        _ev(15, 1700, "k1", "agent:end", agentType="s", status="ok", usage={}, costUsd=0, entryRef=7),
        _ev(16, 1700, "u1", "agent:start", agentType="s", label="mystery-pass", model="m", role="synthesize"),
        _ev(
            17,
            1720,
            "u1",
            "agent:end",
            agentType="s",
            status="ok",
            usage={},
            costUsd=0,
            entryRef=8,
            hostRejected=True,
        ),
        # Final composition 1720 -> 1900.
        _ev(
            18,
            1720,
            "y3",
            "agent:start",
            agentType="s",
            label="final-composition",
            model="m",
            role="synthesize",
        ),
        _ev(19, 1900, "y3", "agent:end", agentType="s", status="ok", usage={}, costUsd=0, entryRef=9),
        # Coordinator activation [950, 1950] with tools [980, 1020] and [1930, 1950] inside it.
        _ev(20, 1020, "c", "tool:end", toolName="get_child_result", outcome="ok", durationMs=40),
        _ev(21, 1950, "c", "tool:end", toolName="finish", outcome="ok", durationMs=20),
        _ev(
            22,
            1950,
            "c",
            "agent:phase:end",
            agentType="",
            role="orchestrate",
            model="m",
            invocation=1,
            durationMs=1000,
            usage={},
            costUsd=0,
            outcome="ok",
        ),
        _ev(23, 1960, "c", "agent:end", agentType="", status="ok", usage={}, costUsd=0, entryRef=10),
        _ev(24, 2000, "s0", "run:end", status="ok", totalUsd=0.2),
    ]
    return evs


def test_synthesize_split_post_fan_in_and_milestones_by_hand() -> None:
    path = reduce_critical_path(_synthesis_stream())
    assert path.run_wall_ms == 2000.0
    assert path.worker_spans == 2
    assert path.post_fan_in_ms == 1000.0  # last worker settles at 1000, run:end at 2000
    assert path.post_fan_in_share == 0.5
    assert path.final_composition_ms == 400 + 100 + 180
    assert path.composition_spans == 3
    assert path.semantic_judge_ms == 150 and path.draft_judge_ms == 100 and path.final_judge_ms == 50
    assert path.judge_spans == 2
    assert path.citation_judge_ms == 50 and path.citation_judge_spans == 1
    assert path.unclassified_synthesis_ms == 20 and path.unclassified_synthesis_spans == 1
    assert path.synthesis_ms == 680 + 150 + 50 + 20
    assert path.synthesis_share == pytest.approx(900 / 2000)
    # Compositions end at 1400, 1500 and 1900; the judges never count as candidates.
    assert path.first_candidate_ms == 1400.0 and path.last_candidate_ms == 1900.0
    assert path.host_rejected_spans == 1
    b = path.post_fan_in
    assert b is not None
    # Window [1000, 2000]: activation [950, 1950] clips to 950 ms; tools clip to 20 + 20.
    assert b.coordination_model_ms == 950.0
    assert b.coordination_model_ms_by_phase == {"orchestrate": 950.0}
    assert b.coordination_tool_ms_by_name == {"get_child_result": 20.0, "finish": 20.0}
    assert b.coordination_tool_calls_by_name == {"get_child_result": 1, "finish": 1}
    assert b.coordination_model_only_ms == 950 - 20 - 20
    assert b.synthesis_ms == 900.0
    assert (
        b.final_composition_ms,
        b.semantic_judge_ms,
        b.citation_judge_ms,
        b.unclassified_synthesis_ms,
    ) == (
        680.0,
        150.0,
        50.0,
        20.0,
    )
    # Covered: [1000, 1950] from the activation plus [1000, 1900] synthesis: 950 ms of 1000.
    assert b.covered_ms == 950.0
    assert b.residue_ms == 50.0 and b.residue_share == 0.05


def test_critical_path_without_workers_leaves_post_fan_in_absent() -> None:
    evs = [e for e in _synthesis_stream() if e["spanId"] not in ("w1", "w2")]
    path = reduce_critical_path(evs)
    assert path.worker_spans == 0
    assert path.post_fan_in_ms is None and path.post_fan_in is None and path.post_fan_in_share is None
    assert path.run_wall_ms == 2000.0
    data = path.to_json_dict()
    assert "postFanInMs" not in data and "postFanIn" not in data and data["runWallMs"] == 2000.0


def test_synthesize_classifier() -> None:
    assert synthesize_span_class(None) == "composition"
    assert synthesize_span_class("final-composition-2") == "composition"
    assert synthesize_span_class("synthesis-note") == "composition"
    assert synthesize_span_class("claim-consistency-judge-final") == "claim-judge"
    assert synthesize_span_class("citation-entailment-judge") == "citation-judge"
    assert synthesize_span_class("claim-consistency-judgement") == "unclassified"


def test_union_length() -> None:
    assert union_length([(0, 10), (5, 15), (20, 30), (30, 30), (25, 26)]) == 25
    assert union_length([]) == 0


def test_multi_segment_stream_counts_segments() -> None:
    path = reduce_critical_path(events("suspension-live") + events("suspension-dryrun"))
    assert path.segments == 2
    table = reduce_invocation_table(events("suspension-live") + events("suspension-dryrun"))
    assert len(table.agents) == 3  # the live agent, its replayed re-emission, the shipper


def test_json_form_is_camel_case_and_leaves_absent_figures_out() -> None:
    data = reduce_invocation_table(events("synthetic-truncated-ok")).to_json_dict()
    row = data["agents"][0]
    assert row["spanId"] == "s2" and row["open"] is True
    assert "usage" not in row and "costUsd" not in row and "status" not in row


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(stream_names()), cut=st.integers(min_value=0, max_value=60), data=st.data())
def test_any_prefix_reduces_without_error(name: str, cut: int, data: st.DataObject) -> None:
    if name == "large":
        name = "tools"
    evs = events(name)
    prefix = evs[: min(cut, len(evs))]
    # Also damage one event's fields: a view must degrade, never raise.
    if prefix and data.draw(st.booleans()):
        victim = prefix[data.draw(st.integers(min_value=0, max_value=len(prefix) - 1))]
        for key in list(victim):
            if key not in ("type",) and data.draw(st.booleans()):
                victim[key] = data.draw(st.sampled_from([None, "x", -1, 1.5, [], {}]))
    table = reduce_invocation_table(prefix)
    path = reduce_critical_path(prefix)
    assert table.open_agents <= len(table.agents)
    assert path.synthesis_ms >= 0
    if path.post_fan_in is not None:
        assert path.post_fan_in.residue_ms >= 0
