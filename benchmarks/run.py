"""The benchmark command: ``python -m benchmarks`` (``--quick`` for a smoke run, ``--help`` for the rest).

Every figure is printed beside a baseline measured in the same process run, interleaved round by
round, with the median of the per-round ratios; see docs/benchmarks.md for what each one means.

The figures live in ``_figures_mapping`` (1-3), ``_figures_scale`` (4-5) and ``_figures_direct``
(6-8), ``_figures_tail`` (9), ``_figures_startup`` (start-up and progress), ``_figures_http``
(OTLP/HTTP against OTLP/gRPC on the direct path), ``_figures_compiled`` (the mypyc build against
the pure sources); the rows and the table
in ``_report``. This module is the command line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks._build import BUILDS, Selected
from benchmarks._figures_compiled import bench_compiled
from benchmarks._figures_direct import bench_direct
from benchmarks._figures_http import bench_http
from benchmarks._figures_mapping import bench_floor, bench_metrics, bench_parse
from benchmarks._figures_scale import bench_e2e, bench_scale
from benchmarks._figures_startup import bench_progress, bench_startup
from benchmarks._figures_tail import bench_tail
from benchmarks._report import DEFAULT_STREAM, Figure, load_stream, say, table

__all__ = ["Figure", "main"]


def _int_list(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def _build_banner(selected: Selected | None) -> str:
    import rulvar_otel
    from rulvar_otel._build import build_label

    note = f"; {selected.note}" if selected is not None and selected.note else ""
    return f"build measured: {build_label()} ({Path(rulvar_otel.__file__).parent}){note}"


def main(argv: Sequence[str] | None = None, *, selected: Selected | None = None) -> int:
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
        default="parse,floor,metrics,direct,http,compiled,scale,e2e,tail,startup,progress",
        help="comma-separated sections to run (default all)",
    )
    parser.add_argument(
        "--build",
        choices=BUILDS,
        default="compiled",
        help="the build to measure: the compiled wheel pip install makes (default) or the sources",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    origin = selected.origin if selected is not None else Path.cwd()
    stream: Path = origin / args.stream
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

            script, _ = capture(load_stream(stream))
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
    if "http" in sections:
        steps.append(("OTLP/HTTP against OTLP/gRPC", lambda: bench_http(stream, rounds)))
    if "compiled" in sections:
        steps.append(("compiled against pure Python", lambda: bench_compiled(stream, min(rounds, 7))))
    if "scale" in sections:
        steps.append(("scale", lambda: bench_scale(stream, points, tracers, target_events)))
    if "e2e" in sections:
        steps.append(("end to end", e2e_step))
    if "tail" in sections:
        steps.append(("live tail", lambda: bench_tail(args.quick)))
    # Fresh processes per round: bounded rounds keep these two within a minute on large.
    if "startup" in sections:
        steps.append(("start-up", lambda: bench_startup(rounds)))
    if "progress" in sections:
        steps.append(("progress overhead", lambda: bench_progress(stream, min(rounds, 7))))

    say(f"rulvar-otel benchmarks on {stream} ({rounds} rounds, medians; python {sys.version.split()[0]})")
    build = _build_banner(selected)
    say(build)
    for title, step in steps:
        say(f"running: {title} ...")
        started = time.perf_counter()
        figures.extend(step())
        say(f"  done in {time.perf_counter() - started:.1f} s")

    sys.stdout.write(build + "\n" + table(figures) + "\n")
    if args.json is not None:
        (origin / args.json).write_text(json.dumps([f.as_json() for f in figures], indent=2) + "\n")
    missed = [f for f in figures if f.met is False]
    return 1 if (args.check and missed) else 0
