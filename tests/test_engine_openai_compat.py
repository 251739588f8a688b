"""The OpenAI-compatible adapter against a real local HTTP server (no network beyond 127.0.0.1)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rulvar_otel.engine import (
    AgentFailedError,
    OpenAICompatAdapter,
    RetryPolicy,
    create_engine,
    tool,
    workflow,
)
from rulvar_otel.errors import ConfigError
from tests._support import TickClock, no_sleep, settle

API_KEY = "sk-test0123456789abcdefghij"


class SSE(list[dict[str, Any]]):
    """A reply sent as server-sent chat-completion chunks, then ``data: [DONE]``."""


class FakeProvider:
    """Answers each POST from a queue of (status, json body or SSE chunks); records every request."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, Any]] = []
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                provider.requests.append((self.path, dict(self.headers), body))
                status, reply = provider.replies.pop(0)
                kind = "application/json"
                data = json.dumps(reply).encode()
                if isinstance(reply, SSE):
                    kind = "text/event-stream"
                    data = (
                        b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in reply) + b"data: [DONE]\n\n"
                    )
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def completion(
    *, content: str | None = None, calls: list[tuple[str, str, dict[str, Any]]] = ()
) -> dict[str, Any]:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ]
    return {
        "id": "chatcmpl-1",
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message}],
        "usage": {
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "prompt_tokens_details": {"cached_tokens": 20},
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }


@tool
def weather(city: str) -> str:
    return f"sunny in {city}"


@workflow("forecast")
async def forecast(ctx: Any, args: Any) -> Any:
    async with ctx.phase("ask"):
        return await ctx.agent("weather in Oslo?", agent_type="forecaster", tools=[weather])


def make(url: str, **options: Any) -> Any:
    adapter = OpenAICompatAdapter(base_url=url, default_model="gpt-test", api_key=API_KEY, timeout_s=5)
    return adapter, create_engine([adapter], clock=TickClock(), sleep=no_sleep, **options)


async def test_tool_loop_over_http_with_usage_and_tool_call_ids(provider: FakeProvider) -> None:
    provider.replies = [
        (200, completion(calls=[("call_abc", "weather", {"city": "Oslo"})])),
        (200, completion(content="It is sunny in Oslo.")),
    ]
    adapter, engine = make(
        provider.url, pricing={"openai:gpt-test": {"input_per_mtok": 1, "output_per_mtok": 10}}
    )
    events, outcome = await settle(engine.run(forecast, {}))
    await adapter.aclose()
    assert outcome.status == "ok" and outcome.value == "It is sunny in Oslo."
    path, headers, body = provider.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["authorization"] == f"Bearer {API_KEY}"
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
    provider.replies = [(503, {"error": "busy"}), (200, completion(content="ok"))]
    adapter, engine = make(provider.url, retry=RetryPolicy(max_retries=1))
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
    adapter, engine = make(f"http://127.0.0.1:{port}/v1", retry=RetryPolicy(max_retries=0))
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
