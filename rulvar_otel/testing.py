"""In-memory OpenTelemetry for testing a host's own use of rulvar_otel: spans and metrics, no network.

A host that exports its runs with ``to_otel`` or ``export_events`` tests what it produced with
these, deterministically (sequential ids, spans kept in start order)::

    from rulvar_otel import handle_from_events, to_otel
    from rulvar_otel.testing import SpanCapture, MetricCapture

    spans, metrics = SpanCapture(), MetricCapture()
    await to_otel(handle_from_events(events), spans.tracer, meter=metrics.meter)
    assert spans.named("run checkout")[0].status.is_ok
    assert metrics.points()["rulvar.runs.settled"]

:class:`SpanCapture` wraps a ``TracerProvider`` with :class:`CountingIdGenerator` and a
:class:`SpanRecorder`; :class:`MetricCapture` wraps a ``MeterProvider`` with an
``InMemoryMetricReader``; :func:`capture_export` runs ``to_otel`` over a recorded stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from opentelemetry.context import Context
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer

from rulvar_otel.core.handle import EventLike, RunOutcome, handle_from_events
from rulvar_otel.otel import to_otel
from rulvar_otel.otel.semconv import INSTRUMENTATION_SCOPE

__all__ = [
    "CountingIdGenerator",
    "MetricCapture",
    "MetricPoint",
    "SpanCapture",
    "SpanRecorder",
    "capture_export",
    "metric_points",
]

# Generous enough that no test loses a span event or attribute to the SDK's defaults.
_MAX_EVENTS: Final = 100_000
_MAX_ATTRIBUTES: Final = 1000

MetricPoint = float | tuple[int, float, tuple[int, ...]]


class CountingIdGenerator(IdGenerator):
    """Sequential ids (1, 2, 3, ...): runs of a test are reproducible byte for byte."""

    def __init__(self) -> None:
        self._span = 0
        self._trace = 0

    def generate_span_id(self) -> int:
        self._span += 1
        return self._span

    def generate_trace_id(self) -> int:
        self._trace += 1
        return self._trace


class SpanRecorder(SpanProcessor):
    """Keeps every span in start order (:attr:`started`) and the ended ones (:attr:`ended`)."""

    def __init__(self) -> None:
        self.started: list[Span] = []
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


class SpanCapture:
    """A tracer whose spans stay in memory, with sequential ids and lifted SDK limits."""

    def __init__(
        self, *, id_generator: IdGenerator | None = None, max_events: int | None = _MAX_EVENTS
    ) -> None:
        self.recorder = SpanRecorder()
        self.provider = TracerProvider(
            id_generator=id_generator if id_generator is not None else CountingIdGenerator(),
            span_limits=SpanLimits(max_events=max_events, max_attributes=_MAX_ATTRIBUTES),
        )
        self.provider.add_span_processor(self.recorder)

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer(INSTRUMENTATION_SCOPE)

    @property
    def spans(self) -> list[Span]:
        """Every span started, in start order."""
        return list(self.recorder.started)

    @property
    def ended(self) -> list[ReadableSpan]:
        return list(self.recorder.ended)

    def named(self, name: str) -> list[Span]:
        return [s for s in self.recorder.started if s.name == name]

    def by_span_id(self) -> dict[int, Span]:
        return {s.context.span_id: s for s in self.recorder.started}

    def parent_of(self, span: ReadableSpan) -> Span | None:
        if span.parent is None:
            return None
        return self.by_span_id().get(span.parent.span_id)


class MetricCapture:
    """A meter whose metrics are read from memory on demand."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])

    @property
    def meter(self) -> Meter:
        return self.provider.get_meter(INSTRUMENTATION_SCOPE)

    def points(self) -> dict[str, dict[frozenset[tuple[str, Any]], MetricPoint]]:
        """Metric name -> {attribute set: value}; histograms as (count, sum, bucket counts)."""
        return metric_points(self.reader)

    def shutdown(self) -> None:
        self.provider.shutdown()


def metric_points(
    reader: InMemoryMetricReader,
) -> dict[str, dict[frozenset[tuple[str, Any]], MetricPoint]]:
    """What ``reader`` collected, keyed by metric name and attribute set."""
    out: dict[str, dict[frozenset[tuple[str, Any]], MetricPoint]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                series = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    key = frozenset((point.attributes or {}).items())
                    if isinstance(point, HistogramDataPoint):
                        series[key] = (point.count, point.sum, tuple(point.bucket_counts))
                    elif isinstance(point, NumberDataPoint):
                        series[key] = point.value
    return out


def capture_export(
    events: Iterable[EventLike],
    outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
    *,
    patterns: Sequence[str] | None = None,
    run_id: str | None = None,
    meter: Meter | None = None,
) -> tuple[int, SpanCapture]:
    """Run ``to_otel`` over a recorded stream into a fresh :class:`SpanCapture`.

    Returns what ``to_otel`` returned (the span count) and the capture.
    """
    capture = SpanCapture()
    handle = handle_from_events(list(events), outcome, run_id=run_id)
    count = asyncio.run(to_otel(handle, capture.tracer, patterns=patterns, meter=meter))
    return count, capture
