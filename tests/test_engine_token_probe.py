"""Admission sized by a countTokens probe, reported as ``control:wire``; a refused or denied probe
admits on the flat reserve.

Each event shape is checked on the engine's own stream and, where it reaches a trace, through
``to_otel`` with the in-memory harness.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rulvar_otel.engine import (
    Fail,
    InMemoryJournalStore,
    ScriptedAdapter,
    workflow,
)
from tests._support import Run, export, make_engine, settle

PROBE_PROMPT = "summarise the vellum ledger"


@workflow("probed")
async def probed(ctx: Any, args: Any) -> Any:
    async with ctx.phase("plan"):
        return await ctx.agent(PROBE_PROMPT, agent_type="planner", **args)


async def _probed(adapter: ScriptedAdapter, args: dict[str, Any], **options: Any) -> Run:
    return await settle(make_engine([adapter], **options).run(probed, args))


def _committed_at_admission(events: list[dict[str, Any]]) -> float:
    return float(next(e for e in events if e["type"] == "budget:update")["committedReserveUsd"])


def test_a_count_tokens_probe_sizes_the_reserve_and_is_reported_as_control_wire() -> None:
    adapter = ScriptedAdapter("fake")

    async def go() -> tuple[Run, Run, Run]:
        engine = make_engine([adapter], journal=InMemoryJournalStore(), count_tokens="on")
        live = await settle(engine.run(probed, {}, run_id="probe-1", budget_usd=0.1))
        replay = await settle(engine.resume("probe-1", probed, dry_run=True))
        flat = make_engine([ScriptedAdapter("fake")])  # policy off: the flat 0.5 reserve
        return live, replay, await settle(flat.run(probed, {}, budget_usd=0.1))

    (events, outcome), (replay, _), (flat_events, flat_outcome) = asyncio.run(go())
    wire = [e for e in events if e["type"] == "control:wire"]
    assert len(wire) == 1
    probe = wire[0]
    assert probe["controlKind"] == "countTokens" and probe["model"] == "fake:model"
    assert probe["outcome"] == "ok" and probe["inputTokens"] == len(PROBE_PROMPT) // 4
    phase = next(e for e in events if e["type"] == "phase:start")
    start = next(e for e in events if e["type"] == "agent:start")
    assert probe["spanId"] == phase["spanId"] and events.index(probe) < events.index(start)
    assert len(adapter.count_requests) == 1
    assert adapter.count_requests[0].messages[-1]["content"] == PROBE_PROMPT
    # Priced from the count ($1 in, $10 out per Mtok, 1024 output tokens) instead of the flat 0.5:
    # a 0.1 USD ceiling admits it, and refuses the flat reserve.
    expected = (len(PROBE_PROMPT) // 4 * 1 + 1024 * 10) / 1_000_000
    assert _committed_at_admission(events) == pytest.approx(expected)
    assert outcome.status == "ok"
    assert flat_outcome.status == "exhausted" and not [e for e in flat_events if e["type"] == "control:wire"]
    # Live telemetry only: a replay admits nothing, so it never probes.
    assert not [e for e in replay if e["type"] == "control:wire"] and len(adapter.count_requests) == 1

    # The exporter keeps the fact on the phase span, and the probed prompt never leaves.
    result = export(events, outcome)
    (host,) = [s for s in result.ended if any(ev.name == "control:wire" for ev in s.events)]
    assert host.name == "phase plan"
    probe_event = next(ev for ev in host.events if ev.name == "control:wire")
    assert probe_event.attributes is not None
    assert probe_event.attributes["rulvar.event.outcome"] == "ok"
    assert "vellum" not in repr(
        [(s.attributes, [(e.name, e.attributes) for e in s.events]) for s in result.ended]
    )


def test_a_refused_probe_and_a_denied_probe_admit_on_the_flat_reserve() -> None:
    refusing = ScriptedAdapter("fake", count_failure=Fail("unsupported", "no counting here"))
    denying = ScriptedAdapter("fake")
    explicit = ScriptedAdapter("fake")

    async def go() -> tuple[Run, Run, Run]:
        return (
            await _probed(refusing, {}, count_tokens="on"),
            await _probed(denying, {}, count_tokens=lambda ref: ref != "fake:model"),
            await _probed(explicit, {"reserve_usd": 0.2}, count_tokens="on"),
        )

    (failed, _), (denied, _), (fixed, _) = asyncio.run(go())
    assert [(e["outcome"], "inputTokens" in e) for e in failed if e["type"] == "control:wire"] == [
        ("failed", False)
    ]
    assert _committed_at_admission(failed) == 0.5 and len(refusing.count_requests) == 1
    assert [e["outcome"] for e in denied if e["type"] == "control:wire"] == ["denied"]
    assert _committed_at_admission(denied) == 0.5 and denying.count_requests == []
    # An explicit reserve is the caller's number: nothing to size, so nothing is probed.
    assert not [e for e in fixed if e["type"] == "control:wire"] and explicit.count_requests == []
    assert _committed_at_admission(fixed) == 0.2
