"""The Model requests row against a real Prometheus, fed by `rulvar-otel demo` as a user runs it.

`rulvar-otel demo --prometheus-port N --prometheus-linger S` runs the bundled engine, which records
the per-request gen_ai.client.* metrics into the export's metrics pipeline; a real Prometheus
(1 s scrapes) scrapes it. Then, on the same port, a host process does what the docs tell hosts:
an engine given the export's meter (``export_run_async(..., metrics=pipeline)``), on a model that
answers after known delays, so the duration quantiles have a spread to be right about. Each panel
of the row must then show the true numbers, not just some:
- request tokens per model and token type: exactly the tokens the demo's own events report, and
  the timed host's scripted usage (the recorder's invocation-token panel shows the same totals);
- requests per model: exactly what the same demo records on an in-process engine (the scripted
  demo is deterministic), and the timed host's eight;
- request duration p50 / p95 per model and operation: Prometheus's quantile of the buckets the
  processes served, recomputed here from the scraped text; for the timed model, inside the
  buckets its known delays put them in.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics.registry import ENGINE_METRICS, prometheus_label
from tests._support import (
    COLLECTOR,
    ENGINE,
    dashboards,
    event_tokens,
    free_port,
    panel_queries,
    panels_fed_by,
    query_source,
    require_tool,
    rulvar_otel_command,
    run_demo_with_meter,
    runnable,
    spawn,
    stop_process,
    wait_for,
)

pytestmark = [pytest.mark.live, pytest.mark.timeout(180)]

# Several scrapes at the 1 s interval below, and one by this test.
LINGER_S = 4.0
WINDOW = "10m"
MODEL, TOKEN_TYPE = prometheus_label(sc.GEN_AI_REQUEST_MODEL), prometheus_label(sc.GEN_AI_TOKEN_TYPE)
OPERATION = prometheus_label(sc.GEN_AI_OPERATION_NAME)
DURATION = next(e for e in ENGINE_METRICS if e.name == sc.GEN_AI_CLIENT_OPERATION_DURATION).prometheus_name

Labels = frozenset[tuple[str, str]]

# A host's engine on the export's meter, answering after known delays (seconds) per request.
TIMED_DELAYS = (0.015, 0.03, 0.05, 0.07, 0.1, 0.15, 0.25, 0.45)
TIMED_MODEL = "timed"
TIMED_HOST = f"""
import asyncio, sys
from rulvar_otel.engine import ScriptedAdapter, create_engine, workflow
from rulvar_otel.export import ExportOptions, build_metrics_delivery, export_run_async

class TimedAdapter:
    adapter_id, default_model = "slow", {TIMED_MODEL!r}
    def __init__(self):
        self.inner = ScriptedAdapter("slow", default_model={TIMED_MODEL!r})
        self.delays = iter({TIMED_DELAYS!r})
    async def turn(self, request):
        await asyncio.sleep(next(self.delays))
        return await self.inner.turn(request)

@workflow("timed")
async def timed(ctx, args):
    for index in range({len(TIMED_DELAYS)}):
        await ctx.agent(f"question {{index}}")

async def main(port, out, linger):
    options = ExportOptions(out=out, prometheus_port=port, prometheus_linger_s=linger)
    metrics = build_metrics_delivery(options, service_name="timed-host")
    engine = create_engine([TimedAdapter()], meter=metrics.meter)
    report = await export_run_async(engine.run(timed, {{}}), options, metrics=metrics, on_note=print)
    print("exported" if report.ok else report.failures, flush=True)
    return 0 if report.ok else 1

sys.exit(asyncio.run(main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]))))
"""


@dataclass
class DemoRun:
    prometheus: str
    exit_code: int
    output: str
    events: list[dict[str, Any]]
    served: dict[tuple[str, Labels], float]  # what each process's /metrics held once its run ended

    def query(self, expr: str) -> dict[Labels, float]:
        body = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=5).json()
        assert body.get("status") == "success", f"{expr!r}: {body}"
        return {
            frozenset(sample["metric"].items()): float(sample["value"][1])
            for sample in body["data"]["result"]
        }

    def panel(self, title: str) -> list[dict[Labels, float]]:
        """Each target of the Runs dashboard's panel ``title``, as Grafana runs it (every variable: All)."""
        exprs = [expr for t, expr in panel_queries(dashboards()["rulvar-runs"]) if t == title]
        assert exprs, title
        return [self.query(runnable(expr, WINDOW)) for expr in exprs]


def _scrape(url: str) -> dict[tuple[str, Labels], float]:
    text = httpx.get(url, timeout=5).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _run(args: list[str], port: int) -> tuple[int, str, dict[tuple[str, Labels], float]]:
    """One process serving on ``port``; its endpoint is scraped once while it lingers."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines: list[str] = []
    served: dict[tuple[str, Labels], float] = {}
    try:
        for line in process.stdout:
            lines.append(line)
            if "up for" in line and not served:  # the run is over: the endpoint holds final values
                served = _scrape(f"http://127.0.0.1:{port}/metrics")
        code = process.wait(timeout=60)
    finally:
        stop_process(process)
    return code, "".join(lines), served


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    prometheus_bin = require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("model-metrics-live")
    demo_port, prom_port = free_port(), free_port()
    (tmp / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "rulvar-demo", "static_configs": [{"targets": [f"127.0.0.1:{demo_port}"]}]}
                ],
            }
        ),
        encoding="utf-8",
    )
    prometheus = spawn(
        "prometheus",
        [
            prometheus_bin,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        tmp / "prometheus.log",
    )
    try:
        url = f"http://127.0.0.1:{prom_port}"
        wait_for("Prometheus ready", lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200)
        probe = DemoRun(url, 0, "", [], {})
        wait_for("the first scrape of the demo port", lambda: bool(probe.query('up{job="rulvar-demo"}')))
        code, output, served = _run(
            [
                rulvar_otel_command(), "demo",
                "--events", str(tmp / "events.jsonl"), "--out", str(tmp / "demo.jsonl"),
                "--no-tree", "--progress", "off",
                "--prometheus-port", str(demo_port), "--prometheus-linger", str(LINGER_S),
            ],
            demo_port,
        )  # fmt: skip
        events = [
            json.loads(line) for line in (tmp / "events.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        host = [sys.executable, "-c", TIMED_HOST, str(demo_port), str(tmp / "timed.jsonl"), str(LINGER_S)]
        host_code, host_output, host_served = _run(host, demo_port)
        assert host_code == 0, host_output
        run = DemoRun(url, code, output, events, {**served, **host_served})
        # Wait for a scrape that found the host gone: every sample it served is stored by then.
        wait_for("the last scrape", lambda: 0.0 in run.query('up{job="rulvar-demo"}').values())
        yield run
    finally:
        prometheus.stop()


def _by(result: dict[Labels, float], *labels: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for key, value in result.items():
        named = dict(key)
        out[tuple(named.get(label, "") for label in labels)] = value
    return out


def test_the_demo_exported_and_served_the_engine_metrics(demo: DemoRun) -> None:
    assert demo.exit_code == 0, demo.output
    assert demo.events and demo.served, demo.output
    served_names = {name for name, _ in demo.served}
    for entry in ENGINE_METRICS:
        assert set(entry.prometheus_series) <= served_names, entry.name
    assert len(panels_fed_by(ENGINE)) == 4  # tokens, requests, p50 and p95


def test_request_tokens_panel_shows_the_tokens_the_events_report(demo: DemoRun) -> None:
    (shown,) = demo.panel("Request tokens by model and type")
    expected = event_tokens(demo.events)
    assert sum(expected.values()) > 10_000
    requests = len(TIMED_DELAYS)  # each answered with the scripted default usage, 10 in and 5 out
    expected.update({(TIMED_MODEL, "input"): 10.0 * requests, (TIMED_MODEL, "output"): 5.0 * requests})
    assert _by(shown, MODEL, TOKEN_TYPE) == expected
    # The recorder's invocation-level panel adds up to the same totals per model and token type.
    (invocations,) = demo.panel("Tokens by type and model")
    assert _by(invocations, MODEL, TOKEN_TYPE) == expected


def test_model_requests_panel_counts_every_request_the_engine_made(demo: DemoRun) -> None:
    (shown,) = demo.panel("Model requests by model and error type")
    recorded, _ = run_demo_with_meter()  # the same scripted demo, in process
    expected: Counter[tuple[str, str]] = Counter()
    for point in recorded[sc.GEN_AI_CLIENT_OPERATION_DURATION].data.data_points:
        attributes = point.attributes or {}
        key = (str(attributes[sc.GEN_AI_REQUEST_MODEL]), str(attributes.get(sc.ERROR_TYPE, "")))
        expected[key] += point.count  # type: ignore[union-attr]
    expected[(TIMED_MODEL, "")] = len(TIMED_DELAYS)
    assert _by(shown, MODEL, prometheus_label(sc.ERROR_TYPE)) == {k: float(v) for k, v in expected.items()}
    served = Counter[str]()
    for (name, labels), value in demo.served.items():
        if name == f"{DURATION}_count":
            served[dict(labels)[MODEL]] += int(value)
    assert sum(served.values()) == sum(expected.values()) >= 18


def _histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's histogram_quantile over (upper bound, cumulative count) buckets."""
    buckets = sorted(buckets)
    assert buckets[-1][0] == math.inf
    rank = q * buckets[-1][1]
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:
        return buckets[-2][0]
    start, below = (buckets[index - 1][0], buckets[index - 1][1]) if index > 0 else (0.0, 0.0)
    end, count = buckets[index]
    return start + (end - start) * (rank - below) / (count - below)


def test_request_duration_panel_shows_the_quantiles_of_the_served_buckets(demo: DemoRun) -> None:
    p50, p95 = demo.panel("Request duration p50 / p95 by model and operation")
    buckets: defaultdict[tuple[str, str], Counter[float]] = defaultdict(Counter)
    for (name, labels), value in demo.served.items():
        if name == f"{DURATION}_bucket":
            named = dict(labels)
            buckets[(named[MODEL], named[OPERATION])][float(named["le"])] += value
    assert len(buckets) >= 3
    for q, shown in ((0.5, p50), (0.95, p95)):
        expected = {key: _histogram_quantile(q, list(b.items())) for key, b in buckets.items()}
        got = _by(shown, MODEL, OPERATION)
        assert set(got) == set(expected), q
        for key, value in expected.items():
            assert math.isclose(got[key], value, rel_tol=1e-9), (q, key, got[key], value)
            assert 0 < got[key] <= max(b for b in buckets[key] if b != math.inf), (q, key)
    for key in buckets:
        assert _by(p50, MODEL, OPERATION)[key] <= _by(p95, MODEL, OPERATION)[key]
    # The timed model's 8 requests took at least their delays (and, on a busy machine, less than
    # 90 ms more): its 4th fastest lies in (0.04, 0.16] s, its slowest above 0.32 s.
    timed = (TIMED_MODEL, "chat")
    assert 0.04 < _by(p50, MODEL, OPERATION)[timed] <= 0.16
    assert _by(p95, MODEL, OPERATION)[timed] > 0.32


def test_one_demo_gives_every_orchestration_panel_a_non_zero_value(demo: DemoRun) -> None:
    # The demo's orchestrated phase (spawns, a rejection, ledger writes, wakes, an escalation, an
    # abandoned and reclaimed branch) feeds the whole orchestration dashboard by itself.
    assert demo.exit_code == 0, demo.output
    queries = panel_queries(dashboards()["rulvar-orchestration"])
    assert len({title for title, _ in queries}) >= 7
    empty: list[str] = []
    for title, expr in queries:
        assert query_source(expr) != COLLECTOR, f"{title}: an orchestration panel reads spanmetrics"
        values = list(demo.query(runnable(expr, WINDOW)).values())
        if not any(math.isfinite(v) and v != 0 for v in values):
            empty.append(f"{title}: {expr} -> {values}")
    assert not empty, "orchestration panels without a non-zero value after one demo:\n" + "\n".join(empty)
