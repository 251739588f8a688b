"""The bundled sample: a multi-agent incident review on the scripted adapter, fully deterministic.

It exercises every span kind the exporter maps: phases, an agent that compacts its context
(``summarize``), two parallel investigators with tools (one call denied by a deny rule, one agent
throttled once by the quota limiter), a child workflow whose writer returns schema-validated
output (``extract``), and an orchestrated sweep: an orchestrator fans triage workers out over the
services, two of them escalate and are cancelled (abandoned), one is re-added and reclaimed by
reference, the ledger gets a brief and facts, a spawn is rejected and a revision drops an op.
:func:`build_demo` assembles the engine, the workflow and its arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from rulvar_otel.core.events import Usage
from rulvar_otel.engine._orchestrate import OrchestrateOptions
from rulvar_otel.engine.context import Context
from rulvar_otel.engine.engine import Engine, create_engine
from rulvar_otel.engine.journal import JournalStore
from rulvar_otel.engine.limits import ScriptedQuota
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.engine.pricing import Price, PricingTable
from rulvar_otel.engine.scripted import Reply, ScriptedAdapter, ScriptTurn, ToolCalls
from rulvar_otel.engine.tools import Permissions, tool
from rulvar_otel.engine.workflow import Workflow, workflow

__all__ = [
    "DEMO_ORCHESTRATION",
    "DEMO_PRICING",
    "DEMO_WORKFLOWS",
    "DemoSetup",
    "IncidentReport",
    "build_demo",
    "demo_adapter",
]

DEMO_PRICING = PricingTable(
    {
        "demo:planner": Price(3.0, 15.0, cache_read_per_mtok=0.3),
        "demo:worker": Price(0.5, 2.0),
        "demo:swift": Price(0.25, 1.25),
        "demo:compact": Price(0.1, 0.4),
    }
)


class IncidentReport(BaseModel):
    title: str
    severity: str
    actions: list[str]


@tool
def search_logs(query: str, limit: int = 20) -> list[str]:
    """Search the aggregated service logs."""
    return [f"{query}: upstream timeout after 30s (x{limit // 4})", f"{query}: connection pool exhausted"]


@tool
def read_runbook(service: str) -> str:
    """Read the on-call runbook of a service."""
    return f"{service}: check the connection pool size, then the upstream gateway health."


@tool
def query_metrics(metric: str, window_minutes: int = 15) -> dict[str, float]:
    """Read a metric's summary over a window."""
    return {"p50": 41.0, "p99": 2980.0 if "latency" in metric else 97.0, "window": float(window_minutes)}


@tool(risk="destructive")
def restart_service(service: str) -> str:
    """Restart a production service."""
    return f"restarted {service}"


@workflow("incident-report")
async def incident_report(ctx: Context, args: Any) -> Any:
    async with ctx.phase("draft"):
        report = await ctx.agent(
            f"Write the incident report from these findings: {args['findings']}",
            agent_type="writer",
            label="writer",
            model="demo:planner",
            schema=IncidentReport,
        )
    ctx.log("info", "report drafted", {"actions": len(report.actions)})
    return report.model_dump()


@workflow("incident-review")
async def incident_review(ctx: Context, args: Any) -> Any:
    ctx.log("info", "incident review started", {"service": args["service"]})
    async with ctx.phase("triage"):
        triage = await ctx.agent(
            f"Triage the {args['service']} alert: {args['alert']}",
            agent_type="triager",
            label="triage",
            model="demo:planner",
            tools=[search_logs, read_runbook],
            compact_at_tokens=4000,
            summarize_model="demo:compact",
        )
    async with ctx.phase("investigate"):
        findings = await ctx.parallel(
            [
                ctx.agent(
                    "Check the database side",
                    agent_type="investigator",
                    label="database",
                    model="demo:worker",
                    tools=[query_metrics, restart_service],
                ),
                ctx.agent(
                    "Check the network side",
                    agent_type="investigator",
                    label="network",
                    model="demo:swift",
                    tools=[search_logs, query_metrics],
                ),
            ]
        )
    async with ctx.phase("report"):
        report = await ctx.workflow(incident_report, {"triage": triage, "findings": findings})
    async with ctx.phase("sweep"):
        sweep = await ctx.orchestrate("Triage every service behind the payments alert", DEMO_ORCHESTRATION)
    ctx.log("info", "incident review complete", {"findings": len(findings)})
    return {
        "triage": triage,
        "findings": findings,
        "report": report,
        "sweep": sweep["childStatusCounts"],
        "completion": "complete",
    }


_SWEEP_SERVICES = ("api", "db", "cache")

DEMO_ORCHESTRATION = OrchestrateOptions(
    model="demo:planner",
    profiles={
        f"triage-{service}": AgentOptions(model="demo:worker", tools=(search_logs,))
        for service in _SWEEP_SERVICES
    },
    strict_profiles=True,
)


def _sweep_script() -> dict[str, list[ScriptTurn]]:
    """The orchestrated sweep: three wake turns of scripted tool calls and the workers' answers."""
    spawns = [
        ("spawn_agent", {"agent_type": f"triage-{s}", "prompt": f"Triage {s}"}) for s in _SWEEP_SERVICES
    ]
    escalate = ("escalate", {"kind": "scope_bigger", "reason": "the pool sizing spans three teams"})
    resolve = {"op": "resolve", "node": "orch#0.n2", "decision": "cancel"}
    return {
        "orchestrator": [
            ToolCalls(
                [
                    ("ledger_append", {"op": "brief_set", "text": "Find which service starves the pool"}),
                    ("ledger_append", {"op": "fact_add", "text": "502s started at 09:12"}),
                    *spawns,
                    ("spawn_agent", {"agent_type": "pager", "prompt": "Page the db team"}),
                    ("await_all", {}),
                ],
                usage=(2400, 160),
            ),
            Reply("waiting for the sweep", usage=(2600, 20)),
            ToolCalls(
                [
                    (
                        "plan_revise",
                        {
                            "ops": [
                                resolve,
                                {"op": "cancel", "node": "orch#0.n3"},
                                {"op": "cancel", "node": "payments-gateway"},
                            ]
                        },
                    ),
                    ("await_all", {}),
                ],
                usage=(3100, 120),
            ),
            Reply("branches closed", usage=(3200, 20)),
            ToolCalls(
                [
                    ("ledger_append", {"op": "fact_add", "text": "db and cache escalated; db re-added"}),
                    spawns[1],
                    ("finish", {"summary": "api healthy; db pool undersized"}),
                ],
                usage=(3400, 140),
            ),
            Reply("sweep finished", usage=(3500, 30)),
        ],
        "triage-api": [
            ToolCalls([("search_logs", {"query": "api 502"})], usage=(600, 40)),
            Reply("api healthy: 502s come from upstream", usage=(900, 60)),
        ],
        "triage-db": [
            ToolCalls([escalate], usage=(800, 50)),
            Reply("escalated: pool sizing", usage=(1000, 40)),
        ],
        "triage-cache": [
            ToolCalls(
                [("escalate", {"kind": "blocked_with_evidence", "reason": "no cache metrics"})],
                usage=(700, 40),
            ),
            Reply("escalated: blocked", usage=(800, 30)),
        ],
    }


DEMO_WORKFLOWS: dict[str, Workflow] = {w.name: w for w in (incident_review, incident_report)}


def demo_adapter() -> ScriptedAdapter:
    """The scripted model behind the demo (a fresh one per run: scripts are consumed)."""
    report = IncidentReport(
        title="payments API timeouts",
        severity="SEV2",
        actions=["raise the payments-db pool size", "add a gateway timeout alert"],
    )
    script: dict[str, list[ScriptTurn]] = {
        "triage": [
            ToolCalls(
                [("search_logs", {"query": "payments 502"})],
                usage=Usage(input_tokens=5200, output_tokens=90),
            ),
            Reply("summary: 502s from payments since 09:12", usage=(5200, 60)),
            ToolCalls([("read_runbook", {"service": "payments"})], usage=(900, 40)),
            Reply("Likely connection pool exhaustion on payments-db.", usage=(1400, 120)),
        ],
        "database": [
            ToolCalls(
                [
                    ("query_metrics", {"metric": "db_connections"}),
                    ("restart_service", {"service": "payments-db"}),
                ],
                usage=(800, 70),
            ),
            Reply("payments-db pool saturated at 97%; restart was refused.", usage=(1100, 90)),
        ],
        "network": [
            ToolCalls([("query_metrics", {"metric": "gateway_latency"})], usage=(700, 50)),
            Reply("gateway p99 latency 2.98s, consistent with a slow upstream.", usage=(950, 80)),
        ],
        "writer": [
            Reply("Draft: payments timeouts caused by pool exhaustion.", usage=(1600, 300)),
            Reply(report.model_dump_json(), usage=(1900, 110)),
        ],
    }
    return ScriptedAdapter("demo", default_model="worker", script={**script, **_sweep_script()})


@dataclass(frozen=True)
class DemoSetup:
    engine: Engine
    workflow: Workflow
    args: dict[str, Any]
    adapter: ScriptedAdapter


def build_demo(
    *,
    journal: JournalStore | None = None,
    clock: Callable[[], datetime] | None = None,
    quota_retry_after_ms: float = 5.0,
    **engine_options: Any,
) -> DemoSetup:
    """The demo engine (scripted adapter, pricing, a deny rule, a one-denial quota), workflow, args."""
    adapter = demo_adapter()
    options: dict[str, Any] = {
        "pricing": DEMO_PRICING,
        "permissions": Permissions(deny=["restart_service"]),
        "quota": ScriptedQuota(
            {"demo:swift": 1}, reason="tokensPerMinute 400000 exhausted", retry_after_ms=quota_retry_after_ms
        ),
    }
    if clock is not None:
        options["clock"] = clock
    options.update(engine_options)
    engine = create_engine([adapter], journal=journal, **options)
    args = {"service": "payments", "alert": "HTTP 502 rate above 5% for 10 minutes"}
    return DemoSetup(engine, incident_review, args, adapter)
