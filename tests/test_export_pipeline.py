"""The export pipeline's promises: nothing dropped, bounded memory, runs never merged, values bounded.

Library level (``rulvar_otel.export``) with the CLI where the promise is the command's.
"""

from __future__ import annotations

import gc
import json
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.errors import ConfigError
from rulvar_otel.export import (
    DEFAULT_VALUE_LENGTH_LIMIT,
    SETTINGS,
    ExportOptions,
    StreamedRun,
    build_trace_delivery,
    export_run,
)
from rulvar_otel.export._batching import BlockingBatchSpanProcessor
from rulvar_otel.export._settings import read_int, resolve_protocol
from tests._support import STREAMS, events, otlp_file_spans

pytestmark = pytest.mark.usefixtures("otel_env_cleared")


# --- backpressure: a full queue waits, never drops --------------------------------------------


class SlowExporter(SpanExporter):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.received = 0
        self.batches = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(self.delay_s)
        self.received += len(spans)
        self.batches += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_a_full_queue_makes_the_producer_wait_and_every_span_arrives() -> None:
    exporter = SlowExporter(0.002)
    processor = BlockingBatchSpanProcessor(exporter, max_queue_size=8, batch_size=4, schedule_delay_s=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for index in range(600):
        tracer.start_span(f"s{index}").end()
    assert processor.force_flush(10_000)
    provider.shutdown()
    assert exporter.received == 600
    assert processor.waits > 0  # the producer really outran the exporter and waited


def test_a_partial_batch_goes_out_after_the_schedule_delay() -> None:
    exporter = SlowExporter(0)
    processor = BlockingBatchSpanProcessor(exporter, max_queue_size=100, batch_size=50, schedule_delay_s=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.get_tracer("t").start_span("one").end()
    deadline = time.monotonic() + 5
    while exporter.received == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert exporter.received == 1  # without a flush: live runs stay near real time
    provider.shutdown()


def test_the_cli_with_a_tiny_queue_delivers_every_span_of_large_and_never_says_queue_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "128")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    out = tmp_path / "large.otlp.jsonl"
    result = CliRunner().invoke(
        app, ["export", str(STREAMS / "large.jsonl"), "--out", str(out), "--progress", "off", "--no-tree"]
    )
    assert result.exit_code == 0, result.stderr
    assert len(otlp_file_spans(out)) == 8021
    assert "Queue full" not in result.stderr and "dropping" not in result.stderr.lower()
    assert "exported 8021 spans" in result.stderr


# --- bounded memory: a streamed run keeps no event ---------------------------------------------


class Event(dict[str, Any]):
    """A wire event that can be weakly referenced (plain dicts cannot)."""


def _weak_events(name: str, refs: list[weakref.ref[Event]]) -> Iterator[Event]:
    for raw in events(name):
        event = Event(raw)
        refs.append(weakref.ref(event))
        yield event


def test_a_streamed_run_keeps_no_event_once_it_is_mapped(tmp_path: Path) -> None:
    refs: list[weakref.ref[Event]] = []
    report = export_run(StreamedRun(_weak_events("large", refs)), ExportOptions(out=tmp_path / "s.jsonl"))
    assert report.ok and report.events == len(refs) > 15_000
    gc.collect()
    alive = sum(ref() is not None for ref in refs)
    # The mapper may hold a few (the last run:end); a buffering handle would hold every one.
    assert alive <= 5


def test_a_recorded_handle_by_contrast_holds_every_event_while_it_lives(tmp_path: Path) -> None:
    refs: list[weakref.ref[Event]] = []
    handle = handle_from_events(_weak_events("tools", refs))
    report = export_run(handle, ExportOptions(out=tmp_path / "r.jsonl"))
    assert report.ok
    gc.collect()
    assert sum(ref() is not None for ref in refs) == len(refs)  # what the CLI no longer uses


def test_a_streamed_run_can_be_iterated_only_once() -> None:
    from rulvar_otel.errors import SourceError

    run = StreamedRun(events("minimal"))
    assert run.run_id == events("minimal")[0]["runId"]
    assert len(list(run.iter_sync())) == len(events("minimal"))  # the peeked event is not lost
    with pytest.raises(SourceError):
        run.iter_sync()


def test_the_report_keeps_a_bounded_number_of_spans(tmp_path: Path) -> None:
    from rulvar_otel.export import _traces

    report = export_run(
        StreamedRun(events("large")), ExportOptions(out=tmp_path / "k.jsonl"), keep_spans=True
    )
    assert report.spans == 8021
    assert len(report.kept_spans) <= _traces.MAX_KEPT_SPANS + 1
    assert any(s.parent is None for s in report.kept_spans)  # the run span (a root) is always kept


# --- two runs in one stream: two traces, never merged ------------------------------------------


def _interleaved(tmp_path: Path) -> tuple[Path, str, str]:
    base = events("tools")
    first, second = "run-A-interleaved", "run-B-interleaved"
    merged: list[dict[str, Any]] = []
    for a, b in zip(base, base, strict=True):
        merged.append({**a, "runId": first})
        merged.append({**b, "runId": second})  # same span ids, same seqs: only runId differs
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in merged), encoding="utf-8")
    return path, first, second


def test_two_interleaved_runs_become_two_whole_traces(tmp_path: Path) -> None:
    path, first, second = _interleaved(tmp_path)
    out = tmp_path / "two.otlp.jsonl"
    result = CliRunner().invoke(
        app, ["export", str(path), "--out", str(out), "--progress", "off", "--no-tree"]
    )
    assert result.exit_code == 0, result.stderr
    spans = otlp_file_spans(out)
    by_trace = Counter(s.trace_id for s in spans)
    assert sorted(by_trace.values()) == [17, 17]  # 2 x 17, not 25 merged spans
    for trace_id in by_trace:
        members = [s for s in spans if s.trace_id == trace_id]
        ids = {s.span_id for s in members}
        assert sum(1 for s in members if not s.parent_span_id) == 1
        assert all(not s.parent_span_id or s.parent_span_id in ids for s in members)
    assert "in 2 traces, one per run" in result.stderr
    assert first in result.stderr and second in result.stderr


def test_interleaved_runs_with_deterministic_ids_get_each_run_its_own_trace_id(tmp_path: Path) -> None:
    from rulvar_otel.otel.ids import derive_trace_id

    path, first, second = _interleaved(tmp_path)
    report = export_run(
        StreamedRun(json.loads(line) for line in path.read_text().splitlines()),
        ExportOptions(out=tmp_path / "d.jsonl", deterministic_ids=True),
    )
    assert report.ok and report.run_ids == (first, second)
    assert set(report.trace_ids) == {format(derive_trace_id(r), "032x") for r in (first, second)}
    assert report.spans == 34


# --- bounded values -----------------------------------------------------------------------------


def _with_huge_workflow(tmp_path: Path, size: int) -> Path:
    stream = events("minimal")
    for event in stream:
        if event["type"] == "run:start":
            event["workflow"] = "w" * size
    path = tmp_path / "huge.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in stream), encoding="utf-8")
    return path


def test_span_names_and_attribute_values_are_bounded_by_default(tmp_path: Path) -> None:
    path = _with_huge_workflow(tmp_path, 1_000_000)
    out = tmp_path / "b.jsonl"
    result = CliRunner().invoke(app, ["export", str(path), "--out", str(out), "--progress", "off"])
    assert result.exit_code == 0, result.stderr
    for span in otlp_file_spans(out):
        assert len(span.name) <= DEFAULT_VALUE_LENGTH_LIMIT
        for attribute in span.attributes:
            assert len(attribute.value.string_value) <= DEFAULT_VALUE_LENGTH_LIMIT
    # The terminal never gets the megabyte: every printed line is bounded.
    assert max(len(line) for line in (result.stdout + result.stderr).splitlines()) < 2_000


def test_the_value_length_limit_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "40")
    path = _with_huge_workflow(tmp_path, 500)
    out = tmp_path / "l.jsonl"
    report = export_run(
        StreamedRun(json.loads(x) for x in path.read_text().splitlines()), ExportOptions(out=out)
    )
    assert report.ok
    (run,) = [s for s in otlp_file_spans(out) if not s.parent_span_id]
    assert len(run.name) == 40
    assert all(len(a.value.string_value) <= 40 for a in run.attributes)


# --- the settings table -------------------------------------------------------------------------


def test_every_variable_read_is_in_the_table_and_the_table_has_no_duplicates() -> None:
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    with pytest.raises(KeyError):
        read_int({}, "OTEL_NOT_A_VARIABLE", minimum=0)


@pytest.mark.parametrize(("raw", "message"), [("x", "must be an integer"), ("0", "must be positive")])
def test_the_one_int_parser_names_the_variable(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"OTEL_BSP_MAX_QUEUE_SIZE {message}"):
        read_int({"OTEL_BSP_MAX_QUEUE_SIZE": raw}, "OTEL_BSP_MAX_QUEUE_SIZE", minimum=1)
    assert read_int({"OTEL_BSP_MAX_QUEUE_SIZE": " 12 "}, "OTEL_BSP_MAX_QUEUE_SIZE", minimum=1) == 12


def test_the_one_protocol_resolver_serves_traces_and_metrics() -> None:
    env = {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert resolve_protocol(None, "http://c:4317", "METRICS", env) == "http/protobuf"
    assert resolve_protocol(None, "http://c:4318", "TRACES", env) == "grpc"
    assert resolve_protocol(None, "http://c:4317", "TRACES", {}) == "grpc"
    assert resolve_protocol(None, "http://c:4318", "METRICS", {}) == "http/protobuf"
    assert resolve_protocol("grpc", "http://c:4318", "METRICS", env) == "grpc"


def test_a_bad_queue_setting_fails_before_any_span(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OTEL_SPAN_EVENT_COUNT_LIMIT"):
        build_trace_delivery(ExportOptions(out=tmp_path / "x"), environ={"OTEL_SPAN_EVENT_COUNT_LIMIT": "-1"})
    assert not (tmp_path / "x").exists()


def test_export_run_never_raises_for_a_bad_environment(tmp_path: Path) -> None:
    report = export_run(
        StreamedRun(events("minimal")),
        ExportOptions(out=tmp_path / "x"),
        environ={"OTEL_BSP_MAX_QUEUE_SIZE": "lots"},
    )
    assert [f.kind.value for f in report.failures] == ["config"]
    assert "OTEL_BSP_MAX_QUEUE_SIZE" in report.failures[0].message


def test_threads_do_not_outlive_an_export(tmp_path: Path) -> None:
    before = {t.name for t in threading.enumerate()}
    export_run(StreamedRun(events("tools")), ExportOptions(out=tmp_path / "t.jsonl"))
    time.sleep(0.1)
    after = {t.name for t in threading.enumerate() if t.is_alive()}
    assert "rulvar-otel-span-export" not in after - before


def test_each_interleaved_run_settles_from_its_own_run_end(tmp_path: Path) -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    ok, failed = events("tools"), events("error")
    merged: list[dict[str, Any]] = []
    for index in range(max(len(ok), len(failed))):
        merged.extend(stream[index] for stream in (ok, failed) if index < len(stream))
    out = tmp_path / "mixed.jsonl"
    report = export_run(StreamedRun(merged), ExportOptions(out=out))
    assert report.ok and len(report.run_ids) == 2
    roots = {s.trace_id: s for s in otlp_file_spans(out) if not s.parent_span_id}
    statuses = sorted(Status.StatusCode.Name(s.status.code) for s in roots.values())
    # The error run's last run:end is the stream's last: it must not settle the ok run as well.
    assert statuses == ["STATUS_CODE_ERROR", "STATUS_CODE_OK"]


# --- observers: fed by the drain beside the spans, never at their cost -------------------------


class _CountingObserver:
    def __init__(self) -> None:
        self.fed = 0
        self.finished: list[object] = []

    def feed(self, event: Any) -> None:
        self.fed += 1

    def finish(self, outcome: object) -> None:
        self.finished.append(outcome)


class _BrokenObserver(_CountingObserver):
    def feed(self, event: Any) -> None:
        super().feed(event)
        raise RuntimeError("observer bug")

    def finish(self, outcome: object) -> None:
        raise RuntimeError("observer bug at the end")


def test_an_observer_that_raises_costs_no_span_and_no_other_observer_an_event(tmp_path: Path) -> None:
    broken, counting = _BrokenObserver(), _CountingObserver()
    report = export_run(
        StreamedRun(events("large")),
        ExportOptions(out=tmp_path / "o.jsonl"),
        observers=[broken, counting],
    )
    assert report.ok and report.spans == 8021 and report.events == len(events("large"))
    assert len(otlp_file_spans(tmp_path / "o.jsonl")) == 8021
    assert counting.fed == broken.fed == len(events("large"))
    assert len(counting.finished) == 1  # finished once, after the spans were settled
