"""The MeterProvider builder, and metrics recorded in the exporter's single pass over events."""

from __future__ import annotations

import re
import socket
import threading
import time
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.errors import ConfigError
from rulvar_otel.export import MetricsSetup, build_meter_provider
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.exporter import export_events
from rulvar_otel.testing import metric_points
from tests._support import adaptive_outcome, adaptive_stream, events, feed, outcome


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (MetricsSetup(), "destination"),
        (MetricsSetup(otlp_endpoint="localhost:4317"), "http"),
        (MetricsSetup(otlp_endpoint="ftp://collector:4317"), "http"),
        (MetricsSetup(otlp_endpoint="http://c:4317", otlp_protocol="udp"), "protocol"),  # type: ignore[arg-type]
        (MetricsSetup(otlp_endpoint="http://c:4317", timeout_s=0), "timeout"),
        (MetricsSetup(otlp_endpoint="http://c:4317", timeout_s=600), "timeout"),
        (MetricsSetup(otlp_endpoint="http://c:4317", export_interval_s=0), "interval"),
        (MetricsSetup(prometheus_port=70000), "port"),
        (MetricsSetup(prometheus_port=0, prometheus_host=" "), "host"),
        (MetricsSetup(prometheus_port=0, prometheus_linger_s=-1), "linger"),
        (MetricsSetup(prometheus_port=0, prometheus_linger_s=1e9), "linger"),
        (MetricsSetup(otlp_endpoint="http://c:4317", headers={"x": 1}), "headers"),  # type: ignore[dict-item]
    ],
)
def test_bad_options_are_config_errors(setup: MetricsSetup, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_meter_provider(setup)


def test_prometheus_endpoint_serves_the_recorded_metrics_and_stops() -> None:
    pipeline = build_meter_provider(MetricsSetup(prometheus_port=0))
    try:
        assert pipeline.prometheus_port
        feed(pipeline.meter, events("quota"), outcome("quota"))
        url = f"http://127.0.0.1:{pipeline.prometheus_port}/metrics"
        text = httpx.get(url, timeout=5).text
        assert "rulvar_quota_denials_total{" in text and 'rulvar_quota_dimension="tokens"' in text
        assert "rulvar_runs_settled_total{" in text and 'rulvar_workflow="throttled"' in text
    finally:
        pipeline.shutdown()
    # Stopped, not left to stop: the serving loop and the stopper have ended when shutdown returns.
    assert pipeline._thread is not None and not pipeline._thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "rulvar-otel-prometheus-stop"]
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=2)


def test_the_endpoint_lingers_with_the_final_values_after_the_export_then_closes() -> None:
    # A one-shot export: every event is folded before shutdown; the linger is what lets a
    # scraper see the final values at all.
    pipeline = build_meter_provider(
        MetricsSetup(prometheus_port=0, prometheus_host="0.0.0.0", prometheus_linger_s=1.5)
    )
    assert pipeline.prometheus_url == f"http://0.0.0.0:{pipeline.prometheus_port}/metrics"
    url = f"http://127.0.0.1:{pipeline.prometheus_port}/metrics"
    feed(pipeline.meter, events("quota"), outcome("quota"))
    done = threading.Event()
    closer = threading.Thread(target=lambda: (pipeline.shutdown(), done.set()))
    closer.start()
    try:
        time.sleep(0.3)
        assert not done.is_set(), "shutdown returned before the linger"
        text = httpx.get(url, timeout=5).text
        assert "rulvar_runs_settled_total{" in text and 'rulvar_workflow="throttled"' in text
        assert pipeline.prometheus_scrapes >= 1
        # The first scrape of the linger serves every series once (flushing before the linger
        # once queued a collection that this scrape served beside its own).
        samples = [line for line in text.splitlines() if line and not line.startswith("#")]
        assert len(samples) == len(set(samples))
    finally:
        closer.join(timeout=10)
    assert done.is_set()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=2)


@pytest.mark.parametrize("given", [{"service.instance.id": "host-7"}, {}])
def test_every_series_on_the_endpoint_carries_the_service_instance_id(given: dict[str, str]) -> None:
    # Each export process is its own instance (the SDK's per-process id, or a fresh one when the
    # caller's resource has none), so one-shot exports of the same workflow never merge into one
    # series that seems never to move; the live Prometheus test counts them.
    pipeline = build_meter_provider(
        MetricsSetup(prometheus_port=0), resource=Resource({"service.name": "x", **given})
    )
    try:
        feed(pipeline.meter, events("quota"), outcome("quota"))
        text = httpx.get(pipeline.prometheus_url or "", timeout=5).text
    finally:
        pipeline.shutdown()
    found = set(re.findall(r'rulvar_runs_settled_total\{[^}]*service_instance_id="([^"]+)"', text))
    assert len(found) == 1
    if given:
        assert found == {"host-7"}
    else:
        assert len(next(iter(found))) == 36  # a UUID


def test_without_a_linger_shutdown_closes_the_endpoint_at_once() -> None:
    pipeline = build_meter_provider(MetricsSetup(prometheus_port=0))
    assert pipeline.linger_s == 0 and pipeline.prometheus_scrapes == 0
    url = f"http://127.0.0.1:{pipeline.prometheus_port}/metrics"
    pipeline.shutdown()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=2)


def test_a_taken_port_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match="cannot serve"):
            build_meter_provider(MetricsSetup(prometheus_port=taken.getsockname()[1]))


def _dead_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_dead_otlp_endpoint_never_hangs_shutdown(protocol: Any) -> None:
    pipeline = build_meter_provider(
        MetricsSetup(
            otlp_endpoint=_dead_endpoint(), otlp_protocol=protocol, timeout_s=0.5, export_interval_s=3600
        )
    )
    feed(pipeline.meter, events("minimal"), outcome("minimal"))
    pipeline.shutdown()  # flushes into a closed port within the bounded timeout


def _one_pass(stream: list[dict[str, Any]], result: Any) -> tuple[dict[str, Any], int]:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    count = export_events(
        stream, tracers.get_tracer("t"), outcome=result, meter=meters.get_meter("rulvar_otel")
    )
    data = metric_points(reader)
    meters.shutdown()
    assert count == len(spans.get_finished_spans())
    return data, count


@pytest.mark.parametrize("name", ["orchestrate", "tools", "quota", "exposure-drained", "suspension-dryrun"])
def test_the_exporter_pass_records_exactly_what_the_recorder_alone_records(name: str) -> None:
    with_spans, count = _one_pass(events(name), outcome(name))
    assert count > 0
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    feed(provider.get_meter("rulvar_otel"), events(name), outcome(name))
    assert with_spans == metric_points(reader)
    provider.shutdown()


def test_the_exporter_pass_folds_the_adaptive_metrics() -> None:
    data, _ = _one_pass(adaptive_stream(), adaptive_outcome())
    share = data[sc.METRIC_ORCHESTRATOR_SHARE]
    assert share.keys() == {frozenset({sc.WORKFLOW: "planner", sc.SHARE_SOURCE: "cost_report"}.items())}
    assert data[sc.METRIC_RECLAIMED_COST] == {
        frozenset({sc.WORKFLOW: "planner"}.items()): pytest.approx(0.25)
    }
