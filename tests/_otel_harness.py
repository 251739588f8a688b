"""Test views over :mod:`rulvar_otel.testing`: an ``Export`` with index helpers, ``ev`` and time helpers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.core.handle import EventLike, RunOutcome, handle_from_events
from rulvar_otel.export import iter_otlp_json_file
from rulvar_otel.otel import to_otel
from rulvar_otel.testing import CountingIdGenerator as CountingIds
from rulvar_otel.testing import SpanRecorder as Recorder

__all__ = [
    "CountingIds",
    "Export",
    "Recorder",
    "ev",
    "export",
    "ms",
    "otlp_file_spans",
    "provider",
    "run_cli",
    "t",
    "write_stream",
]


@dataclass
class Export:
    returned: int
    spans: list[Span]  # start order
    ended: list[ReadableSpan]
    by_id: dict[int, Span] = field(default_factory=dict[int, Span])

    def __post_init__(self) -> None:
        self.by_id = {s.context.span_id: s for s in self.spans}

    def index_of(self, span_id: int | None) -> int | None:
        if span_id is None:
            return None
        for i, s in enumerate(self.spans):
            if s.context.span_id == span_id:
                return i
        return None

    def parent_index(self, span: Span) -> int | None:
        return self.index_of(span.parent.span_id if span.parent is not None else None)

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]


def provider(recorder: SpanProcessor, *, max_events: int | None = 100_000) -> TracerProvider:
    tp = TracerProvider(
        id_generator=CountingIds(),
        span_limits=SpanLimits(max_events=max_events, max_attributes=1000),
    )
    tp.add_span_processor(recorder)
    return tp


def export(
    events: Iterable[EventLike],
    outcome: RunOutcome | BaseException | None = None,
    *,
    patterns: Sequence[str] | None = None,
    run_id: str | None = None,
) -> Export:
    """Run ``to_otel`` over a recorded stream into an in-memory recorder."""
    recorder = Recorder()
    tp = provider(recorder)
    handle = handle_from_events(list(events), outcome, run_id=run_id)
    returned = asyncio.run(to_otel(handle, tp.get_tracer("test"), patterns=patterns))
    return Export(returned, list(recorder.started), list(recorder.ended))


def ev(
    kind: str, seq: int, span: str, parent: str | None = None, ts_ms: int | None = None, **body: Any
) -> dict[str, Any]:
    """A wire-form event for hand-built streams (ts defaults to seq milliseconds after 2026-01-01)."""
    base_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    ms = base_ms + (ts_ms if ts_ms is not None else seq)
    seconds, millis = divmod(ms, 1000)
    import datetime as _dt

    ts = _dt.datetime.fromtimestamp(seconds, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
    out: dict[str, Any] = {"runId": body.pop("runId", "r1"), "seq": seq, "ts": ts, "spanId": span}
    if parent is not None:
        out["parentSpanId"] = parent
    out["type"] = kind
    out.update(body)
    return out


def ms(ns: int | None) -> int | None:
    return None if ns is None else ns // 1_000_000


def t(ts_ms: int) -> int:
    """The ns timestamp `ev(..., ts_ms=...)` produces."""
    return (1_767_225_600_000 + ts_ms) * 1_000_000


def run_cli(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    """``rulvar-otel ARGS`` in process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(app, list(args), input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def otlp_file_spans(path: Path) -> list[OtlpSpan]:
    """Every span of an OTLP/JSON lines file, in file order."""
    return [
        span
        for request in iter_otlp_json_file(path)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def write_stream(path: Path, items: list[Any]) -> Path:
    """A JSONL stream from events (dicts) and raw lines (strings)."""
    path.write_text(
        "".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items),
        encoding="utf-8",
    )
    return path
