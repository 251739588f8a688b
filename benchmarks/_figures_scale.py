"""Figures 4-5: scale over long generated streams (each in a fresh process), and end to end
through the CLI into a real OTLP/gRPC receiver.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import CACHE, Figure, say

__all__ = ["bench_e2e", "bench_scale"]


def _scale_point(stream: Path, events: int, tracer: str) -> dict[str, Any]:
    from benchmarks._scale import generate

    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    path = generate(stream, events, CACHE / f"{stream.stem}-{events}.jsonl")
    say(f"  stream of {events} events ready ({time.perf_counter() - started:.1f} s); exporting ({tracer})")
    # The worker inherits the build this run measures (first on PYTHONPATH) and starts outside the
    # checkout, so `-m`'s working directory on sys.path cannot put the sources before it.
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks._scale", str(path), "--baseline", str(stream), "--tracer", tracer],
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=False,
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
            seconds = r["seconds"]
            base_rate = r["baseline_events"] / statistics.median(r["baseline_seconds"])
            overall = r["events"] / seconds
            # The long stream by its median 0.1 s window (benchmarks._scale._RateSampler): a burst
            # of machine noise must not read as a per-event cost that grows. Its total is shown.
            rate = statistics.median(r["windows"]) if r["windows"] else overall
            growth_mb = r["growth_kb"] / 1024
            relative = rate / base_rate
            judged = events == target_events
            fits.setdefault(tracer, []).append((r["events"], seconds))
            notes = [f"worker build: {r['build']}"]
            if not r["peak_reset"]:
                notes.append("peak RSS mark could not be reset: growth is an upper bound")
            figures.append(
                Figure(
                    "scale",
                    f"{events} events, {_TRACER_NAMES.get(tracer, tracer)}: "
                    f"total {seconds:.2f} s ({overall / 1e3:.1f}k ev/s), peak RSS growth {growth_mb:.1f} MB",
                    f"{rate / 1e3:6.1f}k ev/s median window",
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
