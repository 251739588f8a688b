"""The OTLP/gRPC span sender: retries as the receiver asks, stops when it must, says why it failed.

The CLI's gRPC delivery (both pipelines) goes through it; the delivery, answer and hostile-receiver
suites cover partial success, stalls and huge answers through the CLI. These drive the sender
directly against a receiver that fails the first exports as scripted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.export._grpc_transport import MAX_ATTEMPTS, GrpcSpanSender
from rulvar_otel.export._transport import DeliveryInterrupt, DeliveryInterruptedError, Rejections
from tests._support import ScriptedGrpcReceiver, closed_port

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
Spans = Sequence[ReadableSpan]


@pytest.fixture(scope="module")
def spans() -> Sequence[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for name in ("one", "two", "three"):
        tracer.start_span(name).end()
    provider.shutdown()
    return memory.get_finished_spans()


def sender(endpoint: str, *, timeout_s: float = 10.0, **kwargs: object) -> GrpcSpanSender:
    return GrpcSpanSender(
        endpoint,
        headers=kwargs.pop("headers", {}),  # type: ignore[arg-type]
        timeout_s=timeout_s,
        gzip=False,
        rejections=kwargs.pop("rejections", Rejections()),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_batch_is_delivered_with_lowercased_headers_and_the_user_agent(
    spans: Sequence[ReadableSpan],
) -> None:
    with ScriptedGrpcReceiver([]) as receiver:
        exporter = sender(receiver.endpoint, headers={"X-Tenant": "acme", "authorization": "Bearer t"})
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    [(metadata, count)] = receiver.calls
    assert count == 3
    assert metadata["x-tenant"] == "acme"
    assert metadata["authorization"] == "Bearer t"
    assert "rulvar-otel/" in metadata["user-agent"]
    assert exporter.error is None


def test_the_receivers_retry_delay_is_waited_and_the_batch_then_delivered(
    spans: Sequence[ReadableSpan],
) -> None:
    script = [(EXHAUSTED, "slow down", 0.05), (UNAVAILABLE, "restarting", 0.05)]
    with ScriptedGrpcReceiver(script) as receiver:
        exporter = sender(receiver.endpoint)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert [count for _, count in receiver.calls] == [3, 3, 3]
    assert exporter.error is None


def test_a_transient_failure_without_a_delay_is_retried_on_the_librarys_schedule(
    spans: Sequence[ReadableSpan],
) -> None:
    with ScriptedGrpcReceiver([(UNAVAILABLE, "restarting", None)]) as receiver:
        exporter = sender(receiver.endpoint)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert len(receiver.calls) == 2


def test_a_permanent_status_fails_at_once_and_names_its_code_and_details(
    spans: Sequence[ReadableSpan],
) -> None:
    with ScriptedGrpcReceiver(
        [(grpc.StatusCode.PERMISSION_DENIED, "tenant acme is read-only", None)]
    ) as receiver:
        exporter = sender(receiver.endpoint)
        assert exporter.export(spans) is SpanExportResult.FAILURE
        exporter.shutdown()
    assert len(receiver.calls) == 1
    assert exporter.error == "PERMISSION_DENIED after 1 attempt: tenant acme is read-only"


def test_a_retry_delay_past_the_deadline_ends_the_attempts(spans: Spans) -> None:
    with ScriptedGrpcReceiver([(EXHAUSTED, "come back in a minute", 60.0)]) as receiver:
        exporter = sender(receiver.endpoint, timeout_s=5.0)
        assert exporter.export(spans) is SpanExportResult.FAILURE
        exporter.shutdown()
    assert len(receiver.calls) == 1
    assert exporter.error is not None and exporter.error.startswith("RESOURCE_EXHAUSTED after 1 attempt")


def test_a_last_attempt_cut_by_the_deadline_still_names_the_first_failure(spans: Spans) -> None:
    script = [
        (EXHAUSTED, "received message larger than max", 0.05),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", None),
    ]
    with ScriptedGrpcReceiver(script) as receiver:
        exporter = sender(receiver.endpoint, timeout_s=1.5)
        assert exporter.export(spans) is SpanExportResult.FAILURE
        exporter.shutdown()
    assert len(receiver.calls) == 2
    assert exporter.error == (
        "DEADLINE_EXCEEDED after 2 attempts: Deadline Exceeded "
        "(first attempt: RESOURCE_EXHAUSTED: received message larger than max)"
    )


def test_attempts_stop_at_the_librarys_limit(spans: Spans) -> None:
    with ScriptedGrpcReceiver([(UNAVAILABLE, "down", 0.01)], fail_forever=True) as receiver:
        exporter = sender(receiver.endpoint)
        assert exporter.export(spans) is SpanExportResult.FAILURE
        exporter.shutdown()
    assert len(receiver.calls) == MAX_ATTEMPTS
    assert exporter.error is not None and exporter.error.startswith(
        f"UNAVAILABLE after {MAX_ATTEMPTS} attempts"
    )


def test_shutdown_during_a_wait_between_attempts_ends_the_export(spans: Spans) -> None:
    with ScriptedGrpcReceiver([(UNAVAILABLE, "down", 20.0)], fail_forever=True) as receiver:
        exporter = sender(receiver.endpoint, timeout_s=60.0)
        results: list[SpanExportResult] = []
        worker = threading.Thread(target=lambda: results.append(exporter.export(spans)))
        worker.start()
        while not receiver.calls and worker.is_alive():
            worker.join(0.01)
        exporter.shutdown()
        worker.join(10)
    assert not worker.is_alive()
    assert results == [SpanExportResult.FAILURE]
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert len(receiver.calls) == 1


def test_an_interrupt_that_was_cut_fails_the_export_before_sending(spans: Spans) -> None:
    interrupt = DeliveryInterrupt()
    interrupt.interrupt(0.0)
    assert interrupt.cut.wait(5)
    with ScriptedGrpcReceiver([]) as receiver:
        exporter = sender(receiver.endpoint, interrupt=interrupt)
        with pytest.raises(DeliveryInterruptedError):
            exporter.export(spans)
        exporter.shutdown()
    assert receiver.calls == []


def test_an_unreadable_ca_file_fails_a_tls_export_naming_the_file(
    spans: Sequence[ReadableSpan], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-ca.pem"
    exporter = sender(f"https://127.0.0.1:{closed_port()}", verify=str(missing))
    assert exporter.export(spans) is SpanExportResult.FAILURE
    assert exporter.error is not None and str(missing) in exporter.error
    exporter.shutdown()


def test_a_plaintext_endpoint_never_reads_the_tls_files(
    spans: Sequence[ReadableSpan], tmp_path: Path
) -> None:
    with ScriptedGrpcReceiver([]) as receiver:
        exporter = sender(
            receiver.endpoint, verify=str(tmp_path / "absent.pem"), cert=str(tmp_path / "absent.crt")
        )
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
    assert len(receiver.calls) == 1
