"""The direct path's OTLP/HTTP exporter sends what its OTLP/gRPC exporter sends, and honours compression.

``rulvar-otel export`` runs in process against real receivers on 127.0.0.1 with deterministic
ids; both transports must deliver the same decoded requests, gzip must be on the wire when
``OTEL_EXPORTER_OTLP_(TRACES_)COMPRESSION`` asks for it, and a value other than gzip or none is a
usage error naming the variable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from rulvar_otel.errors import ConfigError
from rulvar_otel.export import ExportOptions, MetricsSetup, build_meter_provider, build_metrics_delivery
from rulvar_otel.export._grpc_transport import GrpcSpanSender
from rulvar_otel.export._settings import read_compression
from rulvar_otel.export._traces import resolve_destinations
from rulvar_otel.otel import export_events
from rulvar_otel.otel._encode import EncodedBatch
from rulvar_otel.otel.direct import DirectSpanSink, export_events_direct, http_span_exporter
from rulvar_otel.otel.ids import RulvarIdGenerator
from tests._support import (
    STREAMS,
    GrpcMetricsReceiver,
    GrpcTraceReceiver,
    HttpTraceReceiver,
    TraceReceiver,
    events,
    outcome,
    reference_span_count,
    run_cli,
)

pytestmark = pytest.mark.usefixtures("otel_env_cleared")


def _export(receiver: TraceReceiver, protocol: str, stream: str) -> None:
    code, out, err = run_cli(
        "export",
        str(STREAMS / f"{stream}.jsonl"),
        "--endpoint",
        receiver.endpoint,
        "--protocol",
        protocol,
        "--pipeline",
        "direct",
        "--deterministic-ids",
        "--progress",
        "off",
        "--no-tree",
    )
    assert code == 0, out + err


def _merged(requests: Sequence[ExportTraceServiceRequest]) -> list[bytes]:
    """Every request's resource, scope and spans, span by span in id order (batching aside)."""
    out: list[bytes] = []
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    one = ExportTraceServiceRequest()
                    rs = one.resource_spans.add()
                    rs.resource.CopyFrom(resource_spans.resource)
                    rs.schema_url = resource_spans.schema_url
                    ss = rs.scope_spans.add()
                    ss.scope.CopyFrom(scope_spans.scope)
                    ss.schema_url = scope_spans.schema_url
                    ss.spans.append(span)
                    out.append(one.SerializeToString(deterministic=True))
    return sorted(out)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stream", ["tools", "orchestrate", "large"])
def test_grpc_and_http_deliver_the_same_requests_on_the_direct_path(stream: str) -> None:
    with GrpcTraceReceiver() as grpc_receiver, HttpTraceReceiver() as http_receiver:
        _export(grpc_receiver, "grpc", stream)
        _export(http_receiver, "http/protobuf", stream)
    over_grpc, over_http = _merged(grpc_receiver.requests), _merged(http_receiver.requests)
    assert len(over_http) == reference_span_count(stream)
    assert over_http == over_grpc
    assert all(h.get("content-type") == "application/x-protobuf" for h in http_receiver.headers)
    assert not any("content-encoding" in h for h in http_receiver.headers)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"]
)
def test_gzip_compression_goes_on_the_wire_and_delivers_the_same_requests(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with HttpTraceReceiver() as plain:
        _export(plain, "http/protobuf", "orchestrate")
    monkeypatch.setenv(variable, "GZIP")
    with HttpTraceReceiver() as http_receiver, GrpcTraceReceiver() as grpc_receiver:
        _export(http_receiver, "http/protobuf", "orchestrate")
        _export(grpc_receiver, "grpc", "orchestrate")
    assert http_receiver.headers and all(h.get("content-encoding") == "gzip" for h in http_receiver.headers)
    assert _merged(http_receiver.requests) == _merged(plain.requests) == _merged(grpc_receiver.requests)


def test_the_traces_variable_wins_over_the_shared_one() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
    assert read_compression(env, "TRACES") == "none"
    assert read_compression(env, "METRICS") == "gzip"
    assert read_compression({}, "TRACES") == "none"
    assert read_compression({"OTEL_EXPORTER_OTLP_COMPRESSION": " Gzip "}, "TRACES") == "gzip"


@pytest.mark.parametrize("value", ["deflate", "brotli", "zstd"])
def test_a_compression_other_than_gzip_or_none_is_a_config_error_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=f"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION .*'{value}'"):
        read_compression({"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": value}, "TRACES")


def test_the_cli_refuses_a_bad_compression_before_exporting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli")
    with HttpTraceReceiver() as receiver:
        code, out, err = run_cli(
            "export", str(STREAMS / "tools.jsonl"), "--endpoint", receiver.endpoint, "--no-tree"
        )
    assert code == 2, out + err
    assert "OTEL_EXPORTER_OTLP_COMPRESSION" in err and "brotli" in err
    assert receiver.requests == []


def test_only_the_direct_pipeline_gets_the_prebuilt_request_http_exporter() -> None:
    options = ExportOptions(endpoint="http://127.0.0.1:4318", protocol="http/protobuf")
    (direct,) = resolve_destinations(options, environ={}, direct=True).exporters
    (sdk,) = resolve_destinations(options, environ={}).exporters
    direct_class, sdk_class = type(direct._inner), type(sdk._inner)
    assert direct_class.__name__.startswith("Direct") and issubclass(direct_class, sdk_class)
    assert not sdk_class.__name__.startswith("Direct")
    direct.shutdown()
    sdk.shutdown()


def test_both_pipelines_send_over_grpc_through_the_one_sender() -> None:
    options = ExportOptions(endpoint="http://127.0.0.1:4317", protocol="grpc")
    (direct,) = resolve_destinations(options, environ={}, direct=True).exporters
    (sdk,) = resolve_destinations(options, environ={}).exporters
    assert type(direct._inner) is GrpcSpanSender and type(sdk._inner) is GrpcSpanSender
    direct.shutdown()
    sdk.shutdown()


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.batches: list[Sequence[ReadableSpan]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batches.append(spans)
        return SpanExportResult.SUCCESS


def test_sdk_spans_still_go_through_the_librarys_own_encoder() -> None:
    provider = TracerProvider(
        span_limits=SpanLimits(max_events=SpanLimits.UNSET), id_generator=RulvarIdGenerator()
    )
    with HttpTraceReceiver() as receiver:
        exporter = http_span_exporter(endpoint=receiver.endpoint + "/v1/traces", timeout=10)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        made = export_events(events("tools"), provider.get_tracer("t"), outcome=outcome("tools"))
        provider.shutdown()
    assert made == len(receiver.spans()) == reference_span_count("tools")


def test_an_oversized_direct_request_is_a_failed_export_and_is_not_sent() -> None:
    kept = _Keep()
    export_events_direct(events("tools"), kept, outcome=outcome("tools"))
    (batch,) = kept.batches
    assert isinstance(batch, EncodedBatch)
    with HttpTraceReceiver() as receiver:
        exporter = http_span_exporter(endpoint=receiver.endpoint + "/v1/traces", max_request_size=100)
        assert exporter.export(batch) is SpanExportResult.FAILURE
        exporter.shutdown()
        assert receiver.requests == []


def test_a_direct_http_exporter_delivers_every_batch_of_a_sink() -> None:
    with HttpTraceReceiver() as receiver:
        exporter = http_span_exporter(endpoint=receiver.endpoint + "/v1/traces", timeout=10)
        assert isinstance(exporter, HttpSpanExporter)
        sink = DirectSpanSink([exporter], max_batch=5)
        tracer = sink.tracer(id_generator=RulvarIdGenerator())
        for index in range(12):
            tracer.start_span(f"span {index}").end()
        assert sink.shutdown() == [12]
    assert [len(r.resource_spans[0].scope_spans[0].spans) for r in receiver.requests] == [5, 5, 2]


def test_metrics_read_their_own_compression_variable_and_refuse_a_bad_one() -> None:
    options = ExportOptions(metrics_endpoint="http://127.0.0.1:4317", protocol="grpc")
    with pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION .*'br'"):
        build_metrics_delivery(
            options, service_name="s", environ={"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "br"}
        )
    with pytest.raises(ConfigError, match="metrics compression 'deflate'"):
        bad = MetricsSetup(otlp_endpoint="http://127.0.0.1:4317", compression="deflate")  # type: ignore[arg-type]
        build_meter_provider(bad)


@pytest.mark.timeout(60)
def test_gzip_metrics_arrive_at_a_grpc_receiver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    with GrpcMetricsReceiver() as receiver:
        code, out, err = run_cli(
            "export", str(STREAMS / "tools.jsonl"), "--out", str(tmp_path / "t.jsonl"),
            "--metrics-endpoint", receiver.endpoint, "--protocol", "grpc", "--progress", "off", "--no-tree",
        )  # fmt: skip
        assert code == 0, out + err
        assert receiver.metric_names()


@pytest.mark.parametrize("pipeline_direct", [True, False])
def test_both_transports_get_the_compression_the_env_mapping_names(pipeline_direct: bool) -> None:
    import grpc

    env = {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"}
    grpc_options = ExportOptions(endpoint="http://127.0.0.1:4317", protocol="grpc")
    http_options = ExportOptions(endpoint="http://127.0.0.1:4318", protocol="http/protobuf")
    # The mapping passed in decides, not os.environ (which the library exporters would read).
    (over_grpc,) = resolve_destinations(grpc_options, environ=env, direct=pipeline_direct).exporters
    (over_http,) = resolve_destinations(http_options, environ=env, direct=pipeline_direct).exporters
    assert over_grpc._inner._compression == grpc.Compression.Gzip  # type: ignore[attr-defined]
    assert over_http._inner._compression.value == "gzip"  # type: ignore[attr-defined]
    over_grpc.shutdown()
    over_http.shutdown()
