"""The default span pipeline: SDK spans, one :class:`SpanMapper` per run id, on one trace delivery.

Events are routed by ``runId``, so two runs in one stream become two traces even when they reuse
span ids; each run settles with its own outcome (the handle's for the run it names, the last
``run:end`` for the others).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import Meter
from opentelemetry.sdk.trace import ReadableSpan

from rulvar_otel.core.handle import RunOutcome, outcome_from_run_end
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.export._options import ExportOptions
from rulvar_otel.export._report import SpanPipeline
from rulvar_otel.export._traces import DeliveryReport, TraceDelivery, build_trace_delivery
from rulvar_otel.otel.exporter import create_mapper

__all__ = ["sdk_pipeline"]


class _SdkRunRouter:
    """The default span pipeline: one :class:`SpanMapper` per run id on one SDK delivery."""

    def __init__(
        self,
        delivery: TraceDelivery,
        masker: SecretMasker,
        meter: Meter | None,
        conventions: tuple[str, ...] | None,
    ) -> None:
        self.delivery = delivery
        self._masker = masker
        self._meter = meter
        self._conventions = conventions
        self._mappers: dict[str, Any] = {}
        self._last_run_id = ""

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(self._mappers)

    def feed(self, event: Mapping[str, Any]) -> None:
        rid = event.get("runId")
        if not isinstance(rid, str):
            rid = self._last_run_id
        self._last_run_id = rid
        mapper = self._mappers.get(rid)
        if mapper is None:
            # Each run id gets its own mapper, hence its own trace: interleaved runs never merge.
            mapper = create_mapper(
                self.delivery.tracer,
                masker=self._masker,
                meter=self._meter,
                run_id=rid,
                conventions=self._conventions,
            )
            self._mappers[rid] = mapper
        mapper.feed(event)

    def finish(self, outcome: RunOutcome | BaseException | None, primary_run_id: str) -> int:
        spans = 0
        single = len(self._mappers) == 1
        for rid, mapper in self._mappers.items():
            # The handle's outcome is its run's; without one each run settles from its own run:end.
            given = outcome is not None and (single or rid == primary_run_id)
            own = outcome if given else outcome_from_run_end(mapper.last_run_end)
            spans += int(mapper.finish(own))
        return spans

    def close(self, *, keep_output: bool) -> DeliveryReport:
        return self.delivery.finish(keep_output=keep_output)

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
) -> SpanPipeline:
    """The default span pipeline: SDK spans through :func:`build_trace_delivery`."""
    delivery = build_trace_delivery(options, environ=environ, keep_spans=keep_spans)
    # None keeps the mapper's default set (OpenInference on); () leaves only OpenTelemetry's.
    conventions = None if options.openinference else ()
    return _SdkRunRouter(delivery, masker, meter, conventions)
