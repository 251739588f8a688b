"""A deterministic bundled engine for tests: fixed prices, a ticking clock, no real sleeps.

:func:`make_engine` builds one over scripted adapters; :func:`settle` awaits a run into
(wire-form events, outcome) and :func:`run_scenario` does so for a scenario builder.
:func:`run_demo_with_meter` runs the scripted demo (what ``rulvar-otel demo`` runs) on an engine
given a meter, and :func:`event_tokens` totals the tokens its events report, per model and type.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric

from rulvar_otel.core.events import event_to_wire
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import EngineRunHandle, Price, ScriptedAdapter, create_engine
from rulvar_otel.engine.demo import build_demo

__all__ = [
    "PRICES",
    "Run",
    "TickClock",
    "event_tokens",
    "make_engine",
    "no_sleep",
    "run_demo_with_meter",
    "run_scenario",
    "settle",
]

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


def _metrics(reader: InMemoryMetricReader) -> dict[str, Metric]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def run_demo_with_meter() -> tuple[dict[str, Metric], list[dict[str, Any]]]:
    """One demo run on an engine given a meter: (its metrics by name, its wire events)."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")

    async def scenario() -> list[dict[str, Any]]:
        setup = build_demo(meter=meter)
        handle = setup.engine.run(setup.workflow, setup.args)
        events = [event_to_wire(event) async for event in handle.events]
        await handle.result
        return events

    events = asyncio.run(scenario())
    return _metrics(reader), events


def event_tokens(events: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """(model id, token type) -> the tokens the run's live agent:phase:end events report."""
    totals: Counter[tuple[str, str]] = Counter()
    for event in events:
        if event.get("type") != "agent:phase:end" or event.get("replayed") is True:
            continue
        model = str(event["model"]).partition(":")[2]
        usage = event["usage"]
        totals[(model, "input")] += usage["inputTokens"]
        totals[(model, "output")] += usage["outputTokens"]
    return {key: float(value) for key, value in totals.items()}
