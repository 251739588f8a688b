"""Suspension deadlines: external waits and tool approvals close as a typed timeout once their
deadline passes; the first close wins.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import (
    DeadlineExceededError,
    InMemoryJournalStore,
    Reply,
    ScriptedAdapter,
    ScriptTurn,
    ToolCalls,
    tool,
    workflow,
)
from tests._support import Run, TickClock, make_engine, settle


@workflow("gated")
async def gated(ctx: Any, args: Any) -> Any:
    async with ctx.phase("gate"):
        try:
            answer = await ctx.await_external("go", prompt="ship?", deadline_at=ctx.now() + 3600)
        except DeadlineExceededError as exc:
            if not args.get("fallback"):
                raise
            answer = f"fallback after {exc.code}"
    return {"answer": answer}


def _error(outcome: RunOutcome) -> dict[str, Any]:
    assert isinstance(outcome.error, dict)
    return outcome.error


class Gate:
    """A gated run on a controllable clock: segments and resolutions driven by the test."""

    def __init__(self, **args: Any) -> None:
        self.clock = TickClock()
        self.store = InMemoryJournalStore()
        self.engine = make_engine([ScriptedAdapter("fake")], clock=self.clock, journal=self.store)
        self.args = args
        self.first: Any = None

    async def start(self) -> Run:
        self.first = self.engine.run(gated, self.args, run_id="gate-1")
        return await settle(self.first)

    async def resume(self, *, dry_run: bool = False) -> Run:
        return await settle(self.engine.resume("gate-1", gated, dry_run=dry_run))

    def later(self, hours: float) -> None:
        self.clock.now += timedelta(hours=hours)


def test_an_external_wait_past_its_deadline_settles_as_a_typed_timeout_on_resume() -> None:
    gate = Gate()

    async def go() -> tuple[Run, Run, Any, Run, Run, Any]:
        first = await gate.start()
        early = await gate.resume()  # within the hour: still waiting
        gate.later(2)
        late_answer = gate.first.resolve_external("go", "too late")
        timed_out = await gate.resume()
        replayed = await gate.resume(dry_run=True)
        return first, early, late_answer, timed_out, replayed, gate.first.resolve_external("go", "again")

    (first, out1), (early, out2), late_answer, (timed, out3), (_, out4), again = asyncio.run(go())
    waiting = next(e for e in first if e["type"] == "external:waiting")
    deadline = datetime.fromisoformat(waiting["deadlineAt"])
    assert out1.status == "suspended" and waiting["deadlineAt"].endswith("Z")
    assert deadline - datetime.fromisoformat(first[0]["ts"]) == pytest.approx(
        timedelta(hours=1), abs=timedelta(seconds=1)
    )
    rewait = next(e for e in early if e["type"] == "external:waiting")
    assert (
        out2.status == "suspended"
        and rewait["replayed"] is True
        and rewait["deadlineAt"] == waiting["deadlineAt"]
    )
    # The deadline closed the suspension first: the late answer is refused, typed.
    assert late_answer.applied is False and late_answer.reason == "deadline_passed"
    assert out3.status == "error"
    assert _error(out3)["code"] == "deadline_exceeded" and _error(out3)["data"]["key"] == "go"
    assert timed[-1]["envelope"]["error"]["code"] == "deadline_exceeded"
    assert not [e for e in timed if e["type"] == "external:waiting"]
    # The timeout is journaled: a dry-run reaches the same terminal, and later answers still lose.
    assert out4.status == "error" and out4.error == out3.error
    assert again.applied is False and again.reason == "deadline_passed"
    closes = [e for e in gate.store.load("gate-1") if e.kind == "resolution"]
    assert [c.data.get("timedOut") for c in closes] == [True]


def test_an_answer_before_the_deadline_wins_and_a_workflow_may_catch_the_timeout() -> None:
    on_time = Gate()
    caught = Gate(fallback=True)

    async def go() -> tuple[Any, Run, Run]:
        await on_time.start()
        answer = on_time.first.resolve_external("go", "ship it")
        on_time.later(5)  # resumed long after the deadline: the first close was the answer
        await caught.start()
        caught.later(2)
        return answer, await on_time.resume(), await caught.resume()

    answer, (_, shipped), (_, fell_back) = asyncio.run(go())
    assert answer.applied is True
    assert shipped.status == "ok" and shipped.value == {"answer": "ship it"}
    assert fell_back.status == "ok" and fell_back.value == {"answer": "fallback after deadline_exceeded"}


def test_a_deadline_already_past_times_out_at_once_and_bad_deadlines_are_refused() -> None:
    @workflow("past")
    async def past(ctx: Any, args: Any) -> Any:
        return await ctx.await_external("go", deadline_at=args["at"])

    async def go() -> tuple[Run, Run]:
        engine = make_engine([ScriptedAdapter("fake")])
        return (
            await settle(engine.run(past, {"at": datetime(2020, 1, 1, tzinfo=UTC)})),
            await settle(engine.run(past, {"at": "tomorrow"})),
        )

    (events, outcome), (_, bad) = asyncio.run(go())
    assert [e["type"] for e in events if e["type"] != "budget:update"] == [
        "run:start",
        "external:waiting",
        "run:end",
    ]
    assert events[1]["deadlineAt"] == "2020-01-01T00:00:00.000Z"
    assert outcome.status == "error" and _error(outcome)["code"] == "deadline_exceeded"
    assert getattr(outcome, "pending", None) == []
    assert bad.status == "error" and "deadline_at" in _error(bad)["message"]


@tool(needs_approval=True)
def deploy(target: str) -> str:
    return f"deployed {target}"


@workflow("guarded")
async def guarded(ctx: Any, args: Any) -> Any:
    async with ctx.phase("ship"):
        return await ctx.agent("ship it", label="shipper", tools=[deploy], **args)


def _guarded_adapter() -> ScriptedAdapter:
    turns: list[ScriptTurn] = [ToolCalls([("deploy", {"target": "prod"})]), Reply("reported")]
    return ScriptedAdapter("fake", script={"shipper": turns})


def test_an_approval_past_its_deadline_ends_the_tool_call_as_a_typed_timeout() -> None:
    async def go() -> tuple[Run, Any, Run]:
        # The injected sleep returns at once, so the approval deadline passes with nobody answering.
        engine = make_engine([_guarded_adapter()], approval_timeout_s=900, journal=InMemoryJournalStore())
        handle = engine.run(guarded, {}, run_id="guard-1")
        run = await settle(handle)
        late = handle.resolve_external("id-0-0", True)
        return run, late, await settle(engine.resume("guard-1", guarded, dry_run=True))

    (events, outcome), late, (replay, again) = asyncio.run(go())
    pending = next(e for e in events if e["type"] == "approval:pending")
    asked = datetime.fromisoformat(pending["ts"])
    assert datetime.fromisoformat(pending["deadlineAt"]) - asked == pytest.approx(
        timedelta(seconds=900), abs=timedelta(seconds=1)
    )
    end = next(e for e in events if e["type"] == "tool:end")
    assert end["outcome"] == "error" and end["errorCode"] == "deadline_exceeded" and end["verdict"] == "ask"
    # A tool failure, never a crashed run: the agent went on with the timeout as its tool result.
    assert outcome.status == "ok" and outcome.value == "reported"
    assert late.applied is False and late.reason == "deadline_passed"
    assert again.value == outcome.value
    assert [(e["outcome"], e["replayed"]) for e in replay if e["type"] == "tool:end"] == [("error", True)]


def test_an_approval_answered_in_time_runs_the_tool() -> None:
    async def go() -> Run:
        engine = make_engine([_guarded_adapter()])
        handle = engine.run(guarded, {"approval_timeout_s": 60})
        handle.on("approval:pending", lambda e: handle.resolve_external(e.entry_ref, True))
        return await settle(handle)

    events, outcome = asyncio.run(go())
    pending = next(e for e in events if e["type"] == "approval:pending")
    end = next(e for e in events if e["type"] == "tool:end")
    assert "deadlineAt" in pending and end["outcome"] == "ok" and outcome.status == "ok"
