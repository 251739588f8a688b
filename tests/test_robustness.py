"""Bad input never raises into the host, every span opened is ended, and one bad time loses nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.core.events import KNOWN_EVENT_TYPES
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.export import iter_otlp_json_file
from rulvar_otel.otel import create_mapper, export_events, to_otel
from rulvar_otel.otel import semconv as sc
from rulvar_otel.testing import SpanCapture
from tests._support import GrpcTraceReceiver, HttpTraceReceiver, TraceReceiver, ev, export, t
from tests._support import events as stream_events

_TYPES = st.sampled_from(sorted(KNOWN_EVENT_TYPES)) | st.text(max_size=12)
_SPAN_IDS = st.sampled_from(["s0", "s1", "s2", "s3", "x"]) | st.text(max_size=4)
_STRINGS = st.text(max_size=40) | st.sampled_from(["\x1b[31mred\n", "a" * 5000, "sk-" + "z" * 20, "\x00\x9b"])
_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _STRINGS
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_FIELDS = st.sampled_from(
    [
        "workflow",
        "phase",
        "agentType",
        "model",
        "role",
        "invocation",
        "toolName",
        "toolCallId",
        "status",
        "outcome",
        "usage",
        "costUsd",
        "envelope",
        "settled",
        "settledReason",
        "scope",
        "error",
        "exploration",
        "completion",
        "childStatusCounts",
        "category",
        "file",
        "line",
        "msg",
        "delta",
        "replayed",
        "guard",
    ]
) | st.text(max_size=10)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {}
    if draw(st.booleans()):
        event["runId"] = draw(st.sampled_from(["r1", "r2"]) | _STRINGS)
    event["seq"] = draw(st.integers(-5, 2**40) | _SCALARS)
    event["ts"] = draw(
        st.sampled_from(
            ["2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.500Z", "bad", "2025-12-31T23:59:59Z"]
        )
        | _SCALARS
    )
    event["spanId"] = draw(_SPAN_IDS | _SCALARS)
    if draw(st.booleans()):
        event["parentSpanId"] = draw(_SPAN_IDS | _SCALARS)
    event["type"] = draw(_TYPES | _SCALARS)
    for key, value in draw(st.dictionaries(_FIELDS, _VALUES, max_size=6)).items():
        event[key] = value
    return event


_OUTCOMES = (
    st.none()
    | st.builds(RunOutcome, status=st.sampled_from(["ok", "error", "weird"]))
    | st.just(RuntimeError("x"))
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), max_size=40), _OUTCOMES)
def test_any_event_sequence_exports_and_ends_every_span(stream: list[dict[str, Any]], outcome: Any) -> None:
    capture = SpanCapture()
    tracer = capture.tracer
    returned = export_events(stream, tracer, outcome=outcome)
    assert returned == len(capture.spans) == len(capture.ended)
    for span in capture.ended:
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time >= span.start_time


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                ev("run:start", 0, "s0", workflow="w"),
                ev("phase:start", 1, "p", "s0", phase="x"),
                ev("agent:start", 2, "a", "p", agentType="t", model="m", role="loop"),
                ev("agent:phase:start", 3, "a", invocation=1, role="loop"),
                ev("tool:start", 4, "a", toolName="t", toolCallId="c"),
                ev("tool:start", 5, "a", toolName="t"),
                ev("tool:end", 6, "a", toolName="t", outcome="ok"),
                ev("tool:end", 7, "a", toolName="t", toolCallId="c", outcome="ok"),
                ev("agent:phase:end", 8, "a", invocation=1, outcome="ok"),
                ev("agent:end", 9, "a", status="ok"),
                ev("child:start", 10, "c", "s0", workflow="k", scope="s"),
                ev("child:end", 11, "c", status="ok"),
                ev("run:end", 12, "s0", status="ok"),
                ev("log", 13, "a", level="info", msg="m"),
                ev("run:start", 4294967296, "s9", workflow="w", resumed=True),
                ev("agent:start", 14, "b", "gone", replayed=True),
            ]
        ),
        max_size=60,
    )
)
def test_any_order_of_well_formed_events_ends_every_span(stream: list[dict[str, Any]]) -> None:
    capture = SpanCapture()
    returned = export_events(stream, capture.tracer)
    assert returned == len(capture.spans) == len(capture.ended)
    assert len({s.context.trace_id for s in capture.ended}) <= 1


def test_a_failing_source_and_a_rejecting_result_never_fail_the_export() -> None:
    class Broken:
        run_id = "r1"

        @property
        def events(self) -> AsyncIterator[Any]:
            async def gen() -> AsyncIterator[Any]:
                yield ev("run:start", 0, "s0", workflow="w")
                yield ev("agent:start", 1, "a", "s0", agentType="t", model="m", role="loop")
                raise ConnectionError("stream died")

            return gen()

        @property
        def result(self) -> Any:
            async def fail() -> RunOutcome:
                raise RuntimeError("rejected")

            return fail()

        def on(self, kind: str, callback: Any) -> Any:
            return lambda: None

    capture = SpanCapture()
    count = asyncio.run(to_otel(Broken(), capture.tracer))
    assert count == 2 == len(capture.ended)
    assert all(s.status.status_code.name == "ERROR" for s in capture.ended)


# --- timestamps (docs/otel-mapping.md#timestamps) ------------------------------------------------

MAX_OTLP_NS = 2**64 - 1
LARGE_SPANS = 8021  # tests/fixtures/reference/README.md


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "rulvar_otel" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("bad", ["", "garbage", "10000-01-01T00:00:00Z", "1969-07-20T20:17:40Z", 17, None])
def test_an_unusable_first_ts_never_starts_the_run_in_1970(
    bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    first = ev("run:start", 0, "s0", workflow="w")
    first["ts"] = bad
    stream = [
        first,
        ev("log", 1, "s0", level="info", msg="m") | {"ts": "also bad"},
        ev("agent:start", 2, "a", "s0", ts_ms=5, agentType="t", model="m", role="loop"),
        ev("run:end", 3, "s0", ts_ms=9, status="ok"),
    ]
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        result = export(stream, RunOutcome(status="ok"))
    run = result.spans[0]
    assert run.start_time == t(5)  # the first usable ts, not 1970 and not the export time
    assert [e.timestamp for e in run.events] == [t(5)]
    assert run.end_time == t(9)
    if bad is not None:
        assert any("event 1 (seq 0)" in w for w in _warnings(caplog))
    assert any("event 2 (seq 1)" in w for w in _warnings(caplog))


@pytest.mark.parametrize(
    "ts", ["1969-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z", "2554-07-21T23:34:34Z", "9999-12-31T23:59:59Z"]
)
def test_an_out_of_range_ts_takes_the_previous_events_time(ts: str, caplog: pytest.LogCaptureFixture) -> None:
    stream = [
        ev("run:start", 0, "s0", workflow="w"),
        ev("agent:start", 1, "a", "s0", ts_ms=4, agentType="t", model="m", role="loop"),
        ev("tool:start", 2, "a", toolName="x") | {"ts": ts},
        ev("tool:end", 3, "a", ts_ms=6, toolName="x", outcome="ok"),
        ev("run:end", 4, "s0", ts_ms=9, status="ok"),
    ]
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        result = export(stream, RunOutcome(status="ok"))
    tool = result.named("tool x")[0]
    assert tool.start_time == t(4) and tool.end_time == t(6)
    for span in result.spans:
        assert span.start_time is not None and span.end_time is not None
        assert 0 <= span.start_time <= span.end_time <= MAX_OTLP_NS
    (warning,) = _warnings(caplog)
    assert "event 3 (seq 2)" in warning and "out of range" in warning
    assert ts not in warning  # the diagnostic names the event, it does not echo input


def test_a_stream_with_no_usable_ts_at_all_is_stamped_at_the_export_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = [ev("run:start", 0, "s0", workflow="w"), ev("run:end", 1, "s0", status="ok")]
    for event in stream:
        event["ts"] = "never"
    before = time.time_ns()
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        result = export(stream, RunOutcome(status="ok"))
    (run,) = result.spans
    assert run.start_time is not None and before <= run.start_time <= time.time_ns()
    assert any("export time" in w for w in _warnings(caplog))


def test_events_waiting_for_a_first_ts_are_bounded() -> None:
    capture = SpanCapture()
    mapper = create_mapper(capture.tracer)
    mapper.feed(ev("run:start", 0, "s0", workflow="w") | {"ts": "bad"})
    assert capture.spans == []  # held for the first usable ts
    for seq in range(1, 2000):
        mapper.feed(ev("log", seq, "s0", level="info", msg="m") | {"ts": "bad"})
    assert len(capture.spans) == 1  # the hold ended at its bound: memory stays bounded
    mapper.finish(RunOutcome(status="ok"))
    assert len(capture.ended) == 1 and len(capture.ended[0].events) == 1999


def _large_with_one_bad_time(tmp_path: Path, ts: str) -> tuple[Path, str]:
    """``large`` with one tool:start's ts replaced; returns the file and the expected diagnostic."""
    events = stream_events("large")
    index = next(i for i, e in enumerate(events) if e["type"] == "tool:start")
    events[index]["ts"] = ts
    path = tmp_path / "large-bad-ts.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path, f"event {index + 1} (seq {events[index]['seq']}) has an unusable ts (out of range)"


def _run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stderr


BAD_TIMES = ["1969-12-31T23:59:59.000Z", "2600-01-01T00:00:00.000Z"]


@pytest.mark.parametrize("ts", BAD_TIMES)
def test_one_out_of_range_ts_in_large_loses_nothing_through_the_file_exporter(
    ts: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stream, diagnostic = _large_with_one_bad_time(tmp_path, ts)
    out = tmp_path / "out.otlp.jsonl"
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        code, err = _run_cli("export", str(stream), "--out", str(out), "--no-tree", "--progress", "off")
    assert code == 0, err
    # The diagnostic names the line (the stream has no blank lines) and the seq, not the value.
    assert [w for w in _warnings(caplog) if "unusable ts" in w] == [
        f"{diagnostic}; it takes the time of the previous event"
    ]
    scopes = [
        scope_spans
        for request in iter_otlp_json_file(out)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
    ]
    spans = [span for scope_spans in scopes for span in scope_spans.spans]
    assert len(spans) == LARGE_SPANS
    # docs/otel-mapping.md#instrumentation-scope-and-schema
    assert {(s.scope.name, s.scope.version, s.schema_url) for s in scopes} == {
        (sc.INSTRUMENTATION_SCOPE, sc.INSTRUMENTATION_VERSION, sc.SCHEMA_URL)
    }
    assert all(0 < s.start_time_unix_nano <= s.end_time_unix_nano for s in spans)


@pytest.mark.parametrize("ts", BAD_TIMES)
def test_one_out_of_range_ts_in_large_loses_nothing_through_a_real_otlp_receiver(
    ts: str, tmp_path: Path
) -> None:
    stream, _ = _large_with_one_bad_time(tmp_path, ts)
    with GrpcTraceReceiver() as rx:
        code, err = _run_cli(
            "export",
            str(stream),
            "--endpoint",
            rx.endpoint,
            "--protocol",
            "grpc",
            "--no-tree",
            "--progress",
            "off",
        )
        assert code == 0, err
        assert len(rx.spans()) == LARGE_SPANS


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_one_out_of_range_ts_never_breaks_the_hosts_own_batches(protocol: str) -> None:
    events = stream_events("large")
    index = next(i for i, e in enumerate(events) if e["type"] == "tool:start")
    events[index]["ts"] = BAD_TIMES[0]
    rx: TraceReceiver = GrpcTraceReceiver() if protocol == "grpc" else HttpTraceReceiver()
    with rx:
        exporter = (
            GrpcExporter(endpoint=rx.endpoint, insecure=True, timeout=10)
            if protocol == "grpc"
            else HttpExporter(endpoint=f"{rx.endpoint}/v1/traces", timeout=10)
        )
        host = TracerProvider(span_limits=SpanLimits(max_events=SpanLimits.UNSET))
        host.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=20_000))
        made = export_events(events, host.get_tracer("host"))
        assert host.force_flush(60_000)
        host.shutdown()
        assert made == LARGE_SPANS == len(rx.spans())
