"""The direct span pipeline: the mapper's finished span records straight to the exporters.

:func:`direct_pipeline` is the :class:`~rulvar_otel.export.PipelineFactory` the CLI uses by
default (``--pipeline direct``). It delivers to the same destinations as :func:`sdk_pipeline`,
with the same resource, span limits, ``OTEL_*`` settings, deterministic ids and report, but no
``TracerProvider``: one :class:`~rulvar_otel.otel._mapper.SpanMapper` per run id drives a
:class:`~rulvar_otel.otel._records.RecordingTracer`, and a
:class:`~rulvar_otel.otel.direct.DirectSpanSink` hands finished records in bounded batches to the
exporter library's OTLP exporters and the OTLP/JSON file writer (a partial batch after at most
:data:`~rulvar_otel.export._traces.DEFAULT_SCHEDULE_DELAY_S`, so a live tail stays near real time).
With metrics, a :class:`~rulvar_otel.otel.direct_metrics.MetricsAggregator` per export feeds the
metrics pipeline's own readers instead of SDK instruments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import Meter
from opentelemetry.sdk.trace import ReadableSpan

from rulvar_otel.core.drain import Sink
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.export._options import ExportOptions
from rulvar_otel.export._report import SpanPipeline

if TYPE_CHECKING:
    from rulvar_otel.export._metrics import MetricsPipeline
from rulvar_otel.export._traces import (
    DEFAULT_SCHEDULE_DELAY_S,
    MAX_KEPT_SPANS,
    DeliveryReport,
    Destinations,
    delivery_report,
    resolve_destinations,
)
from rulvar_otel.otel._parentage import resolve_parent
from rulvar_otel.otel._runs import RunRouter
from rulvar_otel.otel.direct import DirectSpanSink
from rulvar_otel.otel.ids import RulvarIdGenerator

__all__ = ["direct_pipeline"]


class _DirectPipeline:
    """The runs' mappers on one direct sink."""

    def __init__(self, sink: DirectSpanSink, destinations: Destinations, router: RunRouter) -> None:
        self._sink = sink
        self._destinations = destinations
        self._router = router
        self._report: DeliveryReport | None = None
        # The router's own method: the drain calls it per event, with no frame in between.
        self.feed: Callable[[Mapping[str, Any]], None] = router.feed

    @property
    def run_ids(self) -> tuple[str, ...]:
        return self._router.run_ids

    def finish(self, outcome: RunOutcome | BaseException | None, primary_run_id: str) -> int:
        return self._router.finish(outcome, primary_run_id)

    def close(self, *, keep_output: bool) -> DeliveryReport:
        if self._report is None:
            self._sink.shutdown()  # every batch exported (each bounded by its exporter's timeout)
            found = self._destinations
            self._report = delivery_report(found.exporters, found.files, self._sink.ended, keep_output)
        return self._report

    def interrupt(self, grace_s: float) -> None:
        """A Ctrl-C: in-flight OTLP exchanges get ``grace_s`` more, then are cut."""
        self._destinations.interrupt.interrupt(grace_s)

    @property
    def trace_ids(self) -> tuple[str, ...]:
        return tuple(format(t, "032x") for t in self._sink.trace_ids)

    @property
    def kept_spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self._sink.readable_spans())

    @property
    def backpressure_waits(self) -> int:
        return self._sink.waits


def direct_pipeline(
    options: ExportOptions,
    *,
    masker: SecretMasker,
    meter: Meter | None,
    environ: Mapping[str, str] | None,
    keep_spans: bool,
    metrics: MetricsPipeline | None = None,
) -> SpanPipeline:
    """Spans on the direct path (``ExportOptions(pipeline="direct")``, the default).

    With ``metrics`` (the export's metrics pipeline), its readers collect from one
    :class:`MetricsAggregator` fed by every run; else a ``meter`` gets a recorder per run.
    """
    found = resolve_destinations(options, environ=environ, direct=True)
    sink = DirectSpanSink(
        found.exporters,
        resource=found.resource,
        max_batch=found.batch,
        schedule_delay_s=DEFAULT_SCHEDULE_DELAY_S,
        max_queue_batches=max(1, found.queue // found.batch),
        keep=MAX_KEPT_SPANS if keep_spans else 0,
    )
    tracer = sink.tracer(
        id_generator=RulvarIdGenerator() if options.deterministic_ids else None,
        limits=found.limits,
        name_limit=found.name_limit,
    )
    per_run: Any = None
    if metrics is not None and metrics.readers:
        from rulvar_otel.otel.direct_metrics import MetricsAggregator, attach_reader

        aggregator = MetricsAggregator(
            masker, resource=metrics.resource, cardinality_limit=metrics.cardinality_limit
        )
        for reader in metrics.readers:
            attach_reader(reader, aggregator)
        per_run = aggregator.run
    elif meter is not None:
        from rulvar_otel.otel.metrics import MetricsRecorder, SpanSource

        def recorder(spans: SpanSource) -> Sink:
            return MetricsRecorder(meter, masker, spans=spans)

        per_run = recorder
    # None keeps the mapper's default set (OpenInference on); () leaves only OpenTelemetry's.
    conventions = None if options.openinference else ()
    router = RunRouter(
        tracer, masker, conventions=conventions, metrics=per_run, parentage=resolve_parent(options.parent)
    )
    return _DirectPipeline(sink, found, router)
