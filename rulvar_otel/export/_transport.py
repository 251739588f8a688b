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

:class:`BoundedHttpTransport` itself lives in ``_http_transport``, imported by an HTTP export
only (``httpcore``, ``ssl`` and the exporter library's HTTP types cost a gRPC or file export
nothing).
Over OTLP/gRPC, spans go through ``_grpc_transport.GrpcSpanSender``, which reads the answer's
``partial_success`` itself; the library's metric exporter gets the same accounting from
:func:`capture_grpc_rejections`, which wraps its stub so the ``Export`` response is read instead
of dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf.message import Message

__all__ = [
    "MAX_RESPONSE_BYTES",
    "DeliveryInterrupt",
    "DeliveryInterruptedError",
    "ResponseError",
    "Rejections",
    "capture_grpc_rejections",
    "grpc_call",
    "tls_settings",
]

# An OTLP answer is an empty message or a partial_success with a short message: a megabyte is plenty.
MAX_RESPONSE_BYTES: Final = 1024 * 1024
# Characters kept of a receiver's rejection message (it is masked before it is printed).
MAX_MESSAGE_CHARS: Final = 300
_INTERRUPTED: Final = "the export was interrupted before the receiver answered"


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
        response = grpc_call(self._stub.Export, self._interrupt, *args, **kwargs)
        if isinstance(response, Message):
            self._rejections.read(response, self._field)
        return response


def grpc_call(method: Any, interrupt: DeliveryInterrupt | None, *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)``, a gRPC unary call; an ``interrupt``'s cut cancels it in flight
    (:class:`DeliveryInterruptedError`, also raised at once when the cut came first)."""
    if interrupt is None:
        return method(*args, **kwargs)
    import grpc

    if interrupt.cut.is_set():
        raise DeliveryInterruptedError(_INTERRUPTED)
    call = method.future(*args, **kwargs)
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
