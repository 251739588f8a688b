"""Bounded OTLP exchanges: what a receiver's answer may cost, and what it says was kept.

The exporter library's OTLP/HTTP client treats any 2xx-3xx status as delivery, bounds each socket
operation rather than the exchange (a body trickling one byte a second never ends) and reads the
whole body, inflated, into memory. :class:`BoundedHttpTransport` is the transport it is given
instead (``httpcore`` under a network backend whose every socket operation is clamped to the
request's deadline), so that:

- the whole exchange (connect, send, headers, body) ends by the export timeout;
- a response body is read to at most :data:`MAX_RESPONSE_BYTES`, on the wire and inflated
  (gzip and deflate are decoded in bounded steps; anything larger fails the export);
- a 3xx is a failure naming its status (the redirect is not followed: OTLP does not redirect);
- a 2xx body's ``partial_success`` is read: rejected items are recorded in :class:`Rejections`.

The OTLP/gRPC exporters get the same accounting from :func:`capture_grpc_rejections`, which wraps
the library's stub so the ``Export`` response's ``partial_success`` is read instead of dropped.
"""

from __future__ import annotations

import contextvars
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpcore
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport

__all__ = [
    "MAX_RESPONSE_BYTES",
    "BoundedHttpTransport",
    "DeliveryInterrupt",
    "DeliveryInterruptedError",
    "ResponseError",
    "Rejections",
    "capture_grpc_rejections",
    "tls_settings",
]

# An OTLP answer is an empty message or a partial_success with a short message: a megabyte is plenty.
MAX_RESPONSE_BYTES: Final = 1024 * 1024
# Characters kept of a receiver's rejection message (it is masked before it is printed).
MAX_MESSAGE_CHARS: Final = 300
_INTERRUPTED: Final = "the export was interrupted before the receiver answered"

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("rulvar_otel_http_deadline")


class DeliveryInterruptedError(Exception):
    """The export was interrupted (Ctrl-C) before the receiver answered."""


class DeliveryInterrupt:
    """Ends one export's network exchanges early, for a Ctrl-C that must end the command.

    :meth:`interrupt` gives what is in flight ``grace_s`` more; then every open exchange is cut
    (its socket shut down, its gRPC call cancelled) and later ones fail at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cut_at: float | None = None
        self._timer: threading.Timer | None = None
        self.cut = threading.Event()
        self._closers: dict[int, Callable[[], None]] = {}
        self._next = 0

    def interrupt(self, grace_s: float) -> None:
        with self._lock:
            at = time.monotonic() + max(grace_s, 0.0)
            if self._cut_at is not None and self._cut_at <= at:
                return
            self._cut_at = at
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(max(grace_s, 0.0), self._cut_now)
            self._timer.daemon = True
            self._timer.start()

    def _cut_now(self) -> None:
        with self._lock:
            self.cut.set()
            closers = list(self._closers.values())
        for close in closers:
            try:
                close()
            except Exception:  # noqa: BLE001 - cutting is best effort; the deadline still holds
                pass

    def watch(self, close: Callable[[], None]) -> int:
        """Run ``close`` when the cut comes (at once if it came); :meth:`unwatch` the returned key."""
        with self._lock:
            self._next += 1
            self._closers[self._next] = close
            already = self.cut.is_set()
        if already:
            close()
        return self._next

    def unwatch(self, key: int) -> None:
        with self._lock:
            self._closers.pop(key, None)


class ResponseError(Exception):
    """The receiver's answer was not a delivery (a redirect, an unreadable or oversized body)."""


@dataclass(slots=True)
class Rejections:
    """Items receivers rejected in otherwise successful answers (OTLP ``partial_success``).

    The transport adds while an export runs; the tracked exporter takes them once it returned.
    """

    count: int = 0
    message: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, count: int, message: str) -> None:
        with self._lock:
            self.count += max(0, count)
            if message and self.message is None:
                self.message = message[:MAX_MESSAGE_CHARS]

    def take(self) -> tuple[int, str | None]:
        with self._lock:
            taken = (self.count, self.message)
            self.count, self.message = 0, None
            return taken

    def read(self, response: Message, field_name: str) -> None:
        """Record ``response.partial_success`` (an Export*ServiceResponse)."""
        partial = getattr(response, "partial_success", None)
        if partial is None:
            return
        rejected = int(getattr(partial, field_name, 0) or 0)
        if rejected > 0:
            self.add(rejected, str(getattr(partial, "error_message", "") or ""))


def _remaining(timeout: float | None) -> float:
    deadline = _deadline.get(None)
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left <= 0:
        raise httpcore.ReadTimeout("the export timeout passed before the receiver answered")
    if left is None:
        return timeout if timeout is not None else 10.0
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current request's deadline.

    An interrupt's cut shuts its socket down, which ends a blocked read or write at once.
    """

    def __init__(self, inner: httpcore.NetworkStream, interrupt: DeliveryInterrupt | None) -> None:
        self._inner = inner
        self._interrupt = interrupt
        self._key: int | None = None
        sock = inner.get_extra_info("socket")
        if interrupt is not None and isinstance(sock, socket.socket):
            self._key = interrupt.watch(lambda: sock.shutdown(socket.SHUT_RDWR))

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _remaining(timeout))

    def close(self) -> None:
        if self._interrupt is not None and self._key is not None:
            self._interrupt.unwatch(self._key)
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._inner.start_tls(ssl_context, server_hostname, _remaining(timeout))
        return _DeadlineStream(tls, self._interrupt)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, interrupt: DeliveryInterrupt | None) -> None:
        self._inner = httpcore.SyncBackend()
        self._interrupt = interrupt

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, _remaining(timeout), local_address, socket_options)
        return _DeadlineStream(stream, self._interrupt)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


@dataclass(frozen=True, slots=True)
class _Result(BaseHTTPResult):
    body: bytes = b""
    response_headers: Mapping[str, str] = field(default_factory=dict)

    def content(self) -> bytes:
        return self.body

    def headers(self) -> Mapping[str, str]:
        return self.response_headers


def _inflate(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ResponseError(f"the receiver's answer has an unknown content encoding {encoding[:40]!r}")
    wbits = 16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    try:
        # max_length bounds what one call may inflate: a bomb stops at the cap, never in memory.
        out = inflater.decompress(body, MAX_RESPONSE_BYTES + 1)
    except zlib.error as exc:
        raise ResponseError("the receiver's answer is not valid compressed data") from exc
    if len(out) > MAX_RESPONSE_BYTES or inflater.unconsumed_tail:
        raise ResponseError(f"the receiver's answer inflates past {MAX_RESPONSE_BYTES} bytes")
    return out


class BoundedHttpTransport(BaseHTTPTransport):
    """The OTLP/HTTP exporter's transport: bounded in time and size, 3xx not delivered.

    ``response`` is the Export*ServiceResponse class of the signal, ``rejected_field`` its
    ``partial_success`` counter (``rejected_spans``, ``rejected_data_points``).
    """

    def __init__(
        self,
        response: type[Message],
        rejected_field: str,
        rejections: Rejections,
        *,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        interrupt: DeliveryInterrupt | None = None,
    ) -> None:
        context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
        if verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if isinstance(cert, tuple):
            context.load_cert_chain(cert[0], cert[1])
        elif cert:
            context.load_cert_chain(cert)
        self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=_DeadlineBackend(interrupt))
        self._interrupt = interrupt
        self._response = response
        self._field = rejected_field
        self.rejections = rejections
        self.last_error: str | None = None

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        data: bytes | None = None,
    ) -> BaseHTTPResult:
        limit = 10.0 if timeout is None else max(timeout, 0.0)
        if self._interrupt is not None and self._interrupt.cut.is_set():
            return self._failed(DeliveryInterruptedError(_INTERRUPTED))
        token = _deadline.set(time.monotonic() + limit)
        try:
            return self._exchange(method, url, headers or {}, data, limit)
        except (httpcore.TimeoutException, TimeoutError) as exc:
            late = f"the receiver did not answer within {round(limit, 1):g} s ({exc})"
            return self._failed(ResponseError(late))
        except ResponseError as exc:
            return self._failed(exc)
        except Exception as exc:  # noqa: BLE001 - a failed exchange is a result, never a raise
            if self._interrupt is not None and self._interrupt.cut.is_set():
                return self._failed(DeliveryInterruptedError(_INTERRUPTED))
            return self._failed(exc)
        finally:
            _deadline.reset(token)

    def _failed(self, error: Exception) -> BaseHTTPResult:
        self.last_error = str(error) or type(error).__name__
        return _Result(error=error)

    def _exchange(
        self, method: str, url: str, headers: Mapping[str, str], data: bytes | None, limit: float
    ) -> BaseHTTPResult:
        timeouts = {"connect": limit, "read": limit, "write": limit, "pool": limit}
        sent = {**headers, "Accept-Encoding": "gzip, deflate"}
        with self._pool.stream(
            method, url, headers=list(sent.items()), content=data, extensions={"timeout": timeouts}
        ) as response:
            status = response.status
            reason = response.extensions.get("reason_phrase", b"").decode("latin-1", "replace")
            found = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
            if 300 <= status < 400:
                raise ResponseError(
                    f"the receiver answered HTTP {status}, a redirect, which is not a delivery"
                )
            raw = bytearray()
            for chunk in response.iter_stream():
                raw += chunk
                if len(raw) > MAX_RESPONSE_BYTES:
                    raise ResponseError(f"the receiver's answer is larger than {MAX_RESPONSE_BYTES} bytes")
        body = _inflate(bytes(raw), found.get("content-encoding", "").strip().lower())
        if 200 <= status < 300:
            self._read_partial_success(body, found.get("content-type", ""))
        return _Result(status_code=status, reason=reason, body=body, response_headers=found)

    def _read_partial_success(self, body: bytes, content_type: str) -> None:
        if not body:
            return
        message = self._response()
        try:
            if "json" in content_type.lower():
                json_format.Parse(body.decode("utf-8"), message, ignore_unknown_fields=True)
            else:
                message.ParseFromString(body)
        except (DecodeError, json_format.ParseError, ValueError, UnicodeDecodeError) as exc:
            raise ResponseError("the receiver's answer is not an OTLP export response") from exc
        self.rejections.read(message, self._field)

    def is_connection_error(self, exception: Exception | None) -> bool:
        return isinstance(exception, httpcore.ConnectError | httpcore.RemoteProtocolError)

    def close(self) -> None:
        self._pool.close()


def capture_grpc_rejections(
    exporter: Any, rejected_field: str, rejections: Rejections, interrupt: DeliveryInterrupt | None = None
) -> None:
    """Make a library OTLP/gRPC exporter record its answers' ``partial_success`` in ``rejections``.

    The library calls ``self._client.Export(...)`` and drops the response; its stub is wrapped
    after every (re)connection so the response is read first. An ``interrupt``'s cut cancels
    the call in flight (:class:`DeliveryInterruptedError`, which the library does not retry).
    """
    initialize = exporter._initialize_channel_and_stub

    def wrapped_initialize() -> None:
        initialize()
        exporter._client = _RecordingStub(exporter._client, rejected_field, rejections, interrupt)

    exporter._initialize_channel_and_stub = wrapped_initialize
    exporter._client = _RecordingStub(exporter._client, rejected_field, rejections, interrupt)


class _RecordingStub:
    def __init__(
        self, stub: Any, rejected_field: str, rejections: Rejections, interrupt: DeliveryInterrupt | None
    ) -> None:
        self._stub = stub
        self._field = rejected_field
        self._rejections = rejections
        self._interrupt = interrupt

    def Export(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - the stub's method name
        interrupt = self._interrupt
        if interrupt is None:
            response = self._stub.Export(*args, **kwargs)
        else:
            response = self._cancellable(interrupt, *args, **kwargs)
        if isinstance(response, Message):
            self._rejections.read(response, self._field)
        return response

    def _cancellable(self, interrupt: DeliveryInterrupt, *args: Any, **kwargs: Any) -> Any:
        import grpc

        if interrupt.cut.is_set():
            raise DeliveryInterruptedError(_INTERRUPTED)
        call = self._stub.Export.future(*args, **kwargs)
        key = interrupt.watch(call.cancel)
        try:
            return call.result()
        except grpc.FutureCancelledError:
            raise DeliveryInterruptedError(_INTERRUPTED) from None
        finally:
            interrupt.unwatch(key)


def tls_settings(env: Mapping[str, str], signal: str) -> tuple[bool | str, str | tuple[str, str] | None]:
    """``(verify, cert)`` from ``OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE`` and its family."""

    def read(name: str) -> str | None:
        return env.get(f"OTEL_EXPORTER_OTLP_{signal}_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}") or None

    verify: bool | str = read("CERTIFICATE") or True
    key, chain = read("CLIENT_KEY"), read("CLIENT_CERTIFICATE")
    cert: str | tuple[str, str] | None = (chain, key) if chain and key else chain
    return verify, cert
