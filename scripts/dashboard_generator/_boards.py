"""The dashboards the generator writes, in order, and the one call that builds them all."""

from __future__ import annotations

from typing import Final

from dashboard_generator._orchestration import orchestration_panels
from dashboard_generator._panels import DashboardSpec, build_dashboard, rulvar_variables
from dashboard_generator._runs import runs_panels
from dashboard_generator._spans import spans_panels, spans_variables
from dashboard_generator._tools_quotas import tools_panels

__all__ = ["DASHBOARDS", "build_dashboards"]

DASHBOARDS: Final = (
    DashboardSpec("rulvar-runs", "Rulvar / Runs", rulvar_variables, runs_panels),
    DashboardSpec("rulvar-orchestration", "Rulvar / Orchestration", rulvar_variables, orchestration_panels),
    DashboardSpec("rulvar-tools-quotas", "Rulvar / Tools and quotas", rulvar_variables, tools_panels),
    DashboardSpec("rulvar-spans", "Rulvar / Spans (collector spanmetrics)", spans_variables, spans_panels),
)


def build_dashboards() -> dict[str, str]:
    """File name (``<uid>.json``) -> JSON text of every dashboard."""
    return {f"{spec.uid}.json": build_dashboard(spec) for spec in DASHBOARDS}
