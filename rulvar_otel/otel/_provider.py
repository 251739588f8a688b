"""The CLI's own TracerProvider: where spans go, sized so nothing is dropped, and bounded in time.

A host that passes its own tracer to ``to_otel`` keeps its own provider, limits and exporters;
this module is for ``rulvar-otel`` commands (and hosts that want the same behaviour).

Destination, in order: explicit options (``endpoint``, ``protocol``, ``headers``), then the
standard ``OTEL_EXPORTER_OTLP_TRACES_*`` and ``OTEL_EXPORTER_OTLP_*`` variables. With no
endpoint from either, the embedded default writes OTLP/JSON lines to a file. ``out`` adds a file
beside an endpoint.

No span and no span event is dropped: the span-event limit is lifted unless
``OTEL_SPAN_EVENT_COUNT_LIMIT`` is set, the sampler is always-on, and the batch queue holds
:data:`DEFAULT_MAX_QUEUE_SIZE` spans unless ``OTEL_BSP_MAX_QUEUE_SIZE`` says otherwise. A dead
endpoint costs one export timeout: after the first failed batch the rest fail at once, and
:meth:`TraceDelivery.finish` reports it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Tracer
from opentelemetry.util.re import parse_env_headers

from rulvar_otel.core.masking import redact_url
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import semconv
from rulvar_otel.otel._otlp_json import DEFAULT_OTLP_JSON_PATH, OtlpJsonFileExporter

__all__ = [
    "DEFAULT_EXPORT_TIMEOUT_S",
    "DEFAULT_MAX_QUEUE_SIZE",
    "PROTOCOLS",
    "DeliveryReport",
    "OtlpTarget",
    "TargetReport",
    "TraceDelivery",
    "TraceOptions",
    "build_trace_delivery",
    "parse_header",
    "resolve_otlp_target",
    "resolve_service_name",
]

Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: Final[tuple[Protocol, ...]] = ("grpc", "http/protobuf")

DEFAULT_EXPORT_TIMEOUT_S: Final = 10.0
# Enough for 30 runs the size of the 8,021-span `large` workload to queue behind a slow backend.
DEFAULT_MAX_QUEUE_SIZE: Final = 262_144
DEFAULT_MAX_EXPORT_BATCH_SIZE: Final = 512
# Ended spans wait at most this long before a partial batch goes out (live runs stay near real time).
DEFAULT_SCHEDULE_DELAY_MS: Final = 1000

_GRPC_DEFAULT_PORT: Final = 4317
_EXPORTER_LOGGER: Final = "opentelemetry.exporter.otlp"


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """Where and how the CLI sends spans; ``None`` fields fall back to the environment."""

    endpoint: str | None = None
    protocol: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    out: Path | None = None
    service_name: str | None = None
    timeout_s: float | None = None
    collect_spans: bool = False
    # RulvarIdGenerator for --deterministic-ids; None keeps the SDK's random ids.
    id_generator: IdGenerator | None = None


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    """A resolved OTLP endpoint."""

    protocol: Protocol
    endpoint: str
    headers: Mapping[str, str]
    timeout_s: float

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


def _env(environ: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def parse_header(text: str) -> tuple[str, str]:
    """``"K=V"`` -> ``("k", "V")``; header names are case-insensitive (gRPC wants lowercase)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"header {text.split('=', 1)[0]!r} must be given as KEY=VALUE")
    return key.lower(), value.strip()


def _check_endpoint(url: str, origin: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"{origin} must be an http:// or https:// URL with a host, e.g. http://localhost:4317 "
            f"(got {redact_url(url)!r})"
        )
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ConfigError(f"{origin} has an invalid port (got {redact_url(url)!r})") from exc


def _timeout_from_env(environ: Mapping[str, str]) -> float | None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        raw = _env(environ, name)
        if raw is None:
            continue
        try:
            millis = float(raw)
        except ValueError as exc:
            raise ConfigError(f"{name} must be a number of milliseconds (got {raw!r})") from exc
        if not millis > 0 or millis == float("inf"):
            raise ConfigError(f"{name} must be a positive number of milliseconds (got {raw!r})")
        return millis / 1000.0
    return None


def resolve_otlp_target(options: TraceOptions, environ: Mapping[str, str] | None = None) -> OtlpTarget | None:
    """The OTLP endpoint the options and environment configure, or ``None`` for the embedded default.

    Raises :class:`ConfigError` for an unknown protocol, an endpoint that is not an http(s) URL,
    a malformed header or a non-positive timeout.
    """
    env = os.environ if environ is None else environ
    explicit = options.endpoint.strip() if options.endpoint else None
    traces_env = _env(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base_env = _env(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if explicit:
        endpoint, origin, is_base = explicit, "--endpoint", True
    elif traces_env:
        endpoint, origin, is_base = traces_env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", False
    elif base_env:
        endpoint, origin, is_base = base_env, "OTEL_EXPORTER_OTLP_ENDPOINT", True
    else:
        return None
    _check_endpoint(endpoint, origin)

    raw_protocol = options.protocol or _env(
        env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    protocol: Protocol
    if raw_protocol is None:
        # The spec's default is http/protobuf; port 4317 is gRPC's well-known port, so a bare
        # collector address there means gRPC.
        protocol = "grpc" if urlsplit(endpoint).port == _GRPC_DEFAULT_PORT else "http/protobuf"
    elif raw_protocol == "grpc":
        protocol = "grpc"
    elif raw_protocol == "http/protobuf":
        protocol = "http/protobuf"
    else:
        raise ConfigError(f"protocol must be one of grpc, http/protobuf (got {raw_protocol!r})")

    if protocol == "http/protobuf" and is_base:
        parts = urlsplit(endpoint)
        # A base URL gets the signal path, as the OTLP spec does for OTEL_EXPORTER_OTLP_ENDPOINT;
        # an explicit --endpoint with a path is taken as the full traces URL.
        if origin == "OTEL_EXPORTER_OTLP_ENDPOINT" or parts.path in ("", "/"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"

    headers: dict[str, str] = {}
    env_headers = _env(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
    if env_headers:
        headers.update({k.lower(): v for k, v in parse_env_headers(env_headers, liberal=True).items()})
    headers.update({k.lower(): v for k, v in options.headers.items()})

    timeout = options.timeout_s if options.timeout_s is not None else _timeout_from_env(env)
    if timeout is None:
        timeout = DEFAULT_EXPORT_TIMEOUT_S
    if not timeout > 0 or timeout == float("inf"):
        raise ConfigError(f"the export timeout must be a positive number of seconds (got {timeout!r})")
    return OtlpTarget(protocol=protocol, endpoint=endpoint, headers=headers, timeout_s=timeout)


def resolve_service_name(options: TraceOptions, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return options.service_name or _env(env, "OTEL_SERVICE_NAME") or semconv.DEFAULT_SERVICE_NAME


def _make_otlp_exporter(target: OtlpTarget) -> SpanExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=target.endpoint,
            insecure=urlsplit(target.endpoint).scheme == "http",
            headers=dict(target.headers),
            timeout=target.timeout_s,
            # The collector's default limit is 4 MiB; the gRPC client's own send limit must not
            # be the thing that drops a batch.
            channel_options=(("grpc.max_send_message_length", -1),),  # type: ignore[arg-type]
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(endpoint=target.endpoint, headers=dict(target.headers), timeout=target.timeout_s)


class _TrackedExporter(SpanExporter):
    """Counts what one destination accepted; after the first failure, fails the rest at once.

    Failing fast bounds a dead endpoint's cost to one export timeout instead of one per batch;
    the export has failed either way.
    """

    def __init__(self, inner: SpanExporter, target: str) -> None:
        self._inner = inner
        self.target = target
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.broken = False
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
            self.error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.delivered += len(spans)
            else:
                self.failed += len(spans)
                self.broken = True
                if self.error is None:
                    self.error = getattr(self._inner, "error", None)
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._inner.shutdown()


class _Recorder(SpanProcessor):
    """Counts ended spans (what every destination must receive) and optionally keeps them."""

    def __init__(self, keep: bool) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self.ended = 0
        self.spans: list[ReadableSpan] = []
        self.trace_ids: set[int] = set()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended += 1
            if span.context is not None:
                self.trace_ids.add(span.context.trace_id)
            if self._keep:
                self.spans.append(span)


class _ErrorCapture(logging.Handler):
    """Keeps the OTLP exporters' last error line instead of letting it reach stderr raw."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last_error: str | None = None
        self.last_warning: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log record must not break export
            message = str(record.msg)
        if record.levelno >= logging.ERROR:
            self.last_error = message
        elif "Transient error" in message:
            self.last_warning = message

    def describe(self) -> str | None:
        if self.last_error and self.last_warning:
            return f"{self.last_error} (last attempt: {self.last_warning})"
        return self.last_error or self.last_warning


class TraceDelivery:
    """A TracerProvider wired to its destinations; call :meth:`finish` exactly once."""

    def __init__(
        self,
        provider: TracerProvider,
        exporters: Sequence[_TrackedExporter],
        processors: Sequence[BatchSpanProcessor],
        recorder: _Recorder,
        capture: _ErrorCapture,
        otlp: OtlpTarget | None,
        file_path: Path | None,
    ) -> None:
        self.provider = provider
        self.otlp = otlp
        self.file_path = file_path
        self._exporters = tuple(exporters)
        self._processors = tuple(processors)
        self._recorder = recorder
        self._capture = capture
        self._logger = logging.getLogger(_EXPORTER_LOGGER)
        self._saved_propagate = self._logger.propagate
        self._logger.addHandler(capture)
        self._logger.propagate = False
        self._report: DeliveryReport | None = None

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer(
            semconv.INSTRUMENTATION_SCOPE, semconv.INSTRUMENTATION_VERSION, schema_url=semconv.SCHEMA_URL
        )

    @property
    def spans(self) -> list[ReadableSpan]:
        """Every ended span, when the delivery was built with ``collect_spans``."""
        return list(self._recorder.spans)

    @property
    def spans_ended(self) -> int:
        return self._recorder.ended

    @property
    def trace_ids(self) -> list[str]:
        """The hex trace ids of the ended spans (one per run when parentage is intact)."""
        return sorted(format(t, "032x") for t in self._recorder.trace_ids)

    def finish(self) -> DeliveryReport:
        """Flush every queued span, shut the provider down, and report what arrived where."""
        if self._report is not None:
            return self._report
        try:
            for processor in self._processors:
                # Exports whatever is queued, batch by batch; each batch is bounded by the timeout.
                processor.force_flush()
            self.provider.shutdown()
        finally:
            self._logger.removeHandler(self._capture)
            self._logger.propagate = self._saved_propagate
        targets = tuple(
            TargetReport(
                target=e.target,
                delivered=e.delivered,
                failed=e.failed,
                error=e.error or (self._capture.describe() if e.broken else None),
            )
            for e in self._exporters
        )
        self._report = DeliveryReport(spans_ended=self._recorder.ended, targets=targets)
        return self._report


def _queue_size(environ: Mapping[str, str]) -> int:
    raw = _env(environ, "OTEL_BSP_MAX_QUEUE_SIZE")
    if raw is None:
        return DEFAULT_MAX_QUEUE_SIZE
    try:
        size = int(raw)
    except ValueError as exc:
        raise ConfigError(f"OTEL_BSP_MAX_QUEUE_SIZE must be an integer (got {raw!r})") from exc
    if size < 1:
        raise ConfigError(f"OTEL_BSP_MAX_QUEUE_SIZE must be positive (got {raw!r})")
    return size


def _batch_size(environ: Mapping[str, str], queue: int) -> int:
    raw = _env(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
    size = DEFAULT_MAX_EXPORT_BATCH_SIZE
    if raw is not None:
        try:
            size = int(raw)
        except ValueError as exc:
            raise ConfigError(f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be an integer (got {raw!r})") from exc
        if size < 1:
            raise ConfigError(f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be positive (got {raw!r})")
    return min(size, queue)


def _span_limits(environ: Mapping[str, str]) -> SpanLimits:
    # The SDK keeps 128 events per span by default; the run span of a long run carries thousands.
    raw = _env(environ, "OTEL_SPAN_EVENT_COUNT_LIMIT")
    if raw is None:
        return SpanLimits(max_events=SpanLimits.UNSET)
    try:
        limit = int(raw)
    except ValueError as exc:
        raise ConfigError(f"OTEL_SPAN_EVENT_COUNT_LIMIT must be an integer (got {raw!r})") from exc
    if limit < 0:
        raise ConfigError(f"OTEL_SPAN_EVENT_COUNT_LIMIT must not be negative (got {raw!r})")
    return SpanLimits(max_events=limit)


def build_trace_delivery(
    options: TraceOptions | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    default_path: str | Path = DEFAULT_OTLP_JSON_PATH,
) -> TraceDelivery:
    """Build the provider for one export (see the module docstring for the rules).

    Raises :class:`ConfigError` for bad options or environment, or an unwritable ``out`` file,
    before any span exists.
    """
    opts = options or TraceOptions()
    env = os.environ if environ is None else environ
    otlp = resolve_otlp_target(opts, env)
    file_path = opts.out if opts.out is not None else (Path(default_path) if otlp is None else None)
    queue = _queue_size(env)
    batch = _batch_size(env, queue)

    exporters: list[_TrackedExporter] = []
    if otlp is not None:
        exporters.append(_TrackedExporter(_make_otlp_exporter(otlp), otlp.describe()))
    if file_path is not None:
        exporters.append(_TrackedExporter(OtlpJsonFileExporter(file_path), f"file {file_path}"))

    resource = Resource.create({SERVICE_NAME: resolve_service_name(opts, env)})
    provider = TracerProvider(
        resource=resource, sampler=ALWAYS_ON, span_limits=_span_limits(env), id_generator=opts.id_generator
    )
    recorder = _Recorder(keep=opts.collect_spans)
    # The recorder is registered first so a span is counted before any destination can see it.
    provider.add_span_processor(recorder)
    processors: list[BatchSpanProcessor] = []
    for exporter in exporters:
        processor = BatchSpanProcessor(
            exporter,
            max_queue_size=queue,
            max_export_batch_size=batch,
            schedule_delay_millis=DEFAULT_SCHEDULE_DELAY_MS,
        )
        provider.add_span_processor(processor)
        processors.append(processor)
    return TraceDelivery(provider, exporters, processors, recorder, _ErrorCapture(), otlp, file_path)
