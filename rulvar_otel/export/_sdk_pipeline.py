"""The SDK span pipeline: SDK spans, one :class:`SpanMapper` per run id, on one trace delivery.

Events are routed by ``runId`` (:class:`~rulvar_otel.otel._runs.RunRouter`), so two runs in one
stream become two traces even when they reuse span ids; each run settles with its own outcome
(the handle's for the run it names, the last ``run:end`` for the others). Metrics, when a
``meter`` is given, come from a :class:`~rulvar_otel.otel.metrics.MetricsRecorder` per run.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from rulvar_otel.export._traces import DeliveryReport, TraceDelivery, build_trace_delivery
from rulvar_otel.otel._parentage import resolve_parent
from rulvar_otel.otel._runs import RunRouter

__all__ = ["sdk_pipeline"]


class _SdkPipeline:
    """The runs' mappers on one SDK delivery."""

    def __init__(self, delivery: TraceDelivery, router: RunRouter) -> None:
        self.delivery = delivery
        self._router = router

    @property
    def run_ids(self) -> tuple[str, ...]:
        return self._router.run_ids

    def feed(self, event: Mapping[str, Any]) -> None:
        self._router.feed(event)

    def finish(self, outcome: RunOutcome | BaseException | None, primary_run_id: str) -> int:
        return self._router.finish(outcome, primary_run_id)

    def close(self, *, keep_output: bool) -> DeliveryReport:
        return self.delivery.finish(keep_output=keep_output)

    def interrupt(self, grace_s: float) -> None:
        """A Ctrl-C: in-flight OTLP exchanges get ``grace_s`` more, then are cut."""
        self.delivery.interrupt(grace_s)

    @property
    def trace_ids(self) -> tuple[str, ...]:
        return tuple(self.delivery.trace_ids)

    @property
    def kept_spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.delivery.spans)

    @property
    def backpressure_waits(self) -> int:
        return self.delivery.backpressure_waits


def sdk_pipeline(
    options: ExportOptions,
    *,
    masker: SecretMasker,
    meter: Meter | None,
    environ: Mapping[str, str] | None,
    keep_spans: bool,
    metrics: MetricsPipeline | None = None,
) -> SpanPipeline:
    """SDK spans through :func:`build_trace_delivery` (``ExportOptions(pipeline="sdk")``).

    Metrics, when asked for, are recorded on ``meter`` (``metrics`` is not needed here).
    """
    delivery = build_trace_delivery(options, environ=environ, keep_spans=keep_spans)
    # None keeps the mapper's default set (OpenInference on); () leaves only OpenTelemetry's.
    conventions = None if options.openinference else ()
    recorder = None
    if meter is not None:
        from rulvar_otel.otel.metrics import MetricsRecorder, SpanSource

        def recorder(spans: SpanSource) -> Sink:
            return MetricsRecorder(meter, masker, spans=spans)

    return _SdkPipeline(
        delivery,
        RunRouter(
            delivery.tracer,
            masker,
            conventions=conventions,
            metrics=recorder,
            parentage=resolve_parent(options.parent),
        ),
    )
