"""A dispatch that waits for a concurrency slot: ``agent:queued`` once before its start, live only.

Each event shape is checked on the engine's own stream and, where it reaches a trace, through
``to_otel`` with the in-memory harness.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from rulvar_otel.engine import (
    Hang,
    InMemoryJournalStore,
    Reply,
    ScriptedAdapter,
    workflow,
)
from tests._support import Run, export, make_engine, settle


@workflow("crowd")
async def crowd(ctx: Any, args: Any) -> Any:
    async with ctx.phase("fan-out"):
        return await ctx.parallel([ctx.agent(f"task {n}", label=f"w{n}") for n in range(args["agents"])])


def _open_at_once(events: list[dict[str, Any]]) -> int:
    live = peak = 0
    for event in events:
        if event["type"] == "agent:start":
            live += 1
            peak = max(peak, live)
        elif event["type"] == "agent:end":
            live -= 1
    return peak


async def _crowd_live_and_replayed() -> tuple[Run, Run]:
    engine = make_engine([ScriptedAdapter("fake")], max_concurrency=1, journal=InMemoryJournalStore())
    live = await settle(engine.run(crowd, {"agents": 3}, run_id="crowd-1"))
    return live, await settle(engine.resume("crowd-1", crowd, dry_run=True))


def test_a_dispatch_waiting_on_the_concurrency_limit_is_queued_once_before_its_start() -> None:
    (events, outcome), (replay, again) = asyncio.run(_crowd_live_and_replayed())
    assert outcome.status == "ok" and outcome.value == ["done", "done", "done"]
    assert _open_at_once(events) == 1
    queued = [e for e in events if e["type"] == "agent:queued"]
    assert [q["label"] for q in queued] == ["w1", "w2"]  # the first dispatch took the free slot
    starts = {e["spanId"]: i for i, e in enumerate(events) if e["type"] == "agent:start"}
    for q in queued:
        assert set(q) >= {"agentType", "label", "spanId", "seq", "ts"} and q["agentType"] == ""
        assert events.index(q) < starts[q["spanId"]]  # it rides the span its agent:start opens
    assert Counter(q["spanId"] for q in queued).most_common(1)[0][1] == 1

    # The queue is live telemetry: a dry-run replay takes no slot and never re-emits it.
    assert again.value == outcome.value
    assert not [e for e in replay if e["type"] == "agent:queued"]

    # The exporter attaches it as a span event and builds the same agent spans.
    result = export(events, outcome)
    agents = [s for s in result.spans if s.name.startswith("agent ")]
    assert len(agents) == 3, [s.name for s in result.spans]
    span_events = [ev.name for s in result.ended for ev in s.events]
    assert span_events.count("agent:queued") == 2


async def test_no_queue_below_the_limit_and_the_limit_is_shared_by_the_engines_runs() -> None:
    roomy = make_engine([ScriptedAdapter("fake")], max_concurrency=3)
    events, _ = await settle(roomy.run(crowd, {"agents": 3}))
    assert not [e for e in events if e["type"] == "agent:queued"] and _open_at_once(events) == 3

    release = asyncio.Event()
    adapter = ScriptedAdapter("fake", script={"w0": [Hang(release=release, then=Reply("first"))]})
    shared = make_engine([adapter], max_concurrency=1)
    first = shared.run(crowd, {"agents": 1})
    second = shared.run(crowd, {"agents": 1})
    second.on("agent:queued", lambda e: release.set())
    (first_events, first_out), (second_events, second_out) = await asyncio.gather(
        settle(first), settle(second)
    )
    assert first_out.value == ["first"] and second_out.value == ["done"]
    assert not [e for e in first_events if e["type"] == "agent:queued"]
    assert [e["type"] for e in second_events if e["type"].startswith("agent:")][:2] == [
        "agent:queued",
        "agent:start",
    ]


async def test_a_dispatch_cancelled_in_the_queue_settles_cancelled_and_frees_nothing_it_never_held() -> None:
    adapter = ScriptedAdapter("fake", script={"w0": [Hang()]})
    engine = make_engine([adapter], max_concurrency=1)
    handle = engine.run(crowd, {"agents": 2})
    handle.on("agent:queued", lambda e: handle.cancel("operator stop"))
    events, outcome = await settle(handle)
    assert outcome.status == "cancelled"
    waiting = next(e for e in events if e["type"] == "agent:queued")
    own = [e for e in events if e.get("spanId") == waiting["spanId"]]
    assert [e["type"] for e in own] == ["agent:queued", "agent:start", "agent:end"]
    assert own[-1]["status"] == "cancelled" and "usageApprox" not in own[-1]
    assert adapter.calls == 1  # the queued dispatch never reached the adapter
    # Both slots came back: the next run on the same engine is not stuck behind a leaked hold.
    _, again = await settle(engine.run(crowd, {"agents": 2}))
    assert again.status == "ok" and engine.concurrency.active == 0
