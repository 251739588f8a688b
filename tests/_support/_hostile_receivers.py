"""OTLP receivers on 127.0.0.1 that answer badly: partial success, redirects, trickles, bombs, stalls.

:class:`HostileHttpReceiver` serves ``POST /v1/traces`` and ``/v1/metrics`` with one
:class:`HttpAnswer` behaviour; :class:`HostileGrpcReceiver` serves the trace and metrics services
answering ``partial_success`` or stalling; :class:`ScriptedGrpcReceiver` answers each trace export
with the next status of a script (then OK). All count the requests they received and are context
managers.
"""

from __future__ import annotations

import enum
import gzip
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

__all__ = [
    "GrpcAnswer",
    "HostileGrpcReceiver",
    "HostileHttpReceiver",
    "HttpAnswer",
    "REJECTION_MESSAGE",
    "ScriptedGrpcReceiver",
    "retry_info",
]

REJECTION_MESSAGE = "quota exceeded for tenant"
# Inflates to 64 MiB; its gzip form is about 64 KiB.
_BOMB = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)


class HttpAnswer(enum.Enum):
    PARTIAL = "partial"  # 200 with partial_success rejecting every item
    REDIRECT = "redirect"  # 307 to another path
    TRICKLE = "trickle"  # 200 whose body arrives one byte a second
    BOMB = "bomb"  # 200 whose gzip body inflates to 64 MiB
    STALL = "stall"  # reads the request, never answers
    RAW = "raw"  # answers the receiver's ``raw`` (status, headers, body)


def _partial(path: str, rejected: int) -> bytes:
    if path.endswith("/v1/metrics"):
        metrics = metrics_service_pb2.ExportMetricsServiceResponse()
        metrics.partial_success.rejected_data_points = rejected
        metrics.partial_success.error_message = REJECTION_MESSAGE
        return metrics.SerializeToString()
    traces = trace_service_pb2.ExportTraceServiceResponse()
    traces.partial_success.rejected_spans = rejected
    traces.partial_success.error_message = REJECTION_MESSAGE
    return traces.SerializeToString()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        receiver = self.server.receiver
        with receiver.lock:
            receiver.requests += 1
            receiver.bodies += len(body)
        answer = receiver.answer
        if answer is HttpAnswer.REDIRECT:
            self.send_response(307)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif answer is HttpAnswer.PARTIAL:
            self._send(_partial(self.path, receiver.rejected))
        elif answer is HttpAnswer.BOMB:
            self._send(_BOMB, encoding="gzip")
        elif answer is HttpAnswer.RAW:
            status, headers, payload = receiver.raw
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        elif answer is HttpAnswer.TRICKLE:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self._trickle()
        else:
            receiver.stop.wait(120)

    def _trickle(self) -> None:
        try:
            while not self.server.receiver.stop.wait(1.0):
                self.wfile.write(b"\0")
                self.wfile.flush()
        except OSError:
            return

    def _send(self, payload: bytes, encoding: str | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: HostileHttpReceiver


class HostileHttpReceiver:
    """An OTLP/HTTP receiver that answers every request as ``answer`` says."""

    def __init__(self, answer: HttpAnswer, *, rejected: int = 1_000_000) -> None:
        self.answer = answer
        self.rejected = rejected
        self.raw: tuple[int, dict[str, str], bytes] = (200, {}, b"")
        self.lock = threading.Lock()
        self.requests = 0
        self.bodies = 0
        self.stop = threading.Event()
        self.port = 0
        self._server: _Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileHttpReceiver:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.receiver = self
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="hostile-http", daemon=True).start()
        self._server = server
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _serve_grpc(*services: tuple[Callable[[Any, grpc.Server], None], Any]) -> tuple[grpc.Server, int]:
    """A started gRPC server on a free loopback port, with ``(add_servicer, servicer)`` pairs."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    for add, servicer in services:
        add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


class _GrpcServing:
    """A loopback gRPC server's port, endpoint and shutdown, for the receivers below."""

    port = 0
    _server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _closing(self) -> None:
        """Called first on exit: release whatever a handler is waiting on."""

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closing()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None


class GrpcAnswer(enum.Enum):
    PARTIAL = "partial"
    STALL = "stall"
    HUGE = "huge"  # a gzip-compressed answer of a few kilobytes that inflates to 3 MiB


# The message a HUGE answer carries: compresses to kilobytes, inflates past the exporters' 1 MiB
# answer bound (and stays under gRPC's own 4 MiB default, so only that bound can refuse it).
HUGE_MESSAGE_BYTES = 3 * 1024 * 1024


class HostileGrpcReceiver(_GrpcServing):
    """An OTLP/gRPC trace and metrics receiver answering ``partial_success``, stalling, or
    answering a gzip-compressed message that inflates hugely."""

    def __init__(self, answer: GrpcAnswer, *, rejected: int = 1_000_000) -> None:
        self.answer = answer
        self.rejected = rejected
        self.lock = threading.Lock()
        self.requests = 0
        self.stop = threading.Event()

    def _closing(self) -> None:
        self.stop.set()

    def _received(self) -> None:
        with self.lock:
            self.requests += 1
        if self.answer is GrpcAnswer.STALL:
            self.stop.wait(120)

    def _message(self, context: Any) -> str:
        if self.answer is not GrpcAnswer.HUGE:
            return REJECTION_MESSAGE
        context.set_compression(grpc.Compression.Gzip)
        return "z" * HUGE_MESSAGE_BYTES

    def __enter__(self) -> HostileGrpcReceiver:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                receiver._received()
                response = trace_service_pb2.ExportTraceServiceResponse()
                response.partial_success.rejected_spans = receiver.rejected
                response.partial_success.error_message = receiver._message(context)
                return response

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                receiver._received()
                response = metrics_service_pb2.ExportMetricsServiceResponse()
                response.partial_success.rejected_data_points = receiver.rejected
                response.partial_success.error_message = receiver._message(context)
                return response

        self._server, self.port = _serve_grpc(
            (trace_service_pb2_grpc.add_TraceServiceServicer_to_server, Traces()),
            (metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server, Metrics()),
        )
        return self


def retry_info(delay_s: float) -> bytes:
    """The ``google.rpc.RetryInfo`` a receiver puts in its trailing metadata to ask for a delay."""
    from google.rpc.error_details_pb2 import RetryInfo  # type: ignore[import-untyped]

    info = RetryInfo()
    info.retry_delay.seconds = int(delay_s)
    info.retry_delay.nanos = int((delay_s - int(delay_s)) * 1e9)
    return bytes(info.SerializeToString())


class ScriptedGrpcReceiver(_GrpcServing):
    """An OTLP/gRPC trace receiver failing the first exports as scripted, then answering OK.

    Each script entry is ``(status, details, retry_delay_s)``: the export aborts with that status,
    with a ``RetryInfo`` trailer when a delay is given. Every request's metadata and span count is
    kept in order (:attr:`calls`); ``fail_forever`` repeats the last entry instead of answering OK.
    """

    def __init__(
        self, script: Sequence[tuple[grpc.StatusCode, str, float | None]], *, fail_forever: bool = False
    ) -> None:
        self.script = list(script)
        self.fail_forever = fail_forever
        self.lock = threading.Lock()
        self.calls: list[tuple[dict[str, str], int]] = []

    def _answer(self, request: Any, context: Any) -> Any:
        spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with self.lock:
            self.calls.append((dict(context.invocation_metadata()), spans))
            entry = self.script.pop(0) if self.script else None
            if entry is not None and self.fail_forever and not self.script:
                self.script.append(entry)
        if entry is not None:
            status, details, delay = entry
            if delay is not None:
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", retry_info(delay)),))
            context.abort(status, details)
        return trace_service_pb2.ExportTraceServiceResponse()

    def __enter__(self) -> ScriptedGrpcReceiver:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                return receiver._answer(request, context)

        add = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
        self._server, self.port = _serve_grpc((add, Traces()))
        return self
