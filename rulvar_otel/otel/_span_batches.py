"""The direct sink's producer side: finished span records gathered into export batches.

:class:`SpanBatches` takes every record the recorder delivers (one call per span, so it is
compiled with the mapper), counts it, notes its trace, keeps what a terminal tree needs, and
hands each full batch to the sink's ``full`` callback (its bounded queue). The sink's worker
takes a partial batch with :meth:`SpanBatches.take_partial` when no full one came in time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rulvar_otel.otel._records import SpanRecord

__all__ = ["SpanBatches"]


class SpanBatches:
    """Records in end order, cut into batches of ``max_batch``.

    ``keep`` keeps up to that many records, and every root, in :attr:`records`. After
    :meth:`close` nothing more is taken. ``ended`` counts the records taken; ``trace_ids`` is
    an insertion-ordered set of their traces.
    """

    def __init__(self, max_batch: int, keep: int, full: Callable[[list[SpanRecord]], None]) -> None:
        self.max_batch = max(1, max_batch)
        self.keep = keep
        self.records: list[SpanRecord] = []
        self.ended = 0
        self.trace_ids: dict[int, None] = {}
        self.closed = False
        self._full = full
        self._batch: list[SpanRecord] = []
        # The worker takes partial batches from another thread.
        self._lock = threading.Lock()

    def add(self, record: SpanRecord) -> None:
        """Take one finished record (the recorder's delivery)."""
        if self.closed:
            return
        self.ended += 1
        trace_ids = self.trace_ids
        if record.trace_id not in trace_ids:
            trace_ids[record.trace_id] = None
        keep = self.keep
        if keep and (len(self.records) < keep or not record.parent_id):
            self.records.append(record)
        lock = self._lock
        lock.acquire()
        try:
            batch = self._batch
            batch.append(record)
            full = len(batch) >= self.max_batch
            if full:
                self._batch = []
        finally:
            lock.release()
        if full:
            self._full(batch)

    def take_partial(self) -> list[SpanRecord] | None:
        """The batch being filled, if it holds anything (a new one starts)."""
        lock = self._lock
        lock.acquire()
        try:
            batch = self._batch
            if batch:
                self._batch = []
        finally:
            lock.release()
        return batch or None
