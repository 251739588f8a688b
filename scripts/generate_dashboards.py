"""Generate the Grafana dashboards and the Prometheus alert rules from the metric registry.

    python scripts/generate_dashboards.py          # rewrite dashboards/*.json and alerts.yml
    python scripts/generate_dashboards.py --check  # exit 1 when a checked-in file is stale

Every series and label below is derived from rulvar_otel.otel.metrics.registry, so a panel or an
alert can only read what the recorder writes. Dashboards are built with grafana-foundation-sdk.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics.registry import definition, prometheus_label

ROOT: Final = Path(__file__).resolve().parents[1]
DASHBOARDS_DIR: Final = ROOT / "dashboards"
ALERTS_FILE: Final = ROOT / "collector_config" / "prometheus" / "alerts.yml"

DATASOURCE: Final = DataSourceRef(type_val="prometheus", uid="${datasource}")


def series(name: str, suffix: str = "") -> str:
    """The Prometheus series of registry metric ``name`` (``suffix``: bucket, sum or count)."""
    base = definition(name).prometheus_name
    return f"{base}_{suffix}" if suffix else base


def label(attribute: str) -> str:
    return prometheus_label(attribute)


WF: Final = f'{label(sc.WORKFLOW)}=~"$workflow"'
MODEL: Final = f'{label(sc.GEN_AI_REQUEST_MODEL)}=~"$model"'
RATE: Final = "$__rate_interval"
RANGE: Final = "$__range"


def quantile(q: float, name: str, by: Sequence[str] = (), selector: str = "", window: str = RATE) -> str:
    group = ", ".join(["le", *(label(a) for a in by)])
    return (
        f"histogram_quantile({q}, sum by ({group}) (rate({series(name, 'bucket')}{{{selector}}}[{window}])))"
    )


def increase(
    name: str, by: Sequence[str] = (), selector: str = "", window: str = RATE, suffix: str = ""
) -> str:
    group = f" by ({', '.join(label(a) for a in by)})" if by else ""
    return f"sum{group} (increase({series(name, suffix)}{{{selector}}}[{window}]))"


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    targets: tuple[tuple[str, str], ...]  # (expr, legend)
    unit: str = "short"
    kind: str = "timeseries"


def _panel(spec: PanelSpec) -> Any:
    builder: Any = stat.Panel() if spec.kind == "stat" else timeseries.Panel()
    builder = builder.title(spec.title).description(spec.description).datasource(DATASOURCE).unit(spec.unit)
    builder = builder.height(8).span(12)
    for index, (expr, legend) in enumerate(spec.targets):
        query = (
            gp.Dataquery()
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
        builder = builder.with_target(query.instant() if spec.kind == "stat" else query.range())
    return builder


def _variables() -> list[Any]:
    runs = series(sc.METRIC_RUNS_SETTLED)
    tokens = series(sc.GEN_AI_CLIENT_TOKEN_USAGE, "count")
    return [
        gd.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        gd.QueryVariable("workflow")
        .label("Workflow")
        .datasource(DATASOURCE)
        .query(f"label_values({runs}, {label(sc.WORKFLOW)})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*"),
        gd.QueryVariable("model")
        .label("Model")
        .datasource(DATASOURCE)
        .query(f"label_values({tokens}, {label(sc.GEN_AI_REQUEST_MODEL)})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*"),
    ]


def _runs_panels() -> list[PanelSpec]:
    status, completion = label(sc.STATUS), label(sc.RUN_COMPLETION)
    model = label(sc.GEN_AI_REQUEST_MODEL)
    token_type = label(sc.GEN_AI_TOKEN_TYPE)
    settled_false = f'{WF}, {label(sc.RUN_SETTLED)}="false"'
    return [
        PanelSpec(
            "Runs by status x completion",
            "Gate on the pair, never on status alone: ok x partial is an accepted degraded run.",
            (
                (
                    increase(sc.METRIC_RUNS_SETTLED, (sc.STATUS, sc.RUN_COMPLETION), WF),
                    f"{{{{{status}}}}} x {{{{{completion}}}}}",
                ),
            ),
        ),
        PanelSpec(
            "Unsettled terminals",
            "Terminals nothing durable records (settled=false): never green, whatever the status says.",
            (
                (
                    increase(sc.METRIC_RUNS_SETTLED, (sc.WORKFLOW,), settled_false, RANGE),
                    "{{rulvar_workflow}}",
                ),
            ),
            kind="stat",
        ),
        PanelSpec(
            "Spend by model (USD)",
            "Live agent:phase:end costUsd, locally estimated at the caller's price table.",
            ((increase(sc.METRIC_SPEND, (sc.GEN_AI_REQUEST_MODEL,), MODEL), f"{{{{{model}}}}}"),),
            unit="currencyUSD",
        ),
        PanelSpec(
            "Run cost p50 / p95 (USD)",
            "Settled totalUsd per run terminal.",
            (
                (quantile(0.5, sc.METRIC_RUN_COST, selector=WF), "p50"),
                (quantile(0.95, sc.METRIC_RUN_COST, selector=WF), "p95"),
            ),
            unit="currencyUSD",
        ),
        PanelSpec(
            "Tokens by type and model",
            "gen_ai.client.token.usage summed per token type.",
            (
                (
                    increase(
                        sc.GEN_AI_CLIENT_TOKEN_USAGE,
                        (sc.GEN_AI_TOKEN_TYPE, sc.GEN_AI_REQUEST_MODEL),
                        MODEL,
                        suffix="sum",
                    ),
                    f"{{{{{token_type}}}}} {{{{{model}}}}}",
                ),
            ),
        ),
        PanelSpec(
            "Invocation duration p50 / p95 / p99 by model",
            "gen_ai.client.operation.duration per model invocation phase (replayed phases excluded).",
            tuple(
                (
                    quantile(q, sc.GEN_AI_CLIENT_OPERATION_DURATION, (sc.GEN_AI_REQUEST_MODEL,), MODEL),
                    f"p{int(q * 100)} {{{{{model}}}}}",
                )
                for q in (0.5, 0.95, 0.99)
            ),
            unit="s",
        ),
        PanelSpec(
            "Throttling next to failures",
            "Quota denials are healthy waits; only quota exhaustion and real agent errors are failures.",
            (
                (
                    increase(sc.METRIC_QUOTA_DENIALS, (sc.GEN_AI_REQUEST_MODEL,), MODEL),
                    "throttled (healthy) {{gen_ai_request_model}}",
                ),
                (
                    increase(
                        sc.METRIC_AGENT_ERRORS,
                        (sc.ERROR_CLASS,),
                        f'{label(sc.ERROR_CLASS)}!="quota_throttle"',
                    ),
                    "failures {{rulvar_error_class}}",
                ),
            ),
        ),
        PanelSpec(
            "Run duration p50 / p95",
            "run:start to run:end per segment.",
            (
                (quantile(0.5, sc.METRIC_RUN_DURATION, selector=WF), "p50"),
                (quantile(0.95, sc.METRIC_RUN_DURATION, selector=WF), "p95"),
            ),
            unit="s",
        ),
        PanelSpec(
            "Agent invocations by type and status",
            "Settled agent dispatches (live agent:end).",
            (
                (
                    increase(sc.METRIC_AGENT_INVOCATIONS, (sc.AGENT_TYPE, sc.STATUS), MODEL),
                    "{{rulvar_agent_type}} {{rulvar_status}}",
                ),
            ),
        ),
        PanelSpec(
            "Agent duration p95 by agent type",
            "agent:start to agent:end wall time.",
            ((quantile(0.95, sc.METRIC_AGENT_DURATION, (sc.AGENT_TYPE,), MODEL), "{{rulvar_agent_type}}"),),
            unit="s",
        ),
    ]


def _orchestration_panels() -> list[PanelSpec]:
    agent_type = label(sc.AGENT_TYPE)
    return [
        PanelSpec(
            "Ledger ops per spawn",
            "Authored ledger:op count / spawn:admitted count, per run: mean and p90 across runs.",
            (
                (
                    f"{increase(sc.METRIC_LEDGER_OPS_PER_SPAWN, selector=WF, window=RANGE, suffix='sum')} / "
                    f"{increase(sc.METRIC_LEDGER_OPS_PER_SPAWN, selector=WF, window=RANGE, suffix='count')}",
                    "mean",
                ),
                (quantile(0.9, sc.METRIC_LEDGER_OPS_PER_SPAWN, selector=WF, window=RANGE), "p90"),
            ),
            kind="stat",
        ),
        PanelSpec(
            "Ledger writes by operation",
            "ledger:op by operation kind.",
            ((increase(sc.METRIC_LEDGER_OPS, (sc.LEDGER_OP,), WF), "{{rulvar_ledger_op}}"),),
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
                    f"{increase(sc.METRIC_ESCALATIONS, (sc.AGENT_TYPE,), window=RANGE)} / "
                    f"{increase(sc.METRIC_SPAWNS_ADMITTED, (sc.AGENT_TYPE,), window=RANGE)}",
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
                (increase(sc.METRIC_ABANDONED_COST, selector=WF, window=RANGE), "abandoned"),
                (increase(sc.METRIC_RECLAIMED_COST, selector=WF, window=RANGE), "reclaimed"),
                (f"sum (delta({series(sc.METRIC_NET_LOST_COST)}{{{WF}}}[{RANGE}]))", "net lost"),
            ),
            unit="currencyUSD",
            kind="stat",
        ),
        PanelSpec(
            "Spawns admitted and rejected",
            "Admission verdicts and rejection codes.",
            (
                (
                    increase(sc.METRIC_SPAWNS_ADMITTED, (sc.SPAWN_VERDICT,)),
                    "admitted {{rulvar_spawn_verdict}}",
                ),
                (increase(sc.METRIC_SPAWNS_REJECTED, (sc.SPAWN_CODE,)), "rejected {{rulvar_spawn_code}}"),
            ),
        ),
    ]


def _tools_panels() -> list[PanelSpec]:
    error_class = label(sc.ERROR_CLASS)
    return [
        PanelSpec(
            "Tool calls by tool and outcome",
            "Settled tool calls (live tool:end).",
            (
                (
                    increase(sc.METRIC_TOOL_CALLS, (sc.TOOL_NAME, sc.STATUS)),
                    "{{rulvar_tool_name}} {{rulvar_status}}",
                ),
            ),
        ),
        PanelSpec(
            "Tool denials by guard and deciding rule",
            "Which layer denied: an exploration guard, or the permission chain's deciding rule.",
            (
                (
                    increase(
                        sc.METRIC_TOOL_CALLS,
                        (sc.TOOL_GUARD, sc.TOOL_DECIDED_BY),
                        f'{label(sc.STATUS)}="denied"',
                    ),
                    "guard {{rulvar_tool_guard}} / decided by {{rulvar_tool_decided_by}}",
                ),
            ),
        ),
        PanelSpec(
            "Tool duration p50 / p95 by tool",
            "tool:end durationMs.",
            (
                (quantile(0.5, sc.METRIC_TOOL_DURATION, (sc.TOOL_NAME,)), "p50 {{rulvar_tool_name}}"),
                (quantile(0.95, sc.METRIC_TOOL_DURATION, (sc.TOOL_NAME,)), "p95 {{rulvar_tool_name}}"),
            ),
            unit="s",
        ),
        PanelSpec(
            "Quota denials by model and dimension (healthy throttling)",
            "quota:denied: a pre-wire wait that will retry, never a failure.",
            (
                (
                    increase(sc.METRIC_QUOTA_DENIALS, (sc.GEN_AI_REQUEST_MODEL, sc.QUOTA_DIMENSION), MODEL),
                    "{{gen_ai_request_model}} {{rulvar_quota_dimension}}",
                ),
            ),
        ),
        PanelSpec(
            "Quota exhaustion (terminal denials)",
            "The agent:error that ends a run of denials: the per-target denial budget is spent.",
            (
                (
                    increase(sc.METRIC_AGENT_ERRORS, (sc.AGENT_TYPE,), f'{error_class}="quota_exhausted"'),
                    "{{rulvar_agent_type}}",
                ),
            ),
        ),
        PanelSpec(
            "Exposure waits by scope and will_wait",
            "budget:exposure-wait: will_wait=false is the drained arm, a genuine terminal.",
            (
                (
                    increase(sc.METRIC_EXPOSURE_WAITS, (sc.EXPOSURE_SCOPE, sc.WILL_WAIT)),
                    "{{rulvar_exposure_scope}} will_wait={{rulvar_will_wait}}",
                ),
            ),
        ),
        PanelSpec(
            "Agent errors that are not throttling",
            "agent:error of class error, by agent type and error code.",
            (
                (
                    increase(
                        sc.METRIC_AGENT_ERRORS, (sc.AGENT_TYPE, sc.ERROR_TYPE), f'{error_class}="error"'
                    ),
                    "{{rulvar_agent_type}} {{error_type}}",
                ),
            ),
        ),
        PanelSpec(
            "Determinism warnings",
            "Bare clock/random calls; provenance workflow is the one to fix.",
            (
                (
                    increase(
                        sc.METRIC_DETERMINISM_WARNINGS, (sc.DETERMINISM_CATEGORY, sc.DETERMINISM_PROVENANCE)
                    ),
                    "{{rulvar_determinism_category}} {{rulvar_determinism_provenance}}",
                ),
            ),
        ),
    ]


DASHBOARDS: Final = (
    ("rulvar-runs", "Rulvar / Runs", _runs_panels),
    ("rulvar-orchestration", "Rulvar / Orchestration", _orchestration_panels),
    ("rulvar-tools-quotas", "Rulvar / Tools and quotas", _tools_panels),
)


def build_dashboards() -> dict[Path, str]:
    out: dict[Path, str] = {}
    for uid, title, panels in DASHBOARDS:
        builder = (
            gd.Dashboard(title)
            .uid(uid)
            .tags(["rulvar", "generated"])
            .description("Generated by scripts/generate_dashboards.py from the rulvar_otel metric registry.")
            .refresh("30s")
            .time("now-6h", "now")
            .timezone("browser")
            .editable()
        )
        for variable in _variables():
            builder = builder.with_variable(variable)
        for spec in panels():
            builder = builder.with_panel(_panel(spec))
        text = json.dumps(builder.build(), cls=JSONEncoder, sort_keys=True, indent=2)
        out[DASHBOARDS_DIR / f"{uid}.json"] = text + "\n"
    return out


# --- alert rules --------------------------------------------------------------------------------


def fresh_or_increased(selector: str, by: Sequence[str], window: str) -> str:
    """Fires when the selected counter grew inside ``window``, including a series born there.

    ``increase()`` needs two samples, so the first event of a label set (the series appears at
    value 1) would read 0; the ``unless ... offset`` arm catches exactly that birth.
    """
    group = ", ".join(label(a) for a in by)
    grew = f"increase({selector}[{window}]) > 0"
    born = f"({selector} unless {selector} offset {window})"
    return f"sum by ({group}) ({grew} or {born}) > 0"


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


def build_alert_rules() -> dict[str, Any]:
    runs = series(sc.METRIC_RUNS_SETTLED)
    status, settled, completion = label(sc.STATUS), label(sc.RUN_SETTLED), label(sc.RUN_COMPLETION)
    errors = series(sc.METRIC_AGENT_ERRORS)
    error_class, will_retry = label(sc.ERROR_CLASS), label(sc.WILL_RETRY)
    wf = label(sc.WORKFLOW)
    rules = [
        _rule(
            "RulvarUnsettledTerminal",
            fresh_or_increased(f'{runs}{{{settled}="false"}}', (sc.WORKFLOW, sc.STATUS), "15m"),
            "critical",
            f"A run terminal of {ref(sc.WORKFLOW)} is not settled",
            "Nothing durable records this terminal (settled=false): treat it as NOT green whatever the "
            "status literal says; resuming the run re-settles by replay.",
        ),
        _rule(
            "RulvarRunFailureRate",
            f'sum by ({wf}) (rate({runs}{{{status}=~"error|exhausted"}}[30m])) / '
            f"sum by ({wf}) (rate({runs}[30m])) > 0.2",
            "warning",
            f"More than 20% of {ref(sc.WORKFLOW)} runs end in error or exhausted",
            "Share of run terminals with status error or exhausted over 30 minutes.",
            for_="10m",
        ),
        _rule(
            "RulvarRunAcceptedPartial",
            fresh_or_increased(f'{runs}{{{status}="ok", {completion}="partial"}}', (sc.WORKFLOW,), "30m"),
            "warning",
            f"A {ref(sc.WORKFLOW)} run was accepted with completion=partial",
            "status ok with completion partial is an accepted degraded run (salvaged children, waived "
            "evidence floors): not a full success.",
        ),
        _rule(
            "RulvarExposureDrained",
            fresh_or_increased(
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
            fresh_or_increased(f'{errors}{{{error_class}="quota_exhausted"}}', (sc.AGENT_TYPE,), "15m"),
            "critical",
            f"Quota denials exhausted the denial budget of a {ref(sc.AGENT_TYPE)} agent",
            "The agent:error that follows exhausted quota denials: the throttling turned into a failure.",
        ),
        _rule(
            "RulvarQuotaThrottlingSaturated",
            f"sum by ({label(sc.GEN_AI_REQUEST_MODEL)}) "
            f"(rate({series(sc.METRIC_QUOTA_DENIALS)}[10m])) * 60 > 30",
            "warning",
            f"Quota throttling on {ref(sc.GEN_AI_REQUEST_MODEL)} is saturated (not a failure)",
            "More than 30 pre-wire quota denials per minute for 15 minutes. Each denial is a healthy wait "
            "that retries; this is a capacity signal, NOT a failure.",
            for_="15m",
            failure=False,
        ),
        _rule(
            "RulvarAgentErrors",
            fresh_or_increased(
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
            fresh_or_increased(
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


def generated() -> dict[Path, str]:
    files = build_dashboards()
    files[ALERTS_FILE] = build_alerts_text()
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when a checked-in file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    rel = [str(p.relative_to(ROOT)) for p in stale]
    if args.check:
        if stale:
            print("stale generated files (run python scripts/generate_dashboards.py):", *rel, sep="\n  ")
            return 1
        print("generated files are current")
        return 0
    print("wrote:", *rel, sep="\n  ") if rel else print("nothing to write: generated files are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
