"""A batching span processor that waits instead of dropping: backpressure for exports that must be whole.

The SDK's ``BatchSpanProcessor`` drops a span when its queue is full ("Queue full, dropping
Span."). An export of a recorded run has no reason to outrun its destination: here ``on_end``
blocks the producer until the worker has made room, so memory stays bounded by the queue size
and every ended span reaches the exporter. A destination that fails fast (see the tracked
exporter in ``_traces``) drains the queue quickly, so a dead endpoint cannot wedge the producer.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Final

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["BlockingBatchSpanProcessor"]

_STOP_WAIT_S: Final = 60.0


class BlockingBatchSpanProcessor(SpanProcessor):
    """Exports ended spans in batches from a worker thread; a full queue makes ``on_end`` wait.

    A batch goes out when ``batch_size`` spans are queued or ``schedule_delay_s`` has passed since
    the oldest one was queued. :meth:`force_flush` returns once everything queued was exported.
    """

    def __init__(
        self, exporter: SpanExporter, *, max_queue_size: int, batch_size: int, schedule_delay_s: float
    ) -> None:
        self._exporter = exporter
        self._max_queue = max_queue_size
        self._batch_size = min(batch_size, max_queue_size)
        self._delay_s = schedule_delay_s
        self._queue: deque[ReadableSpan] = deque()
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._has_room = threading.Condition(self._lock)
        self._in_flight = 0
        self._flush_requests = 0
        self._stopping = False
        self.waits = 0  # times a producer had to wait for room (backpressure applied)
        self._worker = threading.Thread(target=self._run, name="rulvar-otel-span-export", daemon=True)
        self._worker.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            if self._stopping:
                return
            if len(self._queue) >= self._max_queue:
                self.waits += 1
                while len(self._queue) >= self._max_queue and not self._stopping:
                    self._has_room.wait()
            self._queue.append(span)
            # The first span starts the worker's schedule-delay clock; a full batch ends it.
            if len(self._queue) == 1 or len(self._queue) >= self._batch_size:
                self._has_work.notify()

    def _take_batch(self) -> list[ReadableSpan] | None:
        # Called with the lock held; None when the worker should stop.
        while True:
            full = len(self._queue) >= self._batch_size
            if self._queue and (full or self._flush_requests or self._stopping):
                break
            if self._stopping and not self._queue:
                return None
            if not self._queue:
                self._has_work.wait()
                continue
            # A partial batch: wait for more, at most the schedule delay.
            if not self._has_work.wait(self._delay_s):
                break
        count = min(self._batch_size, len(self._queue))
        batch = [self._queue.popleft() for _ in range(count)]
        self._in_flight += 1
        self._has_room.notify_all()
        return batch

    def _run(self) -> None:
        while True:
            with self._lock:
                batch = self._take_batch()
            if batch is None:
                return
            try:
                self._exporter.export(batch)
            except Exception:  # noqa: BLE001 - the tracked exporter records failures; never die here
                pass
            with self._lock:
                self._in_flight -= 1
                self._has_room.notify_all()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export everything queued; ``False`` when ``timeout_millis`` passed first."""
        deadline = timeout_millis / 1000.0
        with self._lock:
            self._flush_requests += 1
            self._has_work.notify()
            try:
                return self._has_room.wait_for(lambda: not self._queue and not self._in_flight, deadline)
            finally:
                self._flush_requests -= 1

    def shutdown(self) -> None:
        with self._lock:
            self._stopping = True
            self._has_work.notify_all()
            self._has_room.notify_all()
        self._worker.join(_STOP_WAIT_S)
        self._exporter.shutdown()
