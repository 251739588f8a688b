"""``export_run``: one run's events into every configured destination, reported as data.

One export: open the metrics pipeline (when asked) and the span pipeline, drain the handle's
events into it and any observers, settle, flush, and return an :class:`ExportReport`. Nothing is
printed and nothing is raised for bad options, bad input or an unreachable backend: each is an
:class:`ExportFailure` of a :class:`FailureKind` in the report. The span pipeline is pluggable
(``pipeline=``, see ``_report.SpanPipeline``); without one, ``ExportOptions.pipeline`` picks
``_direct_pipeline`` (the default) or ``_sdk_pipeline``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.context import Context

from rulvar_otel.core.drain import Drained, Interrupts, Sink, drain, drain_run
from rulvar_otel.core.handle import RunHandle, RunOutcome
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.core.run_source import as_sync_handle
from rulvar_otel.errors import ConfigError, RulvarOtelError
from rulvar_otel.export._direct_pipeline import direct_pipeline
from rulvar_otel.export._logs import SdkLogCapture, clean_text
from rulvar_otel.export._options import ExportOptions
from rulvar_otel.export._report import (
    EventObserver,
    ExportFailure,
    ExportReport,
    FailureKind,
    PipelineFactory,
    SpanPipeline,
)
from rulvar_otel.export._sdk_pipeline import sdk_pipeline
from rulvar_otel.export._traces import resolve_service_name
from rulvar_otel.otel._parentage import Parentage, resolve_parent

if TYPE_CHECKING:
    from rulvar_otel.export._metrics import MetricsPipeline

__all__ = ["INTERRUPT_GRACE_S", "export_run", "export_run_async"]

# After one Ctrl-C, what was read has this long to reach the receivers before exchanges are cut.
INTERRUPT_GRACE_S: Final = 2.0


class _Feed:
    """One consumer's ``feed`` as a drain sink; its end is the export's (see ``_Export.close``)."""

    __slots__ = ("feed",)

    def __init__(self, feed: Callable[[Mapping[str, Any]], None]) -> None:
        self.feed = feed

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        return None


class _Export:
    """One export: open the destinations, give the drain its sinks (:meth:`sinks`), then close
    (settle, flush, report) with what the drain found."""

    def __init__(
        self,
        options: ExportOptions,
        observers: Sequence[EventObserver],
        on_note: Callable[[str], None] | None,
        environ: Mapping[str, str] | None,
        keep_spans: bool,
        pipeline: PipelineFactory | None = None,
        metrics: MetricsPipeline | None = None,
    ) -> None:
        self.options = options
        self.given_metrics = metrics
        if pipeline is None:
            pipeline = direct_pipeline if options.pipeline == "direct" else sdk_pipeline
        self.make_pipeline: PipelineFactory = pipeline
        self.observers = tuple(observers)
        self.on_note = on_note
        self.environ = environ
        self.keep_spans = keep_spans
        self.masker = compile_secret_masker(options.patterns or None)
        self.capture = SdkLogCapture()
        self.pipeline: SpanPipeline | None = None
        self.metrics: MetricsPipeline | None = None
        self.interrupted = False  # a Ctrl-C came, while reading or while flushing
        self.notes: list[str] = []
        self.failures: list[ExportFailure] = []

    def clean(self, text: str) -> str:
        return clean_text(text, self.masker)

    def stop_linger(self) -> None:
        if self.metrics is not None:
            self.metrics.stop_linger.set()

    def interrupt(self, *, again: bool = False) -> None:
        """A Ctrl-C: stop lingering; what is in flight gets a short grace (none ``again``), then is cut."""
        self.interrupted = True
        self.stop_linger()
        grace = 0.0 if again else INTERRUPT_GRACE_S
        if self.metrics is not None:
            self.metrics.interrupt.interrupt(grace)
        cut = getattr(self.pipeline, "interrupt", None)
        if callable(cut):
            cut(grace)

    def fail(self, kind: FailureKind, text: str) -> None:
        self.failures.append(ExportFailure(kind, self.clean(text)))

    def note(self, text: str) -> None:
        safe = self.clean(text)
        self.notes.append(safe)
        if self.on_note is not None:
            try:
                self.on_note(safe)
            except Exception:  # noqa: BLE001 - a caller's printer never breaks the export
                pass

    def open(self) -> bool:
        try:
            service = resolve_service_name(self.options, self.environ)
            self.metrics = self.given_metrics
            asked = self.options.metrics_endpoint is not None or self.options.prometheus_port is not None
            if self.metrics is None and asked:
                # The metrics SDK and the Prometheus exporter load only for an export that wants them.
                from rulvar_otel.export._metrics import build_metrics_delivery

                self.metrics = build_metrics_delivery(
                    self.options, service_name=service, environ=self.environ
                )
            meter = self.metrics.meter if self.metrics is not None else None
            self.pipeline = self.make_pipeline(
                self.options,
                masker=self.masker,
                meter=meter,
                environ=self.environ,
                keep_spans=self.keep_spans,
                metrics=self.metrics,
            )
        except ConfigError as exc:
            if self.metrics is not None:
                self.metrics.shutdown()
            self.fail(FailureKind.CONFIG, str(exc))
            return False
        if self.metrics is not None and self.metrics.prometheus_url is not None:
            self.note(f"serving Prometheus metrics on {self.metrics.prometheus_url}")
        return True

    def sinks(self) -> tuple[Sink, ...]:
        """What the drain feeds: the span pipeline, then each observer, called directly.

        The drain keeps a failing feed from costing the others an event (an observer's failure
        never costs a span); :meth:`close` settles the pipeline and finishes the observers.
        """
        assert self.pipeline is not None
        return (_Feed(self.pipeline.feed), *(_Feed(observer.feed) for observer in self.observers))

    def close(self, drained: Drained, handle: RunHandle) -> ExportReport:
        """Settle, flush and report.

        The pipeline settles with the handle's own outcome: a recorded run's given one (``None``:
        each run settles from its stream), a live run's result unless the stream broke or was
        interrupted. Observers and the report see how the run settled.
        """
        assert self.pipeline is not None
        outcome: RunOutcome | BaseException | None
        if as_sync_handle(handle):
            outcome, settled = handle.given_outcome, drained.outcome
        elif drained.interrupted or drained.source_error is not None:
            outcome = settled = None
        else:
            outcome = settled = drained.outcome
        spans = self.pipeline.finish(outcome, _run_id(handle))
        for observer in self.observers:
            try:
                observer.finish(settled)
            except Exception:  # noqa: BLE001
                pass
        if drained.source_error is not None:
            self.fail(FailureKind.INPUT, _describe_source_error(drained.source_error))
        elif drained.events == 0 and not (drained.interrupted or self.interrupted):
            self.fail(FailureKind.INPUT, "the stream held no events")
        input_ok = not self.failed(FailureKind.INPUT) and drained.events > 0
        delivery = self.pipeline.close(keep_output=input_ok)
        for problem in delivery.problems():
            self.fail(FailureKind.DELIVERY, self._with_sdk_error(problem))
        if self.metrics is not None:
            if self.metrics.linger_s > 0 and self.metrics.prometheus_url is not None:
                self.note(f"keeping {self.metrics.prometheus_url} up for {self.metrics.linger_s:g} s")
            try:
                self.metrics.shutdown()
            except Exception as exc:  # noqa: BLE001 - metrics never hide the trace result
                self.fail(FailureKind.METRICS, f"metrics export failed: {type(exc).__name__}")
            for problem in self.metrics.problems:
                self.fail(FailureKind.METRICS, self._with_sdk_error(problem))
        quoted = self.failed(FailureKind.DELIVERY)
        notes = [*self.notes, *self.capture.notes(self.clean, quoted=quoted)]
        return ExportReport(
            events=drained.events,
            spans=delivery.spans_ended if spans == 0 else spans,
            run_ids=tuple(self.clean(r) for r in self.pipeline.run_ids),
            trace_ids=self.pipeline.trace_ids,
            failures=tuple(self.failures),
            delivery=delivery,
            outcome=settled,
            # A Ctrl-C during the flush counts too: what was read was exported, the rest cut.
            interrupted=drained.interrupted or self.interrupted,
            destinations=tuple(self.clean(t.target) for t in delivery.targets),
            prometheus_url=self.metrics.prometheus_url if self.metrics is not None else None,
            notes=tuple(notes),
            backpressure_waits=self.pipeline.backpressure_waits,
            kept_spans=self.pipeline.kept_spans,
        )

    def failed(self, kind: FailureKind) -> bool:
        return any(f.kind is kind for f in self.failures)

    def _with_sdk_error(self, problem: str) -> str:
        # The tracked exporters know how many spans were missed; the SDK's log knows why.
        detail = self.capture.describe()
        if detail and ": " not in problem.split(" to ", 1)[-1]:
            return f"{problem}: {detail}"
        return problem

    def report_only(self) -> ExportReport:
        return ExportReport(failures=tuple(self.failures), notes=tuple(self.notes))


def _describe_source_error(exc: BaseException) -> str:
    if isinstance(exc, RulvarOtelError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"cannot read the event stream: {exc.strerror or exc}"
    return f"the event stream failed ({type(exc).__name__})"


async def export_run_async(
    handle: RunHandle,
    options: ExportOptions,
    *,
    observers: Sequence[EventObserver] = (),
    on_note: Callable[[str], None] | None = None,
    keep_spans: bool = False,
    environ: Mapping[str, str] | None = None,
    pipeline: PipelineFactory | None = None,
    metrics: MetricsPipeline | None = None,
) -> ExportReport:
    """Export one run end to end from async code; see :func:`export_run`.

    Cancelling the calling task (Ctrl-C under ``asyncio.run``) stops reading: what was read is
    exported and the report says ``interrupted``.
    """
    options = with_parentage(options, handle)
    export = _Export(options, observers, on_note, environ, keep_spans, pipeline, metrics)
    with export.capture:
        if not export.open():
            return export.report_only()
        # A broken stream's result is not awaited: the report says the input failed.
        drained = await drain(handle, *export.sinks(), interrupts=_Cancelled(export), settle_broken=False)
        # Flushing can block for up to one export timeout; keep the event loop free meanwhile.
        import asyncio  # loaded already: this runs in an event loop

        try:
            return await asyncio.to_thread(export.close, drained, handle)
        except asyncio.CancelledError:
            export.interrupt()
            raise


class _Cancelled(Interrupts):
    """Cancellation of an async export (Ctrl-C under ``asyncio.run``): stop reading, export what was read."""

    __slots__ = ("_export",)

    def __init__(self, export: _Export) -> None:
        super().__init__()
        self._export = export

    def absorb(self, stop: BaseException) -> bool:
        import asyncio  # an async drain's policy: asyncio is loaded

        if not isinstance(stop, asyncio.CancelledError):
            return False
        self._export.interrupt()
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True


def with_parentage(options: ExportOptions, handle: RunHandle) -> ExportOptions:
    """``options`` with ``parent`` resolved now, in the caller's context (or the engine's capture)."""
    if isinstance(options.parent, Parentage):
        return options
    captured = getattr(handle, "trace_context", None)
    resolved = resolve_parent(options.parent, captured if isinstance(captured, Context) else None)
    return replace(options, parent=resolved)


def _run_id(handle: RunHandle) -> str:
    try:
        return handle.run_id or ""
    except Exception:  # noqa: BLE001 - a handle that cannot name its run still exports
        return ""


class _Interrupt(Interrupts):
    """SIGINT during a synchronous export: the first stops reading (a blocked read included).

    A first Ctrl-C while an event is being mapped lets that event finish; while the source is
    read, it ends the read at once. Either way what was read is exported, within
    :data:`INTERRUPT_GRACE_S` (then exchanges still open are cut and reported undelivered). A
    second Ctrl-C cuts them at once and raises ``KeyboardInterrupt`` as usual.
    """

    def __init__(self, export: _Export) -> None:
        super().__init__()
        self._export = export
        self._previous: Any = None
        self._installed = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        already = self.requested
        self.requested = True
        self._export.interrupt(again=already)
        if already or self.reading:
            raise KeyboardInterrupt

    def absorb(self, stop: BaseException) -> bool:
        # A Ctrl-C that ends a blocked read ends the stream; a second one while mapping does not.
        absorbed, self.reading = self.reading, False
        return absorbed

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self.handler)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


def export_run(
    handle: RunHandle,
    options: ExportOptions,
    *,
    observers: Sequence[EventObserver] = (),
    on_note: Callable[[str], None] | None = None,
    keep_spans: bool = False,
    environ: Mapping[str, str] | None = None,
    pipeline: PipelineFactory | None = None,
    metrics: MetricsPipeline | None = None,
) -> ExportReport:
    """Export one run end to end: destinations, spans (and metrics), flush, report.

    ``observers`` see every event and the outcome (a progress view); ``on_note`` receives
    status lines as they happen (the Prometheus address, say); ``keep_spans`` keeps ended spans
    in the report (every root, a bounded number of others) for a terminal tree; ``pipeline``
    replaces the span pipeline ``options.pipeline`` picks (:func:`sdk_pipeline` or the direct
    path's); ``metrics`` is a metrics pipeline the caller built for ``options`` already
    (:func:`build_metrics_delivery`), so that the run's own producer records into the same provider
    (an engine given ``metrics.meter``): the export then uses it instead of building one, and shuts
    it down when it ends. Never raises
    for bad options, bad input or an unreachable backend: see :attr:`ExportReport.failures`.
    A recorded run over a plain iterable (:class:`StreamedRun`, say) is drained without an event
    loop, so the first Ctrl-C ends even a blocked read; the report then says ``interrupted``, as
    it does after a Ctrl-C during the final flush.
    """
    options = with_parentage(options, handle)
    if as_sync_handle(handle) and handle.is_sync:
        export = _Export(options, observers, on_note, environ, keep_spans, pipeline, metrics)
        with export.capture, _Interrupt(export) as interrupt:
            if not export.open():
                return export.report_only()
            return export.close(drain_run(handle, *export.sinks(), interrupts=interrupt), handle)
    import asyncio  # only an async source needs an event loop (a sync export never loads asyncio)

    return asyncio.run(
        export_run_async(
            handle,
            options,
            observers=observers,
            on_note=on_note,
            keep_spans=keep_spans,
            environ=environ,
            pipeline=pipeline,
            metrics=metrics,
        )
    )
