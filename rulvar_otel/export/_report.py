"""What an export reports and the seams it is built from: the report, observers, span pipelines.

:class:`ExportReport` is the result of :func:`~rulvar_otel.export.export_run` as data: counts, run
and trace ids, and each :class:`ExportFailure` with its :class:`FailureKind`. An
:class:`EventObserver` sees every event an export reads (a progress view); a
:class:`SpanPipeline` turns events into delivered spans, built per export by a
:class:`PipelineFactory` (the default is ``sdk_pipeline``; another path, such as a direct
encoder, plugs in the same way).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.metrics import Meter
from opentelemetry.sdk.trace import ReadableSpan

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.export._options import ExportOptions
from rulvar_otel.export._traces import DeliveryReport

if TYPE_CHECKING:
    from rulvar_otel.export._metrics import MetricsPipeline

__all__ = [
    "EventObserver",
    "ExportFailure",
    "ExportReport",
    "FailureKind",
    "PipelineFactory",
    "SpanPipeline",
]


class FailureKind(enum.StrEnum):
    """Why an export did not fully succeed."""

    CONFIG = "config"  # bad options or environment; nothing was read or written
    INPUT = "input"  # the source failed midway, or held no events
    DELIVERY = "delivery"  # a trace destination did not receive every span
    METRICS = "metrics"  # a metrics destination failed


@dataclass(frozen=True, slots=True)
class ExportFailure:
    kind: FailureKind
    message: str


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What one export did. Every string in it is masked and free of terminal controls."""

    events: int = 0
    spans: int = 0
    run_ids: tuple[str, ...] = ()
    trace_ids: tuple[str, ...] = ()
    failures: tuple[ExportFailure, ...] = ()
    delivery: DeliveryReport | None = None
    outcome: RunOutcome | BaseException | None = None
    interrupted: bool = False
    destinations: tuple[str, ...] = ()
    prometheus_url: str | None = None
    notes: tuple[str, ...] = ()
    backpressure_waits: int = 0
    kept_spans: tuple[ReadableSpan, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return not self.failures

    def failed(self, *kinds: FailureKind) -> bool:
        return any(f.kind in kinds for f in self.failures)


class EventObserver(Protocol):
    """Sees every event the export reads, and how the run settled (a progress view, say)."""

    def feed(self, event: Mapping[str, Any]) -> None: ...

    def finish(self, outcome: RunOutcome | BaseException | None) -> None: ...


class SpanPipeline(Protocol):
    """Turns events into delivered spans: feed every event, ``finish`` the runs, ``close`` once.

    ``finish`` settles every run seen (``outcome`` is the handle's, for ``primary_run_id``;
    ``None``: each run settles from its own last ``run:end``) and returns the spans created;
    ``close`` flushes, keeps or discards file output, and reports.
    """

    def feed(self, event: Mapping[str, Any]) -> None: ...

    def finish(self, outcome: RunOutcome | BaseException | None, primary_run_id: str) -> int: ...

    def close(self, *, keep_output: bool) -> DeliveryReport: ...

    @property
    def run_ids(self) -> tuple[str, ...]: ...

    @property
    def trace_ids(self) -> tuple[str, ...]: ...

    @property
    def kept_spans(self) -> tuple[ReadableSpan, ...]: ...

    @property
    def backpressure_waits(self) -> int: ...


class PipelineFactory(Protocol):
    """Builds the span pipeline of one export (raises ConfigError for bad options).

    ``meter`` is the metrics pipeline's meter (``None`` without metrics); ``metrics`` the
    pipeline itself, for a span pipeline that feeds its readers another way (the direct path).
    """

    def __call__(
        self,
        options: ExportOptions,
        *,
        masker: SecretMasker,
        meter: Meter | None,
        environ: Mapping[str, str] | None,
        keep_spans: bool,
        metrics: MetricsPipeline | None = None,
    ) -> SpanPipeline: ...
