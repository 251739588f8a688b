"""End to end: ``rulvar-otel export STREAM --endpoint ...`` into a real OTLP/gRPC receiver on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests._support import GrpcTraceReceiver

__all__ = ["E2EResult", "export_to_receiver"]

_CLI = "from rulvar_otel.cli import main; main()"


@dataclass(frozen=True)
class E2EResult:
    seconds: float
    exit_code: int
    spans: int
    span_events: int
    dropped_events: int
    dropped_attributes: int
    stderr_tail: str


def export_to_receiver(stream: Path, *, pipeline: str = "direct", timeout: float = 300.0) -> E2EResult:
    """Run the CLI in a fresh process (start-up included in the wall time) and count what arrived."""
    with GrpcTraceReceiver() as receiver:
        start = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _CLI,
                "export",
                str(stream),
                "--endpoint",
                receiver.endpoint,
                "--protocol",
                "grpc",
                "--progress",
                "off",
                "--no-tree",
                "--pipeline",
                pipeline,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        seconds = time.perf_counter() - start
        received = receiver.spans()
    return E2EResult(
        seconds=seconds,
        exit_code=done.returncode,
        spans=len(received),
        span_events=sum(len(r.span.events) for r in received),
        dropped_events=sum(r.span.dropped_events_count for r in received),
        dropped_attributes=sum(r.span.dropped_attributes_count for r in received)
        + sum(e.dropped_attributes_count for r in received for e in r.span.events),
        stderr_tail=done.stderr[-2000:],
    )
