"""The agent pipeline for real: rulvar-otel -> otelcol-rulvar (otelcol-agent.yaml) -> Jaeger v2.

One built collector runs the shipped agent config (addresses moved to free loopback ports with
`--set`, Tempo left out of the traces pipeline) in front of one Jaeger. Each reference stream is
exported twice with deterministic ids: to a file (what rulvar-otel sent) and to the collector;
Jaeger's API must then return that trace whole. A hand-made span with a planted credential and a
content key goes straight to the collector to prove its redaction, and a real Prometheus scrapes
the collector's span metrics.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from tests._support import (
    BUILD_TIMEOUT_S,
    CONFIG,
    STREAMS,
    Jaeger,
    JaegerSpan,
    Prometheus,
    Service,
    dashboards,
    free_port,
    otlp_json_spans,
    panel_queries,
    rulvar_otel_command,
    start_collector,
    start_jaeger,
    start_prometheus,
    wait_for,
)

pytestmark = [pytest.mark.live, pytest.mark.timeout(BUILD_TIMEOUT_S)]

# Span counts of the streams as rulvar-otel maps them (large: every one of its 8,021 spans).
STREAM_SPANS = {"tools": 17, "nested": 10, "large": 8021}
JAEGER_WARNINGS = "@jaeger@warnings"


@dataclass
class Agent:
    jaeger: Jaeger
    collector: Service
    grpc_endpoint: str
    prometheus_port: int
    tmp: Path


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    tmp = tmp_path_factory.mktemp("agent")
    jaeger = start_jaeger(tmp)
    grpc, http, prometheus = free_port(), free_port(), free_port()
    try:
        collector = start_collector(
            "otelcol-agent",
            CONFIG / "otelcol-agent.yaml",
            tmp,
            f"receivers.otlp.protocols.grpc.endpoint=127.0.0.1:{grpc}",
            f"receivers.otlp.protocols.http.endpoint=127.0.0.1:{http}",
            f"exporters.otlp_http/jaeger.endpoint={jaeger.otlp_http}",
            "service.pipelines.traces.exporters=[otlp_http/jaeger, span_metrics]",
            f"exporters.prometheus.endpoint=127.0.0.1:{prometheus}",
            "connectors.span_metrics.metrics_flush_interval=1s",
            "processors.batch.timeout=200ms",
        )
    except BaseException:
        jaeger.service.stop()
        raise
    try:
        yield Agent(jaeger, collector, f"http://127.0.0.1:{grpc}", prometheus, tmp)
    finally:
        collector.stop()
        jaeger.service.stop()


def _export(stream: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [rulvar_otel_command(), "export", str(STREAMS / f"{stream}.jsonl"), "--deterministic-ids",
         "--progress", "off", "--no-tree", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def _to(agent: Agent) -> tuple[str, ...]:
    return ("--endpoint", agent.grpc_endpoint, "--protocol", "grpc")


def _sent_spans(stream: str, tmp: Path, service: str) -> list[JaegerSpan]:
    out = tmp / f"{service}.otlp.jsonl"
    _export(stream, "--out", str(out), "--service-name", service)
    lines = out.read_text(encoding="utf-8").splitlines()
    return [span for line in lines if line.strip() for span in otlp_json_spans(json.loads(line))]


def _events(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Events as comparable strings, in a fixed order."""
    return sorted(json.dumps([name, attributes], sort_keys=True) for name, attributes in events)


def _trace_state(spans: list[JaegerSpan], expected: set[str]) -> str:
    """What Jaeger holds of the trace, for a failure message: counts, missing ids, warnings."""
    ids = [span.span_id for span in spans]
    warnings = Counter(
        str(warning)[:120] for span in spans for warning in span.attributes.get(JAEGER_WARNINGS) or []
    )
    missing = sorted(expected - set(ids))
    return (
        f"{len(spans)} spans ({len(set(ids))} distinct ids) of {len(expected)} expected; "
        f"{len(missing)} missing (first: {missing[:5]}); warnings: {dict(warnings.most_common(5))}"
    )


def _log_lines(service: Service, limit: int = 15) -> str:
    noteworthy = [
        line
        for line in service.log_text().splitlines()
        if '"level":"error"' in line.lower()
        or '"level":"warn"' in line.lower()
        or "\terror\t" in line
        or "\twarn\t" in line
    ]
    return "\n".join(line[:400] for line in noteworthy[-limit:]) or "(no warnings or errors logged)"


def _whole_trace(agent: Agent, trace_id: str, expected: set[str]) -> list[JaegerSpan]:
    """The trace as Jaeger's UI shows it, read once Jaeger has stored every span sent.

    Polling reads the stored trace raw: an adjusted read of a trace still arriving would stamp
    lasting warnings on it (see `Jaeger.trace`). On a timeout the failure says what Jaeger held
    and what the collector and Jaeger logged."""
    stored: list[JaegerSpan] = []
    errors: list[str] = []

    def whole() -> bool:
        nonlocal stored
        try:
            stored = agent.jaeger.trace(trace_id, raw=True)
        except httpx.HTTPError as exc:  # a slow query under load: ask again
            errors.append(type(exc).__name__)
            return False
        return {span.span_id for span in stored} >= expected

    deadline = time.monotonic() + 240
    while not whole():
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after 240 s waiting for trace {trace_id} in Jaeger: "
                f"{_trace_state(stored, expected)}; query errors: {Counter(errors)}\n"
                f"collector log:\n{_log_lines(agent.collector)}\n"
                f"jaeger log:\n{_log_lines(agent.jaeger.service)}"
            )
        time.sleep(1.0)
    time.sleep(1.5)  # anything arriving late would be a duplicate or a stray: the checks see it
    return agent.jaeger.trace(trace_id)


@pytest.mark.parametrize("stream", sorted(STREAM_SPANS))
def test_jaeger_returns_each_exported_trace_whole(agent: Agent, stream: str) -> None:
    service = f"rulvar-e2e-{stream}"
    sent = _sent_spans(stream, agent.tmp, service)
    assert len(sent) == STREAM_SPANS[stream]
    trace_ids = {span.trace_id for span in sent}
    assert len(trace_ids) == 1, "one run, one trace"
    (trace_id,) = trace_ids

    _export(stream, *_to(agent), "--service-name", service)
    got = _whole_trace(agent, trace_id, {span.span_id for span in sent})

    # Whole: the same spans, each once, with the same names and parent links; nothing dropped.
    assert len(got) == len(sent)
    by_id = {span.span_id: span for span in got}
    assert len(by_id) == len(got), "a span arrived twice"
    expected = {span.span_id: span for span in sent}
    assert set(by_id) == set(expected)
    for span_id, want in expected.items():
        have = by_id[span_id]
        assert (have.name, have.parent_span_id, have.kind, have.status_code) == (
            want.name, want.parent_span_id, want.kind, want.status_code,
        ), span_id  # fmt: skip
    roots = [span for span in got if span.parent_span_id is None]
    assert len(roots) == 1 and roots[0].name.startswith("run ")
    assert all(span.parent_span_id in by_id for span in got if span is not roots[0])

    # Attributes and events arrive unchanged: every key, every value, and no redaction.* marks
    # (the collector's redaction finds nothing to mask in our spans).
    for span_id, want in expected.items():
        have = by_id[span_id]
        attributes = dict(have.attributes)
        # Jaeger stretches a zero-length span (start and end in the same millisecond of the
        # stream) by 1 ns and says so in a warning; every other span keeps its times exactly.
        if want.end_ns == want.start_ns:
            assert (have.start_ns, have.end_ns) == (want.start_ns, want.end_ns + 1), want.name
            assert "Negative duration" in attributes.pop(JAEGER_WARNINGS)[0], want.name
        else:
            assert (have.start_ns, have.end_ns) == (want.start_ns, want.end_ns), want.name
        assert attributes == want.attributes, want.name
        # Jaeger orders events by time; events of the same millisecond may change places.
        assert _events(have.events) == _events(want.events), want.name
    keys = {k for span in got for k in span.attributes}
    assert any(k.startswith("gen_ai.") for k in keys) and any(k.startswith("rulvar.") for k in keys)
    assert any(span.events for span in got)
    assert got[0].resource.get("service.name") == service

    # One trace per run: exporting the run is one trace in Jaeger, not several fragments.
    assert agent.jaeger.trace_ids(service) == {trace_id}


def test_the_collector_masks_credentials_and_drops_content_keys(agent: Agent) -> None:
    """A foreign emitter (our own masking bypassed): the agent's redaction processor is the net.

    The span is made by hand with the OTel SDK, so nothing of rulvar-otel's masking touches it."""
    secret = "sk-" + "Q" * 32
    provider = TracerProvider(resource=Resource.create({"service.name": "rulvar-redaction-probe"}))
    exporter = OTLPSpanExporter(endpoint=agent.grpc_endpoint, insecure=True, timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("probe").start_span("agent researcher loop")
    span.set_attribute("rulvar.agent_type", "researcher")
    span.set_attribute("rulvar.run_id", "run-with-" + secret)
    span.set_attribute("gen_ai.prompt", "summarise the quarterly report")
    span.set_attribute("gen_ai.input.messages", '[{"role": "user"}]')
    span.set_attribute("rulvar.note", f"retrying with key {secret} now")
    span.set_attribute("http.request.header.authorization", "Bearer " + "t" * 40)
    span.add_event("log", {"message": "the completion text", "rulvar.event.level": "info"})
    span.set_status(Status(StatusCode.OK))
    span.end()
    trace_id = format(span.get_span_context().trace_id, "032x")
    span_id = format(span.get_span_context().span_id, "016x")
    provider.shutdown()

    (got,) = _whole_trace(agent, trace_id, {span_id})
    attributes = got.attributes
    # A key naming content keeps no part of its value; a credential inside a value is cut out.
    assert attributes["gen_ai.prompt"] == "****"
    assert attributes["gen_ai.input.messages"] == "****"
    # The redaction processor replaces a whole match: the pattern's guard character before `sk-`
    # (the space) goes with the key (docs/masking.md: the collector masks whole matches).
    assert attributes["rulvar.note"] == "retrying with key**** now"
    assert attributes["http.request.header.authorization"] == "****"
    assert attributes["rulvar.agent_type"] == "researcher"
    assert attributes["rulvar.run_id"] == "run-with****"
    ((event_name, event_attributes),) = got.events
    assert event_name == "log" and event_attributes["message"] == "****"
    assert "quarterly report" not in json.dumps(got.attributes) + json.dumps(got.events)
    # summary: info counts what was done on the span itself.
    assert attributes["redaction.masked.count"] == 5
    assert "redaction.ignored.count" not in attributes


# --- span metrics ------------------------------------------------------------------------------

SPANMETRICS_SERVICE = "rulvar-spanmetrics"
SPANMETRICS_CALLS = "traces_span_metrics_calls_total"
SPANMETRICS_DURATION = "traces_span_metrics_duration_milliseconds"


def _spanmetrics_prometheus(agent: Agent) -> Iterator[Prometheus]:
    prometheus = start_prometheus(agent.tmp, [f"127.0.0.1:{agent.prometheus_port}"])
    try:
        yield prometheus
    finally:
        prometheus.service.stop()


@pytest.fixture(scope="module")
def scraped(agent: Agent) -> Iterator[Prometheus]:
    _export("tools", *_to(agent), "--service-name", SPANMETRICS_SERVICE)
    yield from _spanmetrics_prometheus(agent)


def _series(prometheus: Prometheus, expr: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def has_data() -> bool:
        nonlocal found
        found = prometheus.query(expr)
        return bool(found)

    wait_for(f"Prometheus data for {expr}", has_data, timeout=60, interval=1.0)
    return found


def test_spanmetrics_reach_prometheus_with_our_dimensions(scraped: Prometheus) -> None:
    selector = '{service_name="rulvar-spanmetrics"}'
    calls = _series(scraped, SPANMETRICS_CALLS + selector)
    by_name: dict[str, float] = {}
    for sample in calls:
        labels = sample["metric"]
        by_name[labels["span_name"]] = by_name.get(labels["span_name"], 0) + float(sample["value"][1])
        assert labels["span_kind"] == "SPAN_KIND_INTERNAL"
        assert labels["status_code"] in {"STATUS_CODE_OK", "STATUS_CODE_ERROR", "STATUS_CODE_UNSET"}
    # tools: 7 tool spans (5 search, 1 fetch, 1 lookup, 1 rm_rf; see the stream), 3 agents.
    assert by_name["tool search"] == 5 and by_name["tool fetch"] == 1
    assert by_name["agent sidekick loop"] == 2 and by_name["agent researcher loop"] == 1
    tool_labels = [s["metric"] for s in calls if s["metric"]["span_name"] == "tool fetch"]
    assert tool_labels[0]["rulvar_tool_name"] == "fetch" and tool_labels[0]["rulvar_status"] == "error"
    errors = scraped.query(
        f'sum({SPANMETRICS_CALLS}{{service_name="rulvar-spanmetrics",status_code="STATUS_CODE_ERROR"}})'
    )
    assert errors and float(errors[0]["value"][1]) >= 1
    buckets = _series(scraped, f"{SPANMETRICS_DURATION}_bucket{selector}")
    # The agent's buckets, in milliseconds: 100 ms up to an hour.
    assert {float(b["metric"]["le"]) for b in buckets} >= {100.0, 3_600_000.0, float("inf")}
    count = scraped.query(f"sum({SPANMETRICS_DURATION}_count{selector})")
    assert float(count[0]["value"][1]) == sum(by_name.values())


# Grafana's template variables as the dashboards resolve them with "All" selected.
PANEL_VARIABLES = {
    "$service": ".*",
    "$workflow": ".*",
    "$model": ".*",
    "$__rate_interval": "1m",
    "$__range": "5m",
}


def _spanmetrics_panels() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr) of every panel query that reads the collector's span metrics."""
    return [
        (board, title, expr)
        for board, data in dashboards().items()
        for title, expr in panel_queries(data)
        if "traces_span_metrics_" in expr
    ]


def test_every_spanmetrics_panel_has_data(scraped: Prometheus) -> None:
    panels = _spanmetrics_panels()
    assert len(panels) >= 4, "the span-metrics dashboard lost its panels"
    for board, title, expr in panels:
        query = expr
        for variable, value in PANEL_VARIABLES.items():
            query = query.replace(variable, value)
        assert "$" not in query, (board, title, query)
        values = [float(sample["value"][1]) for sample in _series(scraped, query)]
        assert any(math.isfinite(v) for v in values), (board, title, values)
