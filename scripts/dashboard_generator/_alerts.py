"""The Prometheus alert rules (collector_config/prometheus/alerts.yml), from the registry's series.

Every rule counts its window with the same born-series shape the panels use (``counted``), and
carries ``severity``, ``failure`` (is it a failure, or a healthy signal such as throttling) and
``source`` labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import yaml

from dashboard_generator._queries import counted, label, series, total
from rulvar_otel.otel import semconv as sc

__all__ = ["THROTTLING_PER_MINUTE", "THROTTLING_WINDOW_MINUTES", "build_alert_rules", "build_alerts_text"]


def happened(selector: str, by: Sequence[str], window: str) -> str:
    """Fires while the selected counter counted anything in ``window`` (a series born there too)."""
    group = ", ".join(label(a) for a in by)
    return f"sum by ({group}) ({counted(selector, window)}) > 0"


def ref(attribute: str) -> str:
    """An alert template reference to the label ``attribute`` becomes."""
    return "{{ $labels." + label(attribute) + " }}"


def _rule(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    for_: str = "0m",
    failure: bool = True,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "failure": "true" if failure else "false", "source": "rulvar"},
        "annotations": {"summary": summary, "description": description},
    }


# Sustained quota throttling: more than 30 denials a minute, averaged over 15 minutes.
THROTTLING_PER_MINUTE: Final = 30
THROTTLING_WINDOW_MINUTES: Final = 15


def build_alert_rules() -> dict[str, Any]:
    runs = series(sc.METRIC_RUNS_SETTLED)
    status, settled, completion = label(sc.STATUS), label(sc.RUN_SETTLED), label(sc.RUN_COMPLETION)
    reason = label(sc.RUN_SETTLED_REASON)
    errors = series(sc.METRIC_AGENT_ERRORS)
    error_class, will_retry = label(sc.ERROR_CLASS), label(sc.WILL_RETRY)
    model = label(sc.GEN_AI_REQUEST_MODEL)
    throttling_limit = THROTTLING_PER_MINUTE * THROTTLING_WINDOW_MINUTES
    throttling_window = f"{THROTTLING_WINDOW_MINUTES}m"
    failed = f'{status}=~"error|exhausted"'
    rules = [
        _rule(
            "RulvarUnsettledTerminal",
            happened(f'{runs}{{{settled}="false", {reason}!="superseded"}}', (sc.WORKFLOW, sc.STATUS), "15m"),
            "critical",
            f"A run terminal of {ref(sc.WORKFLOW)} failed to settle",
            "Settlement failed: nothing durable records this terminal (settled=false). Treat it as NOT "
            "green whatever the status literal says, and resume the run: resuming re-settles it by replay.",
        ),
        _rule(
            "RulvarSupersededTerminal",
            happened(f'{runs}{{{settled}="false", {reason}="superseded"}}', (sc.WORKFLOW,), "15m"),
            "info",
            f"A stale run terminal of {ref(sc.WORKFLOW)} was superseded",
            "A successor owns settlement and this stale terminal is withheld (settled=false, reason "
            "superseded). No resume is needed: read the successor's terminal. Frequent ones mean two "
            "hosts drive the same run.",
            failure=False,
        ),
        _rule(
            "RulvarRunFailureRate",
            f"{total(sc.METRIC_RUNS_SETTLED, (sc.WORKFLOW,), failed, '30m')} / "
            f"{total(sc.METRIC_RUNS_SETTLED, (sc.WORKFLOW,), window='30m')} > 0.2",
            "warning",
            f"More than 20% of {ref(sc.WORKFLOW)} runs end in error or exhausted",
            "Share of run terminals with status error or exhausted over 30 minutes.",
            for_="10m",
        ),
        _rule(
            "RulvarRunAcceptedPartial",
            happened(f'{runs}{{{status}="ok", {completion}="partial"}}', (sc.WORKFLOW,), "30m"),
            "warning",
            f"A {ref(sc.WORKFLOW)} run was accepted with completion=partial",
            "status ok with completion partial is an accepted degraded run (salvaged children, waived "
            "evidence floors): not a full success.",
        ),
        _rule(
            "RulvarExposureDrained",
            happened(
                f'{series(sc.METRIC_EXPOSURE_WAITS)}{{{label(sc.WILL_WAIT)}="false"}}',
                (sc.EXPOSURE_SCOPE, sc.GEN_AI_REQUEST_MODEL),
                "15m",
            ),
            "critical",
            "The in-flight exposure cap drained a root turn (will_wait=false)",
            "budget:exposure-wait with willWait false settles the forced-finish partial: a genuine terminal. "
            "willWait true is healthy waiting and never fires this alert.",
        ),
        _rule(
            "RulvarQuotaExhausted",
            happened(f'{errors}{{{error_class}="quota_exhausted"}}', (sc.AGENT_TYPE,), "15m"),
            "critical",
            f"Quota denials exhausted the denial budget of a {ref(sc.AGENT_TYPE)} agent",
            "The engine's exhaustion error after repeated quota denials: the throttling turned into a "
            "failure.",
        ),
        _rule(
            "RulvarQuotaThrottlingSaturated",
            f"{total(sc.METRIC_QUOTA_DENIALS, (sc.GEN_AI_REQUEST_MODEL,), window=throttling_window)}"
            f" > {throttling_limit}",
            "warning",
            f"Quota throttling on {{{{ $labels.{model} }}}} is saturated (not a failure)",
            f"More than {throttling_limit} pre-wire quota denials within {THROTTLING_WINDOW_MINUTES} minutes "
            f"({THROTTLING_PER_MINUTE} a minute), for 5 minutes. Each denial is a healthy wait that retries; "
            "this is a capacity signal, NOT a failure.",
            for_="5m",
            failure=False,
        ),
        _rule(
            "RulvarAgentErrors",
            happened(
                f'{errors}{{{error_class}="error", {will_retry}="false"}}',
                (sc.AGENT_TYPE, sc.ERROR_TYPE),
                "15m",
            ),
            "warning",
            f"{ref(sc.AGENT_TYPE)} agents fail with {ref(sc.ERROR_TYPE)}",
            "agent:error that will not retry, excluding quota throttling and quota exhaustion.",
        ),
        _rule(
            "RulvarWorkflowDeterminismWarning",
            happened(
                f'{series(sc.METRIC_DETERMINISM_WARNINGS)}{{{label(sc.DETERMINISM_PROVENANCE)}="workflow"}}',
                (sc.DETERMINISM_CATEGORY,),
                "30m",
            ),
            "warning",
            f"Workflow code calls {ref(sc.DETERMINISM_CATEGORY)}",
            "A bare Date.now()/Math.random() in workflow code: replay may diverge.",
        ),
    ]
    return {"groups": [{"name": "rulvar", "rules": rules}]}


def build_alerts_text() -> str:
    header = (
        "# Generated by scripts/generate_dashboards.py from the rulvar_otel metric registry: do not edit.\n"
        "# Unit tests: alerts_test.yml (promtool test rules alerts_test.yml).\n"
    )
    return header + yaml.safe_dump(build_alert_rules(), sort_keys=False, width=4096, allow_unicode=True)
