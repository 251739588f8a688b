"""A deterministic bundled engine for tests: fixed prices, a ticking clock, no real sleeps.

:func:`make_engine` builds one over scripted adapters; :func:`settle` awaits a run into
(wire-form events, outcome) and :func:`run_scenario` does so for a scenario builder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from rulvar_otel.core.events import event_to_wire
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import EngineRunHandle, Price, ScriptedAdapter, create_engine

__all__ = ["PRICES", "Run", "TickClock", "make_engine", "no_sleep", "run_scenario", "settle"]

PRICES = {"fake:model": Price(1, 10), "fake:fake-model": Price(0, 0)}


class TickClock:
    """A deterministic wall clock: every reading is 1 ms after the previous one."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def make_engine(adapters: list[ScriptedAdapter], **options: Any) -> Any:
    options.setdefault("pricing", PRICES)
    options.setdefault("clock", TickClock())
    options.setdefault("sleep", no_sleep)
    return create_engine(adapters, **options)


Run = tuple[list[dict[str, Any]], RunOutcome]


async def settle(handle: EngineRunHandle) -> Run:
    """The run's wire-form events and its outcome, once it settled."""
    outcome = await handle.result
    events = [event_to_wire(e) async for e in handle.events]
    return events, outcome


def run_scenario(build: Callable[[], Awaitable[Run]]) -> Run:
    """Run a scenario builder to completion on a fresh event loop."""

    async def settled() -> Run:
        return await build()

    return asyncio.run(settled())
