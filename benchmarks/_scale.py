"""Scale: long generated streams, each measured in a fresh process for an honest peak-RSS figure.

:func:`generate` repeats a stream with fresh span ids, seqs and timestamps (each copy starts after
the previous one ends), so a 1M-event stream is one long run of many segments, every span new.
``python -m benchmarks._scale`` is the worker: it times the `large` stream around the long one in
the same process (so the throughput comparison shares the process's state and the machine's
moment), resets the kernel's peak-RSS mark, and reports peak RSS growth during the long export.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from rulvar_otel._build import build_label

__all__ = ["generate", "generated_lines"]

_ID_FIELDS = ("spanId", "parentSpanId")


def _parse_ts(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _format_ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generated_lines(source: Path, events: int) -> Iterator[bytes]:
    """``events`` lines of ``source`` repeated; copy ``k`` has ids suffixed ``.k``, shifted seqs, times."""
    template = [orjson.loads(line) for line in source.read_bytes().splitlines() if line.strip()]
    if not template:
        raise ValueError(f"{source} has no events")
    stamps = [_parse_ts(e["ts"]) for e in template if isinstance(e.get("ts"), str)]
    period = (max(stamps) - min(stamps) + timedelta(milliseconds=1)) if stamps else timedelta(0)
    count = len(template)
    produced = 0
    copy = 0
    while produced < events:
        shift = period * copy
        shifted: dict[str, str] = {}
        for event in template[: events - produced]:
            if copy:
                event = dict(event)
                for key in _ID_FIELDS:
                    if isinstance(event.get(key), str):
                        event[key] = f"{event[key]}.{copy}"
                if isinstance(event.get("seq"), int):
                    event["seq"] += copy * count
                ts = event.get("ts")
                if isinstance(ts, str):
                    new = shifted.get(ts)
                    if new is None:
                        new = shifted[ts] = _format_ts(_parse_ts(ts) + shift)
                    event["ts"] = new
            yield orjson.dumps(event) + b"\n"
            produced += 1
        copy += 1


def generate(source: Path, events: int, out: Path) -> Path:
    """Write :func:`generated_lines` to ``out`` (reused when it already has that many lines)."""
    marker = out.with_suffix(".count")
    if out.exists() and marker.exists() and marker.read_text() == f"{source.stat().st_size}:{events}":
        return out
    with out.open("wb") as handle:
        buffer: list[bytes] = []
        for line in generated_lines(source, events):
            buffer.append(line)
            if len(buffer) >= 10_000:
                handle.write(b"".join(buffer))
                buffer.clear()
        handle.write(b"".join(buffer))
    marker.write_text(f"{source.stat().st_size}:{events}")
    return out


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so it measures only what follows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class _RateSampler:
    """Reads a source's ``events_read`` every 0.1 s on a thread: the run's rate window by window.

    A multi-second run on a shared machine meets bursts of noise that a baseline run of a tenth
    of a second mostly misses. The median 0.1 s window of the long stream moves when the cost
    of an event grows deep into a stream, and not for a burst; each window spans many encoded
    batches, so the direct path's bursty reading averages out within it.
    """

    def __init__(self, source: Any, interval_s: float = 0.1) -> None:
        self._source = source
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._samples: list[tuple[float, int]] = [(time.perf_counter(), 0)]
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._samples.append((time.perf_counter(), self._source.events_read))

    def __enter__(self) -> _RateSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._samples.append((time.perf_counter(), self._source.events_read))

    def rates(self) -> list[float]:
        pairs = zip(self._samples, self._samples[1:], strict=False)
        # The last window is cut short by the end of the stream (and holds the run's finish).
        return [(n1 - n0) / (t1 - t0) for (t0, n0), (t1, n1) in list(pairs)[:-1] if t1 > t0]


Run = Callable[[Path], tuple[int, list[float]]]


def _exporter(tracer_kind: str) -> Run:
    from opentelemetry.trace import NoOpTracer

    from benchmarks._floor import new_tracer
    from rulvar_otel.otel import export_events
    from rulvar_otel.sources.jsonl import JsonlEventSource

    if tracer_kind == "direct":
        return _direct_exporter()
    if tracer_kind == "noop":
        tracer: Any = NoOpTracer()
    else:
        _, tracer = new_tracer()

    def run(path: Path) -> tuple[int, list[float]]:
        with JsonlEventSource(path) as source, _RateSampler(source) as sampler:
            export_events(source, tracer)
        return source.events_read, sampler.rates()

    return run


def _direct_exporter() -> Run:
    """The direct path, every batch encoded to OTLP protobuf bytes and then dropped."""
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from rulvar_otel.otel._encode import EncodedBatch
    from rulvar_otel.otel.direct import export_events_direct
    from rulvar_otel.sources.jsonl import JsonlEventSource

    class Encoding(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            assert isinstance(spans, EncodedBatch)
            spans.request_bytes()
            return SpanExportResult.SUCCESS

    def run(path: Path) -> tuple[int, list[float]]:
        with JsonlEventSource(path) as source, _RateSampler(source) as sampler:
            export_events_direct(source, Encoding())
        return source.events_read, sampler.rates()

    return run


def _worker(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._scale")
    parser.add_argument("stream", type=Path)
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--tracer", choices=("noop", "sdk", "direct"), default="noop")
    parser.add_argument("--baseline-runs", type=int, default=3)
    args = parser.parse_args(argv)
    run = _exporter(args.tracer)
    baseline: list[float] = []

    def time_baseline() -> int:
        start = time.perf_counter()
        count, _ = run(args.baseline)
        baseline.append(time.perf_counter() - start)
        return count

    for _ in range(args.baseline_runs):
        baseline_events = time_baseline()
    reset = _reset_peak()
    rss_before = _status_kb("VmRSS")
    start = time.perf_counter()
    events, windows = run(args.stream)
    seconds = time.perf_counter() - start
    peak = _status_kb("VmHWM")
    for _ in range(args.baseline_runs):
        time_baseline()
    result = {
        "events": events,
        "seconds": seconds,
        "windows": windows,
        "growth_kb": peak - rss_before,
        "peak_reset": reset,
        "baseline_events": baseline_events,
        "baseline_seconds": baseline,
        "build": build_label(),
    }
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    _worker(sys.argv[1:])
