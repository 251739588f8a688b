"""Real pipeline services for the live tests: the built collector, Jaeger and Prometheus.

`binaries()` builds (or takes from the cache) otelcol-rulvar and Jaeger through
scripts/build_pipeline.sh; a failed build fails the test with the script's message, never a skip.
`Service` runs one process on free loopback ports with its log in the test's tmp dir and stops
it (only it) afterwards; `spawn` starts any command that way, `stop_process` ends a process
started otherwise. `rulvar_otel_command` is the installed `rulvar-otel` command the live tests
run. `Jaeger` reads traces back through Jaeger's query APIs: the OTLP/JSON API v3 for whole
traces, the UI's API for searches.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

__all__ = [
    "BUILD_TIMEOUT_S",
    "CONFIG",
    "ROOT",
    "Binaries",
    "Jaeger",
    "JaegerSpan",
    "Prometheus",
    "Service",
    "binaries",
    "free_port",
    "otelcol_args",
    "otlp_attributes",
    "otlp_json_spans",
    "require_tool",
    "rulvar_otel_command",
    "spawn",
    "start_collector",
    "start_jaeger",
    "start_prometheus",
    "stop_process",
    "wait_for",
    "write_yaml",
]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "collector_config"
BUILD_SCRIPT = ROOT / "scripts" / "build_pipeline.sh"


# A test that may have to build the binaries (pytest run without scripts/test.sh, on a machine
# with nothing cached) gets the build's bound: the first build takes up to half an hour on two
# busy cores.
BUILD_TIMEOUT_S = 2400


@dataclass(frozen=True)
class Binaries:
    otelcol: Path
    jaeger: Path


@cache
def _build() -> Binaries | str:
    # The first build takes minutes on a small machine; later calls find the cached binaries.
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        return f"scripts/build_pipeline.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
    found = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return Binaries(Path(found["OTELCOL_BIN"]), Path(found["JAEGER_BIN"]))


def binaries() -> Binaries:
    """The built collector and Jaeger; fails the calling test clearly when they cannot be built."""
    built = _build()
    if isinstance(built, str):
        pytest.fail(built)
    return built


def require_tool(*names: str) -> str:
    """The first of ``names`` on PATH; a clear failure (never a skip) when none is."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        f"{' / '.join(names)} is not on PATH: run scripts/install_test_services.sh first "
        "(it installs Debian's prometheus and prometheus-alertmanager)"
    )


def rulvar_otel_command() -> str:
    """The `rulvar-otel` command installed beside this interpreter (else on PATH); a clear
    failure when it is not installed."""
    beside = Path(sys.executable).with_name("rulvar-otel")
    found = str(beside) if beside.exists() else shutil.which("rulvar-otel")
    if found is None:
        pytest.fail("the rulvar-otel command is not installed: pip install -e '.[dev]'")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            pass
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@dataclass
class Service:
    """One child process; `stop()` ends it (and only it)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def require_running(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.process.returncode}:\n{self.log_text()[-4000:]}")

    def wait_healthy(self, url: str, timeout: float = 60.0) -> None:
        def healthy() -> bool:
            self.require_running()
            return httpx.get(url, timeout=2).status_code == 200

        wait_for(f"{self.name} at {url}", healthy, timeout=timeout)

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen[Any]) -> None:
    """End ``process`` if it still runs: terminate, then kill if it does not exit in 15 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def spawn(name: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> Service:
    """``args`` as a child process named ``name``, its output in ``log``, ``env`` added."""
    full_env = {**os.environ, **(env or {})}
    process = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=full_env)
    return Service(name, process, log)


# --- collector ---------------------------------------------------------------------------------


def otelcol_args(config: Path, *sets: str) -> list[str]:
    """Arguments for one collector: a config file plus `--set` overrides (no internal metrics
    endpoint, so several collectors and Jaeger can run side by side)."""
    args = [str(binaries().otelcol), f"--config={config}", "--set=service.telemetry.metrics.level=none"]
    return args + [f"--set={s}" for s in sets]


def start_collector(name: str, config: Path, tmp: Path, *sets: str, health_port: int | None = None,
                    env: dict[str, str] | None = None) -> Service:  # fmt: skip
    """The built collector on `config` with overrides; returns once its health check answers."""
    health_port = health_port or free_port()
    args = otelcol_args(config, *sets, f"extensions.health_check.endpoint=127.0.0.1:{health_port}")
    service = spawn(name, args, tmp / f"{name}.log", env)
    service.wait_healthy(f"http://127.0.0.1:{health_port}/")
    return service


# --- Jaeger ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JaegerSpan:
    """One span as Jaeger's API v3 returns it (OTLP/JSON, ids in hex)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    status_code: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]


def _value(value: dict[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    return value


def otlp_attributes(pairs: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {pair["key"]: _value(pair.get("value", {})) for pair in pairs or []}


def _kind(kind: Any) -> int:
    if isinstance(kind, int):
        return kind
    names = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
    return names.index(str(kind).removeprefix("SPAN_KIND_"))


def _status(status: dict[str, Any] | None) -> int:
    code = (status or {}).get("code", 0)
    if isinstance(code, int):
        return code
    return ("UNSET", "OK", "ERROR").index(str(code).removeprefix("STATUS_CODE_"))


def _hex(value: str | None) -> str | None:
    # OTLP/JSON ids are hex by the spec; grpc-gateway renders bytes as base64.
    if not value:
        return None
    if len(value) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    import base64

    return base64.b64decode(value).hex() or None


def otlp_json_spans(document: dict[str, Any]) -> Iterator[JaegerSpan]:
    """Every span of one OTLP/JSON traces document (`{"resourceSpans": [...]}`)."""
    for resource_spans in document.get("resourceSpans", []):
        resource = otlp_attributes(resource_spans.get("resource", {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                yield JaegerSpan(
                    trace_id=_hex(span["traceId"]) or "",
                    span_id=_hex(span["spanId"]) or "",
                    parent_span_id=_hex(span.get("parentSpanId")),
                    name=span["name"],
                    kind=_kind(span.get("kind", 0)),
                    status_code=_status(span.get("status")),
                    start_ns=int(span.get("startTimeUnixNano", 0)),
                    end_ns=int(span.get("endTimeUnixNano", 0)),
                    attributes=otlp_attributes(span.get("attributes")),
                    events=[
                        (e["name"], otlp_attributes(e.get("attributes"))) for e in span.get("events", [])
                    ],
                    resource=resource,
                )


@dataclass
class Jaeger:
    service: Service
    query_url: str
    otlp_grpc: str
    otlp_http: str

    def trace(self, trace_id: str, *, raw: bool = False) -> list[JaegerSpan]:
        """Every span of one trace (API v3; empty when Jaeger has no such trace).

        ``raw=True`` reads the trace as stored. Poll with it while a trace is still arriving:
        Jaeger v1.76's in-memory store hands its stored trace to the query-time adjusters, which
        edit it in place, so an adjusted read of a partial trace stamps a lasting "parent span
        ID=... is not in the trace" warning on spans whose parent had not arrived yet. The
        default (adjusted) read is what Jaeger's UI shows: read it once the trace is whole.
        """
        params = {"raw_traces": "true"} if raw else {}
        response = httpx.get(f"{self.query_url}/api/v3/traces/{trace_id}", params=params, timeout=30)
        if response.status_code == 404:
            return []
        response.raise_for_status()
        spans: list[JaegerSpan] = []
        # The v3 API streams chunks: one JSON object per chunk, each {"result": {resourceSpans}}.
        decoder = json.JSONDecoder()
        text, index = response.text, 0
        while index < len(text):
            while index < len(text) and text[index].isspace():
                index += 1
            if index >= len(text):
                break
            chunk, index = decoder.raw_decode(text, index)
            if "error" in chunk:
                if chunk["error"].get("httpCode") == 404:
                    return []
                raise AssertionError(f"Jaeger API v3 error for {trace_id}: {chunk['error']}")
            spans.extend(otlp_json_spans(chunk.get("result", chunk)))
        return spans

    def trace_ids(self, service: str) -> set[str]:
        """The ids of the traces Jaeger holds for `service`, whatever their age."""
        params: dict[str, str | int] = {
            "service": service,
            "limit": 10_000,
            "start": 1,  # µs since the epoch: recorded runs carry old timestamps
            "end": int((time.time() + 86_400) * 1_000_000),
        }
        response = httpx.get(f"{self.query_url}/api/traces", params=params, timeout=30)
        response.raise_for_status()
        return {trace["traceID"] for trace in response.json().get("data") or []}

    def services(self) -> set[str]:
        response = httpx.get(f"{self.query_url}/api/services", timeout=10)
        response.raise_for_status()
        return set(response.json().get("data") or [])


def start_jaeger(tmp: Path, name: str = "jaeger") -> Jaeger:
    """Jaeger v2 on the shipped collector_config/jaeger/jaeger.yaml, every port moved to a free one."""
    ports = {key: free_port() for key in ("health", "query", "query_grpc", "grpc", "http")}
    env = {
        "JAEGER_HEALTH_ENDPOINT": f"127.0.0.1:{ports['health']}",
        "JAEGER_QUERY_ENDPOINT": f"127.0.0.1:{ports['query']}",
        "JAEGER_QUERY_GRPC_ENDPOINT": f"127.0.0.1:{ports['query_grpc']}",
        "JAEGER_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{ports['grpc']}",
        "JAEGER_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{ports['http']}",
    }
    args = [str(binaries().jaeger), f"--config={CONFIG / 'jaeger' / 'jaeger.yaml'}"]
    service = spawn(name, args, tmp / f"{name}.log", env)
    service.wait_healthy(f"http://127.0.0.1:{ports['health']}/status")
    jaeger = Jaeger(
        service,
        query_url=f"http://127.0.0.1:{ports['query']}",
        otlp_grpc=f"127.0.0.1:{ports['grpc']}",
        otlp_http=f"http://127.0.0.1:{ports['http']}",
    )
    wait_for(
        "Jaeger's query API", lambda: httpx.get(f"{jaeger.query_url}/api/services", timeout=2).is_success
    )
    return jaeger


# --- Prometheus --------------------------------------------------------------------------------


@dataclass
class Prometheus:
    service: Service
    url: str
    scraped: list[str] = field(default_factory=list)

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert body.get("status") == "success", (expr, body)
        return body["data"]["result"]  # type: ignore[no-any-return]


def start_prometheus(tmp: Path, targets: list[str]) -> Prometheus:
    """Debian's Prometheus scraping `targets` every second (scripts/install_test_services.sh)."""
    binary = require_tool("prometheus")
    port = free_port()
    config = write_yaml(
        tmp / "prometheus.yml",
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "otelcol", "honor_labels": True, "static_configs": [{"targets": targets}]}
            ],
        },
    )
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    service = spawn("prometheus", args, tmp / "prometheus.log")
    url = f"http://127.0.0.1:{port}"
    service.wait_healthy(f"{url}/-/ready")
    return Prometheus(service, url, targets)
