"""Figure 12: the direct path's OTLP/HTTP (protobuf) export against its OTLP/gRPC export.

Both cases read ``large.jsonl``, map it on the direct path and export into a real receiver in
this process (``tests/_support/_receivers.py``), through the exporters the CLI builds
(``resolve_destinations(..., direct=True)``: the bounded HTTP transport, the gRPC answer
accounting). Every round must deliver every span and span event, and both transports must have
delivered the same spans.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._report import Figure, rate

__all__ = ["bench_http"]


def _counts(requests: list[Any]) -> tuple[int, int]:
    spans = events = 0
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans += len(scope_spans.spans)
                events += sum(len(span.events) for span in scope_spans.spans)
    return spans, events


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
    from tests._support import GrpcTraceReceiver, HttpTraceReceiver

    script, _ = capture(load_stream(stream))
    spans, span_events = len(script.spans), script.span_events
    n = sum(1 for line in stream.read_bytes().splitlines() if line.strip())

    with GrpcTraceReceiver() as grpc_receiver, HttpTraceReceiver() as http_receiver:
        receivers = {"grpc": grpc_receiver, "http": http_receiver}
        make = {
            "grpc": _exporter_for(grpc_receiver.endpoint, "grpc", compression),
            "http": _exporter_for(http_receiver.endpoint, "http/protobuf", compression),
        }
        taken: dict[str, list[list[Any]]] = {"grpc": [], "http": []}

        def case(name: str) -> Callable[[], object]:
            receiver, exporter = receivers[name], make[name]

            def run() -> object:
                result = direct_run(stream, exporter)
                # Set aside here, counted after timing: what arrived is checked per round.
                with receiver._lock:
                    taken[name].append(receiver.requests)
                    receiver.requests = []
                return result

            return run

        t = interleaved({"grpc": case("grpc"), "http": case("http")}, rounds)
    seen = {name: [_counts(requests) for requests in per_round] for name, per_round in taken.items()}
    complete = all(c == (spans, span_events) for c in seen["grpc"] + seen["http"])
    ratio = t.ratio("http", "grpc")
    shown = "" if compression == "none" else f", {compression}"
    return [
        Figure(
            "http",
            f"direct path, parse + map + export over OTLP/HTTP protobuf{shown} to a receiver in this "
            f"process (every round {'received' if complete else 'did NOT receive'} all {spans} spans, "
            f"{span_events} span events)",
            rate(n, t.median("http")),
            f"OTLP/gRPC{shown} {t.median('grpc') * 1e3:8.1f} ms",
            ratio,
            "<= 1.10 x OTLP/gRPC, zero dropped",
            ratio <= 1.1 and complete,
            [] if complete else [f"received per round: grpc {seen['grpc']}, http {seen['http']}"],
        )
    ]
