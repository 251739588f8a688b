"""Span-side test views over :mod:`rulvar_otel.testing`, hand-built events and the CLI in process.

:func:`export` runs ``to_otel`` through the public :func:`~rulvar_otel.testing.capture_export` and
wraps the capture in :class:`Export`, which adds what the tests compare by: start-order indices.
:func:`ev` and :func:`t` build wire-form events and their timestamps, :func:`run_stream`,
:func:`agent_start` and :func:`agent_end` the common shapes of hand-built streams; :func:`run_cli`,
:func:`write_stream` and :func:`otlp_file_spans` drive and read the CLI.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.sdk.trace import ReadableSpan, Span
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.core.handle import EventLike, RunOutcome
from rulvar_otel.export import iter_otlp_json_file
from rulvar_otel.testing import SpanCapture, capture_export

__all__ = [
    "OK_OUTCOME",
    "USAGE",
    "Export",
    "agent_end",
    "agent_start",
    "ev",
    "export",
    "ms",
    "otlp_file_spans",
    "run_cli",
    "run_stream",
    "t",
    "write_stream",
]

# Hand-built events start at 2026-01-01T00:00:00Z.
_BASE_MS = 1_767_225_600_000


@dataclass
class Export:
    """What ``to_otel`` returned and the spans it produced, indexed by start order."""

    returned: int
    capture: SpanCapture
    by_id: dict[int, Span] = field(init=False)

    def __post_init__(self) -> None:
        self.by_id = self.capture.by_span_id()

    @property
    def spans(self) -> list[Span]:
        """Every span, in start order."""
        return self.capture.spans

    @property
    def ended(self) -> list[ReadableSpan]:
        return self.capture.ended

    def named(self, name: str) -> list[Span]:
        return self.capture.named(name)

    def index_of(self, span_id: int | None) -> int | None:
        if span_id is None:
            return None
        for i, s in enumerate(self.capture.recorder.started):
            if s.context.span_id == span_id:
                return i
        return None

    def parent_index(self, span: Span) -> int | None:
        return self.index_of(span.parent.span_id if span.parent is not None else None)

    def parent_of(self, span: Span) -> Span | None:
        return self.by_id.get(span.parent.span_id) if span.parent is not None else None

    def only(self, name: str) -> Span:
        """The one span called ``name`` (fails the test when there are none or several)."""
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans]
        return found[0]


def export(
    events: Iterable[EventLike],
    outcome: RunOutcome | BaseException | None = None,
    *,
    patterns: Sequence[str] | None = None,
    run_id: str | None = None,
) -> Export:
    """Run ``to_otel`` over a recorded stream into an in-memory capture."""
    returned, capture = capture_export(events, outcome, patterns=patterns, run_id=run_id)
    return Export(returned, capture)


def ev(
    kind: str, seq: int, span: str, parent: str | None = None, ts_ms: int | None = None, **body: Any
) -> dict[str, Any]:
    """A wire-form event for hand-built streams (ts defaults to seq milliseconds after 2026-01-01)."""
    seconds, millis = divmod(_BASE_MS + (ts_ms if ts_ms is not None else seq), 1000)
    ts = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
    out: dict[str, Any] = {"runId": body.pop("runId", "r1"), "seq": seq, "ts": ts, "spanId": span}
    if parent is not None:
        out["parentSpanId"] = parent
    out["type"] = kind
    out.update(body)
    return out


OK_OUTCOME = RunOutcome(status="ok")
USAGE = {
    "inputTokens": 10,
    "outputTokens": 5,
    "cacheReadTokens": 2,
    "cacheWriteTokens": 1,
    "reasoningTokens": 3,
}


def agent_start(seq: int, span: str, parent: str | None, agent_type: str = "w", **kw: Any) -> dict[str, Any]:
    """An ``agent:start`` of a loop agent on ``openai:gpt-x``."""
    return ev("agent:start", seq, span, parent, agentType=agent_type, model="openai:gpt-x", role="loop", **kw)


def agent_end(seq: int, span: str, status: str = "ok", **kw: Any) -> dict[str, Any]:
    """An ``agent:end`` with :data:`USAGE` and 0.5 USD."""
    return ev(
        "agent:end", seq, span, agentType="w", status=status, usage=USAGE, costUsd=0.5, entryRef=1, **kw
    )


def run_stream(*body: dict[str, Any], status: str = "ok", end: bool = True) -> list[dict[str, Any]]:
    """``body`` inside a run of workflow ``wf`` (span ``s0``), ended at 999 ms unless ``end`` is false."""
    events = [ev("run:start", 0, "s0", workflow="wf", resumed=False), *body]
    if end:
        events.append(ev("run:end", 999, "s0", ts_ms=999, status=status, totalUsd=0))
    return events


def ms(ns: int | None) -> int | None:
    """Nanoseconds as whole milliseconds (None stays None)."""
    return None if ns is None else ns // 1_000_000


def t(ts_ms: int) -> int:
    """The ns timestamp `ev(..., ts_ms=...)` produces."""
    return (_BASE_MS + ts_ms) * 1_000_000


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


def default_sigint() -> None:
    """A ``preexec_fn`` for a child that a test interrupts: SIGINT reaches it as from a terminal.

    A child inherits its parent's ignored or blocked signals across exec, and a Python started
    with SIGINT ignored installs no KeyboardInterrupt handler (asyncio none either): a test's
    Ctrl-C would then be lost whenever the test process got into that state.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
