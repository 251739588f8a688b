"""The event bus and handle, the limiters, cancellation and the layering rule of the core."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from typing import Any

import pytest

from rulvar_otel.core.handle import RunHandle
from rulvar_otel.core.masking import MASKED_SECRET
from rulvar_otel.engine import (
    Hang,
    Reply,
    ScriptedAdapter,
    ScriptedQuota,
    create_engine,
    workflow,
)
from rulvar_otel.errors import ConfigError
from tests._support import PRICES, TickClock, no_sleep

SECRET = "sk-abc123def456ghi789jkl012"


@workflow("two-agents")
async def two_agents(ctx: Any, args: Any) -> Any:
    ctx.log("info", f"starting with {SECRET}", {"key": SECRET})
    async with ctx.phase("work"):
        first = await ctx.agent("one", label="one")
        second = await ctx.agent("two", label="two")
    return [first, second]


def engine(**options: Any) -> Any:
    options.setdefault("pricing", PRICES)
    options.setdefault("clock", TickClock())
    options.setdefault("sleep", no_sleep)
    return create_engine([options.pop("adapter", ScriptedAdapter("fake"))], **options)


async def test_handle_satisfies_the_protocol_and_a_late_consumer_gets_everything() -> None:
    handle = engine().run(two_agents, {})
    assert isinstance(handle, RunHandle)
    outcome = await handle.result
    late = [e async for e in handle.events]
    again = [e async for e in handle.events]
    assert outcome.status == "ok"
    assert late == again and late[0].type == "run:start" and late[-1].type == "run:end"
    assert [e.seq for e in late] == list(range(len(late)))


async def test_two_concurrent_consumers_each_see_the_whole_stream() -> None:
    handle = engine().run(two_agents, {})

    async def consume() -> list[int]:
        return [e.seq async for e in handle.events]

    first, second = await asyncio.gather(consume(), consume())
    assert first == second and len(first) > 10


async def test_on_delivers_from_registration_onward_and_unsubscribes() -> None:
    handle = engine().run(two_agents, {})
    seen: list[str] = []
    late: list[str] = []
    off = handle.on("agent:end", lambda e: seen.append(e.label))

    def register_late(event: Any) -> None:
        if event.label == "one":
            handle.on("agent:start", lambda e: late.append(e.label))

    handle.on("agent:end", register_late)
    everything: list[str] = []
    handle.on("*", lambda e: everything.append(e.type))
    await handle.result
    assert seen == ["one", "two"]
    assert late == ["two"]  # registered after agent one started
    assert everything[0] == "run:start" and everything[-1] == "run:end"
    off()


async def test_throwing_listener_is_isolated_ordered_and_masked() -> None:
    handle = engine().run(two_agents, {})
    order: list[tuple[str, int]] = []

    def boom(event: Any) -> None:
        order.append(("boom", event.seq))
        raise RuntimeError(f"listener leaked {SECRET}")

    handle.on("agent:start", boom)
    handle.on("agent:start", lambda e: order.append(("after", e.seq)))
    handle.on("agent:end", boom)
    outcome = await handle.result
    events = [e async for e in handle.events]
    warnings = [e for e in events if e.type == "log" and e.level == "warn"]
    assert outcome.status == "ok" and outcome.value == ["done", "done"]
    assert len(warnings) == 1  # once per segment, however many listeners threw
    first_start = next(e for e in events if e.type == "agent:start")
    assert ("after", first_start.seq) in order  # the other listener got the event
    assert warnings[0].seq > first_start.seq  # the warning follows its cause
    assert SECRET not in warnings[0].msg and MASKED_SECRET in warnings[0].msg


async def test_each_throwing_listener_is_logged_once_masked_even_unmasked_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handle = engine(redaction={"mask_events": False}).run(two_agents, {})

    def boom(event: Any) -> None:
        raise RuntimeError(f"listener leaked {SECRET}")

    def other(event: Any) -> None:
        raise ValueError("another listener bug")

    handle.on("agent:start", boom)
    handle.on("*", other)
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        outcome = await handle.result
    logged = [r.getMessage() for r in caplog.records if r.name == "rulvar_otel"]
    assert outcome.status == "ok"
    assert len(logged) == 2  # once per listener, though each raised on several events
    assert all(SECRET not in text for text in logged)
    assert any(MASKED_SECRET in text for text in logged)


async def test_masking_on_by_default_and_off_on_request() -> None:
    masked_handle = engine().run(two_agents, {})
    masked = [e async for e in masked_handle.events]
    raw_handle = engine(redaction={"mask_events": False}).run(two_agents, {})
    raw = [e async for e in raw_handle.events]
    masked_log = next(e for e in masked if e.type == "log")
    raw_log = next(e for e in raw if e.type == "log")
    assert masked_log.msg == f"starting with {MASKED_SECRET}" and masked_log.data == {"key": MASKED_SECRET}
    assert raw_log.msg == f"starting with {SECRET}"
    with pytest.raises(ConfigError):
        engine(redaction={"mask": False})


async def test_cancel_before_and_during_the_run() -> None:
    early = engine().run(two_agents, {})
    early.cancel("stop now")
    outcome = await early.result
    assert outcome.status == "cancelled"
    assert [e.type async for e in early.events] == ["run:start", "run:end"]

    hanging = ScriptedAdapter("fake", script={"one": [Hang()]})
    handle = engine(adapter=hanging).run(two_agents, {})
    handle.on("agent:phase:start", lambda e: handle.cancel("operator stop"))
    outcome = await handle.result
    events = [e async for e in handle.events]
    assert outcome.status == "cancelled"
    end = next(e for e in events if e.type == "agent:end")
    assert end.status == "cancelled" and end.usage_approx
    assert events[-1].envelope["status"] == "cancelled"


async def test_quota_exhaustion_ends_in_a_real_agent_error() -> None:
    quota = ScriptedQuota({"fake:model": 10}, retry_after_ms=0)
    handle = engine(quota=quota, max_denials=2).run(two_agents, {})
    outcome = await handle.result
    events = [e async for e in handle.events]
    assert [e.type for e in events].count("quota:denied") == 2
    error = next(e for e in events if e.type == "agent:error")
    assert error.error.code == "quota_exhausted" and error.will_retry is False
    assert outcome.status == "error"


@workflow("fan")
async def fan(ctx: Any, args: Any) -> Any:
    async with ctx.phase("fan"):
        return await ctx.parallel([ctx.agent("a", label="a"), ctx.agent("b", label="b")])


async def test_exposure_cap_parks_a_turn_while_a_hold_can_release() -> None:
    release = asyncio.Event()
    adapter = ScriptedAdapter("fake", script={"a": [Hang(release=release, then=Reply("a done"))]})
    handle = engine(adapter=adapter, max_in_flight_exposure_usd=0.6).run(fan, {})
    handle.on("budget:exposure-wait", lambda e: release.set())
    outcome = await handle.result
    waits = [e async for e in handle.events if e.type == "budget:exposure-wait"]
    assert outcome.status == "ok" and outcome.value == ["a done", "done"]
    assert [w.will_wait for w in waits] == [True]
    assert waits[0].in_flight_usd == 0.5 and waits[0].estimate_usd == 0.5 and waits[0].cap_usd == 0.6


async def test_bad_configuration_is_refused_with_typed_errors() -> None:
    with pytest.raises(ConfigError):
        create_engine([])
    with pytest.raises(ConfigError):
        engine(max_in_flight_exposure_usd=0)
    same = engine()
    await same.run(two_agents, {}, run_id="dup").result
    with pytest.raises(ConfigError, match="already has a journal"):
        same.run(two_agents, {}, run_id="dup")


def test_engine_run_outside_an_event_loop_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="running event loop"):
        engine().run(two_agents, {})


def test_importing_the_core_loads_no_otel_network_or_terminal_library() -> None:
    code = (
        "import sys, rulvar_otel.core, rulvar_otel.engine, rulvar_otel.engine.demo\n"
        "from rulvar_otel.engine import OpenAICompatAdapter\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'httpx', 'typer', 'rich')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@workflow("library-clock")
async def library_clock(ctx: Any, args: Any) -> Any:
    import time
    import uuid

    uuid.uuid1()  # the standard library reads the clock itself: exempt
    first = time.time()
    second = time.time()  # the same (category, provenance) is reported once per segment
    return second >= first


async def test_determinism_exempts_libraries_reports_once_and_honours_the_allowlist() -> None:
    handle = engine().run(library_clock, {})
    await handle.result
    warnings = [e async for e in handle.events if e.type == "determinism:warning"]
    assert [(w.category, w.provenance) for w in warnings] == [("bare-date-now", "workflow")]
    allowed = engine(determinism_allow=[__file__]).run(library_clock, {})
    await allowed.result
    assert [e.provenance async for e in allowed.events if e.type == "determinism:warning"] == ["allowlisted"]
    quiet = engine(determinism_mode="off").run(library_clock, {})
    await quiet.result
    assert not [e async for e in quiet.events if e.type == "determinism:warning"]


async def test_an_engine_fault_during_settlement_still_ends_the_stream_and_rejects_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rulvar_otel.engine.run import RunSegment
    from rulvar_otel.errors import RunRejectedError

    def broken_settle(self: RunSegment, *args: Any) -> None:
        raise RuntimeError("settlement bug")

    monkeypatch.setattr(RunSegment, "_settle", broken_settle)
    handle = engine().run(two_agents, {})
    events = await asyncio.wait_for(_collect(handle), timeout=5)
    assert events[0].type == "run:start"
    with pytest.raises(RunRejectedError, match="without settling"):
        await handle.result


async def _collect(handle: Any) -> list[Any]:
    return [e async for e in handle.events]
