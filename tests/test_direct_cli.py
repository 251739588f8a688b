"""``--pipeline direct`` (the default) and ``--pipeline sdk`` export the same content through the CLI."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from rulvar_otel.export import iter_otlp_json_file
from tests._support import (
    STREAMS,
    GrpcMetricsReceiver,
    GrpcTraceReceiver,
    HttpTraceReceiver,
    closed_port,
    run_cli,
    stream_names,
)

PIPELINES = ("direct", "sdk")


def _spans(requests: list[ExportTraceServiceRequest]) -> tuple[list[Any], list[Any], list[Any]]:
    """Spans in end order, the resources and the scopes the requests carry."""
    spans, resources, scopes = [], [], []
    for request in requests:
        for resource_spans in request.resource_spans:
            resources.append(resource_spans.resource)
            for scope_spans in resource_spans.scope_spans:
                scopes.append(scope_spans.scope)
                spans.extend(scope_spans.spans)
    return spans, resources, scopes


def _export_file(tmp_path: Path, name: str, pipeline: str) -> list[ExportTraceServiceRequest]:
    out = tmp_path / f"{name}.{pipeline}.otlp.jsonl"
    code, _, err = run_cli(
        "export", str(STREAMS / f"{name}.jsonl"), "--out", str(out), "--deterministic-ids",
        "--pipeline", pipeline, "--progress", "off", "--no-tree",
    )  # fmt: skip
    assert code in (0, 2), err  # 2: a stream the corpus made invalid on purpose
    return list(iter_otlp_json_file(out)) if out.exists() else []


@pytest.mark.parametrize("name", stream_names())
def test_both_pipelines_write_the_same_otlp_file(tmp_path: Path, name: str) -> None:
    direct = _spans(_export_file(tmp_path, name, "direct"))
    sdk = _spans(_export_file(tmp_path, name, "sdk"))
    assert direct[0], "nothing exported"
    assert direct[0] == sdk[0]  # spans: ids, parents, names, times, attributes, events, status
    assert set(map(bytes, (r.SerializeToString() for r in direct[1]))) == set(
        map(bytes, (r.SerializeToString() for r in sdk[1]))
    )
    assert {s.SerializeToString() for s in direct[2]} == {s.SerializeToString() for s in sdk[2]}


@pytest.mark.parametrize("receiver_type", [GrpcTraceReceiver, HttpTraceReceiver], ids=["grpc", "http"])
def test_both_pipelines_deliver_the_same_spans_to_a_real_receiver(receiver_type: Any) -> None:
    received = {}
    for pipeline in PIPELINES:
        with receiver_type() as receiver:
            protocol = "grpc" if receiver_type is GrpcTraceReceiver else "http/protobuf"
            code, _, err = run_cli(
                "export", str(STREAMS / "large.jsonl"), "--endpoint", receiver.endpoint,
                "--protocol", protocol, "--deterministic-ids", "--pipeline", pipeline, "--progress", "off",
            )  # fmt: skip
            assert code == 0, err
            received[pipeline] = sorted(
                (s.span.SerializeToString(deterministic=True) for s in receiver.spans()), key=bytes
            )
    assert len(received["direct"]) == 8021
    assert received["direct"] == received["sdk"]


@pytest.mark.timeout(60)
def test_the_sdk_pipeline_also_fails_a_dead_endpoint_within_bounded_time() -> None:
    port = closed_port()
    started = time.monotonic()
    code, _, err = run_cli(
        "export", str(STREAMS / "large.jsonl"), "--endpoint", f"http://127.0.0.1:{port}",
        "--protocol", "grpc", "--export-timeout", "1", "--pipeline", "sdk", "--progress", "off",
    )  # fmt: skip
    assert code == 1
    assert "8021 of 8021 spans were not delivered" in err
    assert time.monotonic() - started < 30


def _metric_points(receiver: GrpcMetricsReceiver) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
    """The last value of every series (cumulative), without times or the instance id."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
    for request in receiver.requests:
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        key = (metric.name, tuple(sorted(_attr(kv) for kv in point.attributes)))
                        if kind == "histogram":
                            out[key] = (point.count, round(point.sum, 9), tuple(point.bucket_counts))
                        else:
                            out[key] = round(point.as_double or point.as_int, 9)
    return out


def _attr(kv: KeyValue) -> tuple[str, str]:
    return kv.key, str(getattr(kv.value, kv.value.WhichOneof("value") or "string_value"))


def test_both_pipelines_push_the_same_metric_points() -> None:
    points = {}
    for pipeline in PIPELINES:
        with GrpcTraceReceiver() as traces, GrpcMetricsReceiver() as metrics:
            code, _, err = run_cli(
                "export", str(STREAMS / "orchestrate.jsonl"), "--endpoint", traces.endpoint,
                "--protocol", "grpc", "--metrics-endpoint", metrics.endpoint, "--pipeline", pipeline,
                "--progress", "off",
            )  # fmt: skip
            assert code == 0, err
            points[pipeline] = _metric_points(metrics)
    assert points["direct"] and points["direct"] == points["sdk"]


def test_an_unknown_pipeline_is_a_usage_error() -> None:
    code, _, err = run_cli(
        "export", str(STREAMS / "minimal.jsonl"), "--pipeline", "fast", "--progress", "off"
    )
    assert code == 2
    assert "--pipeline must be one of direct, sdk" in err
