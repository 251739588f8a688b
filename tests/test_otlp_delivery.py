"""Real OTLP delivery: the CLI against real gRPC and HTTP receivers, and the provider's rules.

Each delivery test runs ``rulvar-otel export`` in process (Typer's CliRunner) against a receiver
on 127.0.0.1, decodes what arrived and checks it against the reference corpus: every span, one
trace per run, parent links intact, no span event lost to the SDK's default limits.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.errors import ConfigError
from rulvar_otel.export import (
    DEFAULT_EXPORT_TIMEOUT_S,
    DeliveryReport,
    ExportOptions,
    TargetReport,
    build_trace_delivery,
    parse_header,
    resolve_otlp_target,
    resolve_service_name,
)
from rulvar_otel.export._settings import with_signal_path
from rulvar_otel.otel.exporter import export_events
from tests._support import (
    REFERENCE,
    STREAMS,
    GrpcMetricsReceiver,
    GrpcTraceReceiver,
    HttpTraceReceiver,
    ReceivedSpan,
    TraceReceiver,
    closed_port,
    events,
    otlp_file_spans,
    outcome,
    reference_span_count,
    run_cli,
    span_index,
)

pytestmark = pytest.mark.usefixtures("otel_env_cleared")


def expected_span_count(name: str) -> int:
    """What export_events creates for the stream, with an in-memory exporter (no network)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_events=SpanLimits.UNSET))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = export_events(events(name), provider.get_tracer("t"), outcome=outcome(name))
    provider.shutdown()
    assert made == len(exporter.get_finished_spans())
    return made


def check_one_whole_trace(spans: list[ReceivedSpan], expected: int) -> ReceivedSpan:
    """Every span arrived once, in one trace, each parent present; returns the root."""
    assert len(spans) == expected
    assert len({s.span_id for s in spans}) == expected, "a span arrived twice"
    assert len({s.trace_id for s in spans}) == 1, "the run was split across traces"
    by_id = span_index(spans)
    roots = [s for s in spans if s.parent_span_id is None]
    assert len(roots) == 1
    for span in spans:
        if span.parent_span_id is not None:
            assert span.parent_span_id in by_id, f"{span.span.name}: parent never arrived"
    # Every span reaches the root through its parents (no cycles, no detached subtree).
    for span in spans:
        seen = 0
        node = span
        while node.parent_span_id is not None:
            node = by_id[node.parent_span_id]
            seen += 1
            assert seen <= expected
        assert node is roots[0]
    return roots[0]


@pytest.fixture(params=["grpc", "http/protobuf"])
def receiver(request: pytest.FixtureRequest) -> Iterator[tuple[str, TraceReceiver]]:
    rx: TraceReceiver = GrpcTraceReceiver() if request.param == "grpc" else HttpTraceReceiver()
    with rx:
        yield request.param, rx


@pytest.mark.parametrize("name", ["tools", "large"])
def test_every_span_reaches_a_real_receiver_in_one_trace(
    name: str, receiver: tuple[str, TraceReceiver]
) -> None:
    protocol, rx = receiver
    code, _, err = run_cli(
        "export",
        str(STREAMS / f"{name}.jsonl"),
        "--outcome",
        str(STREAMS / f"{name}.outcome.json"),
        "--endpoint",
        rx.endpoint,
        "--protocol",
        protocol,
        "--progress",
        "off",
    )
    assert code == 0, err
    expected = expected_span_count(name)
    assert expected == reference_span_count(name)
    spans = rx.spans()
    root = check_one_whole_trace(spans, expected)
    assert root.span.name.startswith("run ")
    # The reference's span names, as a multiset, arrived (names are masked: the fixtures hold none).
    reference = json.loads((REFERENCE / "spans" / f"{name}.nested.json").read_text(encoding="utf-8"))
    assert Counter(s.span.name for s in spans) == Counter(s["name"] for s in reference["spans"])
    # No span event was cut by the SDK's default 128-per-span limit.
    payload_events = Counter(e["type"] for e in events(name))
    assert len(root.span.events) >= min(payload_events["budget:update"], 1)
    if name == "large":
        assert (
            sum(1 for e in root.span.events if e.name == "budget:update") == payload_events["budget:update"]
        )
        assert payload_events["budget:update"] == 5000
    assert {s.resource.get("service.name") for s in spans} == {"rulvar"}
    assert f"exported {expected} spans" in err


def test_headers_and_service_name_reach_the_receiver(receiver: tuple[str, TraceReceiver]) -> None:
    protocol, rx = receiver
    code, _, err = run_cli(
        "export",
        str(STREAMS / "minimal.jsonl"),
        "--endpoint",
        rx.endpoint,
        "--protocol",
        protocol,
        "--header",
        "X-Tenant=acme",
        "--header",
        "authorization=Bearer token-for-test",
        "--service-name",
        "checkout-agents",
        "--progress",
        "off",
    )
    assert code == 0, err
    assert rx.headers and all(h.get("x-tenant") == "acme" for h in rx.headers)
    assert all(h.get("authorization") == "Bearer token-for-test" for h in rx.headers)
    assert {s.resource["service.name"] for s in rx.spans()} == {"checkout-agents"}


def test_standard_environment_variables_configure_the_export(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with HttpTraceReceiver() as rx:
        # OTEL_EXPORTER_OTLP_ENDPOINT is a base URL: the HTTP exporter adds /v1/traces.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-from-env=yes")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
        code, out, err = run_cli("export", str(STREAMS / "tools.jsonl"), "--progress", "off")
        assert code == 0, err
        check_one_whole_trace(rx.spans(), reference_span_count("tools"))
        assert all(h.get("x-from-env") == "yes" for h in rx.headers)
        assert {s.resource["service.name"] for s in rx.spans()} == {"from-env"}
    # An endpoint is configured, so no embedded-default file and no tree unless asked.
    assert not Path("rulvar-traces.otlp.jsonl").exists()
    assert "run tooling" not in out


def test_endpoint_and_out_together_deliver_to_both(tmp_path: Path) -> None:
    out = tmp_path / "copy.otlp.jsonl"
    with GrpcTraceReceiver() as rx:
        code, _, err = run_cli(
            "export",
            str(STREAMS / "tools.jsonl"),
            "--endpoint",
            rx.endpoint,
            "--protocol",
            "grpc",
            "--out",
            str(out),
            "--progress",
            "off",
        )
        assert code == 0, err
        assert len(rx.spans()) == 17
    written = otlp_file_spans(out)
    assert sorted(s.span_id for s in written) == sorted(s.span.span_id for s in rx.spans())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_dead_endpoint_fails_with_exit_1_and_a_clear_message(protocol: str) -> None:
    import time

    port = closed_port()
    started = time.monotonic()
    code, _, err = run_cli(
        "export",
        str(STREAMS / "large.jsonl"),
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--protocol",
        protocol,
        "--export-timeout",
        "1",
        "--progress",
        "off",
    )
    elapsed = time.monotonic() - started
    assert code == 1
    assert "export failed" in err
    assert f"127.0.0.1:{port}" in err
    assert "8021 of 8021 spans were not delivered" in err
    # One export timeout (not one per batch: 16 batches would take 16 timeouts) plus the mapping.
    assert elapsed < 30


def test_metrics_endpoint_receives_the_run_metrics_beside_the_trace() -> None:
    from rulvar_otel.otel.metrics.registry import REGISTRY

    with GrpcTraceReceiver() as traces, GrpcMetricsReceiver() as metrics:
        code, _, err = run_cli(
            "export",
            str(STREAMS / "tools.jsonl"),
            "--endpoint",
            traces.endpoint,
            "--protocol",
            "grpc",
            "--metrics-endpoint",
            metrics.endpoint,
            "--progress",
            "off",
        )
        assert code == 0, err
        check_one_whole_trace(traces.spans(), reference_span_count("tools"))
        names = metrics.metric_names()
    assert names, "no metric arrived"
    assert names <= {d.name for d in REGISTRY}
    assert {"rulvar.tool.calls", "rulvar.runs.settled"} <= names


# --- provider rules (no network) -------------------------------------------------------------


def test_no_endpoint_anywhere_means_the_embedded_default() -> None:
    assert resolve_otlp_target(ExportOptions(), environ={}) is None


def test_endpoint_precedence_option_then_traces_env_then_base_env() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/custom/path",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
    }
    explicit = resolve_otlp_target(ExportOptions(endpoint="http://cli:4318"), environ=env)
    assert explicit is not None and explicit.endpoint == "http://cli:4318/v1/traces"
    traces = resolve_otlp_target(ExportOptions(), environ=env)
    # The signal-specific variable is used as given.
    assert traces is not None and traces.endpoint == "http://traces:4318/custom/path"
    base = resolve_otlp_target(ExportOptions(), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318/"})
    assert base is not None and base.endpoint == "http://base:4318/v1/traces"


def test_protocol_from_option_env_or_port() -> None:
    grpc_port = resolve_otlp_target(ExportOptions(endpoint="http://c:4317"), environ={})
    assert grpc_port is not None and grpc_port.protocol == "grpc" and grpc_port.endpoint == "http://c:4317"
    other = resolve_otlp_target(ExportOptions(endpoint="http://c:9999"), environ={})
    assert other is not None and other.protocol == "http/protobuf"
    env = resolve_otlp_target(
        ExportOptions(endpoint="http://c:9999"), environ={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}
    )
    assert env is not None and env.protocol == "grpc"
    option = resolve_otlp_target(
        ExportOptions(endpoint="http://c:4317", protocol="http/protobuf"),
        environ={"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    )
    assert option is not None and option.protocol == "http/protobuf"
    with pytest.raises(ConfigError, match="http/json"):
        ExportOptions(endpoint="http://c:4318", protocol="http/json")
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    with pytest.raises(ConfigError, match="http/json"):
        resolve_otlp_target(ExportOptions(endpoint="http://c:4318"), environ=env)


def test_headers_merge_env_then_options_with_lowercase_names() -> None:
    target = resolve_otlp_target(
        ExportOptions(endpoint="http://c:4317", headers={"X-Team": "cli"}),
        environ={"OTEL_EXPORTER_OTLP_HEADERS": "X-Team=env,api-key=abc%20def"},
    )
    assert target is not None
    assert dict(target.headers) == {"x-team": "cli", "api-key": "abc def"}
    assert parse_header("Authorization=Bearer a=b") == ("authorization", "Bearer a=b")
    for bad in ("novalue", "=value", ""):
        with pytest.raises(ConfigError, match="KEY=VALUE"):
            parse_header(bad)


def test_timeout_env_is_milliseconds_and_validated() -> None:
    target = resolve_otlp_target(
        ExportOptions(endpoint="http://c:4317"), environ={"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}
    )
    assert target is not None and target.timeout_s == 2.5
    default = resolve_otlp_target(ExportOptions(endpoint="http://c:4317"), environ={})
    assert default is not None and default.timeout_s == DEFAULT_EXPORT_TIMEOUT_S
    option = resolve_otlp_target(
        ExportOptions(endpoint="http://c:4317", export_timeout_s=0.5),
        environ={"OTEL_EXPORTER_OTLP_TIMEOUT": "9000"},
    )
    assert option is not None and option.timeout_s == 0.5
    for bad in ("soon", "0", "-5"):
        with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
            resolve_otlp_target(
                ExportOptions(endpoint="http://c:4317"), environ={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": bad}
            )


@pytest.mark.parametrize("url", ["localhost:4317", "grpc://c:4317", "http://", "http://c:notaport"])
def test_bad_endpoint_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^endpoint"):
        ExportOptions(endpoint=url)
    with pytest.raises(ConfigError, match=r"^OTEL_EXPORTER_OTLP_ENDPOINT"):
        resolve_otlp_target(ExportOptions(), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": url})


def test_service_name_precedence() -> None:
    assert resolve_service_name(ExportOptions(), environ={}) == "rulvar"
    assert resolve_service_name(ExportOptions(), environ={"OTEL_SERVICE_NAME": "env"}) == "env"
    assert (
        resolve_service_name(ExportOptions(service_name="opt"), environ={"OTEL_SERVICE_NAME": "env"}) == "opt"
    )


def _span_with_events(environ: dict[str, str], count: int, tmp_path: Path) -> int:
    out = tmp_path / "events.jsonl"
    delivery = build_trace_delivery(ExportOptions(out=out), environ=environ, keep_spans=True)
    with delivery.tracer.start_as_current_span("many") as span:
        for index in range(count):
            span.add_event("e", {"i": index})
    report = delivery.finish()
    assert report.ok
    (kept,) = delivery.spans
    return len(kept.events)


def test_span_event_limit_is_lifted_unless_the_env_sets_one(tmp_path: Path) -> None:
    assert _span_with_events({}, 5000, tmp_path) == 5000
    assert _span_with_events({"OTEL_SPAN_EVENT_COUNT_LIMIT": "10"}, 50, tmp_path) == 10


def test_delivery_report_counts_what_each_destination_missed() -> None:
    report = DeliveryReport(
        spans_ended=10,
        targets=(
            TargetReport("file a", delivered=10, failed=0, error=None),
            TargetReport("OTLP grpc endpoint http://c:4317", delivered=4, failed=6, error="UNAVAILABLE"),
            TargetReport("file b", delivered=7, failed=0, error=None),
        ),
    )
    assert not report.ok
    assert report.problems() == [
        "6 of 10 spans were not delivered to OTLP grpc endpoint http://c:4317: UNAVAILABLE",
        "3 of 10 spans were not delivered to file b",
    ]
    assert DeliveryReport(3, (TargetReport("file a", 3, 0, None),)).ok


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux /dev/full to fail writes")
def test_a_failing_destination_is_reported_after_finish() -> None:
    delivery = build_trace_delivery(ExportOptions(out=Path("/dev/full")), environ={})
    for index in range(3):
        delivery.tracer.start_span(f"s{index}").end()
    report = delivery.finish()
    assert not report.ok
    (problem,) = report.problems()
    assert problem.startswith("3 of 3 spans were not delivered to file /dev/full: cannot write /dev/full")
    assert delivery.finish() is report


def test_bad_queue_settings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OTEL_BSP_MAX_QUEUE_SIZE"):
        build_trace_delivery(ExportOptions(out=tmp_path / "x"), environ={"OTEL_BSP_MAX_QUEUE_SIZE": "lots"})
    with pytest.raises(ConfigError, match="OTEL_BSP_MAX_EXPORT_BATCH_SIZE"):
        build_trace_delivery(
            ExportOptions(out=tmp_path / "x"), environ={"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "0"}
        )


def test_unwritable_out_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot write"):
        build_trace_delivery(ExportOptions(out=tmp_path / "missing-dir" / "x.jsonl"), environ={})


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://h:4318/base?x=1", "http://h:4318/base/v1/traces?x=1"),
        ("http://h:4318/base/?x=1&y=2#frag", "http://h:4318/base/v1/traces?x=1&y=2#frag"),
        ("http://h:4318?x=1", "http://h:4318/v1/traces?x=1"),
        ("http://h:4318", "http://h:4318/v1/traces"),
    ],
)
def test_the_signal_path_goes_before_a_base_endpoints_query(base: str, expected: str) -> None:
    target = resolve_otlp_target(
        ExportOptions(protocol="http/protobuf"), environ={"OTEL_EXPORTER_OTLP_ENDPOINT": base}
    )
    assert target is not None and target.endpoint == expected
    metrics = expected.replace("/v1/traces", "/v1/metrics")
    assert with_signal_path(base, "/v1/metrics") == metrics
