"""The bundled engine against the reference corpus: one scenario per reference engine stream.

Each scenario rebuilds the reference run (same workflow, phase, agent, tool names) on the bundled
engine and checks that its stream has the reference's event types, per-span order and field
shapes, and that ``to_otel`` builds the same span tree (names, nesting, statuses) from both.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from rulvar_otel.core.events import event_to_wire
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import (
    BudgetExhaustedError,
    EngineRunHandle,
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
    create_engine,
    tool,
    workflow,
)
from tests import _support
from tests._support import export

PRICES = {"fake:model": Price(1, 10), "fake:fake-model": Price(0, 0)}

# Optional fields the bundled engine may add beyond what one reference recording happened to carry
# (all in the catalog): a tool failure's errorCode, and the live quota-denial counters.
ALLOWED_EXTRA: dict[str, set[str]] = {
    "tool:end": {"errorCode"},
    "agent:end": {"error"},
    "spawn:admitted": {"reserveUsd"},
}


class TickClock:
    """A deterministic wall clock: every reading is 1 ms after the previous one."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def make_engine(adapters: list[ScriptedAdapter], **options: Any) -> Any:
    options.setdefault("pricing", PRICES)
    options.setdefault("clock", TickClock())
    options.setdefault("sleep", _no_sleep)
    return create_engine(adapters, **options)


Run = tuple[list[dict[str, Any]], RunOutcome]


async def settle(handle: EngineRunHandle) -> Run:
    outcome = await handle.result
    events = [event_to_wire(e) async for e in handle.events]
    return events, outcome


# --- structural comparison ----------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


def _agent_sequences(events: Iterable[Mapping[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """Per agent span (in opening order): its identity and the ordered types riding its spanId."""
    order: list[str] = []
    identity: dict[str, str] = {}
    seqs: dict[str, list[str]] = defaultdict(list)
    for event in events:
        if event["type"] == "agent:start":
            order.append(event["spanId"])
            identity[event["spanId"]] = f"{event.get('agentType')}|{event.get('label')}|{event.get('role')}"
        if event["spanId"] in identity:
            seqs[event["spanId"]].append(event["type"])
    return sorted((identity[s], tuple(seqs[s])) for s in order)


def _skeleton(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The order of everything that is not per-agent traffic or a budget tick."""
    agent_spans = {e["spanId"] for e in events if e["type"] == "agent:start"}
    return [
        e["type"]
        for e in events
        if e["type"] != "budget:update"
        and e["spanId"] not in agent_spans
        and e["type"] != "resolution:applied"
    ]


def assert_same_shape(
    ours: list[dict[str, Any]], ref: list[dict[str, Any]], envelope_extra: frozenset[str] = frozenset()
) -> None:
    # Event types: the same set, and the same count of every lifecycle type.
    assert set(Counter(e["type"] for e in ours)) == set(Counter(e["type"] for e in ref))
    lifecycle = lambda es: Counter(e["type"] for e in es if e["type"] != "budget:update")  # noqa: E731
    assert lifecycle(ours) == lifecycle(ref)
    # Order rules: the run/phase/child skeleton and every agent span's own sequence.
    assert _skeleton(ours) == _skeleton(ref)
    assert _agent_sequences(ours) == _agent_sequences(ref)
    # Envelope rules: seq strictly increasing, run:start first, run:end last.
    seqs = [e["seq"] for e in ours]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert ours[0]["type"] == "run:start" and ours[-1]["type"] == "run:end"
    # Field shapes: the same keys per type (catalog-optional extras aside), the same JSON types.
    keys_ours: dict[str, set[str]] = defaultdict(set)
    keys_ref: dict[str, set[str]] = defaultdict(set)
    types_ours: dict[tuple[str, str], set[str]] = defaultdict(set)
    types_ref: dict[tuple[str, str], set[str]] = defaultdict(set)
    for bucket, types, events in ((keys_ours, types_ours, ours), (keys_ref, types_ref, ref)):
        for event in events:
            bucket[event["type"]] |= set(event)
            for key, value in event.items():
                types[(event["type"], key)].add(_json_type(value))
    for kind, ref_keys in keys_ref.items():
        extra = keys_ours[kind] - ref_keys - ALLOWED_EXTRA.get(kind, set())
        assert ref_keys <= keys_ours[kind], f"{kind}: missing {ref_keys - keys_ours[kind]}"
        assert not extra, f"{kind}: unexpected fields {extra}"
    for (kind, key), kinds in types_ref.items():
        assert types_ours[(kind, key)] == kinds, f"{kind}.{key}: {types_ours[(kind, key)]} vs {kinds}"
    # The run:end envelope carries the same keys.
    assert set(ours[-1]["envelope"]) - envelope_extra == set(ref[-1]["envelope"])


def _tree(events: list[dict[str, Any]], outcome: RunOutcome | BaseException | None) -> list[tuple[str, ...]]:
    result = export(events, outcome)
    rows = []
    for span in result.spans:
        path = [span.name]
        parent = result.parent_index(span)
        while parent is not None:
            path.append(result.spans[parent].name)
            parent = result.parent_index(result.spans[parent])
        trace_ids = {s.context.trace_id for s in result.spans}
        assert len(trace_ids) == 1, "one run is one trace"
        rows.append((*reversed(path), str(span.status.status_code.name)))
    return sorted(rows)


def assert_same_tree(ours: list[dict[str, Any]], outcome: RunOutcome, name: str) -> None:
    ref_outcome = _support.outcome(name)
    tree = _tree(ours, outcome)
    assert tree and tree == _tree(_support.events(name), ref_outcome)


# The reference's orchestrator settles its drained arm exhausted *with* a forced-finish value and no
# error; a bundled workflow that cannot finish is exhausted with the typed budget error it raised.
ENVELOPE_EXTRA = {"exposure-drained": frozenset({"error"})}


def check(name: str, events: list[dict[str, Any]], outcome: RunOutcome) -> None:
    ref = _support.events(name)
    assert_same_shape(events, ref, ENVELOPE_EXTRA.get(name, frozenset()))
    assert_same_tree(events, outcome, name)
    ref_outcome = _support.outcome(name)
    assert isinstance(ref_outcome, RunOutcome)
    assert outcome.status == ref_outcome.status
    assert outcome.completion == ref_outcome.completion
    # The money agrees on every surface: run:end, the envelope, the cost report, the agents.
    run_end = events[-1]
    assert isinstance(outcome.cost, dict) and isinstance(outcome.envelope, dict)
    assert run_end["totalUsd"] == outcome.cost["totalUsd"] == outcome.envelope["totalUsd"]
    agents = sum(e["costUsd"] for e in events if e["type"] == "agent:end")
    assert agents == pytest.approx(run_end["totalUsd"], abs=1e-12)
    assert set(outcome.cost) >= {"byModel", "byPhase", "byRole", "byAgentType", "unpriced", "totalUsd"}


def run_scenario(build: Callable[[], Awaitable[Run]]) -> Run:
    return asyncio.run(build())


# --- scenarios ----------------------------------------------------------------------------------


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


async def _dry(store: InMemoryJournalStore) -> Run:
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


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("minimal", minimal),
        ("tools", tools_scenario),
        ("approval", approval),
        ("phases", phases),
        ("nested", nested),
        ("error", error),
        ("exhausted", exhausted),
        ("cancelled", cancelled),
        ("quota", quota),
        ("exposure-drained", exposure_drained),
        ("determinism", determinism_scenario),
        ("secrets", secrets),
    ],
)
def test_scenario_matches_reference(name: str, build: Callable[[], Awaitable[Run]]) -> None:
    events, outcome = run_scenario(build)
    check(name, events, outcome)


def test_suspension_then_resume_then_dry_run_matches_reference() -> None:
    live, resumed, dry, resumer = asyncio.run(_suspension_flow())
    check("suspension-live", *live)
    assert live[1].pending == [
        {"key": "gate", "scope": "", "entryRef": live[0][-2]["entryRef"], "prompt": "approve the release?"}
    ]
    # The live resume replays the analysis agent and the clock with zero adapter calls.
    assert resumed[1].status == "ok"
    assert [r.label for r in resumer.requests] == ["shipper", "shipper"]
    # The dry run re-emits the journal-backed history exactly like the reference's dry run.
    check("suspension-dryrun", *dry)
    assert dry[0][0]["seq"] == 2 << 32 and dry[0][0]["spanId"] == f"s{2 << 32}"
    replayed = {e["type"] for e in dry[0] if e.get("replayed")}
    assert replayed == {
        "agent:start",
        "agent:phase:start",
        "agent:phase:end",
        "agent:end",
        "tool:start",
        "tool:end",
    }
    assert dry[1].value == resumed[1].value
    assert dry[1].cost == resumed[1].cost


async def _suspension_flow() -> tuple[Run, Run, Run, ScriptedAdapter]:
    store = InMemoryJournalStore()
    engine = make_engine([hitl_adapter()], journal=store)
    handle = engine.run(hitl, {}, run_id="GOLDEN-SUSPEND-1")
    live = await settle(handle)
    closing = handle.resolve_external("gate", True)
    assert closing.applied
    assert not handle.resolve_external("gate", False).applied  # first close wins
    resumer = hitl_adapter()
    resumed = await settle(make_engine([resumer], journal=store).resume("GOLDEN-SUSPEND-1", hitl))
    return live, resumed, await _dry(store), resumer


def test_secrets_are_masked_in_events_but_not_in_the_outcome() -> None:
    events, outcome = run_scenario(secrets)
    text = str(events)
    for secret in ("AKIAIOSFODNN7EXAMPLE", "sk-abc123def456ghi789jkl012", "ghp_abcdefghijklmnop"):
        assert secret not in text
    assert "AKIAIOSFODNN7EXAMPLE" in str(outcome.value)


def test_determinism_warnings_name_the_workflow_frame() -> None:
    events, _ = run_scenario(determinism_scenario)
    warnings = [e for e in events if e["type"] == "determinism:warning"]
    assert [(w["category"], w["provenance"]) for w in warnings] == [
        ("bare-date-now", "workflow"),
        ("bare-math-random", "workflow"),
    ]
    assert all(w["file"] == __file__ and w["line"] > 0 for w in warnings)
    assert "nondeterministic" in warnings[0]["frame"]


def test_exhausted_refuses_admission_and_reports_full_cost() -> None:
    events, outcome = run_scenario(exhausted)
    assert outcome.status == "exhausted"
    assert isinstance(outcome.error, dict) and outcome.error["code"] == "budget_exhausted"
    updates = [e for e in events if e["type"] == "budget:update"]
    assert updates[0]["remainingUsd"] == 0.5 and updates[-1]["remainingUsd"] == 0
    assert [e["type"] for e in events].count("agent:start") == 1
    assert isinstance(outcome.cost, dict) and outcome.cost["totalUsd"] == pytest.approx(0.6)


def test_cancelled_settles_with_both_agents_cancelled() -> None:
    events, outcome = run_scenario(cancelled)
    assert outcome.status == "cancelled"
    ends = [e for e in events if e["type"] == "agent:end"]
    assert {e["status"] for e in ends} == {"cancelled"} and all(e["usageApprox"] for e in ends)
    assert isinstance(outcome.error, dict) and outcome.error["message"] == "operator stop"


def test_quota_denials_are_counted_on_agent_end() -> None:
    events, _ = run_scenario(quota)
    end = next(e for e in events if e["type"] == "agent:end")
    assert end["quotaDenials"] == {"total": 2, "requests": 0, "tokens": 2, "recovered": 1}
    assert not [e for e in events if e["type"] == "agent:error"]
