"""Trace delivery: the TracerProvider an export writes through, its destinations and its report.

Destination, in order: explicit options (``endpoint``, ``protocol``, ``headers``), then the
standard ``OTEL_EXPORTER_OTLP_TRACES_*`` and ``OTEL_EXPORTER_OTLP_*`` variables (see
``_settings``). With no endpoint from either, the embedded default writes OTLP/JSON lines to a
file; ``out`` adds a file beside an endpoint. A file is written beside its target under a
temporary name and renamed over it only when the export succeeded, so a failed run never
destroys earlier output.

Nothing is dropped: the sampler is always-on, the span-event limit is lifted unless
``OTEL_SPAN_EVENT_COUNT_LIMIT`` is set, and a full batch queue makes the producer wait
(backpressure) instead of discarding. Values are bounded instead: attribute values and span names
keep at most :data:`DEFAULT_VALUE_LENGTH_LIMIT` characters unless
``OTEL_(SPAN_)ATTRIBUTE_VALUE_LENGTH_LIMIT`` says otherwise. A dead endpoint costs one export
timeout: after the first failed batch the rest fail at once, and :meth:`TraceDelivery.finish`
reports it. Delivered means kept: spans a receiver rejects in an OTLP ``partial_success`` are
counted as not delivered, and every OTLP answer is bounded in time and size (``_transport``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Tracer

from rulvar_otel.core.masking import SecretMasker, compile_secret_masker, default_masker, redact_url
from rulvar_otel.errors import ConfigError
from rulvar_otel.export._batching import BlockingBatchSpanProcessor
from rulvar_otel.export._options import ExportOptions
from rulvar_otel.export._otlp_json import DEFAULT_OTLP_JSON_PATH, OtlpJsonFileExporter
from rulvar_otel.export._settings import (
    Compression,
    Protocol,
    env_value,
    read_compression,
    read_headers,
    read_int,
    read_millis,
    resolve_endpoint,
    resolve_protocol,
    with_signal_path,
)
from rulvar_otel.export._transport import (
    DeliveryInterrupt,
    DeliveryInterruptedError,
    Rejections,
    tls_settings,
)
from rulvar_otel.otel import semconv
from rulvar_otel.otel._resource import compose_resource
from rulvar_otel.otel.ids import RulvarIdGenerator

__all__ = [
    "DEFAULT_EXPORT_TIMEOUT_S",
    "Destinations",
    "delivery_report",
    "resolve_destinations",
    "DEFAULT_MAX_QUEUE_SIZE",
    "DEFAULT_VALUE_LENGTH_LIMIT",
    "PROJECT_ATTRIBUTE",
    "DeliveryReport",
    "OtlpTarget",
    "TargetReport",
    "TraceDelivery",
    "build_trace_delivery",
    "check_output_is_not_input",
    "resolve_otlp_target",
    "resolve_project",
    "resolve_service_name",
]

DEFAULT_EXPORT_TIMEOUT_S: Final = 10.0
# Spans waiting for a destination; a full queue applies backpressure, so this bounds memory only.
DEFAULT_MAX_QUEUE_SIZE: Final = 8192
DEFAULT_MAX_EXPORT_BATCH_SIZE: Final = 512
# Ended spans wait at most this long before a partial batch goes out (live runs stay near real time).
DEFAULT_SCHEDULE_DELAY_S: Final = 1.0
# Characters kept of an attribute value, a span-event attribute value and a span name.
DEFAULT_VALUE_LENGTH_LIMIT: Final = 16_384
# Spans kept for the report beyond the roots (a terminal tree shows a few hundred rows anyway).
MAX_KEPT_SPANS: Final = 20_000
# Phoenix files traces under this resource attribute's value.
PROJECT_ATTRIBUTE: Final = semconv.OPENINFERENCE_PROJECT_NAME


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    """A resolved OTLP endpoint."""

    protocol: Protocol
    endpoint: str
    headers: Mapping[str, str]
    timeout_s: float
    compression: Compression = "none"

    def describe(self) -> str:
        return f"OTLP {self.protocol} endpoint {redact_url(self.endpoint)}"


@dataclass(frozen=True, slots=True)
class TargetReport:
    """What one destination received."""

    target: str
    delivered: int
    failed: int
    error: str | None


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """How an export went, known once :meth:`TraceDelivery.finish` returned."""

    spans_ended: int
    targets: tuple[TargetReport, ...]
    written: tuple[Path, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(t.error is None and t.delivered == self.spans_ended for t in self.targets)

    def problems(self) -> list[str]:
        """One sentence per destination that did not receive every span."""
        out: list[str] = []
        for t in self.targets:
            if t.error is None and t.delivered == self.spans_ended:
                continue
            missing = self.spans_ended - t.delivered
            detail = f": {t.error}" if t.error else ""
            out.append(f"{missing} of {self.spans_ended} spans were not delivered to {t.target}{detail}")
        return out


def resolve_otlp_target(
    options: ExportOptions, environ: Mapping[str, str] | None = None
) -> OtlpTarget | None:
    """The OTLP endpoint the options and environment configure, or ``None`` for the embedded default.

    Raises :class:`ConfigError` for an unknown protocol, an endpoint that is not an http(s) URL,
    a non-positive timeout or a compression other than gzip and none.
    """
    env = os.environ if environ is None else environ
    found = resolve_endpoint(options.endpoint, "TRACES", env)
    if found is None:
        return None
    endpoint, origin, is_base = found
    protocol = resolve_protocol(options.protocol, endpoint, "TRACES", env)
    # A base URL gets the signal path, as the OTLP spec does for OTEL_EXPORTER_OTLP_ENDPOINT;
    # an explicit endpoint with a path is taken as the full traces URL.
    bare = origin == "OTEL_EXPORTER_OTLP_ENDPOINT" or urlsplit(endpoint).path in ("", "/")
    if protocol == "http/protobuf" and is_base and bare:
        endpoint = with_signal_path(endpoint, "/v1/traces")
    headers = read_headers(env, "TRACES")
    headers.update({k.lower(): v for k, v in options.headers.items()})
    timeout = options.export_timeout_s
    if timeout is None:
        timeout = read_millis(env, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    return OtlpTarget(
        protocol=protocol,
        endpoint=endpoint,
        headers=headers,
        timeout_s=timeout if timeout is not None else DEFAULT_EXPORT_TIMEOUT_S,
        # Passed to the exporter explicitly: the library reads only os.environ, this reads ``env``.
        compression=read_compression(env, "TRACES"),
    )


def _masker(options: ExportOptions) -> SecretMasker:
    return compile_secret_masker(options.patterns) if options.patterns else default_masker()


def resolve_service_name(options: ExportOptions, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    found = env_value(env, "OTEL_SERVICE_NAME")
    return options.service_name or (found[1] if found else None) or semconv.DEFAULT_SERVICE_NAME


def resolve_project(options: ExportOptions, environ: Mapping[str, str] | None = None) -> str | None:
    """The ``openinference.project.name`` to set: the project, else a service name someone chose."""
    if not options.openinference:
        return options.project
    env = os.environ if environ is None else environ
    found = env_value(env, "OTEL_SERVICE_NAME")
    return options.project or options.service_name or (found[1] if found else None)


def _make_otlp_exporter(
    target: OtlpTarget,
    rejections: Rejections,
    env: Mapping[str, str],
    interrupt: DeliveryInterrupt,
    *,
    direct: bool = False,
) -> SpanExporter:
    """The OTLP exporter for ``target``, recording ``partial_success`` rejections.

    HTTP is the library's exporter over :class:`BoundedHttpTransport` (time, size and redirect
    bounds); ``direct`` picks its subclass that sends a direct batch's prebuilt request. gRPC is
    :class:`GrpcSpanSender` (the same exchange without the library's all-signal imports), whose
    answer is bounded by its receive limit and its deadline.
    """
    gzip = target.compression == "gzip"
    if target.protocol == "grpc":
        from rulvar_otel.export._grpc_transport import GrpcSpanSender

        verify, cert = tls_settings(env, "TRACES")
        return GrpcSpanSender(
            target.endpoint,
            headers=target.headers,
            timeout_s=target.timeout_s,
            gzip=gzip,
            rejections=rejections,
            interrupt=interrupt,
            verify=verify,
            cert=cert,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from rulvar_otel.export._http_transport import BoundedHttpTransport
    from rulvar_otel.otel.direct import http_span_exporter

    verify, cert = tls_settings(env, "TRACES")
    transport = BoundedHttpTransport(
        ExportTraceServiceResponse,
        "rejected_spans",
        rejections,
        verify=verify,
        cert=cert,
        interrupt=interrupt,
    )
    make_http: Callable[..., SpanExporter] = http_span_exporter if direct else HttpSpanExporter
    return make_http(
        endpoint=target.endpoint,
        headers=dict(target.headers),
        timeout=target.timeout_s,
        compression=HttpCompression.Gzip if gzip else HttpCompression.NoCompression,
        _transport=transport,
    )


class _TrackedExporter(SpanExporter):
    """Counts what one destination accepted; after the first failure, fails the rest at once.

    Failing fast bounds a dead endpoint's cost to one export timeout instead of one per batch;
    the export has failed either way.
    """

    def __init__(self, inner: SpanExporter, target: str, rejections: Rejections | None = None) -> None:
        self._inner = inner
        self.target = target
        self._rejections = rejections
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.broken = False
        self.rejected = 0
        self.error: str | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.broken:
            with self._lock:
                self.failed += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self._inner.export(spans)
        except Exception as exc:  # noqa: BLE001 - an exporter bug is a failed export, not a crash
            result = SpanExportResult.FAILURE
            interrupted = isinstance(exc, DeliveryInterruptedError)
            self.error = str(exc) if interrupted else f"{type(exc).__name__}: {exc}"
        rejected, why = self._rejections.take() if self._rejections is not None else (0, None)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                # partial_success: the receiver answered, but did not keep every span.
                rejected = min(rejected, len(spans))
                self.delivered += len(spans) - rejected
                if rejected:
                    self.failed += rejected
                    self.rejected += rejected
                    said = f" ({why})" if why else ""
                    self.error = f"the receiver rejected {self.rejected} spans{said}"
            else:
                self.failed += len(spans)
                self.broken = True
                if self.error is None:
                    self.error = _transport_error(self._inner)
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._inner.shutdown()


def _transport_error(exporter: SpanExporter) -> str | None:
    """Why the exporter's last exchange failed, when its transport knows (the HTTP one does)."""
    found = getattr(exporter, "error", None)
    if isinstance(found, str):
        return found
    client = getattr(exporter, "_client", None)
    transport = getattr(client, "_transport", None)
    error = getattr(transport, "last_error", None)
    return error if isinstance(error, str) else None


class _Recorder(SpanProcessor):
    """Counts ended spans (what every destination must receive); bounds names; keeps a few spans."""

    def __init__(self, keep: int, name_limit: int | None) -> None:
        self._keep = keep
        self._name_limit = name_limit
        self._lock = threading.Lock()
        self.ended = 0
        self.spans: list[ReadableSpan] = []
        self.trace_ids: dict[int, None] = {}  # insertion-ordered set

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # SpanLimits bound attribute values but not the name; a name is a value too.
        if self._name_limit is not None and len(span.name) > self._name_limit:
            span.update_name(span.name[: self._name_limit])

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
            if span.context is not None:
                self.trace_ids.setdefault(span.context.trace_id)
            if self._keep and (len(self.spans) < self._keep or span.parent is None):
                self.spans.append(span)


class TraceDelivery:
    """A TracerProvider wired to its destinations; call :meth:`finish` exactly once."""

    def __init__(
        self,
        provider: TracerProvider,
        exporters: Sequence[_TrackedExporter],
        processors: Sequence[BlockingBatchSpanProcessor],
        recorder: _Recorder,
        otlp: OtlpTarget | None,
        files: Sequence[tuple[OtlpJsonFileExporter, _TrackedExporter]],
    ) -> None:
        self.provider = provider
        self.otlp = otlp
        self._exporters = tuple(exporters)
        self._processors = tuple(processors)
        self._recorder = recorder
        self._files = tuple(files)
        self._report: DeliveryReport | None = None
        # Gives in-flight OTLP exchanges ``grace_s`` more, then cuts them (a Ctrl-C).
        self.interrupt: Callable[[float], None] = lambda grace_s: None

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, semconv.INSTRUMENTATION_VERSION, schema_url=semconv.SCHEMA_URL
        )

    @property
    def file_path(self) -> Path | None:
        """The file this delivery writes (renamed into place by :meth:`finish`), if any."""
        return self._files[0][0].path if self._files else None

    @property
    def spans(self) -> list[ReadableSpan]:
        """The ended spans kept for the report (roots always, others up to a bound)."""
        return list(self._recorder.spans)

    @property
    def spans_ended(self) -> int:
        return self._recorder.ended

    @property
    def trace_ids(self) -> list[str]:
        """The hex trace ids of the ended spans, in the order they were first seen."""
        return [format(t, "032x") for t in self._recorder.trace_ids]

    @property
    def backpressure_waits(self) -> int:
        """How often span production waited for a destination to catch up."""
        return sum(p.waits for p in self._processors)

    def finish(self, *, keep_output: bool = True) -> DeliveryReport:
        """Flush every queued span, shut the provider down, and report what arrived where.

        A file that received every span is renamed into place when ``keep_output``; otherwise
        its temporary file is removed and any earlier file at the target is left untouched.
        """
        if self._report is not None:
            return self._report
        for processor in self._processors:
            # Exports whatever is queued, batch by batch; each batch is bounded by the timeout.
            processor.force_flush()
        self.provider.shutdown()
        self._report = delivery_report(self._exporters, self._files, self._recorder.ended, keep_output)
        return self._report


def delivery_report(
    exporters: Sequence[_TrackedExporter],
    files: Sequence[tuple[OtlpJsonFileExporter, _TrackedExporter]],
    spans_ended: int,
    keep_output: bool,
) -> DeliveryReport:
    """Keep or discard each file output, then report what arrived where (every span pipeline).

    A file that received every span is renamed into place when ``keep_output``; otherwise its
    temporary file is removed and any earlier file at the target is left untouched.
    """
    written: list[Path] = []
    for exporter, tracked in files:
        complete = tracked.error is None and tracked.delivered == spans_ended
        if keep_output and complete and exporter.commit():
            if exporter.path is not None:
                written.append(exporter.path)
        else:
            exporter.discard()
    targets = tuple(
        TargetReport(target=e.target, delivered=e.delivered, failed=e.failed, error=e.error)
        for e in exporters
    )
    return DeliveryReport(spans_ended=spans_ended, targets=targets, written=tuple(written))


def _span_limits(env: Mapping[str, str]) -> tuple[SpanLimits, int]:
    events = read_int(env, "OTEL_SPAN_EVENT_COUNT_LIMIT", minimum=0)
    span_length = read_int(env, "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", minimum=1)
    any_length = read_int(env, "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", minimum=1)
    length = span_length or any_length or DEFAULT_VALUE_LENGTH_LIMIT
    # The SDK keeps 128 events per span by default; the run span of a long run carries thousands.
    limits = SpanLimits(
        max_events=events if events is not None else SpanLimits.UNSET,
        max_span_attribute_length=length,
        max_attribute_length=length,
    )
    return limits, length


@dataclass(frozen=True, slots=True)
class Destinations:
    """Where one export's spans go and under which limits: the same for every span pipeline."""

    otlp: OtlpTarget | None
    exporters: tuple[_TrackedExporter, ...]
    files: tuple[tuple[OtlpJsonFileExporter, _TrackedExporter], ...]
    resource: Resource
    limits: SpanLimits
    name_limit: int
    queue: int
    batch: int
    # A Ctrl-C cuts the OTLP exchanges through this (see _transport.DeliveryInterrupt).
    interrupt: DeliveryInterrupt = field(default_factory=DeliveryInterrupt)


def resolve_destinations(
    options: ExportOptions,
    *,
    environ: Mapping[str, str] | None = None,
    default_path: str | Path = DEFAULT_OTLP_JSON_PATH,
    direct: bool = False,
) -> Destinations:
    """The exporters, resource, span limits and batching ``options`` and the environment ask for.

    ``direct`` builds the OTLP exporters that send a direct batch's prebuilt request (the same
    exporter classes and settings). Raises :class:`ConfigError` as :func:`build_trace_delivery`.
    """
    env = os.environ if environ is None else environ
    otlp = resolve_otlp_target(options, env)
    file_path = options.out if options.out is not None else (Path(default_path) if otlp is None else None)
    queue = read_int(env, "OTEL_BSP_MAX_QUEUE_SIZE", minimum=1) or DEFAULT_MAX_QUEUE_SIZE
    batch = read_int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", minimum=1) or DEFAULT_MAX_EXPORT_BATCH_SIZE
    limits, name_limit = _span_limits(env)

    exporters: list[_TrackedExporter] = []
    files: list[tuple[OtlpJsonFileExporter, _TrackedExporter]] = []
    interrupt = DeliveryInterrupt()
    if otlp is not None:
        rejections = Rejections()
        exporter = _make_otlp_exporter(otlp, rejections, env, interrupt, direct=direct)
        exporters.append(_TrackedExporter(exporter, otlp.describe(), rejections))
    if file_path is not None:
        file_exporter = OtlpJsonFileExporter(file_path, atomic=True)
        tracked = _TrackedExporter(file_exporter, f"file {file_path}")
        files.append((file_exporter, tracked))
        exporters.append(tracked)

    attributes: dict[str, str] = {SERVICE_NAME: resolve_service_name(options, env)}
    project = resolve_project(options, env)
    if project:
        attributes[PROJECT_ATTRIBUTE] = project
    return Destinations(
        otlp,
        tuple(exporters),
        tuple(files),
        compose_resource(attributes, _masker(options)),
        limits,
        name_limit,
        queue,
        min(batch, queue),
        interrupt,
    )


def build_trace_delivery(
    options: ExportOptions | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    default_path: str | Path = DEFAULT_OTLP_JSON_PATH,
    keep_spans: bool = False,
) -> TraceDelivery:
    """Build the provider for one export (see the module docstring for the rules).

    ``keep_spans`` keeps ended spans for the caller (every root, and up to
    :data:`MAX_KEPT_SPANS` others). Raises :class:`ConfigError` for bad options or environment,
    or an unwritable output file, before any span exists.
    """
    opts = options or ExportOptions()
    found = resolve_destinations(opts, environ=environ, default_path=default_path)
    otlp, exporters, files = found.otlp, found.exporters, found.files
    interrupt = found.interrupt
    queue, batch, limits, name_limit = found.queue, found.batch, found.limits, found.name_limit
    provider = TracerProvider(
        resource=found.resource,
        sampler=ALWAYS_ON,
        span_limits=limits,
        id_generator=RulvarIdGenerator() if opts.deterministic_ids else None,
    )
    recorder = _Recorder(keep=MAX_KEPT_SPANS if keep_spans else 0, name_limit=name_limit)
    # The recorder is registered first so a span is counted before any destination can see it.
    provider.add_span_processor(recorder)
    processors: list[BlockingBatchSpanProcessor] = []
    for exporter in exporters:
        processor = BlockingBatchSpanProcessor(
            exporter, max_queue_size=queue, batch_size=batch, schedule_delay_s=DEFAULT_SCHEDULE_DELAY_S
        )
        provider.add_span_processor(processor)
        processors.append(processor)
    delivery = TraceDelivery(provider, exporters, processors, recorder, otlp, files)
    delivery.interrupt = interrupt.interrupt
    return delivery


def check_output_is_not_input(
    options: ExportOptions, source: str | int, environ: Mapping[str, str] | None = None
) -> None:
    """:class:`ConfigError` when the file this export would write is ``source`` itself.

    ``source`` is the input's path, or its file descriptor (``0`` for stdin: ``--out /dev/stdin``
    on a piped stream would write into the pipe it reads).
    """
    env = os.environ if environ is None else environ
    candidate = options.out
    if candidate is None and resolve_endpoint(options.endpoint, "TRACES", env) is None:
        candidate = Path(DEFAULT_OTLP_JSON_PATH)
    if candidate is None:
        return
    try:
        if candidate.exists():
            written = candidate.stat()
            read = os.fstat(source) if isinstance(source, int) else os.stat(source)
            same = (written.st_dev, written.st_ino) == (read.st_dev, read.st_ino)
        else:
            same = False
    except OSError:
        same = False
    if same:
        raise ConfigError(f"the output file {candidate} is the input stream; choose another output file")
