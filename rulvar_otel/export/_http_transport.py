"""The bounded OTLP/HTTP transport (see ``_transport``): ``httpcore`` with every socket
operation clamped to the request's deadline, bodies read and inflated to a bound, 3xx refused.

Its own module so that only an HTTP export imports ``httpcore``, ``ssl`` and the exporter
library's HTTP types.
"""

from __future__ import annotations

import contextvars
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpcore
from google.protobuf.message import DecodeError, Message
from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport

from rulvar_otel.export._transport import (
    _INTERRUPTED,
    MAX_RESPONSE_BYTES,
    DeliveryInterrupt,
    DeliveryInterruptedError,
    Rejections,
    ResponseError,
)

__all__ = ["BoundedHttpTransport"]

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("rulvar_otel_http_deadline")


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
        self._verify, self._cert = verify, cert
        # One pool per scheme, made on first use: a plain http:// receiver never pays for loading
        # the trust store (about 30 ms), an https:// one always gets the context built here.
        self._pools: dict[bool, httpcore.ConnectionPool] = {}
        self._pools_lock = threading.Lock()
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

    def _tls_context(self) -> ssl.SSLContext:
        verify, cert = self._verify, self._cert
        context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
        if verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if isinstance(cert, tuple):
            context.load_cert_chain(cert[0], cert[1])
        elif cert:
            context.load_cert_chain(cert)
        return context

    def _pool(self, url: str) -> httpcore.ConnectionPool:
        tls = not url.lower().startswith("http://")
        with self._pools_lock:
            pool = self._pools.get(tls)
            if pool is None:
                # Without TLS no context is ever read; an https:// (or any other) URL gets ours.
                context = self._tls_context() if tls else None
                pool = self._pools[tls] = httpcore.ConnectionPool(
                    ssl_context=context, network_backend=_DeadlineBackend(self._interrupt)
                )
            return pool

    def _failed(self, error: Exception) -> BaseHTTPResult:
        self.last_error = str(error) or type(error).__name__
        return _Result(error=error)

    def _exchange(
        self, method: str, url: str, headers: Mapping[str, str], data: bytes | None, limit: float
    ) -> BaseHTTPResult:
        timeouts = {"connect": limit, "read": limit, "write": limit, "pool": limit}
        sent = {**headers, "Accept-Encoding": "gzip, deflate"}
        with self._pool(url).stream(
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
                _parse_json(body, message)
            else:
                message.ParseFromString(body)
        except (DecodeError, ValueError, UnicodeDecodeError) as exc:
            raise ResponseError("the receiver's answer is not an OTLP export response") from exc
        self.rejections.read(message, self._field)

    def is_connection_error(self, exception: Exception | None) -> bool:
        return isinstance(exception, httpcore.ConnectError | httpcore.RemoteProtocolError)

    def close(self) -> None:
        with self._pools_lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()


def _parse_json(body: bytes, message: Message) -> None:
    """Read an OTLP/JSON answer into ``message``; ``ValueError`` when it is not one.

    protobuf's JSON parser loads here, on the first JSON answer only.
    """
    from google.protobuf import json_format

    try:
        json_format.Parse(body.decode("utf-8"), message, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(str(exc)) from exc
