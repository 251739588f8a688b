"""Streaming calls: text deltas reach the live stream (``agent:stream``) and never leave the process;
the OpenAI-compatible adapter reads server-sent chunks.

Each event shape is checked on the engine's own stream and, where it reaches a trace, through
``to_otel`` with the in-memory harness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.engine import (
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
from rulvar_otel.testing import SpanCapture
from tests._support import FakeProvider, Run, SseChunks, make_engine, make_openai_engine, settle, weather

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
    capture = SpanCapture()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    meter = meters.get_meter("test")
    # Exported live, while the agent streams.
    await to_otel(handle, capture.tracer, meter=meter)
    live = await settle(handle)
    replay = await settle(engine.resume("stream-1", streamed, dry_run=True))
    otlp = encode_spans(capture.ended).SerializeToString()
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
            SseChunks(
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
            SseChunks(
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
        adapter, engine = make_openai_engine(provider.url)
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
        adapter, engine = make_openai_engine(provider.url)
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
