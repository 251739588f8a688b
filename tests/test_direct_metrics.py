"""Metrics on the direct path: the same points per series as the SDK meter path, delivered by the
OTel readers (OTLP push and the Prometheus endpoint) without one SDK call per observation."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, MetricsData, Sum
from prometheus_client import CollectorRegistry, generate_latest

from rulvar_otel.core.drain import drain_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel.direct_metrics import MetricsAggregator, _bucket_index, otlp_reader, prometheus_reader
from rulvar_otel.otel.metrics import COLLECT_HOOK_NAME, MetricsRecorder
from tests._support import GrpcMetricsReceiver, events, outcome, stream_names

Series = dict[tuple[str, tuple[tuple[str, Any], ...]], Any]


def points(data: MetricsData | None) -> Series:
    """Every point, keyed by (metric, attributes), without times."""
    out: Series = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == COLLECT_HOOK_NAME:
                    continue
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                    if isinstance(metric.data, Histogram):
                        out[key] = (
                            point.count,  # type: ignore[union-attr]
                            pytest.approx(point.sum),  # type: ignore[union-attr]
                            tuple(point.bucket_counts),  # type: ignore[union-attr]
                            tuple(point.explicit_bounds),  # type: ignore[union-attr]
                            point.min,  # type: ignore[union-attr]
                            point.max,  # type: ignore[union-attr]
                        )
                    else:
                        assert isinstance(metric.data, Sum)
                        out[key] = (pytest.approx(point.value), metric.data.is_monotonic)  # type: ignore[union-attr]
    return out


def sdk_points(stream: Iterable[Any], settled: Any) -> Series:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    drain_events(stream, MetricsRecorder(meter, compile_secret_masker()), outcome=settled)
    return points(reader.get_metrics_data())


def direct_points(stream: Iterable[Any], settled: Any) -> tuple[Series, MetricsAggregator]:
    aggregator = MetricsAggregator(compile_secret_masker())
    drain_events(stream, aggregator, outcome=settled)
    return points(aggregator.metrics_data()), aggregator


@pytest.mark.parametrize("name", stream_names())
def test_the_direct_aggregates_equal_the_sdk_meter_paths_points(name: str) -> None:
    expected = sdk_points(events(name), outcome(name))
    got, _ = direct_points(events(name), outcome(name))
    assert got == expected


def test_the_large_stream_yields_histograms_and_counters() -> None:
    got, _ = direct_points(events("large"), outcome("large"))
    kinds = {type(v[0]) for v in got.values()}
    assert len(got) > 10 and kinds  # several series of both kinds
    assert any(len(v) == 6 and v[0] >= 1000 for v in got.values())  # a histogram with many observations


def test_the_sdk_periodic_reader_pushes_the_aggregates_to_a_real_otlp_receiver() -> None:
    _, aggregator = direct_points(events("orchestrate"), outcome("orchestrate"))
    with GrpcMetricsReceiver() as receiver:
        reader = otlp_reader(
            aggregator,
            OTLPMetricExporter(endpoint=receiver.endpoint, insecure=True, timeout=5),
            export_interval_s=60,
        )
        reader.shutdown(timeout_millis=10_000)  # the final push
        names = receiver.metric_names()
    assert names == {name for name, _ in points(aggregator.metrics_data())}


def test_the_prometheus_reader_serves_the_aggregates() -> None:
    _, aggregator = direct_points(events("orchestrate"), outcome("orchestrate"))
    registry = CollectorRegistry(auto_describe=True)
    prometheus_reader(aggregator, registry)
    text = generate_latest(registry).decode()
    for name, _ in points(aggregator.metrics_data()):
        assert name.replace(".", "_") in text


def test_a_collection_mid_stream_sees_what_was_fed_so_far() -> None:
    aggregator = MetricsAggregator()
    stream = events("orchestrate")
    for event in stream[: len(stream) // 2]:
        aggregator.feed(event)
    first = points(aggregator.metrics_data())
    for event in stream[len(stream) // 2 :]:
        aggregator.feed(event)
    aggregator.finish(outcome("orchestrate"))
    final = points(aggregator.metrics_data())
    assert first and set(first) <= set(final)
    assert first != final  # the second half moved some series


def test_interleaved_runs_each_fold_their_own_state_into_the_same_aggregates() -> None:
    aggregator = MetricsAggregator()
    first, second = aggregator.run(), aggregator.run()
    for event in events("orchestrate"):
        first.feed(event)
    for event in events("tools"):
        second.feed(event)
    first.finish(outcome("orchestrate"))
    second.finish(outcome("tools"))
    both = points(aggregator.metrics_data())
    alone_first, _ = direct_points(events("orchestrate"), outcome("orchestrate"))
    alone_second, _ = direct_points(events("tools"), outcome("tools"))
    assert set(both) == set(alone_first) | set(alone_second)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.floats(allow_nan=False), max_size=20).map(lambda b: tuple(sorted(b))),
    st.floats(allow_nan=False),
)
def test_a_histogram_value_lands_in_the_bucket_bisect_left_names(
    bounds: tuple[float, ...], value: float
) -> None:
    assert _bucket_index(bounds, value) == bisect_left(bounds, value)
