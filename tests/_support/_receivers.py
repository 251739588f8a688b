"""Real OTLP receivers on 127.0.0.1 for delivery tests and benchmarks: traces (gRPC, HTTP) and metrics (gRPC).

:class:`GrpcTraceReceiver` serves opentelemetry-proto's ``TraceService`` with grpcio;
:class:`HttpTraceReceiver` answers ``POST /v1/traces`` (binary protobuf, optionally gzip) with a
stdlib ``http.server``. Both bind a free port, collect every decoded
``ExportTraceServiceRequest`` with the request headers, and are context managers::

    with GrpcTraceReceiver() as receiver:
        run_cli(["export", "large.jsonl", "--endpoint", receiver.endpoint])
        spans = receiver.spans()
"""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

__all__ = [
    "GrpcMetricsReceiver",
    "GrpcTraceReceiver",
    "HttpTraceReceiver",
    "ReceivedSpan",
    "TraceReceiver",
    "attributes_of",
    "closed_port",
    "span_index",
]

# Far above any batch the CLI sends; a receiver limit must never be what loses a span.
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived, with the resource and scope it was sent under."""

    span: Span
    resource: dict[str, Any]
    scope_name: str

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_span_id(self) -> str | None:
        return self.span.parent_span_id.hex() or None

    @property
    def attributes(self) -> dict[str, Any]:
        return attributes_of(self.span.attributes)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    """A repeated ``KeyValue`` as a plain dict."""
    out: dict[str, Any] = {}
    kv: KeyValue
    for kv in pairs:
        out[kv.key] = _value(kv.value)
    return out


def span_index(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    """Spans by hex span id."""
    return {s.span_id: s for s in spans}


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class TraceReceiver:
    """What both receivers share: the collected requests and their headers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.port = 0

    def _collect(self, request: ExportTraceServiceRequest, headers: Mapping[str, str]) -> None:
        with self._lock:
            self.requests.append(request)
            self.headers.append({k.lower(): v for k, v in headers.items()})

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in arrival order."""
        with self._lock:
            requests = list(self.requests)
        out: list[ReceivedSpan] = []
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = attributes_of(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(ReceivedSpan(span, resource, scope_spans.scope.name))
        return out

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> TraceReceiver:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: GrpcTraceReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        self._receiver._collect(request, dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


class GrpcTraceReceiver(TraceReceiver):
    """An OTLP/gRPC trace receiver (``TraceService/Export``) on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__()
        self._server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4),
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(self), server)  # type: ignore[no-untyped-call]
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None


class _HttpHandler(BaseHTTPRequestHandler):
    server: _HttpServer

    def do_POST(self) -> None:
        if self.path != "/v1/traces":
            self.send_error(404, "only /v1/traces is served")
            return
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception:
            self.send_error(400, "not an ExportTraceServiceRequest")
            return
        self.server.receiver._collect(request, dict(self.headers.items()))
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: tests read the collected requests, not an access log."""


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    receiver: HttpTraceReceiver


class HttpTraceReceiver(TraceReceiver):
    """An OTLP/HTTP trace receiver (``POST /v1/traces``, binary protobuf) on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__()
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = _HttpServer(("127.0.0.1", 0), _HttpHandler)
        server.receiver = self
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, name="otlp-http-receiver", daemon=True)
        self._thread.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: GrpcMetricsReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        with self._receiver._lock:
            self._receiver.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcMetricsReceiver:
    """An OTLP/gRPC metrics receiver (``MetricsService/Export``) on 127.0.0.1."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.port = 0
        self._server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metric_names(self) -> set[str]:
        with self._lock:
            requests = list(self.requests)
        return {
            metric.name
            for request in requests
            for resource_metrics in request.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
        }

    def __enter__(self) -> GrpcMetricsReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(self), server)  # type: ignore[no-untyped-call]
        self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
