"""Alert rules: promtool checks and unit tests, and every series an alert reads is in the registry."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._support import (
    ALERTS,
    ALERTS_TEST,
    PROMETHEUS_DIR,
    assert_reads_only_the_registry,
    generator_module,
    require_tool,
)


def _promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def _tests() -> list[dict[str, Any]]:
    return yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))["tests"]  # type: ignore[no-any-return]


def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", ALERTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_promtool_test_rules() -> None:
    result = _promtool("test", "rules", ALERTS_TEST.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_fails_a_broken_rule(tmp_path: Path) -> None:
    # The unit tests have teeth: alerting on the exposure-wait event type alone (any willWait) is
    # exactly the mistake the negative case exists for.
    broken = ALERTS.read_text(encoding="utf-8").replace('rulvar_will_wait="false"', 'rulvar_will_wait=~".+"')
    (tmp_path / ALERTS.name).write_text(broken, encoding="utf-8")
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    result = _promtool("test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "willWait true fires nothing" in result.stdout + result.stderr


def test_one_shot_exports_fire_only_because_born_series_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With plain increase() (what the rules used before), a series born at its final value counts
    # as nothing: both one-shot cases of the rate-based alerts must then fail.
    generator = generator_module()
    for module in ("dashboard_generator._queries", "dashboard_generator._alerts"):  # where it is read
        monkeypatch.setattr(
            sys.modules[module], "counted", lambda selector, window: f"increase({selector}[{window}])"
        )
    (tmp_path / ALERTS.name).write_text(generator.build_alerts_text(), encoding="utf-8")
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    result = _promtool("test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "a one-shot export (every series born at its final value) fires the failure-rate warning" in output
    assert "a one-shot export of a heavily throttled run" in output


def test_every_rate_based_alert_has_a_one_shot_case() -> None:
    rate_based = {"RulvarRunFailureRate", "RulvarQuotaThrottlingSaturated"}
    for name in rate_based:
        cases = [
            case
            for case in _tests()
            if case["name"].startswith("a one-shot export")
            and any(
                check["alertname"] == name and check.get("exp_alerts") for check in case["alert_rule_test"]
            )
        ]
        assert cases, name
        for case in cases:
            for item in case["input_series"]:
                values = item["values"].split()
                assert len(values) == 1 and "+" not in values[0] and "_" not in values[0], item


def test_every_alert_reads_only_registry_series() -> None:
    read = set()
    for rule in _rules():
        read |= assert_reads_only_the_registry(rule["expr"])
    assert {
        "rulvar_runs_settled_total",
        "rulvar_budget_exposure_waits_total",
        "rulvar_agent_errors_total",
    } <= read


def test_every_unit_test_series_is_a_registry_series() -> None:
    for case in _tests():
        for item in case["input_series"]:
            assert_reads_only_the_registry(item["series"])


def test_every_rule_has_a_firing_and_a_silent_case() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in _tests():
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in _rules()}
    assert names == fired, names ^ fired
    assert names == silent, names ^ silent


def test_throttling_and_superseded_terminals_are_the_only_non_failure_alerts() -> None:
    failure = {rule["alert"]: rule["labels"]["failure"] for rule in _rules()}
    assert failure.pop("RulvarQuotaThrottlingSaturated") == "false"
    assert failure.pop("RulvarSupersededTerminal") == "false"
    assert set(failure.values()) == {"true"}
    by_name = {rule["alert"]: rule for rule in _rules()}
    assert "NOT a failure" in by_name["RulvarQuotaThrottlingSaturated"]["annotations"]["description"]
    assert by_name["RulvarUnsettledTerminal"]["labels"]["severity"] == "critical"
    assert 'rulvar_will_wait="false"' in by_name["RulvarExposureDrained"]["expr"]


ALERTMANAGER = PROMETHEUS_DIR.parent / "alertmanager" / "alertmanager.yml"


def test_non_failure_alerts_route_to_the_non_paging_receiver() -> None:
    routed: dict[str, str] = {}
    for rule in _rules():
        labels = [f"{key}={value}" for key, value in {"alertname": rule["alert"], **rule["labels"]}.items()]
        result = subprocess.run(
            [require_tool("amtool"), "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        routed[rule["alert"]] = result.stdout.strip()
    assert routed.pop("RulvarQuotaThrottlingSaturated") == "capacity"
    assert routed.pop("RulvarSupersededTerminal") == "capacity"
    assert set(routed.values()) == {"page"}, routed


def test_every_rule_counts_series_born_at_their_final_value() -> None:
    # No bare rate(): every increase() sits in the born-series shape beside a last_over_time().
    for rule in _rules():
        expr = rule["expr"]
        assert "rate(" not in expr, rule["alert"]
        assert expr.count("increase(") == expr.count("last_over_time(") > 0, rule["alert"]
        assert " offset " in expr and " unless " in expr, rule["alert"]
