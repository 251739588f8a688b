"""End to end against a real Prometheus and Alertmanager on 127.0.0.1.

The recorder feeds an in-process OTel Prometheus exporter over several streams (twice, so every
counter has an increase); a real Prometheus scrapes it every second with the generated alert
rules loaded. Then every panel query of every dashboard runs through the HTTP API and must return
data, and the exposure-drained alert must reach a webhook through a real Alertmanager.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from rulvar_otel.export import MetricsPipeline, MetricsSetup, build_meter_provider
from rulvar_otel.otel.metrics import REGISTRY
from tests._fixtures import events, outcome
from tests._metric_streams import adaptive_outcome, adaptive_stream, feed, unsettled_quota_stream
from tests.test_alerts import ALERTS, require_tool
from tests.test_dashboards import dashboards, panel_queries

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]

FIXTURE_STREAMS = (
    "minimal",
    "quota",
    "exposure-drained",
    "error",
    "orchestrate",
    "tools",
    "determinism",
    "unsettled",
    "plan-ledger",
    "phases",
    "nested",
)
# Grafana's template variables, as the dashboards would resolve them with "All" selected.
SUBSTITUTIONS = {"$workflow": ".*", "$model": ".*", "$__rate_interval": "1m", "$__range": "5m"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Webhook:
    port: int
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _start_webhook() -> tuple[Webhook, ThreadingHTTPServer]:
    hook = Webhook(0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            hook.bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.port = int(server.server_port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return hook, server


def _wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}")


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class Stack:
    prometheus: str
    exporter_port: int
    hook: Webhook
    logs: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=5)
        body = response.json()
        assert body.get("status") == "success", f"{expr!r}: {body}"
        return body["data"]["result"]  # type: ignore[no-any-return]


def _feed_all(pipeline: MetricsPipeline) -> None:
    meter = pipeline.meter
    for name in FIXTURE_STREAMS:
        result = outcome(name)
        feed(meter, events(name), result)
    feed(meter, adaptive_stream(), adaptive_outcome())
    feed(meter, unsettled_quota_stream(), None)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_bin = require_tool("prometheus")
    alertmanager_bin = require_tool("alertmanager", "prometheus-alertmanager")
    tmp = tmp_path_factory.mktemp("prometheus-live")
    hook, hook_server = _start_webhook()
    pipeline = build_meter_provider(MetricsSetup(prometheus_port=0, timeout_s=5))
    assert pipeline.prometheus_port is not None
    prom_port, am_port = _free_port(), _free_port()
    (tmp / "alertmanager.yml").write_text(
        yaml.safe_dump(
            {
                "route": {
                    "receiver": "hook",
                    "group_by": ["alertname"],
                    "group_wait": "1s",
                    "group_interval": "1s",
                    "repeat_interval": "1h",
                },
                "receivers": [
                    {
                        "name": "hook",
                        "webhook_configs": [
                            {"url": f"http://127.0.0.1:{hook.port}/", "send_resolved": False}
                        ],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    shutil.copy(ALERTS, tmp / "alerts.yml")
    (tmp / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": ["alerts.yml"],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [
                    {
                        "job_name": "rulvar",
                        "static_configs": [{"targets": [f"127.0.0.1:{pipeline.prometheus_port}"]}],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    processes = []
    try:
        processes.append(
            _spawn(
                [
                    alertmanager_bin,
                    f"--config.file={tmp / 'alertmanager.yml'}",
                    f"--storage.path={tmp / 'am-data'}",
                    f"--web.listen-address=127.0.0.1:{am_port}",
                    "--cluster.listen-address=",
                ],
                tmp / "alertmanager.log",
            )
        )
        processes.append(
            _spawn(
                [
                    prometheus_bin,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'prom-data'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                tmp / "prometheus.log",
            )
        )
        prometheus = f"http://127.0.0.1:{prom_port}"
        _wait_for(
            "Prometheus ready", lambda: httpx.get(f"{prometheus}/-/ready", timeout=2).status_code == 200
        )
        _wait_for(
            "Alertmanager ready",
            lambda: httpx.get(f"http://127.0.0.1:{am_port}/-/ready", timeout=2).status_code == 200,
        )
        live = Stack(prometheus, pipeline.prometheus_port, hook, tmp)
        _feed_all(pipeline)
        _wait_for("a first scrape with data", lambda: bool(live.query("rulvar_runs_settled_total")))
        # A second pass of the same streams makes every counter and histogram grow between scrapes.
        _feed_all(pipeline)
        _wait_for(
            "a scrape after the second pass",
            lambda: bool(live.query("sum(increase(rulvar_runs_settled_total[1m])) > 0")),
        )
        time.sleep(1.5)
        yield live
    finally:
        for process in processes:
            _stop(process)
        pipeline.shutdown()
        hook_server.shutdown()
        hook_server.server_close()


def _substitute(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def test_every_panel_query_of_every_dashboard_returns_data(stack: Stack) -> None:
    empty: list[str] = []
    checked = 0
    for board_name, board in dashboards().items():
        for title, expr in panel_queries(board):
            result = stack.query(_substitute(expr))
            values = [float(sample["value"][1]) for sample in result]
            if not any(math.isfinite(v) for v in values):
                empty.append(f"{board_name} / {title}: {expr} -> {values}")
            checked += 1
    assert checked >= 30
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_template_variables_resolve(stack: Stack) -> None:
    for board in dashboards().values():
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"])
            assert match, variable["query"]
            series, label = match.groups()
            response = httpx.get(
                f"{stack.prometheus}/api/v1/label/{label}/values", params={"match[]": series}, timeout=5
            ).json()
            assert response["status"] == "success" and response["data"], variable["name"]


def test_series_names_match_the_registry_on_the_live_endpoint(stack: Stack) -> None:
    text = httpx.get(f"http://127.0.0.1:{stack.exporter_port}/metrics", timeout=5).text
    exposed = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }
    expected = {name for entry in REGISTRY for name in entry.prometheus_series}
    assert exposed - {"target_info"} == expected
    in_prometheus = set(
        httpx.get(f"{stack.prometheus}/api/v1/label/__name__/values", timeout=5).json()["data"]
    )
    assert expected <= in_prometheus
    # Labels are the registry's, sanitized the way the registry says.
    for entry in REGISTRY:
        series = stack.query(f"{entry.prometheus_series[0]}")
        assert series, entry.name
        labels = set(series[0]["metric"]) - {"__name__", "instance", "job", "le"}
        assert {label for label in labels if not label.startswith("otel_scope_")} <= set(
            entry.prometheus_labels
        )


def test_exposure_drained_alert_reaches_the_webhook(stack: Stack) -> None:
    def drained() -> list[dict[str, Any]]:
        return [
            alert
            for body in stack.hook.bodies
            for alert in body.get("alerts", [])
            if alert["labels"].get("alertname") == "RulvarExposureDrained"
        ]

    _wait_for("the exposure-drained alert at the webhook", lambda: bool(drained()), timeout=45)
    alert = drained()[0]
    assert alert["status"] == "firing"
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["rulvar_exposure_scope"] == "root"
    assert alert["labels"]["gen_ai_request_model"] == "fake:model"
    # willWait true (the adaptive stream's child wait) never fires it.
    assert all(a["labels"].get("rulvar_exposure_scope") != "child" for a in drained())
