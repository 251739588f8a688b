"""Journal and replay: kill-and-resume with zero adapter calls, dry-run re-emission, live/replay money."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rulvar_otel.engine import (
    JsonlJournalStore,
    ReplayMissError,
    Reply,
    ScriptedAdapter,
    ToolCalls,
    create_engine,
    tool,
    workflow,
)
from rulvar_otel.engine.demo import build_demo, demo_adapter
from rulvar_otel.errors import RunNotFoundError
from tests._support import PRICES, TickClock, export, no_sleep, settle


@tool
def note(text: str) -> str:
    return text.upper()


@workflow("pipeline")
async def pipeline(ctx: Any, args: Any) -> Any:
    async with ctx.phase("one"):
        first = await ctx.agent("first", label="first", tools=[note])
    async with ctx.phase("two"):
        second = await ctx.agent("second", label="second", tools=[note])
    return [first, second]


def pipeline_adapter() -> ScriptedAdapter:
    return ScriptedAdapter(
        "fake",
        script={
            "first": [ToolCalls([("note", {"text": "a"})]), Reply("first done")],
            "second": [
                ToolCalls([("note", {"text": "b"})]),
                ToolCalls([("note", {"text": "c"})]),
                Reply("done"),
            ],
        },
    )


def engine_for(store: JsonlJournalStore, adapter: ScriptedAdapter) -> Any:
    return create_engine([adapter], journal=store, pricing=PRICES, clock=TickClock(), sleep=no_sleep)


def test_kill_and_resume_replays_completed_calls_with_zero_adapter_calls(tmp_path: Path) -> None:
    async def scenario() -> None:
        full = JsonlJournalStore(tmp_path / "full")
        _, outcome = await settle(engine_for(full, pipeline_adapter()).run(pipeline, {}, run_id="r1"))
        assert outcome.status == "ok"
        # Simulate a crash in the middle of the second agent: keep the journal up to its first turn
        # and first tool result, plus a torn half-written line.
        lines = (tmp_path / "full" / "r1.jsonl").read_text().splitlines()
        cut = next(i for i, line in enumerate(lines) if '"key":"|agent#1/tool/' in line.replace(" ", ""))
        crashed = tmp_path / "crashed"
        crashed.mkdir()
        (crashed / "r1.jsonl").write_text("\n".join(lines[: cut + 1]) + '\n{"seq": 99, "kind": "tu')
        # The fresh model only knows what is left after the crash point.
        fresh = ScriptedAdapter(
            "fake", script={"second": [ToolCalls([("note", {"text": "c"})]), Reply("done")]}, fallback=None
        )
        resumed, resumed_outcome = await settle(
            engine_for(JsonlJournalStore(crashed), fresh).resume("r1", pipeline)
        )
        # Only the turns after the crash point reach the adapter: agent one and the first turn of
        # agent two come from the journal.
        assert [r.label for r in fresh.requests] == ["second", "second"]
        assert resumed_outcome.value == outcome.value
        assert resumed_outcome.cost == outcome.cost
        assert resumed[0]["type"] == "run:start" and resumed[0]["resumed"] is True
        assert resumed[0]["seq"] == 1 << 32
        first_agent = [e for e in resumed if e.get("label") == "first"]
        assert first_agent and all(e.get("replayed") for e in first_agent)
        # The second agent ran live; its journaled tool call is re-emitted as replayed.
        second_tools = [
            e for e in resumed if e["type"] == "tool:start" and e["spanId"] != first_agent[0]["spanId"]
        ]
        assert [bool(e.get("replayed")) for e in second_tools] == [True, False]

        # A resume of the finished run makes no call at all.
        idle = pipeline_adapter()
        _, again = await settle(engine_for(full, idle).resume("r1", pipeline))
        assert idle.calls == 0 and again.value == outcome.value

    asyncio.run(scenario())


def test_dry_run_re_emits_with_replayed_and_dedupes_onto_the_live_shape(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        store = JsonlJournalStore(tmp_path)
        setup = build_demo(journal=store, clock=TickClock(), quota_retry_after_ms=0)
        live, live_outcome = await settle(setup.engine.run(setup.workflow, setup.args, run_id="demo-run"))
        silent = ScriptedAdapter("demo", fallback=None)
        dry_setup = build_demo(journal=store, clock=TickClock())
        engine = create_engine([silent], journal=store, pricing=dry_setup.engine.pricing, clock=TickClock())
        dry, dry_outcome = await settle(engine.resume("demo-run", setup.workflow, dry_run=True))
        assert silent.calls == 0
        assert dry_outcome.value == live_outcome.value and dry_outcome.cost == live_outcome.cost
        replayable = {
            "agent:start",
            "agent:end",
            "agent:phase:start",
            "agent:phase:end",
            "tool:start",
            "tool:end",
        }
        # The orchestration's journal-recovered admission decisions re-announce, flagged; the
        # cleanly replayed child workflow does not re-announce its admission at all.
        replayable |= {"child:start", "child:end", "spawn:admitted", "spawn:rejected"}
        for event in dry:
            assert bool(event.get("replayed")) == (event["type"] in replayable), event["type"]
        assert not [e for e in dry if e["type"] in ("budget:update", "quota:denied")]
        live_spawns = [e["agentType"] for e in live if e["type"] == "spawn:admitted"]
        dry_spawns = [e["agentType"] for e in dry if e["type"] == "spawn:admitted"]
        assert dry_spawns == [t for t in live_spawns if t != "incident-report"] and dry_spawns
        return live, dry

    def shape(events: list[dict[str, Any]]) -> list[tuple[str, ...]]:
        result = export(events)
        rows = []
        for span in result.spans:
            parent = result.parent_index(span)
            parent_name = result.spans[parent].name if parent is not None else ""
            rows.append((span.name, parent_name, span.status.status_code.name))
        return sorted(rows)

    live, dry = asyncio.run(scenario())
    assert len(shape(live)) == 49  # the review (21) and the orchestrated sweep (28)
    assert shape(dry) == shape(live)


def test_dry_run_of_an_unjournaled_step_is_a_typed_miss_and_unknown_runs_are_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = JsonlJournalStore(tmp_path)
        adapter = pipeline_adapter()
        engine = engine_for(store, adapter)
        try:
            engine.resume("missing", pipeline)
        except RunNotFoundError as exc:
            assert "missing" in str(exc)
        else:
            raise AssertionError("resume of an unknown run must raise")
        _, first = await settle(engine.run(pipeline, {}, run_id="r2"))
        assert first.status == "ok"
        lines = (tmp_path / "r2.jsonl").read_text().splitlines()
        (tmp_path / "r3.jsonl").write_text("\n".join(lines[:3]).replace('"r2"', '"r3"') + "\n")
        _, dry = await settle(engine_for(store, pipeline_adapter()).resume("r3", pipeline, dry_run=True))
        assert dry.status == "error"
        assert isinstance(dry.error, dict) and dry.error["code"] == ReplayMissError.code

    asyncio.run(scenario())


agent_plan = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # tool-call turns before the answer
        st.integers(min_value=1, max_value=5000),  # input tokens per turn
        st.integers(min_value=0, max_value=800),  # output tokens per turn
        st.booleans(),  # runs in the parallel group
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=agent_plan)
def test_live_and_dry_run_replay_agree_on_usage_and_cost_per_agent(tmp_path_factory: Any, plan: Any) -> None:
    directory = tmp_path_factory.mktemp("journal")

    def adapter() -> ScriptedAdapter:
        script: dict[str, list[Any]] = {}
        for index, (tool_turns, inp, out, _) in enumerate(plan):
            turns: list[Any] = [
                ToolCalls([("note", {"text": f"{index}-{t}"})], usage=(inp, out)) for t in range(tool_turns)
            ]
            script[f"agent-{index}"] = [*turns, Reply(f"answer {index}", usage=(inp, out))]
        return ScriptedAdapter("fake", script=script)

    @workflow("random-plan")
    async def random_plan(ctx: Any, args: Any) -> Any:
        results = []
        serial = [i for i, p in enumerate(plan) if not p[3]]
        parallel = [i for i, p in enumerate(plan) if p[3]]
        async with ctx.phase("serial"):
            for i in serial:
                results.append(await ctx.agent("go", label=f"agent-{i}", tools=[note]))
        async with ctx.phase("parallel"):
            results += await ctx.parallel(
                [ctx.agent("go", label=f"agent-{i}", tools=[note]) for i in parallel]
            )
        return results

    def per_agent(events: list[dict[str, Any]]) -> dict[str, tuple[Any, float]]:
        return {e["label"]: (e["usage"], e["costUsd"]) for e in events if e["type"] == "agent:end"}

    async def scenario() -> None:
        store = JsonlJournalStore(directory)
        live, live_outcome = await settle(engine_for(store, adapter()).run(random_plan, {}, run_id="hyp"))
        silent = ScriptedAdapter("fake", fallback=None)
        dry, dry_outcome = await settle(engine_for(store, silent).resume("hyp", random_plan, dry_run=True))
        assert silent.calls == 0
        assert per_agent(live) == per_agent(dry)
        assert live_outcome.cost == dry_outcome.cost and live_outcome.usage == dry_outcome.usage
        # Phase pairs rebuilt from the journal sum to the same per-agent totals.
        phase_sum: dict[str, float] = {}
        for event in dry:
            if event["type"] == "agent:phase:end":
                phase_sum[event["label"]] = phase_sum.get(event["label"], 0.0) + event["costUsd"]
        assert phase_sum == {label: cost for label, (_, cost) in per_agent(dry).items()}

    asyncio.run(scenario())


def test_demo_replay_through_build_demo_is_deterministic() -> None:
    async def scenario() -> tuple[Any, Any]:
        setup = build_demo(clock=TickClock(), quota_retry_after_ms=0, id_factory=lambda: "fixed")
        return await settle(setup.engine.run(setup.workflow, setup.args))

    first, second = asyncio.run(scenario()), asyncio.run(scenario())
    strip = lambda events: [{k: v for k, v in e.items() if k != "durationMs"} for e in events]  # noqa: E731
    assert strip(first[0]) == strip(second[0])
    assert demo_adapter().calls == 0


def test_a_replayed_value_that_no_longer_validates_is_reported_without_its_content(tmp_path: Path) -> None:
    from pydantic import BaseModel

    class Loose(BaseModel):
        note: str

    class Strict(BaseModel):
        note: int

    def extracting(schema: type[BaseModel]) -> Any:
        @workflow("extracting")
        async def body(ctx: Any, args: Any) -> Any:
            return await ctx.agent("extract", schema=schema)

        return body

    planted = "planted-content-never-echoed"
    answer = Reply(f'{{"note": "{planted}"}}')
    adapter = ScriptedAdapter("fake", script=[answer, answer])
    store = JsonlJournalStore(tmp_path)

    async def scenario() -> Any:
        live = await engine_for(store, adapter).run(extracting(Loose), {}, run_id="x").result
        assert live.status == "ok"
        handle = engine_for(store, adapter).resume("x", extracting(Strict), dry_run=True)
        return await handle.result

    outcome = asyncio.run(scenario())
    assert outcome.status == "error"
    assert "ValidationError" in outcome.error["message"] and "note" in outcome.error["message"]
    assert planted not in repr(outcome.error)
