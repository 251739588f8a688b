"""OTLP/gRPC span delivery on ``grpc`` alone: one unary ``TraceService/Export`` call per batch.

The exporter library's gRPC span exporter loads the metrics and logs SDKs, every signal's service
stubs and ``importlib.metadata`` when it is imported: about a quarter of a small export's whole
process time, for code a span export never runs. :class:`GrpcSpanSender` makes the same exchange
with what it needs (``grpc`` and the trace service's messages), under the same contract:

- the endpoint's ``host:port``; plaintext for ``http://``, TLS otherwise, trusting the CA and
  presenting the client key and chain of ``OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`` and family
  (read when the first batch is sent: an unreadable file fails that export, naming the file);
- headers as call metadata (names lowercased, as gRPC requires), gzip when asked, the library's
  channel options plus the caller's (send and receive limits);
- one timeout bounds every attempt at one batch; a retryable status (the library's set) is tried
  again after 1 s, 2 s, 4 s ... (±20 %) or after the receiver's ``RetryInfo`` delay, while the
  deadline allows, at most six attempts; ``UNAVAILABLE`` on the first attempt reconnects;
- the answer's ``partial_success`` is recorded in :class:`Rejections`;
- a :class:`DeliveryInterrupt` cut cancels the call in flight (:class:`DeliveryInterruptedError`);
- a failed batch leaves :attr:`GrpcSpanSender.error`: the status name, attempts and details, and
  the first attempt's status when it differed (a last attempt cut by the deadline hides nothing).

A direct batch sends its prebuilt request bytes; any other span sequence is encoded by the
library's own encoder first.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from rulvar_otel._version import __version__
from rulvar_otel.export._transport import (
    MAX_RESPONSE_BYTES,
    DeliveryInterrupt,
    Rejections,
    grpc_call,
)
from rulvar_otel.otel._encode import EncodedBatch

__all__ = ["EXPORT_METHOD", "GrpcSpanSender", "RETRYABLE_CODES"]

EXPORT_METHOD: Final = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# The exporter library's retryable set: transient by the gRPC status code definitions.
RETRYABLE_CODES: Final = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
MAX_ATTEMPTS: Final = 6
_RETRY_INFO_KEY: Final = "google.rpc.retryinfo-bin"
_MAX_DETAILS_CHARS: Final = 500
# A PEM bundle of a few hundred certificates is well under this.
MAX_TLS_FILE_BYTES: Final = 16 * 1024 * 1024


def _wire(request: bytes) -> bytes:
    return request


class GrpcSpanSender(SpanExporter):
    """Sends span batches to one OTLP/gRPC endpoint; see the module docstring for the contract."""

    def __init__(
        self,
        endpoint: str,
        *,
        headers: Mapping[str, str],
        timeout_s: float,
        gzip: bool,
        rejections: Rejections,
        interrupt: DeliveryInterrupt | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
    ) -> None:
        parts = urlsplit(endpoint)
        self._target = parts.netloc or endpoint
        self._insecure = parts.scheme == "http"
        self._metadata = tuple((name.lower(), value) for name, value in headers.items())
        self._timeout_s = timeout_s
        self._compression = grpc.Compression.Gzip if gzip else grpc.Compression.NoCompression
        self._rejections = rejections
        self._interrupt = interrupt
        self._verify = verify
        self._cert = cert
        self._options = (
            ("grpc.primary_user_agent", f"rulvar-otel/{__version__}"),
            # The receiver's own limit is the one that may refuse a batch, never the client's.
            ("grpc.max_send_message_length", -1),
            # An answer is an empty message or a short partial_success: this bounds a hostile one.
            ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
        )
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._call: Any = None
        self._closing = threading.Event()
        self._first_failure = ("", "")
        self.error: str | None = None

    # --- the SpanExporter interface -------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closing.is_set():
            self.error = "the exporter was shut down"
            return SpanExportResult.FAILURE
        request = spans.request_bytes() if isinstance(spans, EncodedBatch) else _encode(spans)
        deadline = time.monotonic() + self._timeout_s
        for attempt in range(MAX_ATTEMPTS):
            try:
                call = self._export_call(reconnect=False)
            except OSError as exc:
                self.error = f"cannot read a TLS file: {exc.strerror or exc} ({exc.filename})"
                return SpanExportResult.FAILURE
            try:
                timeout = max(deadline - time.monotonic(), 0.0)
                response = grpc_call(call, self._interrupt, request, metadata=self._metadata, timeout=timeout)
            except grpc.RpcError as error:
                backoff = self._after_failure(error, attempt, deadline)
                if backoff is None or self._closing.wait(backoff):
                    return SpanExportResult.FAILURE
                continue
            self._rejections.read(response, "rejected_spans")
            self.error = None
            return SpanExportResult.SUCCESS
        return SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        self._closing.set()
        with self._lock:
            channel, self._channel, self._call = self._channel, None, None
        if channel is not None:
            channel.close()

    # --- one exchange ---------------------------------------------------------------------------

    def _after_failure(self, error: grpc.RpcError, attempt: int, deadline: float) -> float | None:
        """The wait before the next attempt, or None when this failure is final (``error`` set)."""
        code = _code(error)
        name = code.name if code is not None else "UNKNOWN"
        details = _details(error)
        said = f"{name}: {details}" if details else name
        if attempt == 0:
            self._first_failure = (name, said)
        plural = "s" if attempt else ""
        self.error = f"{name} after {attempt + 1} attempt{plural}" + (f": {details}" if details else "")
        first_name, first_said = self._first_failure
        if first_name != name:
            # A last attempt cut by the deadline must not hide why the first one failed.
            self.error += f" (first attempt: {first_said})"
        if code not in RETRYABLE_CODES or attempt + 1 >= MAX_ATTEMPTS or self._closing.is_set():
            return None
        asked = _retry_delay(error)
        # The library's schedule, with its +-20 % jitter, unless the receiver named a delay.
        backoff = 2.0**attempt * random.uniform(0.8, 1.2) if asked is None else max(asked, 0.0)
        if backoff > deadline - time.monotonic():
            return None
        if code is grpc.StatusCode.UNAVAILABLE and attempt == 0:
            self._export_call(reconnect=True)
        return backoff

    def _export_call(self, *, reconnect: bool) -> Any:
        with self._lock:
            if self._call is not None and not reconnect:
                return self._call
            if self._channel is not None:
                self._channel.close()
            channel = self._open_channel()
            self._channel = channel
            self._call = channel.unary_unary(
                EXPORT_METHOD,
                request_serializer=_wire,
                response_deserializer=ExportTraceServiceResponse.FromString,
            )
            return self._call

    def _open_channel(self) -> grpc.Channel:
        if self._insecure:
            return grpc.insecure_channel(self._target, options=self._options, compression=self._compression)
        credentials = grpc.ssl_channel_credentials(*_tls_files(self._verify, self._cert))
        return grpc.secure_channel(
            self._target, credentials, options=self._options, compression=self._compression
        )


def _encode(spans: Sequence[ReadableSpan]) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans).SerializeToString()  # type: ignore[no-any-return]


def _tls_files(
    verify: bool | str, cert: str | tuple[str, str] | None
) -> tuple[bytes | None, bytes | None, bytes | None]:
    """``(root CA, client key, client chain)`` read from the configured files; None uses the defaults."""

    def read(path: str) -> bytes:
        with open(path, "rb") as file:
            return file.read(MAX_TLS_FILE_BYTES)

    roots = read(verify) if isinstance(verify, str) else None
    if isinstance(cert, tuple):
        chain, key = cert
        return roots, read(key), read(chain)
    return roots, None, read(cert) if cert else None


def _code(error: grpc.RpcError) -> grpc.StatusCode | None:
    code = getattr(error, "code", None)
    found = code() if callable(code) else None
    return found if isinstance(found, grpc.StatusCode) else None


def _details(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    found = details() if callable(details) else None
    return found[:_MAX_DETAILS_CHARS] if isinstance(found, str) else ""


def _retry_delay(error: grpc.RpcError) -> float | None:
    """The receiver's ``RetryInfo`` delay in seconds, when its trailing metadata carries one."""
    trailing = getattr(error, "trailing_metadata", None)
    metadata = trailing() if callable(trailing) else None
    for key, value in metadata or ():
        if key == _RETRY_INFO_KEY and isinstance(value, bytes):
            from google.protobuf.message import DecodeError
            from google.rpc.error_details_pb2 import RetryInfo  # type: ignore[import-untyped]

            info = RetryInfo()
            try:
                info.ParseFromString(value)
            except DecodeError:
                return None
            delay = info.retry_delay
            return float(delay.seconds) + float(delay.nanos) / 1e9
    return None
