"""One label-set limit per instrument, the same on both metric pipelines: past it, every new
attribute set adds up in one ``otel.metric.overflow=true`` series, so 10k distinct agent types,
models and tools cost at most limit + 1 series per instrument, and the pipelines agree point for
point."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import Counter, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, MetricsData, Sum

from rulvar_otel.core.drain import drain_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.errors import ConfigError
from rulvar_otel.export import ExportOptions, MetricsSetup, build_meter_provider, build_metrics_delivery
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.direct_metrics import MetricsAggregator, attach_reader
from rulvar_otel.otel.metrics import COLLECT_HOOK_NAME, MetricsRecorder
from tests._support import build_stream

DISTINCT = 10_000
OVERFLOW = (sc.METRIC_OVERFLOW, True)


def _many_labels(distinct: int) -> list[dict[str, Any]]:
    """One run whose agents each have their own agent type, model and tool."""
    bodies: list[tuple[float, str, dict[str, Any]]] = [(0.0, "s0", {"type": "run:start", "workflow": "w"})]
    usage = {"inputTokens": 3, "outputTokens": 2, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    for n in range(distinct):
        at, span = 1.0 + n * 0.001, f"a{n}"
        agent = {"agentType": f"type-{n}", "model": f"vendor:model-{n}", "role": "loop"}
        bodies += [
            (at, span, {"type": "agent:start", **agent}),
            (at, span, {"type": "agent:phase:start", **agent, "invocation": 1}),
            (at, span, {"type": "tool:start", "toolName": f"tool-{n}", "toolCallId": f"c{n}"}),
            (at, span, {"type": "tool:end", "toolName": f"tool-{n}", "toolCallId": f"c{n}", "outcome": "ok",
                        "durationMs": n % 97}),
            (at, span, {"type": "agent:phase:end", **agent, "invocation": 1, "durationMs": n % 89,
                        "usage": usage, "costUsd": 0.001, "outcome": "ok"}),
            (at, span, {"type": "agent:end", "agentType": f"type-{n}", "status": "ok", "usage": usage,
                        "costUsd": 0.001}),
        ]  # fmt: skip
    bodies.append((99.0, "s0", {"type": "run:end", "status": "ok", "totalUsd": distinct * 0.001}))
    return build_stream("many-labels", bodies)


Points = dict[str, dict[tuple[tuple[str, Any], ...], Any]]


def _points(data: MetricsData | None) -> Points:
    out: Points = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == COLLECT_HOOK_NAME:
                    continue
                series = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    key = tuple(sorted((point.attributes or {}).items()))
                    if isinstance(metric.data, Histogram):
                        series[key] = (point.count, pytest.approx(point.sum), tuple(point.bucket_counts))  # type: ignore[union-attr]
                    else:
                        assert isinstance(metric.data, Sum)
                        series[key] = pytest.approx(point.value)  # type: ignore[union-attr]
    return out


def _sdk(stream: Iterable[dict[str, Any]], limit: int) -> Points:
    """The SDK pipeline: MetricsRecorder into a provider whose reader has the limit on every kind."""
    reader = InMemoryMetricReader(
        cardinality_limits=dict.fromkeys((Counter, UpDownCounter, SdkHistogram), limit)
    )
    provider = MeterProvider(metric_readers=[reader])
    try:
        drain_events(stream, MetricsRecorder(provider.get_meter("t"), compile_secret_masker()))
        return _points(reader.get_metrics_data())
    finally:
        provider.shutdown()


def _direct(stream: Iterable[dict[str, Any]], limit: int) -> Points:
    aggregator = MetricsAggregator(compile_secret_masker(), cardinality_limit=limit)
    drain_events(stream, aggregator)
    return _points(aggregator.metrics_data())


@pytest.fixture(scope="module")
def many() -> list[dict[str, Any]]:
    return _many_labels(DISTINCT)


@pytest.mark.parametrize("limit", [sc.DEFAULT_METRIC_CARDINALITY_LIMIT, 37])
def test_ten_thousand_label_sets_give_at_most_limit_plus_one_series_per_instrument_on_both_pipelines(
    many: list[dict[str, Any]], limit: int
) -> None:
    direct = _direct(many, limit)
    sdk = _sdk(many, limit)
    assert direct == sdk  # point for point, the overflow series included
    capped = [name for name, series in direct.items() if len(series) > limit]
    assert capped, "some instrument had more label sets than the limit"
    for name, series in direct.items():
        assert len(series) <= limit + 1, name
        overflow = [key for key in series if OVERFLOW in key]
        if len(series) > limit:
            assert overflow == [(OVERFLOW,)], name  # the one overflow series, with only that label
    invocations = direct[sc.METRIC_AGENT_INVOCATIONS]
    total = sum(v.expected if hasattr(v, "expected") else v for v in invocations.values())
    assert total == DISTINCT  # nothing is dropped: the overflow series counts the rest


def test_under_the_limit_no_overflow_series_exists(many: list[dict[str, Any]]) -> None:
    few = _many_labels(20)
    direct = _direct(few, 50)
    assert direct == _sdk(few, 50)
    assert not any(OVERFLOW in key for series in direct.values() for key in series)


def test_the_limit_is_the_sdks_default_unless_configured() -> None:
    assert sc.DEFAULT_METRIC_CARDINALITY_LIMIT == 2000
    assert ExportOptions().metric_cardinality_limit == 2000
    assert MetricsSetup().cardinality_limit == 2000
    pipeline = build_meter_provider(MetricsSetup(prometheus_port=0))
    try:
        assert pipeline.cardinality_limit == 2000
    finally:
        pipeline.shutdown()


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_a_limit_below_one_or_not_a_whole_number_is_a_config_error(bad: Any) -> None:
    with pytest.raises(ConfigError, match="metric cardinality limit"):
        ExportOptions(metric_cardinality_limit=bad)


def _served_series(text: str) -> dict[str, int]:
    """Series per metric family in a Prometheus exposition (histograms by their _count lines)."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith("rulvar_") or "{" not in line:
            continue
        name = line.split("{", 1)[0]
        if name.endswith(("_bucket", "_sum", "_created")):
            continue
        counts[name.removesuffix("_count")] = counts.get(name.removesuffix("_count"), 0) + 1
    return counts


@pytest.mark.usefixtures("otel_env_cleared")
@pytest.mark.parametrize("pipeline", ["direct", "sdk"])
def test_the_configured_limit_caps_what_the_prometheus_endpoint_serves(
    many: list[dict[str, Any]], pipeline: str
) -> None:
    limit = 25
    metrics = build_metrics_delivery(
        ExportOptions(prometheus_port=0, metric_cardinality_limit=limit), service_name="cardinality"
    )
    assert metrics is not None and metrics.cardinality_limit == limit
    try:
        if pipeline == "direct":
            aggregator = MetricsAggregator(
                compile_secret_masker(),
                resource=metrics.resource,
                cardinality_limit=metrics.cardinality_limit,
            )
            for reader in metrics.readers:
                attach_reader(reader, aggregator)
            drain_events(many, aggregator)
        else:
            drain_events(many, MetricsRecorder(metrics.meter, compile_secret_masker()))
        assert metrics.prometheus_url is not None
        with urllib.request.urlopen(metrics.prometheus_url, timeout=30) as response:
            text = response.read().decode()
    finally:
        metrics.shutdown()
    served = _served_series(text)
    assert served and max(served.values()) == limit + 1
    assert 'otel_metric_overflow="true"' in text
