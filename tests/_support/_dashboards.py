"""The generated dashboards and alert rules as tests read them, and who writes each series they read.

:func:`generator_module` loads ``scripts/generate_dashboards.py``; :func:`dashboards` reads the
checked-in dashboards and :func:`panel_queries` their panel targets. Every series a panel reads
has one writer (:data:`RECORDER`, :data:`ENGINE` or :data:`COLLECTOR`): :func:`panels_fed_by`
picks the panels a test can fill from one of them, and :func:`runnable` turns a panel query into
the PromQL Grafana sends. :data:`ALERTS` and :data:`ALERTS_TEST` are the generated alert rules
and their promtool unit tests.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rulvar_otel.otel.metrics import REGISTRY
from rulvar_otel.otel.metrics.registry import ENGINE_METRICS, SPAN_METRICS
from tests._support._promql import promql_references

__all__ = [
    "ALERTS",
    "ALERTS_TEST",
    "COLLECTOR",
    "DASHBOARDS",
    "ENGINE",
    "PROMETHEUS_DIR",
    "RECORDER",
    "dashboards",
    "data_panels",
    "generator_module",
    "panel_queries",
    "panels_fed_by",
    "query_source",
    "runnable",
    "series_sources",
    "spanmetrics_panel_queries",
]

_ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = _ROOT / "dashboards"
PROMETHEUS_DIR = _ROOT / "collector_config" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
ALERTS_TEST = PROMETHEUS_DIR / "alerts_test.yml"

# Who writes a series, so a test feeds each panel from the source that can fill it: an export of
# any run (the recorder's folds), the bundled engine where it calls a provider with a meter
# (`rulvar-otel demo` with metrics), or the collector's spanmetrics connector.
RECORDER, ENGINE, COLLECTOR = "recorder", "engine", "collector"


def generator_module() -> ModuleType:
    """``scripts/generate_dashboards.py`` loaded as the module ``generate_dashboards``."""
    spec = importlib.util.spec_from_file_location(
        "generate_dashboards", _ROOT / "scripts" / "generate_dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("generate_dashboards", module)
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    """Every checked-in dashboard by file stem."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARDS.glob("*.json"))}


def data_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that queries (row headers only group them)."""
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel."""
    return [(panel["title"], target["expr"]) for panel in data_panels(board) for target in panel["targets"]]


def series_sources() -> dict[str, str]:
    """Every Prometheus series a dashboard may read -> who writes it."""
    out: dict[str, str] = {}
    for source, entries in ((RECORDER, REGISTRY), (ENGINE, ENGINE_METRICS), (COLLECTOR, SPAN_METRICS)):
        for entry in entries:
            out.update(dict.fromkeys(entry.prometheus_series, source))
    return out


def query_source(expr: str) -> str:
    """The one source every series of ``expr`` comes from (a panel never mixes them)."""
    sources = series_sources()
    found = {sources[name] for name in promql_references(expr)[0]}
    assert len(found) == 1, f"{expr!r} reads series of {found}"
    return found.pop()


def panels_fed_by(source: str) -> list[tuple[str, str]]:
    """(dashboard / panel title, expr) of every panel target whose series ``source`` writes."""
    return [
        (f"{board_name} / {title}", expr)
        for board_name, board in dashboards().items()
        for title, expr in panel_queries(board)
        if query_source(expr) == source
    ]


def runnable(expr: str, window: str = "10m") -> str:
    """A panel query as Grafana runs it with every variable at "All" and ``window`` for both the
    rate interval and the dashboard range."""
    for variable, value in (
        ("$workflow", ".*"),
        ("$model", ".*"),
        ("$service", ".*"),
        ("$__rate_interval", window),
        ("$__range", window),
    ):
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def spanmetrics_panel_queries(window: str = "10m") -> list[tuple[str, str]]:
    """(dashboard / panel title, runnable PromQL) for every panel target that reads the
    collector's spanmetrics series: what a Prometheus scraping the agent collector must answer."""
    names = tuple(series for entry in SPAN_METRICS for series in entry.prometheus_series)
    return [
        (f"{board_name} / {title}", runnable(expr, window))
        for board_name, board in dashboards().items()
        for title, expr in panel_queries(board)
        if any(name in expr for name in names)
    ]
