"""Suspensions: the run waiting on an answer from outside, an ``await_external`` value or a tool approval.

Both are one :class:`Suspension`: a journaled opening entry, an optional deadline, and a close.
The first close wins: a resolution (``handle.resolve_external``), or a timeout journaled once the
deadline has passed (on resume, by a live watchdog, or when a late answer arrives). A workflow
parked on an external wait unwinds the run (``suspended``); an approval is awaited in place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from rulvar_otel.core.events import EventModel, ResolutionApplied, ResolutionSuperseded
from rulvar_otel.engine.bus import format_ts
from rulvar_otel.engine.journal import JournalEntry, JournalKind
from rulvar_otel.engine.values import jsonable
from rulvar_otel.errors import ConfigError, DeadlineExceededError, ReplayMissError

if TYPE_CHECKING:
    from rulvar_otel.core.handle import RunOutcome
    from rulvar_otel.engine.bus import EventBus
    from rulvar_otel.engine.config import EngineConfig
    from rulvar_otel.engine.journal_view import JournalView

__all__ = [
    "Answer",
    "ResolutionOutcome",
    "Suspension",
    "SuspensionHost",
    "SuspensionKind",
    "Suspensions",
    "deadline_error",
    "deadline_from",
]


class ResolutionOutcome(BaseModel):
    """What ``resolve_external`` did: ``applied`` for the first close, else the reason."""

    model_config = ConfigDict(frozen=True)

    applied: bool
    target_ref: int | None = None
    entry_ref: int | None = None
    reason: str | None = None


class SuspensionKind(StrEnum):
    EXTERNAL = "external"
    APPROVAL = "approval"

    @property
    def journal_kind(self) -> JournalKind:
        return (
            JournalKind.EXTERNAL_WAITING if self is SuspensionKind.EXTERNAL else JournalKind.APPROVAL_PENDING
        )


@dataclass(frozen=True)
class Answer:
    """How a suspension closed: the resolved ``value``, or ``timed_out`` at its deadline."""

    value: Any = None
    timed_out: bool = False

    @classmethod
    def of(cls, close: JournalEntry) -> Answer:
        return cls(timed_out=True) if close.data.get("timedOut") else cls(value=close.data.get("value"))


@dataclass
class Suspension:
    """One opened (or reopened) suspension; ``answer`` is set once it is closed."""

    kind: SuspensionKind
    entry: JournalEntry
    deadline: str | None
    replayed: bool
    answer: Answer | None = None
    # Live waits only: the names resolve_external accepts besides the entry ref, and the waiter.
    names: tuple[str, ...] = ()
    future: asyncio.Future[Answer] | None = field(default=None, repr=False)


def deadline_from(deadline_at: datetime | float | None) -> str | None:
    """The wire form of a caller's deadline (an aware datetime or epoch seconds)."""
    if deadline_at is None:
        return None
    if isinstance(deadline_at, datetime):
        if deadline_at.tzinfo is None:
            raise ConfigError("deadline_at must be timezone-aware (or epoch seconds)")
        return format_ts(deadline_at)
    if isinstance(deadline_at, bool) or not isinstance(deadline_at, int | float):
        raise ConfigError(
            f"deadline_at must be a datetime or epoch seconds, got {type(deadline_at).__name__}"
        )
    return format_ts(datetime.fromtimestamp(float(deadline_at), UTC))


def deadline_error(key: str, deadline: Any) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"nobody resolved {key!r} before its deadline {deadline}",
        data={"key": key, "deadlineAt": deadline},
    )


class SuspensionHost(Protocol):
    """What the suspensions read of their segment (the segment's state satisfies it)."""

    @property
    def engine(self) -> EngineConfig: ...
    @property
    def run_id(self) -> str: ...
    @property
    def root_span(self) -> str: ...
    @property
    def journal(self) -> JournalView: ...
    @property
    def bus(self) -> EventBus: ...
    @property
    def result(self) -> asyncio.Future[RunOutcome]: ...
    @property
    def dry_run(self) -> bool: ...
    def emit(
        self, cls: type[EventModel], span_id: str, parent: str | None = None, **body: Any
    ) -> EventModel: ...


class Suspensions:
    """The run's suspensions: opening, timing out, live waiting and resolution."""

    def __init__(self, run: SuspensionHost) -> None:
        self._run = run
        self.live: dict[int, Suspension] = {}
        # The external waits this segment parked on, reported in the outcome's ``pending``.
        self.pending: list[dict[str, Any]] = []

    def deadline_passed(self, deadline: Any) -> bool:
        return isinstance(deadline, str) and self._run.engine.clock() >= datetime.fromisoformat(deadline)

    def deadline_after(self, seconds: float | None) -> str | None:
        if seconds is None:
            return None
        return format_ts(self._run.engine.clock() + timedelta(seconds=seconds))

    def open(
        self,
        kind: SuspensionKind,
        key: str,
        data: dict[str, Any],
        *,
        new_deadline: Callable[[], str | None],
        miss: str,
    ) -> Suspension:
        """Reopen the journaled suspension ``key`` (closing it if its deadline passed), or open it.

        ``new_deadline`` is asked only when opening: a reopened one keeps its journaled deadline.
        A dry-run cannot open a new one: it raises ReplayMissError with ``miss``.
        """
        journal = self._run.journal
        opening = journal.lookup(kind.journal_kind, key)
        if opening is not None:
            recorded = opening.data.get("deadlineAt")
            close = journal.close_of(opening.seq)
            if close is None and not journal.read_only and self.deadline_passed(recorded):
                close = self.close_timed_out(opening.seq)
            answer = Answer.of(close) if close is not None else None
            deadline = recorded if isinstance(recorded, str) else None
            return Suspension(kind, opening, deadline, replayed=True, answer=answer)
        if journal.read_only:
            raise ReplayMissError(miss)
        deadline = new_deadline()
        if deadline is not None:
            data = {**data, "deadlineAt": deadline}
        return Suspension(kind, journal.append(kind.journal_kind, key, data), deadline, replayed=False)

    def close_timed_out(self, entry_ref: int) -> JournalEntry:
        """Close a suspension as timed out: a journaled close like any resolution (first wins)."""
        return self._run.journal.append(
            JournalKind.RESOLUTION, None, {"targetRef": entry_ref, "timedOut": True, "by": "deadline"}
        )

    async def wait(
        self, suspension: Suspension, names: tuple[str, ...], announce: Callable[[], None]
    ) -> Answer:
        """Await a live answer for ``suspension``; ``announce()`` emits its event once it is listed.

        Registered before the event goes out, because a listener may answer from inside the emit.
        A deadline gets a watchdog that closes the suspension as timed out when it passes.
        """
        run = self._run
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        suspension.names, suspension.future = names, future
        self.live[suspension.entry.seq] = suspension
        announce()
        watchdog: asyncio.Task[None] | None = None
        if suspension.deadline is not None and not run.journal.read_only and not future.done():
            watchdog = asyncio.get_running_loop().create_task(self._watch(suspension, suspension.deadline))
        try:
            return await future
        finally:
            if watchdog is not None:
                watchdog.cancel()
            self.live.pop(suspension.entry.seq, None)

    async def _watch(self, suspension: Suspension, deadline: str) -> None:
        run = self._run
        left = (datetime.fromisoformat(deadline) - run.engine.clock()).total_seconds()
        await run.engine.sleep(max(0.0, left))
        if suspension.future is not None and not suspension.future.done():
            self.close_timed_out(suspension.entry.seq)
            suspension.future.set_result(Answer(timed_out=True))

    def cancel_waiters(self) -> None:
        for suspension in self.live.values():
            if suspension.future is not None and not suspension.future.done():
                suspension.future.cancel()

    # --- resolution ---------------------------------------------------------------------------

    def resolve(self, key_or_ref: str | int, value: Any, by: str) -> ResolutionOutcome:
        for suspension in self.live.values():
            if suspension.entry.seq == key_or_ref or key_or_ref in suspension.names:
                return self._resolve_live(suspension, value, by)
        return self._resolve_detached(key_or_ref, value, by)

    def _resolve_live(self, suspension: Suspension, value: Any, by: str) -> ResolutionOutcome:
        run = self._run
        target = suspension.entry.seq
        assert suspension.future is not None
        if suspension.future.done():
            winner = run.journal.close_of(target)
            if not run.bus.closed and winner is not None:
                run.emit(
                    ResolutionSuperseded,
                    run.root_span,
                    target_ref=target,
                    entry_ref=winner.seq,
                    superseded_by=winner.seq,
                    reason="already_resolved",
                )
            timed_out = winner is not None and winner.data.get("timedOut")
            reason = "deadline_passed" if timed_out else "already_resolved"
            return ResolutionOutcome(applied=False, target_ref=target, reason=reason)
        entry = run.journal.append(
            JournalKind.RESOLUTION, None, {"targetRef": target, "value": jsonable(value), "by": by}
        )
        suspension.future.set_result(Answer(value=value))
        if not run.bus.closed:
            run.emit(ResolutionApplied, run.root_span, target_ref=target, entry_ref=entry.seq, by=by)
        return ResolutionOutcome(applied=True, target_ref=target, entry_ref=entry.seq)

    def _resolve_detached(self, key_or_ref: str | int, value: Any, by: str) -> ResolutionOutcome:
        # Nothing waits in this process: close the journaled suspension for a later resume.
        run = self._run
        live = not run.result.done() and not run.dry_run
        store = run.engine.journal
        entries = list(run.journal.entries) if live else store.load(run.run_id)
        closes: dict[Any, JournalEntry] = {}
        for entry in entries:
            if entry.kind == JournalKind.RESOLUTION:
                closes.setdefault(entry.data.get("targetRef"), entry)
        openings = (JournalKind.EXTERNAL_WAITING, JournalKind.APPROVAL_PENDING)
        for entry in entries:
            if entry.kind not in openings:
                continue
            names = {entry.data.get("key"), entry.data.get("toolCallId")}
            if key_or_ref != entry.seq and key_or_ref not in names:
                continue
            winner = closes.get(entry.seq)
            if winner is not None:
                reason = "deadline_passed" if winner.data.get("timedOut") else "already_resolved"
                return ResolutionOutcome(applied=False, target_ref=entry.seq, reason=reason)
            # Past its deadline the suspension closes as timed out, and this late answer loses.
            timed_out = self.deadline_passed(entry.data.get("deadlineAt"))
            data: dict[str, Any] = (
                {"targetRef": entry.seq, "timedOut": True, "by": "deadline"}
                if timed_out
                else {"targetRef": entry.seq, "value": jsonable(value), "by": by}
            )
            if live:
                own = run.journal.append(JournalKind.RESOLUTION, None, data)
            else:
                own = JournalEntry(
                    seq=1 + max(e.seq for e in entries),
                    kind=JournalKind.RESOLUTION.value,
                    ts=format_ts(run.engine.clock()),
                    data=data,
                )
                store.append(run.run_id, own)
            if timed_out:
                return ResolutionOutcome(applied=False, target_ref=entry.seq, reason="deadline_passed")
            return ResolutionOutcome(applied=True, target_ref=entry.seq, entry_ref=own.seq)
        raise ConfigError(f"run {run.run_id!r} has no suspension named {key_or_ref!r}")
