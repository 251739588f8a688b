"""Generated dashboards: current with the registry, reading only series the recorder writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rulvar_otel.otel.metrics import REGISTRY
from tests._metric_streams import assert_reads_only_the_registry

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "dashboards"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_dashboards", ROOT / "scripts" / "generate_dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("generate_dashboards", module)
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARDS.glob("*.json"))}


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel."""
    return [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel["targets"]]


def test_checked_in_files_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert _generator().main(["--check"]) == 0, capsys.readouterr().out


def test_check_detects_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generator = _generator()
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    monkeypatch.setattr(generator, "DASHBOARDS_DIR", tmp_path / "dashboards")
    monkeypatch.setattr(generator, "ALERTS_FILE", tmp_path / "alerts.yml")
    monkeypatch.setattr(generator, "DOCS_FILE", tmp_path / "metrics.md")
    assert generator.main([]) == 0  # writes a fresh set
    assert generator.main(["--check"]) == 0
    stale = tmp_path / "dashboards" / "rulvar-runs.json"
    stale.write_text(
        stale.read_text(encoding="utf-8").replace("Unsettled terminals", "Old title"), encoding="utf-8"
    )
    assert generator.main(["--check"]) == 1
    assert generator.main([]) == 0
    assert generator.main(["--check"]) == 0


def test_the_three_dashboards_exist_with_their_panels() -> None:
    boards = dashboards()
    assert set(boards) == {"rulvar-runs", "rulvar-orchestration", "rulvar-tools-quotas"}
    titles = {name: {panel["title"] for panel in board["panels"]} for name, board in boards.items()}
    assert {
        "Runs by status x completion",
        "Unsettled terminals",
        "Spend by model (USD)",
        "Tokens by type and model",
        "Invocation duration p50 / p95 / p99 by model",
        "Throttling next to failures",
    } <= titles["rulvar-runs"]
    assert {
        "Ledger ops per spawn",
        "Wake render size p50 / p90",
        "Escalation rate by agent type",
        "Orchestrator share p50 / p90",
        "Abandoned / reclaimed / net lost (USD)",
    } <= titles["rulvar-orchestration"]
    assert "Quota exhaustion (terminal denials)" in titles["rulvar-tools-quotas"]


def test_variables_and_datasources() -> None:
    for name, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert set(variables) == {"datasource", "workflow", "model"}, name
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for var in ("workflow", "model"):
            assert variables[var]["includeAll"] is True and variables[var]["allValue"] == ".*"
            assert_reads_only_the_registry(
                variables[var]["query"]
                .removeprefix("label_values(")
                .rstrip(")")
                .replace(",", "{}", 1)
                .split("{}")[0]
            )
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"


def test_every_panel_reads_only_registry_series_and_every_metric_is_shown() -> None:
    shown: set[str] = set()
    for board in dashboards().values():
        for _, expr in panel_queries(board):
            shown |= assert_reads_only_the_registry(expr)
    for entry in REGISTRY:
        assert shown & set(entry.prometheus_series), f"{entry.name} is on no dashboard"
