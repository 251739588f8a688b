"""Figures 6-8: the direct export path against the SDK path (file, OTLP/gRPC receiver, with metrics)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._report import Figure, load_stream, rate

__all__ = ["bench_direct"]


def _file_counts(path: Path) -> tuple[int, int]:
    from rulvar_otel.export import iter_otlp_json_file

    spans = events = 0
    for request in iter_otlp_json_file(path):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans += len(scope_spans.spans)
                events += sum(len(span.events) for span in scope_spans.spans)
    return spans, events


def _request_counts(requests: list[Any]) -> tuple[int, int]:
    spans = events = 0
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans += len(scope_spans.spans)
                events += sum(len(span.events) for span in scope_spans.spans)
    return spans, events


def bench_direct(stream: Path, rounds: int) -> list[Figure]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from benchmarks._direct import direct_run, file_exporter, sdk_run, temp_directory
    from benchmarks._floor import capture
    from benchmarks._timing import interleaved
    from rulvar_otel.otel.direct import grpc_span_exporter
    from tests._support import GrpcTraceReceiver

    script, _ = capture(load_stream(stream))
    spans, span_events = len(script.spans), script.span_events
    n = sum(1 for line in stream.read_bytes().splitlines() if line.strip())
    figures: list[Figure] = []

    with temp_directory() as tmp:
        directory = Path(tmp)
        to_sdk_file = file_exporter(directory, "sdk.otlp.jsonl")
        to_direct_file = file_exporter(directory, "direct.otlp.jsonl")
        t = interleaved(
            {
                "sdk": lambda: sdk_run(stream, to_sdk_file),
                "direct": lambda: direct_run(stream, to_direct_file),
            },
            rounds,
        )
        sdk_counts = _file_counts(directory / "sdk.otlp.jsonl")
        direct_counts = _file_counts(directory / "direct.otlp.jsonl")
    complete = sdk_counts == direct_counts == (spans, span_events)
    ratio = t.ratio("direct", "sdk")
    figures.append(
        Figure(
            "direct path",
            f"parse + map + OTLP encode + write the OTLP/JSON file, direct path ({direct_counts[0]}/{spans} "
            f"spans, {direct_counts[1]}/{span_events} span events in the file)",
            rate(n, t.median("direct")),
            f"SDK path {t.median('sdk') * 1e3:8.1f} ms",
            ratio,
            "<= 0.40 x SDK path",
            ratio <= 0.4 and complete,
            [] if complete else [f"file content differs: sdk {sdk_counts}, direct {direct_counts}"],
        )
    )

    from rulvar_otel.otel.direct_metrics import MetricsAggregator

    with temp_directory() as tmp:
        directory = Path(tmp)
        to_file = file_exporter(directory, "direct.otlp.jsonl")
        t = interleaved(
            {
                "traces": lambda: direct_run(stream, to_file),
                "traces+metrics": lambda: direct_run(stream, to_file, metrics=MetricsAggregator),
            },
            rounds,
        )
    ratio = t.ratio("traces+metrics", "traces")
    figures.append(
        Figure(
            "direct path",
            "direct path, traces + metrics in one pass (the fold aggregates, exemplars name the spans as "
            "in the CLI; OTLP-encoded once at the end)",
            rate(n, t.median("traces+metrics")),
            f"direct traces only {t.median('traces') * 1e3:8.1f} ms",
            ratio,
            "<= 1.15 x direct traces only",
            ratio <= 1.15,
        )
    )

    with GrpcTraceReceiver() as sdk_receiver, GrpcTraceReceiver() as direct_receiver:
        sdk_endpoint, direct_endpoint = sdk_receiver.endpoint, direct_receiver.endpoint
        taken: dict[str, list[list[Any]]] = {"sdk": [], "direct": []}

        def checked(name: str, receiver: Any, run: Callable[[], object]) -> Callable[[], object]:
            def case() -> object:
                result = run()
                # Only set aside here (counted after timing): what arrived is checked per round.
                with receiver._lock:
                    taken[name].append(receiver.requests)
                    receiver.requests = []
                return result

            return case

        t = interleaved(
            {
                "sdk": checked(
                    "sdk",
                    sdk_receiver,
                    lambda: sdk_run(stream, lambda: OTLPSpanExporter(endpoint=sdk_endpoint, insecure=True)),
                ),
                "direct": checked(
                    "direct",
                    direct_receiver,
                    lambda: direct_run(
                        stream, lambda: grpc_span_exporter(endpoint=direct_endpoint, insecure=True)
                    ),
                ),
            },
            rounds,
        )
    seen = {
        name: [_request_counts(requests) for requests in rounds_taken] for name, rounds_taken in taken.items()
    }
    complete = all(c == (spans, span_events) for c in seen["sdk"] + seen["direct"])
    ratio = t.ratio("direct", "sdk")
    figures.append(
        Figure(
            "direct path",
            "parse + map + export to a real OTLP/gRPC receiver in this process, direct path (every round "
            f"{'received' if complete else 'did NOT receive'} all {spans} spans, {span_events} span events)",
            rate(n, t.median("direct")),
            f"SDK path {t.median('sdk') * 1e3:8.1f} ms",
            ratio,
            "<= 0.50 x SDK path, zero dropped",
            ratio <= 0.5 and complete,
            [] if complete else [f"received per round: sdk {seen['sdk']}, direct {seen['direct']}"],
        )
    )
    return figures
