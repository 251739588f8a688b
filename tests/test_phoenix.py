"""End to end against a real trace backend: Arize Phoenix, installed from PyPI into its own venv.

The venv lives outside the repo (``$RULVAR_OTEL_PHOENIX_VENV``, default
``~/.cache/rulvar-otel/phoenix-venv``) and is reused when present, so only the first run pays for
the install (about a minute). Phoenix runs on 127.0.0.1 with free ports and a temporary working
directory; the ``tools``, ``nested`` and ``orchestrate`` runs go to it over OTLP gRPC and OTLP
HTTP, and the spans are read back through Phoenix's REST and GraphQL APIs: the trees, the span
kinds Phoenix shows, the token totals it computes, and how failed tools look
(docs/otel-mapping.md#genai-semantic-conventions).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.otel import export_events
from rulvar_otel.otel import semconv as sc
from tests._support import events, free_port, outcome

PHOENIX_REQUIREMENT = "arize-phoenix==20.26.1"
INSTALL_TIMEOUT_S = 900
STARTUP_TIMEOUT_S = 120
INGEST_TIMEOUT_S = 60

pytestmark = [pytest.mark.live, pytest.mark.timeout(INSTALL_TIMEOUT_S + STARTUP_TIMEOUT_S + 300)]


def _venv() -> Path:
    default = Path.home() / ".cache" / "rulvar-otel" / "phoenix-venv"
    return Path(os.environ.get("RULVAR_OTEL_PHOENIX_VENV", default))


def _ensure_phoenix() -> Path:
    venv = _venv()
    python = venv / "bin" / "python"
    marker = venv / ".rulvar-otel-installed"
    if python.exists() and marker.exists() and marker.read_text() == PHOENIX_REQUIREMENT:
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PHOENIX_REQUIREMENT],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"installing {PHOENIX_REQUIREMENT} failed:\n{proc.stderr[-3000:]}"
    marker.write_text(PHOENIX_REQUIREMENT)
    return python


class Phoenix:
    def __init__(self, http_port: int, grpc_port: int) -> None:
        self.http = f"http://127.0.0.1:{http_port}"
        self.grpc = f"http://127.0.0.1:{grpc_port}"

    def spans(self, project: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.http}/v1/projects/{project}/spans", params={"limit": 1000}, timeout=10)
        if response.status_code == 404:
            return []  # the project appears with its first ingested span
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        response = httpx.post(
            f"{self.http}/graphql", json={"query": query, "variables": variables}, timeout=10
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        assert not body.get("errors"), body["errors"]
        data: dict[str, Any] = body["data"]
        return data

    def project_id(self, name: str) -> str:
        data = self.graphql("query { projects(first: 1000) { edges { node { id name } } } }")
        (found,) = [e["node"]["id"] for e in data["projects"]["edges"] if e["node"]["name"] == name]
        return str(found)

    def wait_for(self, project: str, count: int) -> list[dict[str, Any]]:
        """The project's spans once ``count`` have been ingested (ingestion is asynchronous)."""
        deadline = time.monotonic() + INGEST_TIMEOUT_S
        spans = self.spans(project)
        while len(spans) < count and time.monotonic() < deadline:
            time.sleep(0.5)
            spans = self.spans(project)
        assert len(spans) == count
        return spans


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    python = _ensure_phoenix()
    workdir = tmp_path_factory.mktemp("phoenix")
    http_port, grpc_port = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))},
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (workdir / "phoenix.log").open("w")
    proc = subprocess.Popen(
        [str(python), "-m", "phoenix.server.main", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    server = Phoenix(http_port, grpc_port)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"Phoenix exited:\n{(workdir / 'phoenix.log').read_text()[-3000:]}"
            try:
                if httpx.get(f"{server.http}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "Phoenix did not come up in time"
            time.sleep(0.5)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _expected(name: str) -> Counter[tuple[str, str | None]]:
    """(span name, parent span name) pairs of an in-memory export: the tree Phoenix must serve."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    export_events(events(name), provider.get_tracer("test"), outcome=outcome(name))
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s.name for s in spans}
    return Counter((s.name, by_id[s.parent.span_id] if s.parent else None) for s in spans)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("scenario", ["tools", "nested", "orchestrate"])
def test_phoenix_serves_one_correct_trace_per_run(phoenix: Phoenix, protocol: str, scenario: str) -> None:
    project = f"rulvar-{scenario}-{protocol}"
    exporter = (
        GrpcExporter(endpoint=phoenix.grpc, insecure=True, timeout=10)
        if protocol == "grpc"
        else HttpExporter(endpoint=f"{phoenix.http}/v1/traces", timeout=10)
    )
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rulvar", "openinference.project.name": project})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    sent = export_events(events(scenario), provider.get_tracer("rulvar-otel"), outcome=outcome(scenario))
    assert provider.force_flush(30_000)
    provider.shutdown()

    expected = _expected(scenario)
    assert sent == sum(expected.values())
    deadline = time.monotonic() + INGEST_TIMEOUT_S
    spans = phoenix.spans(project)
    while len(spans) < sent and time.monotonic() < deadline:
        time.sleep(0.5)  # ingestion is asynchronous
        spans = phoenix.spans(project)
    assert len(spans) == sent

    assert len({s["context"]["trace_id"] for s in spans}) == 1  # the run is exactly one trace
    by_id = {s["context"]["span_id"]: s for s in spans}
    roots = [s for s in spans if s["parent_id"] is None]
    assert len(roots) == 1 and roots[0]["name"].startswith("run ")
    assert all(s["parent_id"] is None or s["parent_id"] in by_id for s in spans)
    served = Counter((s["name"], by_id[s["parent_id"]]["name"] if s["parent_id"] else None) for s in spans)
    assert served == expected
    run_id = events(scenario)[0]["runId"]
    assert all(s["attributes"].get("rulvar.run_id") == run_id for s in spans)


# --- what Phoenix shows: kinds, tokens, errors (docs/otel-mapping.md#genai-semantic-conventions) ---

EXPECTED_KIND = {
    "run": "CHAIN",
    "phase": "CHAIN",
    "workflow": "CHAIN",
    "agent": "AGENT",
    "invocation": "LLM",
    "tool": "TOOL",
}


def _send(phoenix: Phoenix, scenario: str, project: str, **options: Any) -> int:
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rulvar", sc.OPENINFERENCE_PROJECT_NAME: project})
    )
    provider.add_span_processor(
        BatchSpanProcessor(HttpExporter(endpoint=f"{phoenix.http}/v1/traces", timeout=10))
    )
    tracer = provider.get_tracer(
        sc.INSTRUMENTATION_SCOPE, sc.INSTRUMENTATION_VERSION, schema_url=sc.SCHEMA_URL
    )
    sent = export_events(events(scenario), tracer, outcome=outcome(scenario), **options)
    assert provider.force_flush(30_000)
    provider.shutdown()
    return sent


@pytest.fixture(scope="module")
def shown(phoenix: Phoenix) -> dict[str, list[dict[str, Any]]]:
    """The spans Phoenix serves for each scenario, sent once with the default conventions."""
    out = {}
    for scenario in ("tools", "nested", "orchestrate"):
        project = f"rulvar-shown-{scenario}"
        out[scenario] = phoenix.wait_for(project, _send(phoenix, scenario, project))
    return out


@pytest.mark.parametrize("scenario", ["tools", "nested", "orchestrate"])
def test_phoenix_shows_every_span_with_its_kind(
    shown: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    spans = shown[scenario]
    kinds: Counter[str] = Counter()
    for span in spans:
        expected = EXPECTED_KIND[span["name"].split(" ", 1)[0]]
        assert span["span_kind"] == expected, span["name"]
        kinds[expected] += 1
    assert "UNKNOWN" not in kinds
    assert {"CHAIN", "AGENT", "LLM"} <= set(kinds)
    if scenario == "tools":
        assert kinds["TOOL"] == 8


@pytest.mark.parametrize("scenario", ["tools", "nested", "orchestrate"])
def test_phoenix_trace_token_total_is_the_invocations_tokens_counted_once(
    phoenix: Phoenix, shown: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    spans = shown[scenario]
    invocations = [s for s in spans if s["name"].startswith("invocation ")]
    assert invocations
    expected = sum(
        int(s["attributes"][sc.GEN_AI_USAGE_INPUT_TOKENS])
        + int(s["attributes"][sc.GEN_AI_USAGE_OUTPUT_TOKENS])
        for s in invocations
    )
    envelope = next(e for e in reversed(events(scenario)) if e["type"] == "run:end")["envelope"]["usage"]
    assert expected == envelope["inputTokens"] + envelope["outputTokens"] > 0  # the run's own total
    (trace_id,) = {s["context"]["trace_id"] for s in spans}
    data = phoenix.graphql(
        """query ($id: ID!, $trace: ID!) { node(id: $id) { ... on Project {
             trace(traceId: $trace) { rootSpan { name cumulativeTokenCountTotal } }
        } } }""",
        id=phoenix.project_id(f"rulvar-shown-{scenario}"),
        trace=trace_id,
    )
    root = data["node"]["trace"]["rootSpan"]
    assert root["name"].startswith("run ")
    assert root["cumulativeTokenCountTotal"] == expected  # what Phoenix shows as the trace's tokens
    # gen_ai.conversation.id is what Phoenix groups a run's spans into a session by.
    run_id = events(scenario)[0]["runId"]
    for span in spans:
        if span["name"].startswith(("run ", "agent ")):
            assert span["attributes"]["session.id"] == run_id, span["name"]


def test_phoenix_shows_failed_tools_as_errors_with_their_error_type(
    shown: dict[str, list[dict[str, Any]]],
) -> None:
    tool_ends = [e for e in events("tools") if e["type"] == "tool:end"]
    failed = Counter(e["outcome"] for e in tool_ends if e["outcome"] != "ok")
    assert failed == {"denied": 3, "error": 1}
    tools = [s for s in shown["tools"] if s["name"].startswith("tool ")]
    shown_failed = [s for s in tools if s["status_code"] == "ERROR"]
    assert Counter(s["status_message"] for s in shown_failed) == failed
    for span in shown_failed:
        assert span["attributes"][sc.ERROR_TYPE], span["name"]
        assert span["attributes"][sc.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert all(
        s["status_code"] == "OK" and sc.ERROR_TYPE not in s["attributes"]
        for s in tools
        if s not in shown_failed
    )


def test_without_openinference_phoenix_still_types_genai_spans_from_the_operation(phoenix: Phoenix) -> None:
    project = "rulvar-no-openinference"
    spans = phoenix.wait_for(project, _send(phoenix, "tools", project, conventions=()))
    assert not any(sc.OPENINFERENCE_SPAN_KIND in s["attributes"] for s in spans)
    for span in spans:
        prefix = span["name"].split(" ", 1)[0]
        # Phoenix derives AGENT/LLM/TOOL from gen_ai.operation.name; run and phase spans carry none.
        assert span["span_kind"] == (
            EXPECTED_KIND[prefix] if prefix in ("agent", "invocation", "tool") else "UNKNOWN"
        )
