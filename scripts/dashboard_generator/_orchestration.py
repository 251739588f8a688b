"""The Rulvar / Orchestration dashboard: ledger, wakes, escalations, orchestrator share, churn cost."""

from __future__ import annotations

from dashboard_generator._panels import PanelSpec
from dashboard_generator._queries import RANGE, WF, changed, label, quantile, series, total
from rulvar_otel.otel import semconv as sc

__all__ = ["orchestration_panels"]


def orchestration_panels() -> list[PanelSpec]:
    agent_type = label(sc.AGENT_TYPE)
    net_lost = f"{series(sc.METRIC_NET_LOST_COST)}{{{WF}}}"
    return [
        PanelSpec(
            "Ledger ops per spawn",
            "Authored ledger:op count / spawn:admitted count, per run: mean and p90 across runs.",
            (
                (
                    f"{total(sc.METRIC_LEDGER_OPS_PER_SPAWN, selector=WF, window=RANGE, suffix='sum')} / "
                    f"{total(sc.METRIC_LEDGER_OPS_PER_SPAWN, selector=WF, window=RANGE, suffix='count')}",
                    "mean",
                ),
                (quantile(0.9, sc.METRIC_LEDGER_OPS_PER_SPAWN, selector=WF, window=RANGE), "p90"),
            ),
            kind="stat",
        ),
        PanelSpec(
            "Ledger writes by operation",
            "ledger:op by operation kind.",
            ((total(sc.METRIC_LEDGER_OPS, (sc.LEDGER_OP,), WF), "{{rulvar_ledger_op}}"),),
        ),
        PanelSpec(
            "Wake render size p50 / p90",
            "orchestrator:woke renderSize: is the wake digest render budget sized right?",
            (
                (quantile(0.5, sc.METRIC_WAKE_RENDER_SIZE, selector=WF), "p50"),
                (quantile(0.9, sc.METRIC_WAKE_RENDER_SIZE, selector=WF), "p90"),
            ),
        ),
        PanelSpec(
            "Escalation rate by agent type",
            "escalation:raised / spawn:admitted, grouped by agent type.",
            (
                (
                    f"{total(sc.METRIC_ESCALATIONS, (sc.AGENT_TYPE,), WF, window=RANGE)} / "
                    f"{total(sc.METRIC_SPAWNS_ADMITTED, (sc.AGENT_TYPE,), WF, window=RANGE)}",
                    f"{{{{{agent_type}}}}}",
                ),
            ),
            unit="percentunit",
            kind="stat",
        ),
        PanelSpec(
            "Orchestrator share p50 / p90",
            "CostReport orchestrator.share across runs (the last orchestrator:budget share when no "
            "outcome was known; see rulvar_orchestrator_share_source).",
            (
                (quantile(0.5, sc.METRIC_ORCHESTRATOR_SHARE, selector=WF, window=RANGE), "p50"),
                (quantile(0.9, sc.METRIC_ORCHESTRATOR_SHARE, selector=WF, window=RANGE), "p90"),
            ),
            unit="percentunit",
            kind="stat",
        ),
        PanelSpec(
            "Abandoned / reclaimed / net lost (USD)",
            "Spend under abandoned subtrees, spend recovered by node:linked reuse, and the difference.",
            (
                (total(sc.METRIC_ABANDONED_COST, selector=WF, window=RANGE), "abandoned"),
                (total(sc.METRIC_RECLAIMED_COST, selector=WF, window=RANGE), "reclaimed"),
                (f"sum ({changed(net_lost, RANGE)})", "net lost"),
            ),
            unit="currencyUSD",
            kind="stat",
        ),
        PanelSpec(
            "Spawns admitted and rejected",
            "Admission verdicts and rejection codes.",
            (
                (
                    total(sc.METRIC_SPAWNS_ADMITTED, (sc.SPAWN_VERDICT,), WF),
                    "admitted {{rulvar_spawn_verdict}}",
                ),
                (total(sc.METRIC_SPAWNS_REJECTED, (sc.SPAWN_CODE,), WF), "rejected {{rulvar_spawn_code}}"),
            ),
        ),
    ]
