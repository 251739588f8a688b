"""Generated dashboards: current with the registry, reading only series the recorder writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import REGISTRY, definition
from rulvar_otel.otel.metrics.registry import (
    ENGINE_METRICS,
    SPAN_METRICS,
    SPAN_METRICS_DIMENSIONS,
    SPAN_METRICS_DURATION_UNIT,
    SPAN_METRICS_NAMESPACE,
)
from tests._support import (
    COLLECTOR,
    ENGINE,
    RECORDER,
    assert_reads_only_the_registry,
    dashboards,
    data_panels,
    generator_module,
    panel_queries,
    panels_fed_by,
    promql_references,
    query_source,
    registry_series_labels,
    spanmetrics_panel_queries,
)

ROOT = Path(__file__).resolve().parents[1]


def test_checked_in_files_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert generator_module().main(["--check"]) == 0, capsys.readouterr().out


def test_check_detects_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generator = generator_module()
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
    assert set(boards) == {"rulvar-runs", "rulvar-orchestration", "rulvar-tools-quotas", "rulvar-spans"}
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
    assert {"Span calls by kind and name", "Span latency p50 / p95 by kind and name"} <= titles[
        "rulvar-spans"
    ]


RULVAR_VARIABLES = {"datasource", "workflow", "model"}


def test_variables_and_datasources() -> None:
    for name, board in dashboards().items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        expected = {"datasource", "service"} if name == "rulvar-spans" else RULVAR_VARIABLES
        assert set(variables) == expected, name
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for var in expected - {"datasource"}:
            assert variables[var]["includeAll"] is True and variables[var]["allValue"] == ".*"
            assert_reads_only_the_registry(
                variables[var]["query"]
                .removeprefix("label_values(")
                .rstrip(")")
                .replace(",", "{}", 1)
                .split("{}")[0]
            )
        for panel in data_panels(board):
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"


def test_every_offered_variable_filters_every_series_that_carries_its_label() -> None:
    # A variable on a dashboard must never leave a panel unfiltered that it could filter: the
    # workflow variable reaches every recorder panel (every event metric carries rulvar_workflow);
    # the engine's per-request series carry no workflow, only a model.
    known = registry_series_labels()
    by_variable = {"workflow": "rulvar_workflow", "model": "gen_ai_request_model", "service": "service_name"}
    for name, board in dashboards().items():
        offered = {v["name"] for v in board["templating"]["list"]} - {"datasource"}
        for title, expr in panel_queries(board):
            for series_name in promql_references(expr)[0]:
                for variable in offered:
                    label = by_variable[variable]
                    if label not in known[series_name]:
                        continue
                    for selector in re.findall(rf"\b{series_name}(\{{[^}}]*\}})?", expr):
                        assert f'{label}=~"${variable}"' in selector, (name, title, series_name, variable)
        for title, expr in panel_queries(board):
            if query_source(expr) == RECORDER:
                assert 'rulvar_workflow=~"$workflow"' in expr, (name, title)
            elif query_source(expr) == ENGINE:
                assert 'gen_ai_request_model=~"$model"' in expr, (name, title)


def test_every_counter_read_counts_series_born_at_their_final_value() -> None:
    # No bare rate()/increase(): each one sits in the born-series shape of scripts/generate_dashboards.py.
    generator = generator_module()
    for board in dashboards().values():
        for title, expr in panel_queries(board):
            assert "rate(" not in expr, title
            # counted() pairs every increase() with a last_over_time(), changed() every delta().
            assert expr.count("increase(") + expr.count("delta(") == expr.count("last_over_time("), title
            assert "offset $__r" in expr, title
    assert generator.counted("x", "5m").count("offset 5m") == 2


def test_the_spanmetrics_panels_are_found_for_the_collector_tests() -> None:
    queries = spanmetrics_panel_queries()
    assert len(queries) >= 6
    assert all(title.startswith("rulvar-spans / ") for title, _ in queries)
    assert all("$" not in expr for _, expr in queries)


GENAI_AGENT_METRICS = (
    sc.GEN_AI_INVOKE_AGENT_DURATION,
    sc.GEN_AI_EXECUTE_TOOL_DURATION,
    sc.GEN_AI_INVOKE_WORKFLOW_DURATION,
    sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS,
    sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS,
)


def test_each_panel_reads_one_source_and_the_engine_panels_sit_in_their_own_row() -> None:
    assert {query_source(expr) for board in dashboards().values() for _, expr in panel_queries(board)} == {
        RECORDER,
        ENGINE,
        COLLECTOR,
    }
    runs = dashboards()["rulvar-runs"]["panels"]
    rows = [index for index, panel in enumerate(runs) if panel["type"] == "row"]
    assert [runs[index]["title"] for index in rows] == [
        "Agents, tools and workflows (GenAI conventions)",
        "Model requests (engine, per provider request)",
    ]
    after = {query_source(t["expr"]) for panel in runs[rows[1] + 1 :] for t in panel.get("targets", ())}
    before = {query_source(t["expr"]) for panel in runs[: rows[1]] for t in panel.get("targets", ())}
    assert (before, after) == ({RECORDER}, {ENGINE})
    # The GenAI row reads exactly the conventions' agent-level metrics, each of them.
    genai_row = runs[rows[0] + 1 : rows[1]]
    read = {name for panel in genai_row for t in panel["targets"] for name in promql_references(t["expr"])[0]}
    assert {name.rsplit("_", 1)[0] for name in read} == {
        definition(name).prometheus_name for name in GENAI_AGENT_METRICS
    }
    assert {title for title, _ in panels_fed_by(ENGINE)} == {
        "rulvar-runs / Request tokens by model and type",
        "rulvar-runs / Model requests by model and error type",
        "rulvar-runs / Request duration p50 / p95 by model and operation",
    }


def test_every_latency_and_cost_panel_shows_exemplars_and_no_counter_panel_does() -> None:
    """A histogram quantile links each point to a trace; a counter has no exemplars to show."""
    with_exemplars = 0
    for board in dashboards().values():
        for panel in board["panels"]:
            for target in panel.get("targets", ()):
                quantile = "histogram_quantile" in target["expr"] and panel["type"] == "timeseries"
                assert target.get("exemplar", False) is quantile, (board["uid"], panel["title"])
                with_exemplars += quantile
    titles = {p["title"] for p in dashboards()["rulvar-runs"]["panels"]}
    assert {"Run cost p50 / p95 (USD)", "Agent duration p95 by agent type"} <= titles
    assert with_exemplars >= 10


def test_spanmetrics_names_match_the_shipped_connector_config() -> None:
    config = yaml.safe_load((ROOT / "collector_config" / "otelcol-agent.yaml").read_text(encoding="utf-8"))
    connector = config["connectors"]["span_metrics"]
    assert connector.get("namespace") == SPAN_METRICS_NAMESPACE
    assert connector.get("histogram", {}).get("unit", "ms") == SPAN_METRICS_DURATION_UNIT
    assert [d["name"] for d in connector["dimensions"]] == list(SPAN_METRICS_DIMENSIONS)
    names = {series for entry in SPAN_METRICS for series in entry.prometheus_series}
    assert names == {
        "traces_span_metrics_calls_total",
        "traces_span_metrics_duration_milliseconds_bucket",
        "traces_span_metrics_duration_milliseconds_sum",
        "traces_span_metrics_duration_milliseconds_count",
    }


def test_every_panel_reads_only_registry_series_and_every_metric_is_shown() -> None:
    shown: set[str] = set()
    for board in dashboards().values():
        for _, expr in panel_queries(board):
            shown |= assert_reads_only_the_registry(expr)
    for entry in (*REGISTRY, *ENGINE_METRICS, *SPAN_METRICS):
        assert shown & set(entry.prometheus_series), f"{entry.name} is on no dashboard"


def test_dashboards_are_built_for_grafana_11_and_12() -> None:
    # The pinned SDK build targets Grafana 11.6; the Grafana-10.1 build wrote schemaVersion 36,
    # `style: dark` and `options: null`, which Grafana 11/12 migrate on every load.
    for name, board in dashboards().items():
        assert board["schemaVersion"] >= 41, name
        assert "style" not in board, name
        text = json.dumps(board)
        assert '"options": null' not in text, name
