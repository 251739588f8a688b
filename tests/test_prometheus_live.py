"""End to end against a real Prometheus and Alertmanager on 127.0.0.1, fed the way users feed it.

One `rulvar-otel export STREAM --prometheus-port N --prometheus-linger S` process per stream, one
after the other on the same port, as a user exports recorded runs: each process serves every
counter once, at its final value, for a couple of scrapes and exits. A real Prometheus (1 s
scrape and rule evaluation, the generated alert rules loaded) scrapes it. Then every panel query
an export feeds (the recorder's series: every Rulvar panel but the engine's Model requests row,
which test_model_metrics_live.py feeds from `rulvar-otel demo`) must show a non-zero value, the
event alerts must fire, and the exposure-drained alert must reach a webhook through a real
Alertmanager.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from rulvar_otel.otel.metrics import REGISTRY
from tests._support import (
    ALERTS,
    COLLECTOR,
    ENGINE,
    RECORDER,
    STREAMS,
    Service,
    adaptive_outcome,
    adaptive_stream,
    build_stream,
    dashboards,
    free_port,
    generator_module,
    panels_fed_by,
    require_tool,
    rulvar_otel_command,
    runnable,
    series_sources,
    spawn,
    unsettled_quota_stream,
    wait_for,
)

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]

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
# Two scrapes at the 1 s interval below, with a margin: what the docs tell users (the scrape
# interval plus a margin) scaled to this Prometheus.
LINGER_S = 2.5
# The panels' window (rate interval and range): it covers the whole feeding (a minute or so) and
# reaches back to before Prometheus started.
WINDOW = "10m"


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


@dataclass
class Stack:
    prometheus: str
    hook: Webhook
    logs: Path
    exports: list[tuple[str, int, str]]  # (stream, exit code, output)

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=5)
        body = response.json()
        assert body.get("status") == "success", f"{expr!r}: {body}"
        return body["data"]["result"]  # type: ignore[no-any-return]


def _write_stream(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    return path


def _superseded_stream() -> list[dict[str, Any]]:
    """A stale terminal a successor superseded: settled=false with the reason."""
    end = {"type": "run:end", "status": "ok", "totalUsd": 0, "settled": False, "settledReason": "superseded"}
    return build_stream(
        "syn-superseded-1", [(0.0, "s0", {"type": "run:start", "workflow": "raced"}), (1.0, "s0", end)]
    )


def _streams(tmp: Path) -> list[tuple[str, Path, Path | None]]:
    """(name, stream file, outcome file or None) for every export the test runs."""
    out: list[tuple[str, Path, Path | None]] = []
    for name in FIXTURE_STREAMS:
        result = STREAMS / f"{name}.outcome.json"
        out.append((name, STREAMS / f"{name}.jsonl", result if result.exists() else None))
    adaptive_result = tmp / "adaptive.outcome.json"
    adaptive_result.write_text(
        json.dumps({"settled": "resolved", "outcome": adaptive_outcome().model_dump(mode="json")}),
        encoding="utf-8",
    )
    out.append(("adaptive", _write_stream(tmp / "adaptive.jsonl", adaptive_stream()), adaptive_result))
    out.append(
        ("unsettled-quota", _write_stream(tmp / "unsettled-quota.jsonl", unsettled_quota_stream()), None)
    )
    out.append(("superseded", _write_stream(tmp / "superseded.jsonl", _superseded_stream()), None))
    return out


def _export(tmp: Path, name: str, stream: Path, result: Path | None, port: int) -> tuple[str, int, str]:
    """One `rulvar-otel export` process, as a user runs it; returns (name, exit code, output)."""
    args = [
        rulvar_otel_command(), "export", str(stream),
        "--out", str(tmp / f"{name}.trace.json"), "--no-tree",
        "--prometheus-port", str(port), "--prometheus-linger", str(LINGER_S),
    ]  # fmt: skip
    if result is not None:
        args += ["--outcome", str(result)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    return name, done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_bin = require_tool("prometheus")
    alertmanager_bin = require_tool("alertmanager", "prometheus-alertmanager")
    tmp = tmp_path_factory.mktemp("prometheus-live")
    hook, hook_server = _start_webhook()
    export_port, prom_port, am_port = free_port(), free_port(), free_port()
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
                    {"job_name": "rulvar-otel", "static_configs": [{"targets": [f"127.0.0.1:{export_port}"]}]}
                ],
            }
        ),
        encoding="utf-8",
    )
    services: list[Service] = []
    try:
        services.append(
            spawn(
                "alertmanager",
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
        services.append(
            spawn(
                "prometheus",
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
        wait_for("Prometheus ready", lambda: httpx.get(f"{prometheus}/-/ready", timeout=2).status_code == 200)
        wait_for(
            "Alertmanager ready",
            lambda: httpx.get(f"http://127.0.0.1:{am_port}/-/ready", timeout=2).status_code == 200,
        )
        # Prometheus applies new targets every few seconds: export once it scrapes (and misses) ours.
        wait_for(
            "the first scrape of the export port",
            lambda: bool(Stack(prometheus, hook, tmp, []).query('up{job="rulvar-otel"}')),
        )
        exports = [_export(tmp, name, stream, result, export_port) for name, stream, result in _streams(tmp)]
        live = Stack(prometheus, hook, tmp, exports)
        # Rules evaluate every second; give the last export's samples one evaluation.
        wait_for("the last export's samples", lambda: bool(live.query('count(up{job="rulvar-otel"} == 0)')))
        time.sleep(2)
        yield live
    finally:
        for service in services:
            service.stop()
        hook_server.shutdown()
        hook_server.server_close()


def test_every_export_process_succeeded(stack: Stack) -> None:
    failed = [f"{name}: exit {code}\n{output}" for name, code, output in stack.exports if code != 0]
    assert not failed, "\n".join(failed)
    assert len(stack.exports) == len(FIXTURE_STREAMS) + 3


def test_every_panel_an_export_feeds_shows_a_non_zero_value(stack: Stack) -> None:
    # An export feeds the recorder's series. The engine's per-request series come from a run of the
    # engine itself (test_model_metrics_live.py checks their panels' numbers), the spanmetrics
    # series from a collector (the collector tests): here their panels must only be valid PromQL.
    for _, expr in (*panels_fed_by(ENGINE), *panels_fed_by(COLLECTOR)):
        stack.query(runnable(expr, WINDOW))
    empty: list[str] = []
    fed = panels_fed_by(RECORDER)
    for title, expr in fed:
        result = stack.query(runnable(expr, WINDOW))
        values = [float(sample["value"][1]) for sample in result]
        if not any(math.isfinite(v) and v != 0 for v in values):
            empty.append(f"{title}: {expr} -> {values}")
    assert len(fed) >= 30
    assert not empty, "panels without a non-zero value:\n" + "\n".join(empty)


def test_every_run_is_counted_once_and_plain_increase_would_have_missed_them(stack: Stack) -> None:
    # Every series was served at its final value by a process that lived a few seconds (each
    # process its own service_instance_id), so increase() alone sees almost nothing.
    window = WINDOW
    counted = stack.query(f"sum({generator_module().counted('rulvar_runs_settled_total', window)})")
    plain = stack.query(f"sum(increase(rulvar_runs_settled_total[{window}]))")
    runs = len(stack.exports)  # one run:end per stream
    assert float(counted[0]["value"][1]) == runs
    assert (float(plain[0]["value"][1]) if plain else 0.0) < runs / 2


def test_template_variables_resolve(stack: Stack) -> None:
    for board in dashboards().values():
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"])
            assert match, variable["query"]
            series, label = match.groups()
            if series_sources()[series] != RECORDER:
                continue  # the collector's series: not fed here
            response = httpx.get(
                f"{stack.prometheus}/api/v1/label/{label}/values", params={"match[]": series}, timeout=5
            ).json()
            assert response["status"] == "success" and response["data"], variable["name"]


def test_series_names_and_labels_match_the_registry(stack: Stack) -> None:
    expected = {name for entry in REGISTRY for name in entry.prometheus_series}
    in_prometheus = set(
        httpx.get(f"{stack.prometheus}/api/v1/label/__name__/values", timeout=5).json()["data"]
    )
    assert expected <= in_prometheus, expected - in_prometheus
    for entry in REGISTRY:
        series = stack.query(f"last_over_time({entry.prometheus_series[0]}[10m])")
        assert series, entry.name
        for sample in series:
            # Prometheus adds job and instance; every pipeline adds its service_instance_id.
            labels = set(sample["metric"]) - {"__name__", "instance", "job", "le", "service_instance_id"}
            assert {label for label in labels if not label.startswith("otel_scope_")} <= set(
                entry.prometheus_labels
            ), entry.name


def test_the_event_alerts_fire_from_one_shot_exports(stack: Stack) -> None:
    expected_firing = {
        "RulvarUnsettledTerminal",
        "RulvarSupersededTerminal",
        "RulvarRunAcceptedPartial",
        "RulvarExposureDrained",
        "RulvarQuotaExhausted",
        "RulvarAgentErrors",
        "RulvarWorkflowDeterminismWarning",
    }

    def states() -> dict[str, set[str]]:
        alerts = httpx.get(f"{stack.prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        out: dict[str, set[str]] = {}
        for alert in alerts:
            out.setdefault(alert["labels"]["alertname"], set()).add(alert["state"])
        return out

    wait_for(
        "every event alert firing",
        lambda: expected_firing <= {k for k, v in states().items() if "firing" in v},
    )
    current = states()
    # The failure-rate warning needs 10 minutes: one-shot exports of failed runs make it pending.
    assert "pending" in current.get("RulvarRunFailureRate", set()) | current.get(
        "RulvarRunFailureRate", set()
    )
    # Throttling in these streams is far below saturation.
    assert "RulvarQuotaThrottlingSaturated" not in current
    alerts = httpx.get(f"{stack.prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    unsettled = {
        a["labels"]["rulvar_workflow"]
        for a in alerts
        if a["labels"]["alertname"] == "RulvarUnsettledTerminal"
    }
    assert unsettled == {"demo", "solo"}  # the superseded terminal of "raced" is not a failed settlement
    exhausted = [a for a in alerts if a["labels"]["alertname"] == "RulvarQuotaExhausted"]
    assert {a["labels"]["rulvar_agent_type"] for a in exhausted} == {"researcher"}


def test_exposure_drained_alert_reaches_the_webhook(stack: Stack) -> None:
    def drained() -> list[dict[str, Any]]:
        return [
            alert
            for body in stack.hook.bodies
            for alert in body.get("alerts", [])
            if alert["labels"].get("alertname") == "RulvarExposureDrained"
        ]

    wait_for("the exposure-drained alert at the webhook", lambda: bool(drained()), timeout=45)
    alert = drained()[0]
    assert alert["status"] == "firing"
    assert alert["labels"]["severity"] == "critical"
    assert alert["labels"]["rulvar_exposure_scope"] == "root"
    assert alert["labels"]["gen_ai_request_model"] == "model"  # the model id, as on the spans
    # willWait true (the adaptive stream's child wait) never fires it.
    assert all(a["labels"].get("rulvar_exposure_scope") != "child" for a in drained())
