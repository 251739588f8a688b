"""The engine's per-request gen_ai.client.* metrics: named by the registry, fed to the export's readers.

The registry's ENGINE_METRICS must describe exactly what an engine given a meter records (name,
unit, description, attributes, buckets), the demo's per-request token totals must be the totals
its own events report, and a reader the direct path points at its aggregator must keep
collecting the provider's own instruments (so `rulvar-otel demo` serves both on one endpoint).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.resources import Resource

from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.direct_metrics import MetricsAggregator, attach_reader
from rulvar_otel.otel.metrics.registry import ENGINE_METRICS
from tests._support import STREAMS, GrpcMetricsReceiver, event_tokens, run_cli, run_demo_with_meter


def _histogram_points(metric: Metric) -> list[HistogramDataPoint]:
    return [point for point in metric.data.data_points if isinstance(point, HistogramDataPoint)]


def test_the_registry_describes_what_the_engine_records() -> None:
    recorded, _ = run_demo_with_meter()
    assert set(recorded) == {entry.name for entry in ENGINE_METRICS}
    for entry in ENGINE_METRICS:
        metric = recorded[entry.name]
        assert (metric.unit, metric.description) == (entry.unit, entry.description), entry.name
        points = _histogram_points(metric)
        assert points, entry.name
        for point in points:
            assert set(point.attributes or {}) <= set(entry.attributes), entry.name
            assert tuple(point.explicit_bounds) == entry.buckets, entry.name


def test_the_demo_engine_counts_exactly_the_tokens_its_events_report() -> None:
    recorded, events = run_demo_with_meter()
    per_request: Counter[tuple[str, str]] = Counter()
    for point in _histogram_points(recorded[sc.GEN_AI_CLIENT_TOKEN_USAGE]):
        attributes = point.attributes or {}
        per_request[(str(attributes[sc.GEN_AI_REQUEST_MODEL]), str(attributes[sc.GEN_AI_TOKEN_TYPE]))] += (
            point.sum
        )
    expected = event_tokens(events)
    assert len(expected) >= 6  # several models, both token types
    assert dict(per_request) == expected
    # Every answered request is timed once; its two token points share the request's count.
    requests = sum(p.count for p in _histogram_points(recorded[sc.GEN_AI_CLIENT_OPERATION_DURATION]))
    token_points = sum(p.count for p in _histogram_points(recorded[sc.GEN_AI_CLIENT_TOKEN_USAGE]))
    assert token_points == 2 * requests > 0


def test_a_reader_pointed_at_the_aggregator_still_collects_the_providers_instruments() -> None:
    resource = Resource.create({"service.name": "merged"})
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    aggregator = MetricsAggregator(compile_secret_masker(None), resource=resource)
    attach_reader(reader, aggregator)
    provider.get_meter("host").create_counter("host.requests").add(3, {"route": "a"})
    run = aggregator.run()
    for line in (STREAMS / "tools.jsonl").read_text(encoding="utf-8").splitlines():
        run.feed(json.loads(line))
    run.finish(None)
    data = reader.get_metrics_data()
    assert data is not None
    assert len(data.resource_metrics) == 1  # one resource: the aggregator's and the provider's
    names = {m.name for scope in data.resource_metrics[0].scope_metrics for m in scope.metrics}
    assert "host.requests" in names
    assert sc.METRIC_TOOL_CALLS in names
    provider.shutdown()


@pytest.mark.parametrize("pipeline", ["direct", "sdk"])
def test_the_demo_pushes_its_engines_request_metrics_with_the_run_metrics(
    pipeline: str, tmp_path: Path
) -> None:
    with GrpcMetricsReceiver() as receiver:
        code, _, err = run_cli(
            "demo", "--out", str(tmp_path / "trace.jsonl"), "--events", str(tmp_path / "events.jsonl"),
            "--metrics-endpoint", receiver.endpoint, "--protocol", "grpc", "--pipeline", pipeline,
            "--progress", "off", "--no-tree",
        )  # fmt: skip
        assert code == 0, err
        tokens: Counter[tuple[str, str]] = Counter()
        resources = set()
        for request in receiver.requests[-1:]:  # cumulative: the last push holds the totals
            for resource_metrics in request.resource_metrics:
                resources.add(resource_metrics.resource.SerializeToString(deterministic=True))
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        if metric.name != sc.GEN_AI_CLIENT_TOKEN_USAGE:
                            continue
                        for point in metric.histogram.data_points:
                            attributes = {kv.key: kv.value.string_value for kv in point.attributes}
                            key = (attributes[sc.GEN_AI_REQUEST_MODEL], attributes[sc.GEN_AI_TOKEN_TYPE])
                            tokens[key] += point.sum
        names = receiver.metric_names()
    assert {entry.name for entry in ENGINE_METRICS} | {sc.METRIC_INVOCATION_TOKEN_USAGE} <= names
    assert len(resources) == 1  # one provider, one service.instance.id for both kinds
    events = [
        json.loads(line) for line in (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert dict(tokens) == event_tokens(events)
