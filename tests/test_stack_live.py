"""scripts/stack.sh for real: up, the documented demo, status, down.

Every port is moved to a free one and the state directory into the test's tmp dir, so the test
never meets a stack a developer runs. The "see it work" path of docs/pipeline.md is what runs:
`rulvar-otel demo --endpoint $OTLP_ENDPOINT`, then the trace in Jaeger and the span metrics in
Prometheus.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._support import BUILD_TIMEOUT_S, ROOT, binaries, free_port, rulvar_otel_command, wait_for

pytestmark = [pytest.mark.live, pytest.mark.timeout(BUILD_TIMEOUT_S)]

STACK = ROOT / "scripts" / "stack.sh"
PORT_VARIABLES = (
    "OTLP_GRPC",
    "OTLP_HTTP",
    "METRICS",
    "HEALTH",
    "JAEGER",
    "JAEGER_GRPC",
    "JAEGER_OTLP",
    "JAEGER_OTLP_GRPC",
    "JAEGER_HEALTH",
    "PROMETHEUS",
)


def _stack(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(STACK), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    binaries()  # a build failure fails here, with the build script's message
    env = {**os.environ, "RULVAR_STACK_DIR": str(tmp_path / "stack")}
    env.update({f"RULVAR_STACK_{name}_PORT": str(free_port()) for name in PORT_VARIABLES})
    try:
        yield env
    finally:
        _stack(env, "down")


def _lines(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line and " " not in line)


def test_up_demo_status_down(stack_env: dict[str, str], tmp_path: Path) -> None:
    up = _stack(stack_env, "up")
    assert up.returncode == 0, up.stderr
    found = _lines(up.stdout)
    env = stack_env
    assert found["OTLP_ENDPOINT"] == f"http://127.0.0.1:{env['RULVAR_STACK_OTLP_GRPC_PORT']}"
    assert found["JAEGER_URL"] == f"http://127.0.0.1:{env['RULVAR_STACK_JAEGER_PORT']}"
    assert found["PROMETHEUS_URL"] == f"http://127.0.0.1:{env['RULVAR_STACK_PROMETHEUS_PORT']}"

    # Healthy on return: no waiting needed before the first request.
    assert httpx.get(f"{found['JAEGER_URL']}/api/services", timeout=5).is_success
    assert httpx.get(f"{found['PROMETHEUS_URL']}/-/ready", timeout=5).is_success

    again = _stack(stack_env, "up")
    assert again.returncode == 0 and "already up" in again.stderr
    assert _lines(again.stdout) == found

    # The command the stack prints works as printed with the ports it chose (any gRPC port).
    hint = re.search(r"See a trace: rulvar-otel (demo .*)$", up.stderr + up.stdout, re.MULTILINE)
    assert hint, up.stderr
    printed = shlex.split(hint[1])
    assert printed[printed.index("--endpoint") + 1] == found["OTLP_ENDPOINT"]
    assert printed[printed.index("--protocol") + 1] == "grpc"
    demo = subprocess.run(
        [rulvar_otel_command(), *printed,
         "--no-tree", "--service-name", "rulvar-stack-demo", "--progress", "off",
         "--journal", str(tmp_path / "journal")],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    exported = re.search(r"exported (\d+) spans? .* in trace ([0-9a-f]{32})", demo.stderr)
    assert exported, demo.stderr
    spans, trace_id = int(exported[1]), exported[2]

    def trace_in_jaeger() -> bool:
        # Every span the demo exported: the collector's batches may reach Jaeger a few seconds apart.
        response = httpx.get(f"{found['JAEGER_URL']}/api/traces/{trace_id}", timeout=5)
        return response.is_success and len(response.json()["data"][0]["spans"]) == spans

    wait_for(
        f"the {spans} spans of demo trace {trace_id} in Jaeger", trace_in_jaeger, timeout=60, interval=1.0
    )
    tree = _stack(stack_env, "trace", "rulvar-stack-demo")
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(f"trace {trace_id}: {spans} spans of service rulvar-stack-demo")
    assert len(lines) == spans + 1 and lines[1].startswith("run ")
    assert sum(line.startswith("  ") for line in lines[1:]) == spans - 1  # one root, the rest below it

    def spanmetrics_in_prometheus() -> bool:
        query = 'traces_span_metrics_calls_total{service_name="rulvar-stack-demo"}'
        response = httpx.get(f"{found['PROMETHEUS_URL']}/api/v1/query", params={"query": query}, timeout=5)
        return bool(response.json()["data"]["result"])

    # The shipped scrape interval and flush interval are 15 s each.
    wait_for("span metrics of the demo in Prometheus", spanmetrics_in_prometheus, timeout=120, interval=2.0)

    # From a spike to the trace: the agent-duration histogram's exemplars name whole traces.
    exemplar_traces: set[str] = set()

    def agent_duration_exemplars() -> bool:
        response = httpx.get(
            f"{found['PROMETHEUS_URL']}/api/v1/query_exemplars",
            params={"query": "rulvar_agent_duration_seconds_bucket", "start": "0", "end": "9999999999"},
            timeout=5,
        )
        for series in response.json().get("data") or ():
            for exemplar in series.get("exemplars", ()):
                exemplar_traces.add(exemplar["labels"]["trace_id"])
        return bool(exemplar_traces)

    wait_for("agent-duration exemplars in Prometheus", agent_duration_exemplars, timeout=120, interval=2.0)
    assert exemplar_traces == {trace_id}
    whole = httpx.get(f"{found['JAEGER_URL']}/api/traces/{trace_id}", timeout=5).json()["data"][0]
    assert len(whole["spans"]) == spans

    status = _stack(stack_env, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ("jaeger", "otelcol", "prometheus"):
        assert f"{name}: running" in status.stdout
    pids = [int(p.read_text().split()[0]) for p in (tmp_path / "stack").glob("*.pid")]
    assert len(pids) == 3

    down = _stack(stack_env, "down")
    assert down.returncode == 0, down.stderr
    for pid in pids:
        try:
            gone = "zombie" in Path(f"/proc/{pid}/status").read_text()  # exited, not yet reaped
        except FileNotFoundError:
            gone = True
        assert gone, f"pid {pid} still runs after down: {down.stderr}"
    after = _stack(stack_env, "status")
    assert after.returncode == 1 and after.stdout.count(": stopped") == 3


def test_down_never_signals_a_process_it_did_not_start(stack_env: dict[str, str], tmp_path: Path) -> None:
    state = tmp_path / "stack"
    state.mkdir()
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        # A stale pid file naming a live pid that runs something else (a recycled pid).
        (state / "otelcol.pid").write_text(f"{bystander.pid} {binaries().otelcol}\n")
        assert _stack(stack_env, "down").returncode == 0
        assert bystander.poll() is None, "down killed a process it did not start"
        assert not (state / "otelcol.pid").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_up_refuses_a_busy_port_and_names_it(stack_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**stack_env, "RULVAR_STACK_JAEGER_PORT": str(port)}
        result = _stack(env, "up")
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr
    assert "OTLP_ENDPOINT" not in result.stdout
