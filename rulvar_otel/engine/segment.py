"""The state one run segment shares with its workflow code: :class:`SegmentState`.

The journal view, the event bus, the budget, the cost records, the suspensions and the span ids of
one segment. ``ctx``, agent dispatches and suspensions work on this state; the segment's main loop
and its settlement (:mod:`~rulvar_otel.engine.run`) build on it, so nothing below the run imports
the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rulvar_otel.core.events import BudgetUpdate, EventModel
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import determinism
from rulvar_otel.engine.budget import BudgetAccount
from rulvar_otel.engine.bus import EventBus
from rulvar_otel.engine.config import EngineConfig
from rulvar_otel.engine.cost import AgentRecord, OrchestrationFacts
from rulvar_otel.engine.journal import JournalEntry
from rulvar_otel.engine.journal_view import JournalView
from rulvar_otel.engine.limits import ExposureGate
from rulvar_otel.engine.suspension import Suspensions
from rulvar_otel.errors import ConfigError

__all__ = ["SegmentState"]


class SegmentState:
    """One segment's journal view, bus, budget, records, suspensions and span ids."""

    def __init__(
        self,
        engine: EngineConfig,
        run_id: str,
        entries: list[JournalEntry],
        *,
        segment: int,
        dry_run: bool,
        budget_usd: float | None,
    ) -> None:
        if budget_usd is not None and (budget_usd < 0 or budget_usd != budget_usd):
            raise ConfigError("budget_usd must be a number >= 0")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigError(
                "engine.run and engine.resume need a running event loop (call them from async code)"
            ) from None
        self.engine = engine
        self.run_id = run_id
        self.segment = segment
        self.journal = JournalView(engine.journal, run_id, entries, clock=engine.clock, read_only=dry_run)
        base = segment << 32
        self._next_span = base
        self.root_span = self.mint_span()
        self.bus = EventBus(
            run_id, base=base, masker=engine.masker, clock=engine.clock, root_span=self.root_span
        )
        self.budget = BudgetAccount(budget_usd, self.report_budget)
        self.records: list[AgentRecord] = []
        # Set by the first ctx.orchestrate of the run: what its orchestrations add to the cost fold.
        self.orchestration: OrchestrationFacts | None = None
        self.agents_spawned = 0
        self.suspensions = Suspensions(self)
        cap = engine.max_in_flight_exposure_usd
        self.exposure = ExposureGate(cap) if cap else None
        self.cancel_reason: str | None = None
        self.result: asyncio.Future[RunOutcome] = loop.create_future()

    @property
    def dry_run(self) -> bool:
        return self.journal.read_only

    def mint_span(self) -> str:
        span = f"s{self._next_span}"
        self._next_span += 1
        return span

    def emit(self, cls: type[EventModel], span_id: str, parent: str | None = None, **body: Any) -> EventModel:
        with determinism.suppressed():
            return self.bus.emit(cls, span_id, parent, **body)

    def report_budget(self) -> None:
        budget = self.budget
        self.emit(
            BudgetUpdate,
            self.root_span,
            spent_usd=budget.spent_usd,
            remaining_usd=budget.remaining_usd,
            committed_reserve_usd=max(0.0, budget.committed_usd),
        )
