"""Figures 1-3, in process over the parsed stream: parse + map on a no-op tracer, the exporter over
the SDK floor (the same spans made without the mapping), and the cost of metrics beside traces.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson

from benchmarks._report import Figure, load_stream, rate

__all__ = ["bench_floor", "bench_metrics", "bench_parse"]


def bench_parse(stream: Path, rounds: int) -> list[Figure]:
    import json as stdlib_json

    from opentelemetry.trace import NoOpTracer

    from benchmarks._timing import interleaved
    from rulvar_otel.otel import export_events
    from rulvar_otel.sources.jsonl import JsonlEventSource

    tracer = NoOpTracer()
    events = sum(1 for line in stream.read_bytes().splitlines() if line.strip())

    def stdlib_loads() -> None:
        loads = stdlib_json.loads
        with stream.open("rb") as handle:
            for line in handle:
                loads(line)

    def orjson_loads() -> None:
        loads = orjson.loads
        with stream.open("rb") as handle:
            for line in handle:
                loads(line)

    def parse_and_map() -> None:
        with JsonlEventSource(stream) as source:
            export_events(source, tracer)

    def orjson_parse_and_map() -> None:
        loads = orjson.loads
        with stream.open("rb") as handle:
            export_events((loads(line) for line in handle if line.strip()), tracer)

    def stdlib_parse_and_map() -> None:
        loads = stdlib_json.loads
        with stream.open("rb") as handle:
            export_events((loads(line) for line in handle if line.strip()), tracer)

    t = interleaved(
        {
            "json.loads": stdlib_loads,
            "orjson.loads": orjson_loads,
            "parse+map": parse_and_map,
            "json.loads+map": stdlib_parse_and_map,
            "orjson+map": orjson_parse_and_map,
        },
        rounds,
    )
    base = f"json.loads {rate(events, t.median('json.loads'))}"
    ratio = t.ratio("parse+map", "json.loads")
    return [
        Figure(
            "parse+map",
            f"parse+map, no-op tracer ({events} events, orjson source)",
            rate(events, t.median("parse+map")),
            base,
            ratio,
            "<= 1.50 x json.loads",
            ratio <= 1.5,
        ),
        Figure(
            "parse+map",
            "same without the JSONL source's envelope checks (bare orjson.loads loop)",
            rate(events, t.median("orjson+map")),
            base,
            t.ratio("orjson+map", "json.loads"),
        ),
        Figure(
            "parse+map",
            "same, parsed with stdlib json.loads instead",
            rate(events, t.median("json.loads+map")),
            base,
            t.ratio("json.loads+map", "json.loads"),
        ),
        Figure(
            "parse+map",
            "orjson.loads alone (the parser the source uses)",
            rate(events, t.median("orjson.loads")),
            base,
            t.ratio("orjson.loads", "json.loads"),
        ),
        Figure(
            "parse+map",
            "map only (parse+map minus orjson.loads)",
            f"{(t.median('parse+map') - t.median('orjson.loads')) * 1e3:8.1f} ms",
        ),
    ]


def bench_floor(stream: Path, rounds: int) -> tuple[list[Figure], int, int]:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from benchmarks._floor import capture, new_tracer, replay, signature
    from benchmarks._timing import interleaved
    from rulvar_otel.otel import export_events

    events = load_stream(stream)
    script, captured = capture(events)
    # The floor must make the very spans the exporter makes, or the ratio means nothing.
    memory = InMemorySpanExporter()
    provider, tracer = new_tracer(memory)
    replay(script, tracer)
    provider.shutdown()
    identical = signature(memory.get_finished_spans()) == signature(captured)
    if not identical:
        raise SystemExit("benchmark error: the floor's spans differ from the exporter's")

    _, floor_tracer = new_tracer()
    _, export_tracer = new_tracer()
    t = interleaved(
        {
            "floor": lambda: replay(script, floor_tracer),
            "exporter": lambda: export_events(events, export_tracer),
        },
        rounds,
    )
    ratio = t.ratio("exporter", "floor")
    n = len(events)
    figures = [
        Figure(
            "sdk floor",
            f"exporter, real SDK, pre-parsed ({n} events -> {len(script.spans)} spans, "
            f"{script.span_events} span events)",
            rate(n, t.median("exporter")),
            f"floor {t.median('floor') * 1e3:8.1f} ms",
            ratio,
            "<= 1.25 x floor",
            ratio <= 1.25,
            ["floor verified: same spans, parents, attributes, events, times, status"],
        )
    ]
    return figures, len(script.spans), script.span_events


def bench_metrics(stream: Path, rounds: int) -> list[Figure]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from benchmarks._floor import capture_metrics, new_tracer, replay_calls, replay_metrics
    from benchmarks._timing import interleaved
    from rulvar_otel.otel import export_events

    events = load_stream(stream)
    _, tracer = new_tracer()
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("rulvar-otel-bench")
    # The SDK's own share: the very instrument calls the recorder makes, made directly.
    captured = capture_metrics(events)
    floor_meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("rulvar-otel-floor")
    floor_calls = replay_metrics(captured, floor_meter)
    t = interleaved(
        {
            "traces": lambda: export_events(events, tracer),
            "traces+metrics": lambda: export_events(events, tracer, meter=meter),
            "metrics floor": lambda: replay_calls(floor_calls),
        },
        rounds,
    )
    data = reader.get_metrics_data()
    metrics = sum(
        len(sm.metrics) for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
    )
    n = len(events)
    # What this package adds: traces + metrics against traces plus the SDK's own instrument calls,
    # round by round (the SDK's share is the host's meter's cost, whoever makes the calls).
    rounds_seen = zip(
        t.seconds["traces+metrics"], t.seconds["traces"], t.seconds["metrics floor"], strict=True
    )
    ours = statistics.median(both / (traces + floor) for both, traces, floor in rounds_seen)
    floor_ms, traces_ms = t.median("metrics floor") * 1e3, t.median("traces") * 1e3
    return [
        Figure(
            "metrics",
            f"traces + metrics in one pass, real SDK ({metrics} metric streams recorded), against "
            "traces only plus the SDK's own instrument calls",
            rate(n, t.median("traces+metrics")),
            f"traces {traces_ms:6.1f} + SDK calls {floor_ms:6.1f} ms",
            ours,
            "<= 1.15 x (traces only + SDK calls)",
            ours <= 1.15,
        ),
        Figure(
            "metrics",
            "the same against traces only (at least 1 + the SDK calls' share below)",
            rate(n, t.median("traces+metrics")),
            f"traces only {traces_ms:8.1f} ms",
            t.ratio("traces+metrics", "traces"),
        ),
        Figure(
            "metrics",
            f"SDK metrics floor: the recorder's {len(floor_calls)} instrument calls made directly (no "
            "folds), as a share of traces only",
            f"{floor_ms:8.1f} ms",
            f"traces only {traces_ms:8.1f} ms",
            t.ratio("metrics floor", "traces"),
        ),
    ]
