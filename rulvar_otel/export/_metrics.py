"""Metrics delivery: a MeterProvider pushing OTLP (gRPC or HTTP) and/or serving Prometheus.

Everything that talks to the network is bounded: the OTLP exporters get a timeout, periodic
export has an export timeout, and shutdown flushes within a bounded time. The Prometheus endpoint
binds the host asked for and, for a one-shot export, stays up a chosen linger after the last
event so a scraper gets at least one look at the final values. Every OTLP export's result is
kept, so a refused, hanging or failing endpoint is reported (:attr:`MetricsPipeline.problems`)
instead of being logged and forgotten. A Prometheus port that cannot be bound is a
:class:`~rulvar_otel.errors.ConfigError`: a usage problem, found before the run is read.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import urlparse
from wsgiref.simple_server import WSGIServer

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from rulvar_otel.core.masking import compile_secret_masker, redact_url
from rulvar_otel.errors import ConfigError
from rulvar_otel.export._options import ExportOptions
from rulvar_otel.export._settings import (
    Compression,
    read_compression,
    read_headers,
    read_millis,
    resolve_protocol,
    with_signal_path,
)
from rulvar_otel.export._transport import (
    MAX_RESPONSE_BYTES,
    DeliveryInterrupt,
    DeliveryInterruptedError,
    Rejections,
    capture_grpc_rejections,
    tls_settings,
)
from rulvar_otel.otel._resource import compose_resource, mask_resource
from rulvar_otel.otel.semconv import (
    DEFAULT_METRIC_CARDINALITY_LIMIT,
    DEFAULT_SERVICE_NAME,
    INSTRUMENTATION_SCOPE,
    INSTRUMENTATION_VERSION,
    SCHEMA_URL,
)

__all__ = ["MetricsPipeline", "MetricsSetup", "build_meter_provider", "build_metrics_delivery"]

Protocol = Literal["grpc", "http/protobuf"]

MAX_TIMEOUT_S: Final = 60.0
MAX_LINGER_S: Final = 3600.0
_DEFAULT_HTTP_PATH: Final = "/v1/metrics"
_REFUSED: Final = "the endpoint refused the metrics or did not answer in time"


@dataclass(frozen=True, slots=True)
class MetricsSetup:
    """Where metrics go. At least one of ``otlp_endpoint`` and ``prometheus_port`` is needed.

    ``otlp_endpoint``: an ``http(s)://host:port`` URL of an OTLP receiver (gRPC by default; for
    ``http/protobuf`` a URL without a path gets ``/v1/metrics``). ``headers`` ride every export
    (an auth token, say). ``timeout_s`` bounds each export (at most 60 s). ``export_interval_s``
    is the push period. ``prometheus_port`` serves ``/metrics`` on ``prometheus_host`` (0 picks a
    free port; the chosen one is :attr:`MetricsPipeline.prometheus_port`; ``0.0.0.0`` or ``::``
    lets a container or another machine scrape it). ``prometheus_linger_s`` keeps that endpoint
    up so long after the export, at its final values, before shutdown closes it: at least one
    scrape interval of the scraper, so a one-shot export is seen. ``cardinality_limit``: the
    attribute sets each instrument keeps before its ``otel.metric.overflow`` series.
    ``compression``: ``gzip`` or ``none`` for the OTLP exports.
    """

    otlp_endpoint: str | None = None
    otlp_protocol: Protocol = "grpc"
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    export_interval_s: float = 15.0
    prometheus_port: int | None = None
    prometheus_host: str = "127.0.0.1"
    prometheus_linger_s: float = 0.0
    service_name: str = DEFAULT_SERVICE_NAME
    cardinality_limit: int = DEFAULT_METRIC_CARDINALITY_LIMIT
    compression: Compression = "none"


class _ScrapeCounter(Collector):
    """Counts the scrapes of one endpoint (each one collects its registry once); adds no series."""

    def __init__(self) -> None:
        self.count = 0

    def collect(self) -> Iterator[Metric]:
        self.count += 1
        return iter(())

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering describes; only a scrape collects


class _TrackedMetricExporter(MetricExporter):
    """Keeps every export's result: a metrics endpoint that fails is reported, not just logged."""

    def __init__(self, inner: MetricExporter, target: str, rejections: Rejections | None = None) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self.target = target
        self._rejections = rejections
        self.exports = 0
        self.failures = 0
        self.rejected = 0
        self.error: str | None = None
        self._in_flight = 0
        self._idle = threading.Condition()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        with self._idle:
            self._in_flight += 1
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a failed export, never a crash
            result = MetricExportResult.FAILURE
            self.error = str(exc) if isinstance(exc, DeliveryInterruptedError) else type(exc).__name__
        rejected, why = self._rejections.take() if self._rejections is not None else (0, None)
        with self._idle:
            self.exports += 1
            if result is MetricExportResult.SUCCESS and rejected:
                # partial_success: the receiver answered but did not keep every data point.
                self.rejected += rejected
                self.failures += 1
                said = f" ({why})" if why else ""
                self.error = f"the receiver rejected {self.rejected} data points{said}"
            elif result is not MetricExportResult.SUCCESS:
                self.failures += 1
                transport = getattr(getattr(self._inner, "_client", None), "_transport", None)
                known = getattr(transport, "last_error", None)
                self.error = self.error or (known if isinstance(known, str) else None) or _REFUSED
            self._in_flight -= 1
            self._idle.notify_all()
        return result

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait for an export still running in the reader's thread; ``False`` on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout_s)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


@dataclass(slots=True)
class MetricsPipeline:
    """A built provider and what it started.

    ``shutdown()`` pushes what is pending, keeps the Prometheus endpoint up for the linger, then
    stops everything (bounded). ``prometheus_port`` is the bound port (also when 0 was asked for).
    Setting :attr:`stop_linger` ends a linger early. After ``shutdown()``, :attr:`problems` holds
    one sentence per OTLP destination that failed.
    """

    provider: MeterProvider
    timeout_s: float
    prometheus_port: int | None = None
    prometheus_host: str | None = None
    linger_s: float = 0.0
    _server: WSGIServer | None = None
    _thread: threading.Thread | None = None
    _scrapes: _ScrapeCounter | None = None
    _exporter: _TrackedMetricExporter | None = None
    stop_linger: threading.Event = field(default_factory=threading.Event)
    # A Ctrl-C cuts the OTLP metric exchanges through this (after a grace).
    interrupt: DeliveryInterrupt = field(default_factory=DeliveryInterrupt)
    problems: list[str] = field(default_factory=list)
    # The readers on the provider (the direct path points them at its own aggregates).
    readers: tuple[MetricReader, ...] = ()
    resource: Resource | None = None
    cardinality_limit: int = DEFAULT_METRIC_CARDINALITY_LIMIT

    @property
    def meter(self) -> Meter:
        return self.provider.get_meter(INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION, schema_url=SCHEMA_URL)

    @property
    def prometheus_url(self) -> str | None:
        """``http://host:port/metrics`` of the pull endpoint, or None without one."""
        if self.prometheus_port is None or self.prometheus_host is None:
            return None
        host = f"[{self.prometheus_host}]" if ":" in self.prometheus_host else self.prometheus_host
        return f"http://{host}:{self.prometheus_port}/metrics"

    @property
    def prometheus_scrapes(self) -> int:
        """How many times the pull endpoint was scraped so far."""
        return self._scrapes.count if self._scrapes is not None else 0

    def shutdown(self) -> None:
        """Flush, linger with the endpoint up (when one was asked for), stop. Ctrl-C ends a linger."""
        try:
            if self._server is not None and self.linger_s > 0:
                # Push what is pending now rather than after the linger; the endpoint serves the
                # final values meanwhile (a scrape collects them itself). Only the push readers:
                # flushing the Prometheus reader queues a collection that the next scrape would
                # serve next to its own, every series twice.
                for reader in self.readers:
                    if not isinstance(reader, PrometheusMetricReader):
                        reader.force_flush(timeout_millis=self.timeout_s * 1000)
                self.stop_linger.wait(self.linger_s)
        finally:
            try:
                self.provider.shutdown(timeout_millis=self.timeout_s * 1000)
            finally:
                if self._server is not None:
                    _stop_serving(self._server, self.timeout_s)
                if self._thread is not None:
                    self._thread.join(timeout=self.timeout_s)
        exporter = self._exporter
        if exporter is None or self.problems:
            return
        # The reader's last export runs in its own thread and may outlive the shutdown's join.
        if not exporter.wait_idle(self.timeout_s + 1.0):
            self.problems.append(
                f"the last metric export to {exporter.target} did not finish within {self.timeout_s:g} s"
            )
        elif exporter.failures:
            self.problems.append(
                f"{exporter.failures} of {exporter.exports} metric exports failed to reach "
                f"{exporter.target}: {exporter.error}"
            )


def _stop_serving(server: WSGIServer, timeout_s: float) -> None:
    """Stop the Prometheus endpoint now, waiting at most ``timeout_s``.

    The server's loop sees a stop request only between its half-second polls (200-500 ms at the
    end of every export). Shutting the listening socket down wakes that poll at once; where the
    platform refuses it, the poll still ends by itself.
    """
    stopping = threading.Thread(target=server.shutdown, name="rulvar-otel-prometheus-stop", daemon=True)
    stopping.start()
    with contextlib.suppress(OSError):
        server.socket.shutdown(socket.SHUT_RDWR)
    stopping.join(timeout_s)
    server.server_close()


def _validate(setup: MetricsSetup) -> None:
    if setup.otlp_endpoint is None and setup.prometheus_port is None:
        raise ConfigError("metrics need a destination: an OTLP metrics endpoint or a Prometheus port")
    if setup.otlp_endpoint is not None:
        parsed = urlparse(setup.otlp_endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            shown = redact_url(setup.otlp_endpoint)
            raise ConfigError(f"metrics endpoint {shown!r} is not an http(s)://host:port URL")
    if setup.otlp_protocol not in ("grpc", "http/protobuf"):
        raise ConfigError(f"metrics protocol {setup.otlp_protocol!r} is not 'grpc' or 'http/protobuf'")
    if not 0 < setup.timeout_s <= MAX_TIMEOUT_S:
        raise ConfigError(f"metrics timeout {setup.timeout_s!r} s is not in (0, {MAX_TIMEOUT_S:g}]")
    if not setup.export_interval_s > 0:
        raise ConfigError(f"metrics export interval {setup.export_interval_s!r} s must be positive")
    if setup.prometheus_port is not None and not 0 <= setup.prometheus_port <= 65535:
        raise ConfigError(f"Prometheus port {setup.prometheus_port!r} is not in 0..65535")
    if not isinstance(setup.prometheus_host, str) or not setup.prometheus_host.strip():
        raise ConfigError(f"Prometheus host {setup.prometheus_host!r} is not a host name or address")
    if not isinstance(setup.cardinality_limit, int) or setup.cardinality_limit < 1:
        raise ConfigError(f"metric cardinality limit {setup.cardinality_limit!r} is not a whole number >= 1")
    if not 0 <= setup.prometheus_linger_s <= MAX_LINGER_S:
        raise ConfigError(
            f"Prometheus linger {setup.prometheus_linger_s!r} s is not in [0, {MAX_LINGER_S:g}]"
        )
    if setup.compression not in ("gzip", "none"):
        raise ConfigError(f"metrics compression {setup.compression!r} is not gzip or none")
    for key, value in setup.headers.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise ConfigError("metrics headers must map non-empty names to string values")


def _otlp_exporter(
    setup: MetricsSetup, rejections: Rejections, interrupt: DeliveryInterrupt
) -> MetricExporter:
    """The library's OTLP metric exporter, bounded and recording ``partial_success`` rejections."""
    assert setup.otlp_endpoint is not None
    headers = dict(setup.headers)
    gzip = setup.compression == "gzip"
    if setup.otlp_protocol == "grpc":
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        parsed = urlparse(setup.otlp_endpoint)
        exporter = GrpcExporter(
            endpoint=setup.otlp_endpoint,
            insecure=parsed.scheme == "http",
            headers=headers,
            timeout=setup.timeout_s,
            compression=grpc.Compression.Gzip if gzip else grpc.Compression.NoCompression,
            channel_options=(("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),),  # type: ignore[arg-type]
        )
        capture_grpc_rejections(exporter, "rejected_data_points", rejections, interrupt)
        return exporter
    from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

    from rulvar_otel.export._http_transport import BoundedHttpTransport

    endpoint = setup.otlp_endpoint
    if urlparse(endpoint).path in ("", "/"):
        endpoint = with_signal_path(endpoint, _DEFAULT_HTTP_PATH)
    verify, cert = tls_settings(os.environ, "METRICS")
    transport = BoundedHttpTransport(
        ExportMetricsServiceResponse,
        "rejected_data_points",
        rejections,
        verify=verify,
        cert=cert,
        interrupt=interrupt,
    )
    return HttpExporter(
        endpoint=endpoint,
        headers=headers,
        timeout=setup.timeout_s,
        compression=HttpCompression.Gzip if gzip else HttpCompression.NoCompression,
        _transport=transport,
    )


def _with_instance_id(resource: Resource) -> Resource:
    """``resource`` with a ``service.instance.id`` (a fresh UUID unless it has one)."""
    if resource.attributes.get(SERVICE_INSTANCE_ID):
        return resource
    return resource.merge(Resource({SERVICE_INSTANCE_ID: str(uuid.uuid4())}))


def _limits(setup: MetricsSetup) -> dict[type, int]:
    """One label-set limit for every instrument class (the direct aggregator applies the same)."""
    return dict.fromkeys((Counter, UpDownCounter, Histogram), setup.cardinality_limit)


def build_meter_provider(setup: MetricsSetup, *, resource: Resource | None = None) -> MetricsPipeline:
    """Build a MeterProvider for ``setup`` (raises :class:`ConfigError` on a bad option).

    The Prometheus endpoint uses its own registry, so several pipelines (or a host's own
    ``prometheus_client`` metrics) never collide; :class:`ConfigError` when the port is taken.

    Every pipeline is its own ``service.instance.id`` (a UUID unless ``resource`` names one): it
    labels every series the pull endpoint serves (``service_instance_id``) and, over OTLP, the
    collector's Prometheus exporter makes it the ``instance`` label. So two processes that export
    runs with the same labels one after the other (a loop of one-shot exports) write two series,
    each counted in full, instead of one series that seems never to move.
    """
    _validate(setup)
    resource = _with_instance_id(
        mask_resource(resource)
        if resource is not None
        else compose_resource({SERVICE_NAME: setup.service_name})
    )
    readers: list[MetricReader] = []
    tracked: _TrackedMetricExporter | None = None
    interrupt = DeliveryInterrupt()
    if setup.otlp_endpoint is not None:
        target = f"OTLP metrics endpoint {redact_url(setup.otlp_endpoint)}"
        rejections = Rejections()
        exporter = _otlp_exporter(setup, rejections, interrupt)
        tracked = _TrackedMetricExporter(exporter, target, rejections)
        readers.append(
            PeriodicExportingMetricReader(
                tracked,
                export_interval_millis=setup.export_interval_s * 1000,
                export_timeout_millis=setup.timeout_s * 1000,
                cardinality_limits=_limits(setup),
            )
        )
    server: Any = None
    thread: Any = None
    port: int | None = None
    scrapes: _ScrapeCounter | None = None
    if setup.prometheus_port is not None:
        registry = CollectorRegistry(auto_describe=True)
        scrapes = _ScrapeCounter()
        registry.register(scrapes)
        readers.append(
            PrometheusMetricReader(
                registry=registry,
                resource_attribute_filter=lambda key: key == SERVICE_INSTANCE_ID,
                cardinality_limits=_limits(setup),
            )
        )
        try:
            server, thread = start_http_server(
                setup.prometheus_port, addr=setup.prometheus_host, registry=registry
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot serve Prometheus metrics on {setup.prometheus_host}:{setup.prometheus_port}: "
                f"{exc.strerror or exc}"
            ) from exc
        port = int(server.server_port)
    provider = MeterProvider(metric_readers=readers, resource=resource)
    return MetricsPipeline(
        provider,
        setup.timeout_s,
        port,
        setup.prometheus_host if port is not None else None,
        setup.prometheus_linger_s if port is not None else 0.0,
        server,
        thread,
        scrapes,
        tracked,
        readers=tuple(readers),
        resource=resource,
        cardinality_limit=setup.cardinality_limit,
        interrupt=interrupt,
    )


def build_metrics_delivery(
    options: ExportOptions, *, service_name: str, environ: Mapping[str, str] | None = None
) -> MetricsPipeline | None:
    """The metrics pipeline ``options`` ask for, or ``None`` when they ask for none."""
    if options.metrics_endpoint is None and options.prometheus_port is None:
        return None
    env = os.environ if environ is None else environ
    protocol: Protocol = "grpc"
    headers: dict[str, str] = {}
    if options.metrics_endpoint is not None:
        # The same rules as for traces: explicit, the METRICS variable, the shared one, the port.
        protocol = resolve_protocol(options.protocol, options.metrics_endpoint, "METRICS", env)
        headers = read_headers(env, "METRICS")
    headers.update(options.headers)
    timeout = options.export_timeout_s or read_millis(
        env, "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"
    )
    setup = MetricsSetup(
        otlp_endpoint=options.metrics_endpoint.strip() if options.metrics_endpoint else None,
        otlp_protocol=protocol,
        headers=headers,
        timeout_s=min(timeout or 10.0, MAX_TIMEOUT_S),
        prometheus_port=options.prometheus_port,
        prometheus_host=options.prometheus_host,
        prometheus_linger_s=options.prometheus_linger_s,
        service_name=service_name,
        cardinality_limit=options.metric_cardinality_limit,
        compression=read_compression(env, "METRICS"),
    )
    masker = compile_secret_masker(options.patterns) if options.patterns else None
    return build_meter_provider(setup, resource=compose_resource({SERVICE_NAME: service_name}, masker))
