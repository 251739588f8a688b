"""The OpenAI-compatible adapter against a real local HTTP server (no network beyond 127.0.0.1)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from rulvar_otel.engine import (
    AgentFailedError,
    OpenAICompatAdapter,
    RetryPolicy,
    workflow,
)
from rulvar_otel.errors import ConfigError
from tests._support import (
    FAKE_API_KEY,
    FakeProvider,
    chat_completion,
    make_openai_engine,
    settle,
    weather,
)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


@workflow("forecast")
async def forecast(ctx: Any, args: Any) -> Any:
    async with ctx.phase("ask"):
        return await ctx.agent("weather in Oslo?", agent_type="forecaster", tools=[weather])


async def test_tool_loop_over_http_with_usage_and_tool_call_ids(provider: FakeProvider) -> None:
    provider.replies = [
        (200, chat_completion(calls=[("call_abc", "weather", {"city": "Oslo"})])),
        (200, chat_completion(content="It is sunny in Oslo.")),
    ]
    adapter, engine = make_openai_engine(
        provider.url, pricing={"openai:gpt-test": {"input_per_mtok": 1, "output_per_mtok": 10}}
    )
    events, outcome = await settle(engine.run(forecast, {}))
    await adapter.aclose()
    assert outcome.status == "ok" and outcome.value == "It is sunny in Oslo."
    path, headers, body = provider.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == f"Bearer {FAKE_API_KEY}"
    assert body["model"] == "gpt-test" and body["tools"][0]["function"]["name"] == "weather"
    assert provider.requests[1][2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "sunny in Oslo",
    }
    starts = [e for e in events if e["type"] == "tool:start"]
    assert starts[0]["toolCallId"] == "call_abc"
    end = next(e for e in events if e["type"] == "agent:end")
    assert end["usage"] == {
        "inputTokens": 240,
        "outputTokens": 60,
        "cacheReadTokens": 40,
        "cacheWriteTokens": 0,
        "reasoningTokens": 10,
    }
    assert end["costUsd"] == pytest.approx(2 * (120 * 1 + 30 * 10) / 1e6)


async def test_http_errors_become_typed_wire_errors_and_retry_when_retryable(provider: FakeProvider) -> None:
    provider.replies = [(503, {"error": "busy"}), (200, chat_completion(content="ok"))]
    adapter, engine = make_openai_engine(provider.url, retry=RetryPolicy(max_retries=1))
    events, outcome = await settle(engine.run(forecast, {}))
    errors = [e for e in events if e["type"] == "agent:error"]
    assert outcome.status == "ok"
    assert [(e["error"]["code"], e["willRetry"]) for e in errors] == [("overloaded", True)]
    provider.replies = [(400, {"error": "bad"})]
    _, failed = await settle(engine.run(forecast, {}))
    await adapter.aclose()
    assert failed.status == "error" and isinstance(failed.error, dict)
    assert failed.error["code"] == "bad_request" and failed.error["retryable"] is False


async def test_dead_endpoint_fails_fast_and_typed() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter, engine = make_openai_engine(f"http://127.0.0.1:{port}/v1", retry=RetryPolicy(max_retries=0))
    _, outcome = await settle(engine.run(forecast, {}))
    await adapter.aclose()
    assert outcome.status == "error" and isinstance(outcome.error, dict)
    assert outcome.error["code"] == "unreachable" and outcome.error["retryable"] is True
    assert AgentFailedError.code == "agent"


def test_adapter_configuration_is_validated() -> None:
    with pytest.raises(ConfigError):
        OpenAICompatAdapter(base_url="ftp://x", default_model="m")
    with pytest.raises(ConfigError):
        OpenAICompatAdapter(base_url="http://x", default_model="m", timeout_s=0)
