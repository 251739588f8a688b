"""The bundled engine rebuilding each reference engine run: one scenario builder per corpus stream.

:data:`ENGINE_SCENARIOS` maps a reference stream name to an async builder returning the bundled
engine's (events, outcome) for the same workflow, phases, agents and tools;
:func:`suspension_flow` runs the human-in-the-loop reference: live, resumed and dry-run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from rulvar_otel.engine import (
    BudgetExhaustedError,
    ExposureDrainedError,
    Fail,
    Hang,
    InMemoryJournalStore,
    Permissions,
    Price,
    Reply,
    RetryPolicy,
    ScriptedAdapter,
    ScriptedQuota,
    ToolCalls,
    WorkflowError,
    tool,
    workflow,
)
from tests._support._engine import Run, make_engine, settle

__all__ = ["ENGINE_SCENARIOS", "suspension_flow"]


async def minimal() -> Run:
    @workflow("review")
    async def review(ctx: Any, args: Any) -> Any:
        async with ctx.phase("scan"):
            await ctx.agent("scan the repo", model="fake:fake-model")
        return {"findings": "scanned"}

    engine = make_engine([ScriptedAdapter("fake", script=[Reply("scanned", usage=(4, 2))])])
    return await settle(engine.run(review, {}))


@tool
async def search(query: str) -> str:
    return f"results for {query}"


@tool
def fetch(url: str) -> str:
    raise ConnectionError("unreachable")


@tool(risk="destructive")
def rm_rf(path: str) -> str:
    return "removed"


@tool(max_calls=0)
def lookup(key: str) -> str:
    return key


async def tools_scenario() -> Run:
    @workflow("tooling")
    async def tooling(ctx: Any, args: Any) -> Any:
        async with ctx.phase("research"):
            main = await ctx.agent(
                "research",
                agent_type="researcher",
                tools=[search, fetch, rm_rf, lookup],
                deny_repeated_calls=True,
            )
        async with ctx.phase("fanout"):
            sides = await ctx.parallel(
                [
                    ctx.agent("a", agent_type="sidekick", label="side-a", tools=[search]),
                    ctx.agent("b", agent_type="sidekick", label="side-b", tools=[search]),
                ]
            )
        return {"main": main, "sides": sides}

    adapter = ScriptedAdapter(
        "fake",
        script={
            "researcher": [
                ToolCalls(
                    [
                        ("search", {"query": "a"}),
                        ("search", {"query": "b"}),
                        ("fetch", {"url": "u"}),
                        ("rm_rf", {"path": "/"}),
                    ]
                ),
                ToolCalls([("search", {"query": "a"}), ("lookup", {"key": "k"})]),
                Reply("research complete"),
            ],
            "side-a": [ToolCalls([("search", {"query": "x"})]), Reply("side-a done")],
            "side-b": [ToolCalls([("search", {"query": "y"})]), Reply("side-b done")],
        },
    )
    engine = make_engine([adapter], permissions=Permissions(deny=["rm_rf"]))
    return await settle(engine.run(tooling, {}))


@tool(needs_approval=True)
def deploy(target: str) -> str:
    return f"deployed {target}"


async def approval() -> Run:
    @workflow("release")
    async def release(ctx: Any, args: Any) -> Any:
        async with ctx.phase("ship"):
            await ctx.agent("ship it", tools=[deploy])
        return "release done"

    adapter = ScriptedAdapter(
        "fake",
        script=[ToolCalls([("deploy", {"target": "prod"}), ("deploy", {"target": "eu"})]), Reply("shipped")],
    )
    engine = make_engine([adapter])
    handle = engine.run(release, {})
    answers = iter([True, False])
    handle.on("approval:pending", lambda e: handle.resolve_external(e.entry_ref, next(answers)))
    return await settle(handle)


class Verdict(BaseModel):
    verdict: str
    hours: int


@tool
def clock() -> str:
    return "12:00"


async def phases() -> Run:
    @workflow("phased")
    async def phased(ctx: Any, args: Any) -> Any:
        async with ctx.phase("work"):
            value = await ctx.agent(
                "what time is it",
                agent_type="longRunner",
                tools=[clock],
                compact_at_tokens=100_000,
                summarize_model="fake:summary",
                finalize=True,
                finalize_model="fake:final",
                extract_model="fake:extract",
                schema=Verdict,
            )
        return value.model_dump()

    adapter = ScriptedAdapter(
        "fake",
        script=[
            ToolCalls([("clock", {})], usage=(120_000, 10)),
            Reply("summary one", usage=(10, 5)),
            ToolCalls([("clock", {})], usage=(120_000, 10)),
            Reply("summary two", usage=(10, 5)),
            Reply("it is noon", usage=(10, 5)),
            Reply("final: noon", usage=(30, 12)),
            Reply('{"verdict": "noon", "hours": 12}', usage=(7, 3)),
        ],
    )
    engine = make_engine(
        [adapter],
        pricing={
            "fake:model": Price(1, 10),
            "fake:summary": Price(1, 10),
            "fake:final": Price(1, 10),
            "fake:extract": Price(1, 10),
        },
    )
    return await settle(engine.run(phased, {}))


async def nested() -> Run:
    @workflow("child-summarizer")
    async def child(ctx: Any, args: Any) -> Any:
        async with ctx.phase("child-phase"):
            ctx.log("info", "child working", {"topic": args["topic"]})
            return await ctx.agent(f"summarize {args['topic']}", model="fake:fake-model")

    @workflow("nested-parent")
    async def parent(ctx: Any, args: Any) -> Any:
        ctx.log("debug", "parent starting")
        async with ctx.phase("outer"):
            ctx.log("info", "in outer", {"stamp": 42})
            async with ctx.phase("inner"):
                inner = await ctx.agent("inner question", model="fake:fake-model")
        async with ctx.phase("delegate"):
            summary = await ctx.workflow(child, {"topic": "otel"})
        ctx.log("warn", "parent finishing")
        return {"inner": inner, "summary": summary}

    engine = make_engine([ScriptedAdapter("fake", fallback=Reply("answer", usage=(4, 7)))])
    return await settle(engine.run(parent, {}))


async def error() -> Run:
    @workflow("fragile")
    async def fragile(ctx: Any, args: Any) -> Any:
        async with ctx.phase("prepare"):
            await ctx.agent("prepare", model="fake:fake-model")
        async with ctx.phase("call"):
            return await ctx.agent("call", agent_type="flaky", model="fake:fake-model")

    overloaded = Fail("agent", "upstream overloaded", retryable=True, data={"kind": "overloaded"})
    adapter = ScriptedAdapter(
        "fake", script={"flaky": [overloaded, overloaded]}, fallback=Reply("ok", usage=(5, 2))
    )
    engine = make_engine([adapter], retry=RetryPolicy(max_retries=1))
    return await settle(engine.run(fragile, {}))


async def exhausted() -> Run:
    @workflow("capped")
    async def capped(ctx: Any, args: Any) -> Any:
        async with ctx.phase("first"):
            await ctx.agent("big", reserve_usd=0.01)
        async with ctx.phase("second"):
            await ctx.agent("one more", reserve_usd=0.01)
        return "unreachable"

    engine = make_engine([ScriptedAdapter("fake", fallback=Reply("read it all", usage=(600_000, 0)))])
    return await settle(engine.run(capped, {}, budget_usd=0.5))


@tool
async def slow_tool() -> str:
    await asyncio.Event().wait()
    return "never"


async def cancelled() -> Run:
    @workflow("long-haul")
    async def long_haul(ctx: Any, args: Any) -> Any:
        async with ctx.phase("work"):
            return await ctx.parallel(
                [ctx.agent("hang", label="hanger"), ctx.agent("tool", label="tooler", tools=[slow_tool])]
            )

    adapter = ScriptedAdapter("fake", script={"hanger": [Hang()], "tooler": [ToolCalls([("slow_tool", {})])]})
    engine = make_engine([adapter])
    handle = engine.run(long_haul, {})
    handle.on("tool:start", lambda e: handle.cancel("operator stop"))
    return await settle(handle)


async def quota() -> Run:
    @workflow("throttled")
    async def throttled(ctx: Any, args: Any) -> Any:
        async with ctx.phase("ask"):
            return await ctx.agent("ask", label="throttled-agent")

    engine = make_engine(
        [ScriptedAdapter("fake", script=[Reply("answered", usage=(12, 7))])],
        quota=ScriptedQuota({"fake:model": 2}, reason="tokensPerMinute 1800000 exhausted", retry_after_ms=3),
    )
    return await settle(engine.run(throttled, {}))


async def exposure_drained() -> Run:
    @workflow("rulvar-orchestrate")
    async def orchestrate(ctx: Any, args: Any) -> Any:
        try:
            return await ctx.agent("coordinate", role="orchestrate", reserve_usd=2)
        except ExposureDrainedError as exc:
            raise BudgetExhaustedError(str(exc), data={"completion": "partial"}) from exc

    engine = make_engine([ScriptedAdapter("fake")], max_in_flight_exposure_usd=0.03)
    return await settle(engine.run(orchestrate, {}, budget_usd=10))


async def determinism_scenario() -> Run:
    @workflow("nondeterministic")
    async def nondeterministic(ctx: Any, args: Any) -> Any:
        late = time.time() > 0
        rolled = random.random() >= 0
        stamp, draw = ctx.now(), ctx.random()
        async with ctx.phase("ask"):
            answer = await ctx.agent("ask", model="fake:fake-model")
        return {"late": late, "random": rolled, "journaled": stamp > 0 and draw >= 0, "answer": answer}

    engine = make_engine([ScriptedAdapter("fake", script=[Reply("ok", usage=(4, 1))])])
    return await settle(engine.run(nondeterministic, {}))


@workflow("hitl")
async def hitl(ctx: Any, args: Any) -> Any:
    async with ctx.phase("analyze"):
        analysis = await ctx.agent("analyze")
    stamp = ctx.now()
    async with ctx.phase("gate"):
        approved = await ctx.await_external("gate", prompt="approve the release?")
    async with ctx.phase("ship"):
        shipped = await ctx.agent(
            "ship", label="shipper", tools=[deploy], permissions=Permissions(allow=["deploy"])
        )
    return {"analysis": analysis, "stamp": stamp, "approved": approved, "shipped": shipped}


def hitl_adapter() -> ScriptedAdapter:
    return ScriptedAdapter(
        "fake",
        script={
            "*": [Reply("analysis done")],
            "shipper": [ToolCalls([("deploy", {"target": "prod"})]), Reply("shipped")],
        },
    )


async def _dry_resume(store: InMemoryJournalStore) -> Run:
    silent = ScriptedAdapter("fake", fallback=None)
    engine = make_engine([silent], journal=store)
    run = await settle(engine.resume("GOLDEN-SUSPEND-1", hitl, dry_run=True))
    assert silent.calls == 0
    return run


@tool(name="ghp_abcdefghijklmnopqrstuvwxyz0123456789")
def leaky_tool() -> str:
    raise PermissionError("nope")


async def secrets() -> Run:
    key = "AKIAIOSFODNN7EXAMPLE"

    @workflow(f"leaky-{key}")
    async def leaky(ctx: Any, args: Any) -> Any:
        ctx.log("warn", "rotating sk-abc123def456ghi789jkl012", {"token": "sk-abc123def456ghi789jkl012"})
        async with ctx.phase(f"phase {key}"):
            used = await ctx.agent("use", label=f"tool-user {key}", tools=[leaky_tool])
        async with ctx.phase("fail"):
            try:
                await ctx.agent("fail", label=f"failer {key}")
            except WorkflowError as exc:
                return f"{used} / {exc}"
        return used

    adapter = ScriptedAdapter(
        "vault",
        default_model=f"model-{key}",
        script={
            f"tool-user {key}": [
                ToolCalls([("ghp_abcdefghijklmnopqrstuvwxyz0123456789", {})]),
                Reply(f"used {key}"),
            ],
            f"failer {key}": [
                Fail(
                    "agent",
                    f"provider rejected credential sk-abc123def456ghi789jkl012 (aws {key})",
                    data={"kind": "terminal", "apiKey": "sk-abc123def456ghi789jkl012"},
                )
            ],
        },
    )
    engine = make_engine([adapter], pricing={f"vault:model-{key}": Price(1, 10)})
    return await settle(engine.run(leaky, {}, run_id="GOLDEN-SECRETS-1"))


async def suspension_flow() -> tuple[Run, Run, Run, ScriptedAdapter]:
    """The hitl run suspended live, resumed after the gate closed, and replayed dry: (live, resumed,
    dry, the resuming adapter)."""
    store = InMemoryJournalStore()
    engine = make_engine([hitl_adapter()], journal=store)
    handle = engine.run(hitl, {}, run_id="GOLDEN-SUSPEND-1")
    live = await settle(handle)
    closing = handle.resolve_external("gate", True)
    assert closing.applied
    assert not handle.resolve_external("gate", False).applied  # first close wins
    resumer = hitl_adapter()
    resumed = await settle(make_engine([resumer], journal=store).resume("GOLDEN-SUSPEND-1", hitl))
    return live, resumed, await _dry_resume(store), resumer


ENGINE_SCENARIOS: dict[str, Callable[[], Awaitable[Run]]] = {
    "minimal": minimal,
    "tools": tools_scenario,
    "approval": approval,
    "phases": phases,
    "nested": nested,
    "error": error,
    "exhausted": exhausted,
    "cancelled": cancelled,
    "quota": quota,
    "exposure-drained": exposure_drained,
    "determinism": determinism_scenario,
    "secrets": secrets,
}
