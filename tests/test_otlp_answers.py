"""What a receiver's answer means: only what it kept is exported, and every answer is bounded.

Real receivers on 127.0.0.1 answer with ``partial_success`` (HTTP and gRPC), a redirect, a body
trickling one byte a second, a gzip bomb, or never; ``rulvar-otel export`` runs against each on
both span pipelines and must say what was lost, exit 1, and end by its export timeout.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests._support import (
    REJECTION_MESSAGE,
    STREAMS,
    GrpcAnswer,
    HostileGrpcReceiver,
    HostileHttpReceiver,
    HttpAnswer,
    default_sigint,
    reference_span_count,
    rulvar_otel_command,
    run_cli,
)

PIPELINES = ["direct", "sdk"]
STREAM = "tools"


def _export(endpoint: str, protocol: str, pipeline: str, *extra: str) -> tuple[int, str, float]:
    started = time.monotonic()
    code, out, err = run_cli(
        "export",
        str(STREAMS / f"{STREAM}.jsonl"),
        "--endpoint",
        endpoint,
        "--protocol",
        protocol,
        "--pipeline",
        pipeline,
        "--progress",
        "off",
        "--no-tree",
        *extra,
    )
    return code, out + err, time.monotonic() - started


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_http_partial_success_rejecting_every_span_is_a_failed_export(pipeline: str) -> None:
    total = reference_span_count(STREAM)
    with HostileHttpReceiver(HttpAnswer.PARTIAL) as receiver:
        code, text, _ = _export(receiver.endpoint, "http/protobuf", pipeline)
    assert code == 1, text
    assert f"exported {total} spans" not in text
    assert f"{total} of {total} spans were not delivered" in text
    assert f"rejected {total} spans ({REJECTION_MESSAGE})" in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_grpc_partial_success_rejecting_every_span_is_a_failed_export(pipeline: str) -> None:
    total = reference_span_count(STREAM)
    with HostileGrpcReceiver(GrpcAnswer.PARTIAL) as receiver:
        code, text, _ = _export(receiver.endpoint, "grpc", pipeline)
    assert code == 1, text
    assert "exported" not in text
    assert f"{total} of {total} spans were not delivered" in text
    assert f"rejected {total} spans ({REJECTION_MESSAGE})" in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_partial_rejection_counts_only_the_kept_spans(protocol: str, pipeline: str) -> None:
    total = reference_span_count(STREAM)
    make = HostileGrpcReceiver if protocol == "grpc" else HostileHttpReceiver
    answer = GrpcAnswer.PARTIAL if protocol == "grpc" else HttpAnswer.PARTIAL
    with make(answer, rejected=3) as receiver:  # type: ignore[operator]
        code, text, _ = _export(receiver.endpoint, protocol, pipeline)
    assert code == 1, text
    assert "exported" not in text
    assert f"3 of {total} spans were not delivered" in text
    assert "rejected 3 spans" in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_an_http_redirect_is_not_a_delivery(pipeline: str) -> None:
    with HostileHttpReceiver(HttpAnswer.REDIRECT) as receiver:
        code, text, _ = _export(receiver.endpoint, "http/protobuf", pipeline)
        assert receiver.requests == 1  # not followed, not retried
    assert code == 1, text
    assert "HTTP 307" in text and "redirect" in text
    assert "exported" not in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_trickling_answer_ends_at_the_export_timeout(pipeline: str) -> None:
    with HostileHttpReceiver(HttpAnswer.TRICKLE) as receiver:
        code, text, elapsed = _export(receiver.endpoint, "http/protobuf", pipeline, "--export-timeout", "2")
    assert code == 1, text
    assert "did not answer within 2 s" in text
    # One export timeout (the first failure fails the rest at once) plus mapping and start-up.
    assert elapsed < 12, elapsed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_gzip_bomb_answer_is_not_inflated(pipeline: str) -> None:
    with HostileHttpReceiver(HttpAnswer.BOMB) as receiver:
        code, text, _ = _export(receiver.endpoint, "http/protobuf", pipeline)
    assert code == 1, text
    assert "inflates past 1048576 bytes" in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_stalled_grpc_receiver_ends_at_the_export_timeout(pipeline: str) -> None:
    with HostileGrpcReceiver(GrpcAnswer.STALL) as receiver:
        code, text, elapsed = _export(receiver.endpoint, "grpc", pipeline, "--export-timeout", "2")
    assert code == 1, text
    assert "exported" not in text
    assert elapsed < 12, elapsed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_metrics_partial_success_is_a_metrics_failure(protocol: str, tmp_path: Path) -> None:
    make = HostileGrpcReceiver if protocol == "grpc" else HostileHttpReceiver
    answer = GrpcAnswer.PARTIAL if protocol == "grpc" else HttpAnswer.PARTIAL
    with make(answer, rejected=5) as receiver:  # type: ignore[operator]
        code, out, err = run_cli(
            "export",
            str(STREAMS / f"{STREAM}.jsonl"),
            "--out",
            str(tmp_path / "spans.jsonl"),
            "--metrics-endpoint",
            receiver.endpoint,
            "--protocol",
            protocol,
            "--progress",
            "off",
            "--no-tree",
        )
    text = out + err
    assert code == 1, text
    assert "rejected 5 data points" in text and REJECTION_MESSAGE in text


def _start_stuck_export(endpoint: str, protocol: str, pipeline: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            rulvar_otel_command(),
            "export",
            str(STREAMS / "large.jsonl"),
            "--endpoint",
            endpoint,
            "--protocol",
            protocol,
            "--pipeline",
            pipeline,
            "--export-timeout",
            "60",
            "--progress",
            "off",
            "--no-tree",
        ],
        stdout=subprocess.PIPE,
        preexec_fn=default_sigint,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_request(receiver: HostileHttpReceiver | HostileGrpcReceiver, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with receiver.lock:
            if receiver.requests:
                return
        time.sleep(0.05)
    raise AssertionError("the export never reached the receiver")


def _receiver(protocol: str) -> HostileHttpReceiver | HostileGrpcReceiver:
    if protocol == "grpc":
        return HostileGrpcReceiver(GrpcAnswer.STALL)
    return HostileHttpReceiver(HttpAnswer.STALL)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("protocol", "pipeline"), [("grpc", "direct"), ("http/protobuf", "sdk")])
def test_one_ctrl_c_ends_an_export_stuck_on_a_stalled_receiver(protocol: str, pipeline: str) -> None:
    with _receiver(protocol) as receiver:
        process = _start_stuck_export(receiver.endpoint, protocol, pipeline)
        try:
            _wait_for_request(receiver)
            sent = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            process.kill()
    # The export timeout is 60 s: only the interrupt (a 2 s grace, then the cut) ends it this soon.
    assert took < 10, (took, err)
    assert process.returncode == 130, err  # interrupted, though spans were lost
    assert "spans were not delivered" in err and "interrupted" in err
    assert "Traceback" not in err


@pytest.mark.timeout(90)
def test_a_second_ctrl_c_exits_at_once() -> None:
    with _receiver("grpc") as receiver:
        process = _start_stuck_export(receiver.endpoint, "grpc", "direct")
        try:
            _wait_for_request(receiver)
            process.send_signal(signal.SIGINT)
            time.sleep(0.3)
            sent = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            process.kill()
    assert took < 3, (took, err)
    assert process.returncode == 130, err
    assert "Traceback" not in err


@pytest.mark.timeout(90)
def test_one_ctrl_c_ends_a_metrics_export_stuck_on_a_stalled_receiver(tmp_path: Path) -> None:
    with HostileGrpcReceiver(GrpcAnswer.STALL) as receiver:
        process = subprocess.Popen(
            [
                rulvar_otel_command(),
                "export",
                str(STREAMS / f"{STREAM}.jsonl"),
                "--out",
                str(tmp_path / "spans.jsonl"),
                "--metrics-endpoint",
                receiver.endpoint,
                "--protocol",
                "grpc",
                "--export-timeout",
                "60",
                "--progress",
                "off",
                "--no-tree",
            ],
            stdout=subprocess.PIPE,
            preexec_fn=default_sigint,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for_request(receiver)
            sent = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            process.kill()
    assert took < 10, (took, err)
    assert process.returncode == 130, err  # interrupted, though metrics were lost
    assert "interrupted before the receiver answered" in err
    assert "Traceback" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_a_grpc_answer_inflating_past_the_bound_is_refused_not_read(pipeline: str) -> None:
    """A gzip-compressed gRPC answer of kilobytes that inflates to 3 MiB: the channel's receive
    bound (1 MiB) refuses it; the export fails, nothing claims delivery."""
    with HostileGrpcReceiver(GrpcAnswer.HUGE) as receiver:
        code, text, elapsed = _export(receiver.endpoint, "grpc", pipeline, "--export-timeout", "3")
        assert receiver.requests >= 1
    assert code == 1, text
    assert "RESOURCE_EXHAUSTED" in text and "larger than max" in text
    assert "exported" not in text and "zzzz" not in text
    assert elapsed < 20, elapsed


@pytest.mark.timeout(60)
def test_a_grpc_metrics_answer_inflating_past_the_bound_is_a_metrics_failure(tmp_path: Path) -> None:
    with HostileGrpcReceiver(GrpcAnswer.HUGE) as receiver:
        code, out, err = run_cli(
            "export",
            str(STREAMS / f"{STREAM}.jsonl"),
            "--out",
            str(tmp_path / "spans.jsonl"),
            "--metrics-endpoint",
            receiver.endpoint,
            "--protocol",
            "grpc",
            "--export-timeout",
            "3",
            "--progress",
            "off",
            "--no-tree",
        )
    text = out + err
    assert code == 1, text
    assert "zzzz" not in text
