"""The direct path delivers through the exporter library's own OTLP exporters, and fails bounded."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.otel import export_events
from rulvar_otel.otel._records import SpanRecord
from rulvar_otel.otel.direct import DirectSpanSink, grpc_span_exporter
from rulvar_otel.otel.ids import RulvarIdGenerator
from tests._support import GrpcTraceReceiver, HttpTraceReceiver, ReceivedSpan, closed_port, events, outcome


def _expected(name: str) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        span_limits=SpanLimits(max_events=SpanLimits.UNSET), id_generator=RulvarIdGenerator()
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    export_events(events(name), provider.get_tracer("t"), outcome=outcome(name))
    return list(memory.get_finished_spans())


def _check(received: list[ReceivedSpan], name: str) -> None:
    expected = _expected(name)
    assert len(received) == len(expected)
    by_id = {r.span_id: r for r in received}
    for span in expected:
        assert span.context is not None
        got = by_id[format(span.context.span_id, "016x")]
        assert got.span.name == span.name
        assert got.trace_id == format(span.context.trace_id, "032x")
        assert got.parent_span_id == (format(span.parent.span_id, "016x") if span.parent else None)
        assert len(got.span.events) == len(span.events)
        assert got.attributes == dict(span.attributes or {})
        assert got.span.start_time_unix_nano == span.start_time
        assert got.span.end_time_unix_nano == span.end_time


@pytest.mark.parametrize("name", ["orchestrate", "large"])
def test_the_direct_path_delivers_every_span_to_a_real_grpc_receiver(name: str) -> None:
    with GrpcTraceReceiver() as receiver:
        exporter = grpc_span_exporter(endpoint=receiver.endpoint, insecure=True, timeout=10)
        from rulvar_otel.otel.direct import export_events_direct

        export_events_direct(events(name), exporter, outcome=outcome(name), id_generator=RulvarIdGenerator())
        received = receiver.spans()
    _check(received, name)
    # Batches stay bounded: nothing arrives as one giant request.
    assert max(len(r.resource_spans[0].scope_spans[0].spans) for r in receiver.requests) <= 512


def test_the_direct_path_delivers_to_a_real_http_receiver_through_the_stock_exporter() -> None:
    with HttpTraceReceiver() as receiver:
        exporter = HttpSpanExporter(endpoint=receiver.endpoint + "/v1/traces", timeout=10)
        from rulvar_otel.otel.direct import export_events_direct

        export_events_direct(
            events("orchestrate"), exporter, outcome=outcome("orchestrate"), id_generator=RulvarIdGenerator()
        )
        received = receiver.spans()
    _check(received, "orchestrate")


def test_export_events_takes_an_exporter_instead_of_a_tracer() -> None:
    with GrpcTraceReceiver() as receiver:
        made = export_events(
            events("orchestrate"),
            exporter=grpc_span_exporter(endpoint=receiver.endpoint, insecure=True),
            outcome=outcome("orchestrate"),
        )
        assert made == len(receiver.spans()) > 0
    with pytest.raises(TypeError):
        export_events(events("minimal"))


def test_a_dead_endpoint_fails_within_the_export_timeout_and_is_reported() -> None:
    exporter = grpc_span_exporter(endpoint=f"http://127.0.0.1:{closed_port()}", insecure=True, timeout=1)
    sink = DirectSpanSink([exporter], max_batch=64)
    from rulvar_otel.core.masking import compile_secret_masker
    from rulvar_otel.otel._mapper import SpanMapper

    mapper = SpanMapper(sink.tracer(), compile_secret_masker())
    started = time.monotonic()
    for event in events("large"):
        mapper.feed(event)
    mapper.finish(outcome("large"))
    sink.shutdown()
    elapsed = time.monotonic() - started
    # One export timeout (with the library's retries inside it), then every later batch fails at once.
    assert elapsed < 15
    assert sink.delivered == [0]
    assert sink.failed == [mapper.span_count]


class Slow(SpanExporter):
    """Takes its time per batch and counts what it got."""

    def __init__(self) -> None:
        self.spans = 0
        self.batches: list[int] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(0.01)
        self.spans += len(spans)
        self.batches.append(len(spans))
        return SpanExportResult.SUCCESS


def test_a_slow_exporter_slows_the_producer_instead_of_losing_spans() -> None:
    slow = Slow()
    sink = DirectSpanSink([slow], max_batch=16, max_queue_batches=2)
    tracer = sink.tracer()
    for index in range(400):
        tracer.start_span(f"s{index}", start_time=index).end(index + 1)
    sink.shutdown()
    assert slow.spans == 400 and sink.delivered == [400]
    assert max(slow.batches) <= 16
    assert sink.waits > 0  # the producer did wait


def test_kept_records_are_bounded_but_every_root_is_kept() -> None:
    sink = DirectSpanSink([Slow()], keep=3)
    tracer = sink.tracer()
    root = tracer.start_span("root", start_time=0)
    # A record is span-shaped, not an OpenTelemetry Span: a context carries it by its span context.
    parent = trace.set_span_in_context(trace.NonRecordingSpan(root.get_span_context()))
    for index in range(10):
        child = tracer.start_span(f"c{index}", context=parent, start_time=1)
        child.end(2)
    root.end(3)
    sink.shutdown()
    kept = sink.readable_spans()
    assert [s.name for s in kept] == ["c0", "c1", "c2", "root"]
    assert kept[-1].parent is None and kept[0].parent is not None


def test_a_live_stream_gets_a_partial_batch_out_after_the_schedule_delay() -> None:
    slow = Slow()
    sink = DirectSpanSink([slow], schedule_delay_s=0.05)
    span: SpanRecord = sink.tracer().start_span("one", start_time=1)
    span.end(2)
    deadline = time.monotonic() + 5
    while slow.spans == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slow.spans == 1  # delivered while the sink is still open
    sink.shutdown()


def test_to_otel_takes_an_exporter_for_a_live_handle() -> None:
    import asyncio

    from rulvar_otel.core.handle import handle_from_events
    from rulvar_otel.otel import to_otel

    with GrpcTraceReceiver() as receiver:
        handle = handle_from_events(events("orchestrate"), outcome("orchestrate"))
        made = asyncio.run(
            to_otel(handle, exporter=grpc_span_exporter(endpoint=receiver.endpoint, insecure=True))
        )
        assert made == len(receiver.spans()) > 0
