"""The direct export path: the span mapper's finished records go to OTLP exporters without the SDK's
live-span machinery.

A recorded or replayed stream does not need ``start_span``, contexts, span processors or locked
attribute validation: every span's facts are known when it ends. On this path the
:class:`~rulvar_otel.otel._mapper.SpanMapper` drives a
:class:`~rulvar_otel.otel._records.RecordingTracer`, each finished record goes to a
:class:`DirectSpanSink`, and the sink hands batches (:class:`~rulvar_otel.otel._encode.EncodedBatch`,
a ``Sequence[ReadableSpan]``) to ordinary OTel ``SpanExporter`` objects on a worker thread. The
exporters keep delivery, retries, timeouts, compression, headers and their ``OTEL_*`` settings;
:func:`grpc_span_exporter` and :func:`http_span_exporter` build the library's gRPC and HTTP
exporters sending the batch's prebuilt request.
The mapping itself (ids, masking, span-event limits, every rule) is the mapper's, shared with the
tracer path.

Live streams still deliver each span soon after it ends: a partial batch goes out after
``schedule_delay_s``. Memory is bounded: at most ``max_queue_batches`` batches wait, and a producer
faster than the exporters waits for room (backpressure) instead of dropping spans.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.metrics import Meter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from rulvar_otel.core.drain import Sink, drain_events
from rulvar_otel.core.handle import EventLike, RunOutcome
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.otel import semconv
from rulvar_otel.otel._encode import BatchHeader, EncodedBatch
from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel._parentage import NO_PARENT, Parentage
from rulvar_otel.otel._records import RecordingTracer, SpanRecord
from rulvar_otel.otel._resource import compose_resource, mask_resource
from rulvar_otel.otel._span_batches import SpanBatches

if TYPE_CHECKING:  # loaded only when metrics are on
    from rulvar_otel.otel.direct_metrics import MetricsAggregator

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_SCOPE",
    "DirectSpanSink",
    "export_events_direct",
    "grpc_span_exporter",
    "http_span_exporter",
]

_log = logging.getLogger("rulvar_otel")

DEFAULT_MAX_BATCH: Final = 512
DEFAULT_SCHEDULE_DELAY_S: Final = 1.0
# Batches waiting for the exporters; a producer beyond this waits (memory stays bounded).
DEFAULT_MAX_QUEUE_BATCHES: Final = 8
_STOP: Final = object()
# The scope the CLI's SDK tracer reports, so both paths name the same instrumentation.
DEFAULT_SCOPE: Final = InstrumentationScope(
    semconv.INSTRUMENTATION_SCOPE, semconv.INSTRUMENTATION_VERSION, semconv.SCHEMA_URL
)


class DirectSpanSink:
    """Batches finished span records and exports each batch to every exporter, in end order.

    ``on_end`` is the :class:`RecordingTracer` callback. :meth:`shutdown` flushes what waits,
    shuts the exporters down and returns how many spans every exporter accepted. An exporter that
    fails once is not called again (a dead endpoint costs one export timeout, not one per batch).
    ``keep`` keeps up to that many records, and every root (for a terminal tree).
    """

    def __init__(
        self,
        exporters: Sequence[SpanExporter],
        *,
        resource: Resource | None = None,
        scope: InstrumentationScope | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        schedule_delay_s: float = DEFAULT_SCHEDULE_DELAY_S,
        max_queue_batches: int = DEFAULT_MAX_QUEUE_BATCHES,
        keep: int = 0,
    ) -> None:
        self.header = BatchHeader(
            mask_resource(resource)
            if resource is not None
            else compose_resource({SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}),
            scope if scope is not None else DEFAULT_SCOPE,
        )
        self._exporters = tuple(exporters)
        self.delivered = [0] * len(self._exporters)
        self.failed = [0] * len(self._exporters)
        self._broken = [False] * len(self._exporters)
        self._delay = schedule_delay_s
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max(1, max_queue_batches))
        self._batches = SpanBatches(max_batch, keep, self._enqueue)
        self.waits = 0  # times the producer waited for the exporters (backpressure applied)
        self._worker = threading.Thread(target=self._run, name="rulvar-otel-direct-export", daemon=True)
        self._worker.start()

    # --- producer side ----------------------------------------------------------------------------

    @property
    def on_end(self) -> Callable[[SpanRecord], None]:
        """Takes one finished record (the mapper's tracer calls it when a span ends)."""
        return self._batches.add

    @property
    def ended(self) -> int:
        """The records taken."""
        return self._batches.ended

    @property
    def records(self) -> list[SpanRecord]:
        """The kept records (see ``keep``)."""
        return self._batches.records

    @property
    def trace_ids(self) -> dict[int, None]:
        """The traces of the records taken, in order (an insertion-ordered set)."""
        return self._batches.trace_ids

    def _enqueue(self, batch: list[SpanRecord]) -> None:
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            self.waits += 1
            self._queue.put(batch)  # the exporters are behind: wait for them, drop nothing

    def tracer(
        self,
        *,
        id_generator: IdGenerator | None = None,
        limits: SpanLimits | None = None,
        name_limit: int | None = None,
    ) -> RecordingTracer:
        """A tracer whose spans end into this sink."""
        return RecordingTracer(self.on_end, id_generator=id_generator, limits=limits, name_limit=name_limit)

    def readable_spans(self) -> list[ReadableSpan]:
        """The kept records as the SDK's span objects (see ``keep``)."""
        return list(EncodedBatch(self.records, self.header))

    # --- worker -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._delay)
            except queue.Empty:
                item = self._batches.take_partial()
                if item is None:
                    continue
            if item is _STOP:
                return
            assert isinstance(item, list)
            self._export(item)

    def _export(self, records: list[SpanRecord]) -> None:
        batch = EncodedBatch(records, self.header)
        for index, exporter in enumerate(self._exporters):
            if self._broken[index]:
                self.failed[index] += len(records)
                continue
            try:
                result = exporter.export(batch)
            except Exception:  # noqa: BLE001 - an exporter bug is a failed export, not a crash
                _log.debug("span exporter raised", exc_info=True)
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                self.delivered[index] += len(records)
            else:
                self.failed[index] += len(records)
                self._broken[index] = True

    # --- end --------------------------------------------------------------------------------------

    def force_flush(self) -> None:
        """Hand the partial batch to the worker now (it is exported in order)."""
        partial = self._batches.take_partial()
        if partial is not None:
            self._queue.put(partial)

    def shutdown(self) -> list[int]:
        """Export everything that waits, stop the worker, shut the exporters down.

        Returns the spans each exporter accepted (in the order given). Idempotent.
        """
        if not self._batches.closed:
            self._batches.closed = True
            self.force_flush()
            self._queue.put(_STOP)
            self._worker.join()
            for exporter in self._exporters:
                try:
                    exporter.shutdown()
                except Exception:  # noqa: BLE001
                    _log.debug("span exporter shutdown failed", exc_info=True)
        return list(self.delivered)


def grpc_span_exporter(**kwargs: Any) -> SpanExporter:
    """The exporter library's OTLP/gRPC span exporter, reading a direct batch's prebuilt request.

    Takes the same keyword arguments as ``OTLPSpanExporter`` (endpoint, headers, timeout,
    compression, credentials, ...; unset ones come from the ``OTEL_EXPORTER_OTLP_*`` variables).
    Any other span sequence is encoded by the library's own encoder, as usual.
    """
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    class DirectGrpcSpanExporter(OTLPSpanExporter):
        def _initialize_channel_and_stub(self) -> None:
            super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
            self._client: Any = _PrebuiltExportStub(self._channel)

        def _translate_data(self, data: Sequence[ReadableSpan]) -> Any:
            if isinstance(data, EncodedBatch):
                return data.request_bytes()
            return super()._translate_data(data)

    return DirectGrpcSpanExporter(**kwargs)


def _request_wire(request: bytes | Any) -> bytes:
    return request if isinstance(request, bytes) else request.SerializeToString()


class _PrebuiltExportStub:
    """The trace service's ``Export`` call, taking a request message or its serialized bytes."""

    def __init__(self, channel: Any) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        method = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].methods_by_name["Export"]
        self.Export = channel.unary_unary(
            f"/{method.containing_service.full_name}/{method.name}",
            request_serializer=_request_wire,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )


def http_span_exporter(**kwargs: Any) -> SpanExporter:
    """The exporter library's OTLP/HTTP (protobuf) span exporter, sending a direct batch's prebuilt request.

    Takes the same keyword arguments as that ``OTLPSpanExporter`` (endpoint, headers, timeout,
    compression, ``_transport``, ...; unset ones come from the ``OTEL_EXPORTER_OTLP_*``
    variables). A direct batch's request is serialized once and handed to the library's own HTTP
    client, so its compression, retries, headers, timeout, size limit and transport all apply;
    any other span sequence goes through the library's whole ``export``.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    class DirectHttpSpanExporter(OTLPSpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            client = getattr(self, "_client", None)
            if not isinstance(spans, EncodedBatch) or self._shutdown or client is None:
                return super().export(spans)
            with self._metrics.export_operation(len(spans)) as result:
                data = spans.request_bytes()
                limit = getattr(self, "_max_request_size", 0)
                if 0 < limit < len(data):
                    # The library's rule: a request over the limit is dropped whole, as a failure.
                    _log.warning("span batch of %d bytes exceeds max_request_size %d", len(data), limit)
                    result.error = ValueError(f"the request is {len(data)} bytes, over {limit}")
                    return SpanExportResult.FAILURE
                sent = client.export(data)
                if not sent.success:
                    result.error = sent.error
                    return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    return DirectHttpSpanExporter(**kwargs)


def export_events_direct(
    events: Iterable[EventLike],
    exporters: SpanExporter | Sequence[SpanExporter],
    *,
    outcome: RunOutcome | BaseException | None = None,
    patterns: Sequence[str] | None = None,
    masker: SecretMasker | None = None,
    run_id: str | None = None,
    resource: Resource | None = None,
    id_generator: IdGenerator | None = None,
    limits: SpanLimits | None = None,
    sinks: Sequence[Sink] = (),
    conventions: Iterable[str] = semconv.DEFAULT_CONVENTIONS,
    parentage: Parentage = NO_PARENT,
    meter: Meter | None = None,
    aggregator: MetricsAggregator | None = None,
) -> int:
    """Map a recorded stream straight onto ``exporters`` (no tracer); returns the spans created.

    Every span is exported before this returns (the exporters are shut down). ``sinks`` are fed
    the same pass; ``conventions`` as for :func:`~rulvar_otel.otel.exporter.create_mapper`;
    ``parentage`` is the resolved ``parent=``. A ``meter`` gets a recorder, an ``aggregator`` (a
    :class:`~rulvar_otel.otel.direct_metrics.MetricsAggregator`; give it the same ``masker``) a
    run, both with exemplars naming the mapper's spans (an aggregator passed in ``sinks`` has no
    spans to name). A bad ``patterns``
    raises ``ConfigError`` before anything is exported; an exception raised by ``events`` is
    raised again once every span ended.
    """
    if masker is None:
        masker = compile_secret_masker(patterns)
    targets = [exporters] if isinstance(exporters, SpanExporter) else list(exporters)
    sink = DirectSpanSink(targets, resource=resource)
    tracer = sink.tracer(id_generator=id_generator, limits=limits)
    mapper = SpanMapper(tracer, masker, run_id=run_id, conventions=conventions, parentage=parentage)
    extra = list(sinks)
    if meter is not None:
        from rulvar_otel.otel.metrics import MetricsRecorder

        extra.append(MetricsRecorder(meter, masker, spans=mapper))
    if aggregator is not None:
        extra.append(aggregator.run(spans=mapper))
    try:
        drained = drain_events(events, mapper, *extra, outcome=outcome)
    finally:
        sink.shutdown()
    if drained.source_error is not None:
        raise drained.source_error
    return mapper.span_count
