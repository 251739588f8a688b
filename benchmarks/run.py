"""The benchmark command: ``python -m benchmarks`` (``--quick`` for a smoke run, ``--help`` for the rest).

Every figure is printed beside a baseline measured in the same process run, interleaved round by
round, with the median of the per-round ratios; see docs/benchmarks.md for what each one means.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Figure", "main"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STREAM = REPO / "tests" / "fixtures" / "reference" / "streams" / "large.jsonl"
CACHE = Path(tempfile.gettempdir()) / "rulvar-otel-bench"


@dataclass
class Figure:
    """One row of the table: a measured figure, its in-run baseline, their ratio and the target."""

    section: str
    name: str
    value: str
    baseline: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "value": self.value,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "target": self.target,
            "met": self.met,
            "notes": self.notes,
        }


def _rate(events: int, seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms  {events / seconds / 1e3:6.1f}k ev/s"


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# --- 1. parse + map ------------------------------------------------------------------------------


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
    base = f"json.loads {_rate(events, t.median('json.loads'))}"
    ratio = t.ratio("parse+map", "json.loads")
    return [
        Figure(
            "parse+map",
            f"parse+map, no-op tracer ({events} events, orjson source)",
            _rate(events, t.median("parse+map")),
            base,
            ratio,
            "<= 1.50 x json.loads",
            ratio <= 1.5,
        ),
        Figure(
            "parse+map",
            "same without the JSONL source's envelope checks (bare orjson.loads loop)",
            _rate(events, t.median("orjson+map")),
            base,
            t.ratio("orjson+map", "json.loads"),
        ),
        Figure(
            "parse+map",
            "same, parsed with stdlib json.loads instead",
            _rate(events, t.median("json.loads+map")),
            base,
            t.ratio("json.loads+map", "json.loads"),
        ),
        Figure(
            "parse+map",
            "orjson.loads alone (the parser the source uses)",
            _rate(events, t.median("orjson.loads")),
            base,
            t.ratio("orjson.loads", "json.loads"),
        ),
        Figure(
            "parse+map",
            "map only (parse+map minus orjson.loads)",
            f"{(t.median('parse+map') - t.median('orjson.loads')) * 1e3:8.1f} ms",
        ),
    ]


# --- 2. SDK floor, 3. metrics ----------------------------------------------------------------------


def _load(stream: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.read_bytes().splitlines() if line.strip()]


def bench_floor(stream: Path, rounds: int) -> tuple[list[Figure], int, int]:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from benchmarks._floor import capture, new_tracer, replay, signature
    from benchmarks._timing import interleaved
    from rulvar_otel.otel import export_events

    events = _load(stream)
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
            _rate(n, t.median("exporter")),
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

    from benchmarks._floor import new_tracer
    from benchmarks._timing import interleaved
    from rulvar_otel.otel import export_events

    events = _load(stream)
    _, tracer = new_tracer()
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("rulvar-otel-bench")
    t = interleaved(
        {
            "traces": lambda: export_events(events, tracer),
            "traces+metrics": lambda: export_events(events, tracer, meter=meter),
        },
        rounds,
    )
    data = reader.get_metrics_data()
    metrics = sum(
        len(sm.metrics) for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
    )
    ratio = t.ratio("traces+metrics", "traces")
    n = len(events)
    return [
        Figure(
            "metrics",
            f"traces + metrics in one pass, real SDK ({metrics} metric streams recorded)",
            _rate(n, t.median("traces+metrics")),
            f"traces only {t.median('traces') * 1e3:8.1f} ms",
            ratio,
            "<= 1.15 x traces only",
            ratio <= 1.15,
        )
    ]


# --- 6. the direct path ----------------------------------------------------------------------------


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

    script, _ = capture(_load(stream))
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
            _rate(n, t.median("direct")),
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
            "direct path, traces + metrics in one pass (the fold aggregates; OTLP-encoded once at the end)",
            _rate(n, t.median("traces+metrics")),
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
            _rate(n, t.median("direct")),
            f"SDK path {t.median('sdk') * 1e3:8.1f} ms",
            ratio,
            "<= 0.50 x SDK path, zero dropped",
            ratio <= 0.5 and complete,
            [] if complete else [f"received per round: sdk {seen['sdk']}, direct {seen['direct']}"],
        )
    )
    return figures


# --- 4. scale --------------------------------------------------------------------------------------


def _scale_point(stream: Path, events: int, tracer: str) -> dict[str, Any]:
    from benchmarks._scale import generate

    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    path = generate(stream, events, CACHE / f"{stream.stem}-{events}.jsonl")
    _say(f"  stream of {events} events ready ({time.perf_counter() - started:.1f} s); exporting ({tracer})")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks._scale", str(path), "--baseline", str(stream), "--tracer", tracer],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    if done.returncode != 0:
        raise SystemExit(f"scale worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_TRACER_NAMES = {"noop": "no-op tracer", "sdk": "real SDK", "direct": "direct path, OTLP-encoded"}


def bench_scale(
    stream: Path, points: Sequence[int], tracers: Sequence[str], target_events: int
) -> list[Figure]:
    import statistics

    figures: list[Figure] = []
    fits: dict[str, list[tuple[int, float]]] = {}
    for tracer in tracers:
        for events in points:
            r = _scale_point(stream, events, tracer)
            base_seconds = statistics.median(r["baseline_seconds"])
            base_rate = r["baseline_events"] / base_seconds
            rate = r["events"] / r["seconds"]
            growth_mb = (r["peak_kb"] - r["rss_before_kb"]) / 1024
            relative = rate / base_rate
            judged = events == target_events
            fits.setdefault(tracer, []).append((r["events"], r["seconds"]))
            notes = [] if r["peak_reset"] else ["peak RSS mark could not be reset: growth is an upper bound"]
            figures.append(
                Figure(
                    "scale",
                    f"{events} events, {_TRACER_NAMES.get(tracer, tracer)}: "
                    f"total {r['seconds']:.2f} s, peak RSS growth {growth_mb:.1f} MB",
                    f"{rate / 1e3:6.1f}k ev/s",
                    f"{stream.stem} {base_rate / 1e3:6.1f}k ev/s",
                    relative,
                    ">= 0.90 x, <= 64 MB" if judged else "",
                    (relative >= 0.9 and growth_mb <= 64) if judged else None,
                    notes,
                )
            )
    for tracer, fit in fits.items():
        if len(fit) >= 3:
            n = len(fit)
            mean_x = sum(x for x, _ in fit) / n
            mean_y = sum(y for _, y in fit) / n
            sxx = sum((x - mean_x) ** 2 for x, _ in fit)
            slope = sum((x - mean_x) * (y - mean_y) for x, y in fit) / sxx
            intercept = mean_y - slope * mean_x
            ss_tot = sum((y - mean_y) ** 2 for _, y in fit)
            ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in fit)
            r2 = 1 - ss_res / ss_tot if ss_tot else 1.0
            figures.append(
                Figure(
                    "scale",
                    f"linear fit over {n} points ({tracer}): seconds = a + b * events",
                    f"b = {slope * 1e6:.2f} us/event, a = {intercept * 1e3:.0f} ms",
                    "",
                    None,
                    "R^2 " + f"{r2:.4f}",
                )
            )
    return figures


# --- 5. end to end ---------------------------------------------------------------------------------


def bench_e2e(stream: Path, spans: int, span_events: int) -> list[Figure]:
    from benchmarks._e2e import export_to_receiver

    figures: list[Figure] = []
    results = {pipeline: export_to_receiver(stream, pipeline=pipeline) for pipeline in ("direct", "sdk")}
    for pipeline, r in results.items():
        complete = (
            r.exit_code == 0
            and r.spans == spans
            and r.span_events == span_events
            and r.dropped_events == 0
            and r.dropped_attributes == 0
        )
        notes = [] if r.exit_code == 0 else [f"CLI exit {r.exit_code}: {r.stderr_tail}"]
        other = results["sdk"]
        figures.append(
            Figure(
                "end to end",
                f"rulvar-otel export --pipeline {pipeline} -> OTLP/gRPC on 127.0.0.1: {r.spans}/{spans} "
                f"spans, {r.span_events}/{span_events} span events, {r.dropped_events} dropped",
                f"{r.seconds * 1e3:8.1f} ms wall",
                "(process start-up included)"
                + (f"; --pipeline sdk {other.seconds * 1e3:8.1f} ms" if pipeline == "direct" else ""),
                r.seconds / other.seconds if pipeline == "direct" else None,
                "zero dropped",
                complete,
                notes,
            )
        )
    return figures


# --- the command -----------------------------------------------------------------------------------


def _table(figures: Sequence[Figure]) -> str:
    lines: list[str] = []
    section = ""
    for f in figures:
        if f.section != section:
            section = f.section
            lines.append(f"\n== {section} ==")
        verdict = "" if f.met is None else ("  [met]" if f.met else "  [MISSED]")
        ratio = f"  ratio {f.ratio:5.2f}" if f.ratio is not None else ""
        target = f"  target {f.target}" if f.target else ""
        lines.append(f"- {f.name}")
        lines.append(f"    {f.value}" + (f"  | baseline: {f.baseline}" if f.baseline else "") + ratio)
        if target or verdict:
            lines.append(f"   {target}{verdict}")
        lines.extend(f"    note: {note}" for note in f.notes)
    return "\n".join(lines)


def _int_list(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="rulvar-otel benchmarks, each figure beside an in-run baseline.",
    )
    parser.add_argument(
        "--stream", type=Path, default=DEFAULT_STREAM, help="stream to measure (default: large)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: few rounds, small scale points")
    parser.add_argument("--rounds", type=int, help="rounds per interleaved figure (default 15, quick 3)")
    parser.add_argument(
        "--scale",
        type=_int_list,
        help="scale points in events (default 100000,300000,1000000; quick 5000,10000,20000; add 10000000)",
    )
    parser.add_argument(
        "--scale-tracers",
        default="noop,sdk,direct",
        help="paths for the scale points: noop, sdk, direct (default all three)",
    )
    parser.add_argument(
        "--only",
        default="parse,floor,metrics,direct,scale,e2e",
        help="comma-separated sections to run (default all)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    stream: Path = args.stream
    if not stream.is_file():
        parser.error(f"no stream at {stream} (the reference corpus lives in tests/fixtures/reference)")
    rounds = args.rounds or (3 if args.quick else 15)
    # Three points by default, so the linear fit has something to prove (two points fit any line).
    points = args.scale or ([5_000, 10_000, 20_000] if args.quick else [100_000, 300_000, 1_000_000])
    target_events = 1_000_000
    sections = {s.strip() for s in args.only.split(",")}
    tracers = [t.strip() for t in args.scale_tracers.split(",") if t.strip()]

    figures: list[Figure] = []
    steps: list[tuple[str, Callable[[], list[Figure]]]] = []
    spans_and_events: list[int] = []

    def floor_step() -> list[Figure]:
        out, spans, events = bench_floor(stream, rounds)
        spans_and_events.extend([spans, events])
        return out

    def e2e_step() -> list[Figure]:
        if not spans_and_events:
            from benchmarks._floor import capture

            script, _ = capture(_load(stream))
            spans_and_events.extend([len(script.spans), script.span_events])
        return bench_e2e(stream, spans_and_events[0], spans_and_events[1])

    if "parse" in sections:
        steps.append(("parse + map, no-op tracer", lambda: bench_parse(stream, rounds)))
    if "floor" in sections:
        steps.append(("SDK floor ratio", floor_step))
    if "metrics" in sections:
        steps.append(("metrics overhead", lambda: bench_metrics(stream, rounds)))
    if "direct" in sections:
        steps.append(("direct path", lambda: bench_direct(stream, rounds)))
    if "scale" in sections:
        steps.append(("scale", lambda: bench_scale(stream, points, tracers, target_events)))
    if "e2e" in sections:
        steps.append(("end to end", e2e_step))

    _say(f"rulvar-otel benchmarks on {stream} ({rounds} rounds, medians; python {sys.version.split()[0]})")
    for title, step in steps:
        _say(f"running: {title} ...")
        started = time.perf_counter()
        figures.extend(step())
        _say(f"  done in {time.perf_counter() - started:.1f} s")

    sys.stdout.write(_table(figures).lstrip("\n") + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps([f.as_json() for f in figures], indent=2) + "\n")
    missed = [f for f in figures if f.met is False]
    return 1 if (args.check and missed) else 0
