"""The engine's catalog gaps: agent:queued, agent:stream, control:wire, deadlines, determinism errors.

Each event shape is checked on the engine's own stream and, where it reaches a trace, through
``to_otel`` with the in-memory harness.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import (
    DeadlineExceededError,
    Fail,
    Hang,
    InMemoryJournalStore,
    Reply,
    ScriptedAdapter,
    ScriptTurn,
    ToolCalls,
    tool,
    workflow,
)
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import to_otel
from tests._otel_harness import Recorder, export
from tests._otel_harness import provider as tracer_provider
from tests.test_engine_openai_compat import SSE, FakeProvider, make, weather
from tests.test_engine_scenarios import Run, TickClock, make_engine, settle

# --- agent:queued ---------------------------------------------------------------------------------


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


# --- agent:stream ---------------------------------------------------------------------------------

SECRET_PROSE = "zebra quartz nebula marmalade"


@workflow("streamed")
async def streamed(ctx: Any, args: Any) -> Any:
    async with ctx.phase("write"):
        loud = await ctx.agent("write it", label="writer", stream=True, tools=[lookup_note])
        quiet = await ctx.agent("again, quietly", label="quiet")
    return {"loud": loud, "quiet": quiet}


@tool
def lookup_note(key: str) -> str:
    return f"note {key}"


def streamed_adapter() -> ScriptedAdapter:
    script: dict[str, list[ScriptTurn]] = {
        "writer": [
            ToolCalls([("lookup_note", {"key": "k1"})]),
            Reply(SECRET_PROSE, deltas=["zebra ", "quartz ", "nebula marmalade"]),
        ],
        "quiet": [Reply("marmalade whispered")],
    }
    return ScriptedAdapter("fake", script=script)


async def _streamed_run() -> tuple[Run, Run, list[Any], bytes, str]:
    store = InMemoryJournalStore()
    engine = make_engine([streamed_adapter()], journal=store)
    handle = engine.run(streamed, {}, run_id="stream-1")
    recorder = Recorder()
    tp = tracer_provider(recorder)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    meter = meters.get_meter("test")
    # Exported live, while the agent streams.
    await to_otel(handle, tp.get_tracer("test"), meter=meter)
    live = await settle(handle)
    replay = await settle(engine.resume("stream-1", streamed, dry_run=True))
    otlp = encode_spans(recorder.ended).SerializeToString()
    data = reader.get_metrics_data()
    assert data is not None
    metrics = data.to_json()
    return live, replay, store.load("stream-1"), otlp, metrics


def test_a_streaming_call_emits_its_deltas_live_and_they_never_leave_the_process() -> None:
    (events, outcome), (replay, again), journal, otlp, metrics = asyncio.run(_streamed_run())
    assert outcome.status == "ok" and outcome.value == {"loud": SECRET_PROSE, "quiet": "marmalade whispered"}
    deltas = [e for e in events if e["type"] == "agent:stream"]
    assert [d["delta"] for d in deltas] == ["zebra ", "quartz ", "nebula marmalade"]
    writer = next(e for e in events if e["type"] == "agent:start" and e["label"] == "writer")
    assert {d["spanId"] for d in deltas} == {writer["spanId"]}
    assert all(set(d) <= {"type", "delta", "runId", "seq", "ts", "spanId", "parentSpanId"} for d in deltas)
    # Inside the invocation that produced them, after the tool turn.
    own = [e["type"] for e in events if e.get("spanId") == writer["spanId"]]
    assert own.index("tool:end") < own.index("agent:stream") < own.index("agent:phase:end")

    # Never journaled, never re-emitted: the replay reaches the same value with no delta.
    assert "agent:stream" not in {e.kind for e in journal}
    assert again.value == outcome.value and not [e for e in replay if e["type"] == "agent:stream"]

    # The trace and the metrics carry none of it (nor any other content).
    assert otlp and b"agent:stream" not in otlp
    for word in SECRET_PROSE.split():
        assert word.encode() not in otlp and word not in metrics
    assert otlp.count(b"agent (anon) loop") == 2 and b"tool lookup_note" in otlp
    assert "rulvar" in metrics  # the metrics were recorded: the absence above is meaningful


@pytest.fixture
def http_provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def _chunk(delta: dict[str, Any] | None = None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "model": "gpt-test",
        "choices": [] if delta is None else [{"index": 0, "delta": delta}],
        **({"usage": usage} if usage else {}),
    }


def test_the_openai_compatible_adapter_streams_server_sent_chunks(http_provider: FakeProvider) -> None:
    provider = http_provider
    call = {"index": 0, "id": "call_7", "type": "function", "function": {"name": "weather", "arguments": ""}}
    provider.replies = [
        (
            200,
            SSE(
                [
                    _chunk({"role": "assistant", "tool_calls": [call]}),
                    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
                    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
                    _chunk(usage={"prompt_tokens": 50, "completion_tokens": 9}),
                ]
            ),
        ),
        (
            200,
            SSE(
                [
                    _chunk({"role": "assistant", "content": ""}),
                    _chunk({"content": "Sunny "}),
                    _chunk({"content": "in Oslo."}),
                    _chunk(usage={"prompt_tokens": 70, "completion_tokens": 4}),
                ]
            ),
        ),
    ]

    @workflow("streamed-forecast")
    async def streamed_forecast(ctx: Any, args: Any) -> Any:
        return await ctx.agent("weather in Oslo?", agent_type="forecaster", tools=[weather], stream=True)

    async def go() -> Run:
        adapter, engine = make(provider.url)
        try:
            return await settle(engine.run(streamed_forecast, {}))
        finally:
            await adapter.aclose()

    events, outcome = asyncio.run(go())
    assert outcome.status == "ok" and outcome.value == "Sunny in Oslo."
    assert [e["delta"] for e in events if e["type"] == "agent:stream"] == ["Sunny ", "in Oslo."]
    tool_end = next(e for e in events if e["type"] == "tool:end")
    assert tool_end["toolCallId"] == "call_7" and tool_end["outcome"] == "ok"
    end = next(e for e in events if e["type"] == "agent:end")
    assert (end["usage"]["inputTokens"], end["usage"]["outputTokens"]) == (120, 13)
    bodies = [body for _, _, body in provider.requests]
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies)
    assert bodies[1]["messages"][-1]["content"] == "sunny in Oslo"  # the tool result went back


def test_a_streamed_error_status_is_the_same_typed_wire_error(http_provider: FakeProvider) -> None:
    provider = http_provider
    provider.replies = [(400, {"error": {"message": "bad"}})]

    @workflow("streamed-refusal")
    async def streamed_refusal(ctx: Any, args: Any) -> Any:
        return await ctx.agent("x", stream=True)

    async def go() -> Run:
        adapter, engine = make(provider.url)
        try:
            return await settle(engine.run(streamed_refusal, {}))
        finally:
            await adapter.aclose()

    events, outcome = asyncio.run(go())
    error = next(e for e in events if e["type"] == "agent:error")
    assert error["error"]["code"] == "bad_request" and error["willRetry"] is False
    assert outcome.status == "error" and not [e for e in events if e["type"] == "agent:stream"]


def test_scripted_deltas_must_spell_the_reply() -> None:
    with pytest.raises(ConfigError, match="join"):
        Reply("abc", deltas=["a", "c"])
    assert "".join(Reply("  two  words ").pieces()) == "  two  words "


# --- control:wire ---------------------------------------------------------------------------------

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


# --- deadlines ------------------------------------------------------------------------------------


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


# --- determinism error mode -----------------------------------------------------------------------


@workflow("clocked")
async def clocked(ctx: Any, args: Any) -> Any:
    async with ctx.phase("work"):
        if args.get("swallow"):
            try:
                time.time()
            except Exception as exc:
                ctx.log("info", f"caught {type(exc).__name__}")
        elif args.get("dice"):
            random.random()
        else:
            time.time()
        return await ctx.agent("after the clock")


@workflow("clean-clock")
async def clean_clock(ctx: Any, args: Any) -> Any:
    uuid.uuid1()  # the standard library reads the clock itself: exempt even in error mode
    return {"stamp": ctx.now() > 0, "draw": ctx.random() >= 0}


async def _clocked(args: dict[str, Any], wf: Any = clocked, **options: Any) -> Run:
    return await settle(
        make_engine([ScriptedAdapter("fake")], determinism_mode="error", **options).run(wf, args)
    )


def test_error_mode_rejects_the_run_at_the_bare_call_after_its_warning() -> None:
    async def go() -> tuple[Run, Run, Run, Run, Run]:
        return (
            await _clocked({}),
            await _clocked({"dice": True}),
            await _clocked({"swallow": True}),
            await _clocked({}, clean_clock),
            await _clocked({}, determinism_allow=[__file__]),
        )

    (events, outcome), (dice, dice_out), (swallowed, swallow_out), (_, clean), (allowed, allow_out) = (
        asyncio.run(go())
    )
    kinds = [e["type"] for e in events if e["type"] != "budget:update"]
    assert kinds == ["run:start", "phase:start", "determinism:warning", "run:end"]  # no agent ran
    warning = next(e for e in events if e["type"] == "determinism:warning")
    assert (warning["category"], warning["provenance"]) == ("bare-date-now", "workflow")
    assert warning["file"] == __file__
    error = _error(outcome)
    assert outcome.status == "error" and error["code"] == "determinism"
    assert error["data"] == {"category": "bare-date-now", "file": __file__, "line": warning["line"]}
    assert events[-1]["envelope"]["error"]["code"] == "determinism"
    assert dice_out.status == "error" and _error(dice_out)["data"]["category"] == "bare-math-random"
    assert [e["category"] for e in dice if e["type"] == "determinism:warning"] == ["bare-math-random"]
    # Caught inside the workflow, the bare call still never ran, and the run is still rejected.
    assert [e["msg"] for e in swallowed if e["type"] == "log"] == ["caught DeterminismError"]
    assert swallow_out.status == "error" and _error(swallow_out)["code"] == "determinism"
    assert swallow_out.value is None and any(e["type"] == "agent:end" for e in swallowed)
    # Exempt and allowlisted calls warn (or not) exactly as in warn mode, and never reject.
    assert clean.status == "ok"
    assert allow_out.status == "ok"
    assert [e["provenance"] for e in allowed if e["type"] == "determinism:warning"] == ["allowlisted"]
    with pytest.raises(ConfigError, match="determinism_mode"):
        make_engine([ScriptedAdapter("fake")], determinism_mode="strict")
