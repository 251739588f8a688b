"""One run's journal as the run sees it: the index replay reads, and the one place entries are written.

A dry-run reads only: :meth:`JournalView.append` refuses with ReplayMissError. The segment marker
is the one write a segment makes before its body, written explicitly by :meth:`write_marker` (a
dry-run's marker reserves its segment number, and a read-only archive simply keeps none). The first
refused write latches: every later write fails fast with the same :class:`JournalError`, and the
run settles on it instead of carrying on with facts nothing records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from rulvar_otel.engine.bus import format_ts
from rulvar_otel.engine.journal import JournalEntry, JournalKind, JournalStore
from rulvar_otel.errors import JournalError, ReplayMissError, RulvarOtelError

__all__ = ["JournalView"]


class JournalView:
    """The entries of one run: looked up by (kind, key), suspensions' closes by their target."""

    def __init__(
        self,
        store: JournalStore,
        run_id: str,
        entries: list[JournalEntry],
        *,
        clock: Callable[[], datetime],
        read_only: bool,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.read_only = read_only
        self.entries = list(entries)
        self.failure: JournalError | None = None
        self._clock = clock
        self._by_key: dict[tuple[str, str], JournalEntry] = {}
        self._closes: dict[int, JournalEntry] = {}
        for entry in self.entries:
            self._index(entry)
        self._next_seq = 1 + max((e.seq for e in self.entries), default=-1)

    def _index(self, entry: JournalEntry, *, replace: bool = False) -> None:
        if entry.kind == JournalKind.RESOLUTION:
            target = entry.data.get("targetRef")
            if isinstance(target, int) and target not in self._closes:
                self._closes[target] = entry
        elif entry.key is not None:
            if replace:
                self._by_key[(entry.kind, entry.key)] = entry
            else:
                self._by_key.setdefault((entry.kind, entry.key), entry)

    def lookup(self, kind: JournalKind, key: str) -> JournalEntry | None:
        return self._by_key.get((kind.value, key))

    def close_of(self, entry_ref: int) -> JournalEntry | None:
        """The first resolution that closed the suspension ``entry_ref`` (first close wins)."""
        return self._closes.get(entry_ref)

    def ensure_writable(self) -> None:
        """Raise the latched refusal before live work whose facts could not be recorded."""
        if self.failure is not None:
            raise JournalError(f"the journal refused an earlier write: {self.failure}")

    def append(self, kind: JournalKind, key: str | None, data: Mapping[str, Any]) -> JournalEntry:
        """Journal one decided fact; a dry-run refuses, a refused write latches (see the module)."""
        if self.read_only:
            raise ReplayMissError(f"a dry-run never writes the journal ({kind.value} {key or ''})")
        return self._write(kind, key, data)

    def write_marker(self, segment: int, *, dry_run: bool) -> JournalEntry:
        """The segment marker, written by live and dry-run segments alike (raises JournalError)."""
        # A dry-run's refused marker is a read-only archive, not a failed run: nothing latches.
        marker = {"segment": segment, "dryRun": dry_run}
        return self._write(JournalKind.SEGMENT, None, marker, latch=not dry_run)

    def _write(
        self, kind: JournalKind, key: str | None, data: Mapping[str, Any], *, latch: bool = True
    ) -> JournalEntry:
        if latch:
            self.ensure_writable()
        entry = JournalEntry(
            seq=self._next_seq, kind=kind.value, key=key, ts=format_ts(self._clock()), data=dict(data)
        )
        try:
            self.store.append(self.run_id, entry)
        except Exception as exc:
            # A host's own store may raise anything; the run still settles on a typed error.
            if isinstance(exc, JournalError):
                failure = exc
            else:
                detail = str(exc) if isinstance(exc, RulvarOtelError) else type(exc).__name__
                failure = JournalError(f"the journal store refused an append: {detail}")
            if latch:
                self.failure = failure
            if failure is exc:
                raise
            raise failure from exc
        self._next_seq += 1
        self.entries.append(entry)
        # An agent terminal that replaces an earlier cancelled one must win the index.
        self._index(entry, replace=kind == JournalKind.AGENT)
        return entry
