"""What the bundled engine's reference scenarios settle with: masking, determinism warnings,
budget exhaustion, cancellation and quota denials, beyond the shape the reference comparison checks.
"""

from __future__ import annotations

import pytest

from tests._support import ENGINE_SCENARIOS, run_scenario


def test_secrets_are_masked_in_events_but_not_in_the_outcome() -> None:
    events, outcome = run_scenario(ENGINE_SCENARIOS["secrets"])
    text = str(events)
    for secret in ("AKIAIOSFODNN7EXAMPLE", "sk-abc123def456ghi789jkl012", "ghp_abcdefghijklmnop"):
        assert secret not in text
    assert "AKIAIOSFODNN7EXAMPLE" in str(outcome.value)


def test_determinism_warnings_name_the_workflow_frame() -> None:
    events, _ = run_scenario(ENGINE_SCENARIOS["determinism"])
    warnings = [e for e in events if e["type"] == "determinism:warning"]
    assert [(w["category"], w["provenance"]) for w in warnings] == [
        ("bare-date-now", "workflow"),
        ("bare-math-random", "workflow"),
    ]
    # The frame is the workflow's own source line, wherever the scenario is defined.
    workflow_file = ENGINE_SCENARIOS["determinism"].__code__.co_filename
    assert all(w["file"] == workflow_file and w["line"] > 0 for w in warnings)
    assert "nondeterministic" in warnings[0]["frame"]


def test_exhausted_refuses_admission_and_reports_full_cost() -> None:
    events, outcome = run_scenario(ENGINE_SCENARIOS["exhausted"])
    assert outcome.status == "exhausted"
    assert isinstance(outcome.error, dict) and outcome.error["code"] == "budget_exhausted"
    updates = [e for e in events if e["type"] == "budget:update"]
    assert updates[0]["remainingUsd"] == 0.5 and updates[-1]["remainingUsd"] == 0
    assert [e["type"] for e in events].count("agent:start") == 1
    assert isinstance(outcome.cost, dict) and outcome.cost["totalUsd"] == pytest.approx(0.6)


def test_cancelled_settles_with_both_agents_cancelled() -> None:
    events, outcome = run_scenario(ENGINE_SCENARIOS["cancelled"])
    assert outcome.status == "cancelled"
    ends = [e for e in events if e["type"] == "agent:end"]
    assert {e["status"] for e in ends} == {"cancelled"} and all(e["usageApprox"] for e in ends)
    assert isinstance(outcome.error, dict) and outcome.error["message"] == "operator stop"


def test_quota_denials_are_counted_on_agent_end() -> None:
    events, _ = run_scenario(ENGINE_SCENARIOS["quota"])
    end = next(e for e in events if e["type"] == "agent:end")
    assert end["quotaDenials"] == {"total": 2, "requests": 0, "tokens": 2, "recovered": 1}
    assert not [e for e in events if e["type"] == "agent:error"]
