"""``rulvar_otel.testing``: the in-memory harness a host tests its own exports with.

These use the conftest fixtures built on it (``span_capture``, ``metric_capture``,
``reference_stream``), the way a host's own test suite would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rulvar_otel import handle_from_events, to_otel
from rulvar_otel.testing import CountingIdGenerator, MetricCapture, SpanCapture, capture_export

Loader = Callable[[str], tuple[list[dict[str, Any]], Any]]


def test_span_capture_keeps_every_span_in_start_order_with_sequential_ids(
    span_capture: SpanCapture, reference_stream: Loader
) -> None:
    events, outcome = reference_stream("tools")
    count = asyncio.run(to_otel(handle_from_events(events, outcome), span_capture.tracer))
    spans = span_capture.spans
    assert count == len(spans) == len(span_capture.ended) == 17
    assert spans[0].name.startswith("run ")  # the run starts first
    assert [s.context.span_id for s in spans] == list(range(1, 18))
    assert {s.context.trace_id for s in spans} == {1}
    (run,) = span_capture.named(spans[0].name)
    assert span_capture.parent_of(run) is None
    assert all(span_capture.parent_of(s) is not None for s in spans[1:])


def test_metric_capture_reads_the_run_metrics(
    span_capture: SpanCapture, metric_capture: MetricCapture, reference_stream: Loader
) -> None:
    events, outcome = reference_stream("tools")
    asyncio.run(to_otel(handle_from_events(events, outcome), span_capture.tracer, meter=metric_capture.meter))
    points = metric_capture.points()
    tool_ends = sum(1 for e in events if e["type"] == "tool:end")
    assert tool_ends > 0 and sum(points["rulvar.tool.calls"].values()) == tool_ends
    (settled,) = points["rulvar.runs.settled"].values()
    assert settled == 1


def test_capture_export_is_repeatable_byte_for_byte(reference_stream: Loader) -> None:
    events, outcome = reference_stream("nested")

    def shape() -> list[tuple[str, int, int | None, int | None, int | None]]:
        count, capture = capture_export(events, outcome)
        assert count == len(capture.spans)
        return [
            (s.name, s.context.span_id, s.parent.span_id if s.parent else None, s.start_time, s.end_time)
            for s in capture.spans
        ]

    assert shape() == shape()


def test_counting_ids_count_from_one() -> None:
    ids = CountingIdGenerator()
    assert [ids.generate_span_id() for _ in range(3)] == [1, 2, 3]
    assert ids.generate_trace_id() == 1
