"""The run's budget account and its journal view, on their own: admission against the ceiling,
release, the call check; lookups, the first close winning, the write latch, the read-only view."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rulvar_otel.engine import InMemoryJournalStore, JournalEntry, JournalError, JournalKind
from rulvar_otel.engine.budget import BudgetAccount
from rulvar_otel.engine.journal_view import JournalView
from rulvar_otel.errors import BudgetExhaustedError, ReplayMissError


def _clock() -> datetime:
    return datetime(2026, 12, 1, tzinfo=UTC)


def test_admission_fits_exactly_at_the_ceiling_despite_float_noise_and_refuses_past_it() -> None:
    changes: list[tuple[float, float]] = []
    account = BudgetAccount(0.3, lambda: changes.append((account.spent_usd, account.committed_usd)))
    account.charge(0.1)
    account.charge(0.2)  # 0.30000000000000004
    account.release(0.0)
    with pytest.raises(BudgetExhaustedError) as refused:
        account.admit(0.01)
    assert refused.value.data == {
        "account": "run",
        "spentUsd": account.spent_usd,
        "committedReserveUsd": 0.0,
        "proposedReserveUsd": 0.01,
        "ceilingUsd": 0.3,
    }
    roomy = BudgetAccount(0.3, lambda: None)
    roomy.charge(0.1)
    roomy.admit(0.2)  # 0.1 + 0.2 lands a hair above 0.3 and still fits
    assert roomy.remaining_usd == pytest.approx(0.2)
    roomy.release(0.2)
    assert roomy.committed_usd == 0.0
    assert len(changes) == 3


def test_a_call_is_refused_once_the_spend_reached_the_ceiling_and_replayed_spend_is_silent() -> None:
    changes: list[None] = []
    account = BudgetAccount(1.0, lambda: changes.append(None))
    account.rebook(0.4)
    account.check_call()
    assert changes == []
    account.charge(0.6)
    with pytest.raises(BudgetExhaustedError, match=r"budget ceiling 1\.0000 USD reached"):
        account.check_call()
    BudgetAccount(None, lambda: None).check_call()  # no ceiling, never refused


class Refusing(InMemoryJournalStore):
    def append(self, run_id: str, entry: JournalEntry) -> None:
        raise JournalError("cannot append to journal j: Read-only file system")


def test_the_first_refused_write_latches_and_the_store_is_not_asked_again() -> None:
    store = Refusing()
    view = JournalView(store, "r", [], clock=_clock, read_only=False)
    with pytest.raises(JournalError, match="Read-only"):
        view.append(JournalKind.TURN, "k", {})
    with pytest.raises(JournalError, match="refused an earlier write: cannot append"):
        view.ensure_writable()
    assert isinstance(view.failure, JournalError) and view.entries == []


def test_a_read_only_view_refuses_appends_but_a_refused_dry_run_marker_latches_nothing() -> None:
    view = JournalView(Refusing(), "r", [], clock=_clock, read_only=True)
    with pytest.raises(ReplayMissError):
        view.append(JournalKind.TURN, "k", {})
    with pytest.raises(JournalError):
        view.write_marker(3, dry_run=True)
    assert view.failure is None


def test_lookups_index_by_kind_and_key_and_the_first_close_of_a_suspension_wins() -> None:
    store = InMemoryJournalStore()
    view = JournalView(store, "r", [], clock=_clock, read_only=False)
    waiting = view.append(JournalKind.EXTERNAL_WAITING, "|ext:go", {"key": "go"})
    first = view.append(JournalKind.RESOLUTION, None, {"targetRef": waiting.seq, "value": 1})
    view.append(JournalKind.RESOLUTION, None, {"targetRef": waiting.seq, "value": 2})
    assert view.lookup(JournalKind.EXTERNAL_WAITING, "|ext:go") == waiting
    assert view.lookup(JournalKind.APPROVAL_PENDING, "|ext:go") is None
    assert view.close_of(waiting.seq) == first
    reopened = JournalView(store, "r", store.load("r"), clock=_clock, read_only=True)
    assert reopened.close_of(waiting.seq) == first
    assert [e.seq for e in store.load("r")] == [0, 1, 2]


def test_a_later_agent_terminal_replaces_a_cancelled_one_in_the_index() -> None:
    view = JournalView(InMemoryJournalStore(), "r", [], clock=_clock, read_only=False)
    view.append(JournalKind.AGENT, "|agent#0", {"status": "cancelled"})
    final = view.append(JournalKind.AGENT, "|agent#0", {"status": "ok"})
    view.append(JournalKind.TURN, "t", {"n": 1})
    view.append(JournalKind.TURN, "t", {"n": 2})
    assert view.lookup(JournalKind.AGENT, "|agent#0") == final
    found = view.lookup(JournalKind.TURN, "t")
    assert found is not None and found.data == {"n": 1}
