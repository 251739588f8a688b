"""Scripted orchestrations for the orchestration tests: one run, its events, outcome and replay.

:func:`orchestrated` runs ``orchestrate`` on a scripted adapter (the orchestrator's wake turns are
scripted tool calls) and returns an :class:`Orchestrated` record; :func:`replayed` dry-runs it again
from its journal. :func:`adaptive` keeps the adaptive events, :func:`of_type` one type's bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rulvar_otel.core.events import event_to_wire
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import (
    InMemoryJournalStore,
    OrchestrateOptions,
    ScriptedAdapter,
    ScriptTurn,
    orchestrate,
    orchestration_workflow,
)
from tests._support._engine import make_engine

__all__ = ["ADAPTIVE", "Orchestrated", "adaptive", "of_type", "orchestrated", "replayed"]

ADAPTIVE = frozenset(
    {
        "plan:revised", "node:parked", "node:cancelled", "node:linked", "orchestrator:woke",
        "orchestrator:budget", "orchestrator:acceptance", "escalation:raised", "escalation:decided",
        "spawn:admitted", "spawn:rejected", "verify:failed", "ledger:op", "stall:detected",
        "guard:oscillation", "resolution:applied", "resolution:superseded", "termination:debit",
        "termination:denied",
    }
)  # fmt: skip


@dataclass
class Orchestrated:
    events: list[dict[str, Any]]
    outcome: RunOutcome
    adapter: ScriptedAdapter
    store: InMemoryJournalStore
    options: OrchestrateOptions | None
    run_id: str


def orchestrated(
    script: Mapping[str, Sequence[ScriptTurn]],
    options: OrchestrateOptions | None = None,
    *,
    budget_usd: float | None = None,
    run_id: str = "orch-1",
) -> Orchestrated:
    adapter = ScriptedAdapter("fake", default_model="model", script=script)
    store = InMemoryJournalStore()

    async def go() -> Orchestrated:
        engine = make_engine([adapter], journal=store)
        handle = orchestrate(engine, "triage every service", options, run_id=run_id, budget_usd=budget_usd)
        outcome = await handle.result
        events = [event_to_wire(e) async for e in handle.events]
        return Orchestrated(events, outcome, adapter, store, options, run_id)

    return asyncio.run(go())


def replayed(run: Orchestrated) -> tuple[list[dict[str, Any]], RunOutcome, int]:
    """Dry-run the run from its journal: (events, outcome, adapter calls made by the replay)."""
    adapter = ScriptedAdapter("fake", default_model="model", script={})

    async def go() -> tuple[list[dict[str, Any]], RunOutcome, int]:
        engine = make_engine([adapter], journal=run.store)
        handle = engine.resume(run.run_id, orchestration_workflow(run.options), dry_run=True)
        outcome = await handle.result
        return [event_to_wire(e) async for e in handle.events], outcome, adapter.calls

    return asyncio.run(go())


def adaptive(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(e) for e in events if e["type"] in ADAPTIVE]


def of_type(events: Iterable[Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [dict(e) for e in events if e["type"] == kind]
