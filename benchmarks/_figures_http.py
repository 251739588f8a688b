"""Figure 12: the direct path's OTLP/HTTP (protobuf) export against its OTLP/gRPC export.

Both cases read ``large.jsonl``, map it on the direct path and export through the exporters the
CLI builds (``resolve_destinations(..., direct=True)``: the bounded HTTP transport, the gRPC
answer accounting) into real receivers (``tests/_support/_receivers.py``) running in a child
process, as a collector runs beside an exporter: in this process, the HTTP receiver's Python
request parsing would take the GIL from the exporter and be timed as the exporter's cost. Every
round must deliver every span and span event, and both transports must have delivered the same
spans.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._report import REPO, Figure, rate

__all__ = ["bench_http"]


# The child: both receivers; each stdin line names one, answered with what it received since.
_RECEIVERS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tests._support import GrpcTraceReceiver, HttpTraceReceiver

def counts(requests):
    spans = events = 0
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans += len(scope_spans.spans)
                events += sum(len(span.events) for span in scope_spans.spans)
    return [spans, events]

with GrpcTraceReceiver() as grpc_receiver, HttpTraceReceiver() as http_receiver:
    receivers = {"grpc": grpc_receiver, "http": http_receiver}
    print(json.dumps({name: r.endpoint for name, r in receivers.items()}), flush=True)
    for line in sys.stdin:
        receiver = receivers[line.strip()]
        with receiver._lock:
            requests, receiver.requests = receiver.requests, []
        print(json.dumps(counts(requests)), flush=True)
"""


class _Receivers:
    """The child process holding both receivers."""

    def __init__(self) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-c", _RECEIVERS, str(REPO)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.endpoints: dict[str, str] = json.loads(self._read())

    def _read(self) -> str:
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError(f"the receivers' process ended (exit {self._child.wait(10)})")
        return line

    def take(self, name: str) -> tuple[int, int]:
        """What ``name``'s receiver got since the last take: (spans, span events)."""
        assert self._child.stdin is not None
        self._child.stdin.write(name + "\n")
        self._child.stdin.flush()
        spans, events = json.loads(self._read())
        return spans, events

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        try:
            self._child.wait(10)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait(10)


def _exporter_for(endpoint: str, protocol: str, compression: str) -> Callable[[], Any]:
    from rulvar_otel.export import ExportOptions
    from rulvar_otel.export._traces import resolve_destinations

    options = ExportOptions(endpoint=endpoint, protocol=protocol)
    environ = {"OTEL_EXPORTER_OTLP_COMPRESSION": compression}

    def make() -> Any:
        (exporter,) = resolve_destinations(options, environ=environ, direct=True).exporters
        return exporter

    return make


def bench_http(stream: Path, rounds: int, *, compression: str = "none") -> list[Figure]:
    from benchmarks._direct import direct_run
    from benchmarks._floor import capture
    from benchmarks._report import load_stream
    from benchmarks._timing import interleaved

    script, _ = capture(load_stream(stream))
    spans, span_events = len(script.spans), script.span_events
    n = sum(1 for line in stream.read_bytes().splitlines() if line.strip())

    receivers = _Receivers()
    try:
        make = {name: _exporter_for(receivers.endpoints[name], protocol, compression) for name, protocol in
                (("grpc", "grpc"), ("http", "http/protobuf"))}  # fmt: skip
        taken: dict[str, list[tuple[int, int]]] = {"grpc": [], "http": []}

        def case(name: str) -> Callable[[], object]:
            exporter = make[name]

            def run() -> object:
                result = direct_run(stream, exporter)
                # Every request was answered before the export returned: the receiver holds them.
                taken[name].append(receivers.take(name))
                return result

            return run

        t = interleaved({"grpc": case("grpc"), "http": case("http")}, rounds)
    finally:
        receivers.close()
    complete = all(c == (spans, span_events) for c in taken["grpc"] + taken["http"])
    ratio = t.ratio("http", "grpc")
    shown = "" if compression == "none" else f", {compression}"
    return [
        Figure(
            "http",
            f"direct path, parse + map + export over OTLP/HTTP protobuf{shown} to a receiver in another "
            f"process (every round {'received' if complete else 'did NOT receive'} all {spans} spans, "
            f"{span_events} span events)",
            rate(n, t.median("http")),
            f"OTLP/gRPC{shown} {t.median('grpc') * 1e3:8.1f} ms",
            ratio,
            "<= 1.10 x OTLP/gRPC, zero dropped",
            ratio <= 1.1 and complete,
            [] if complete else [f"received per round: grpc {taken['grpc']}, http {taken['http']}"],
        )
    ]
