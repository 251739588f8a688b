"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 and a bundled engine over it.

:class:`FakeProvider` answers each POST from a queue of replies (a JSON body, or
:class:`SseChunks` sent as server-sent chunks) and records every request;
:func:`chat_completion` builds a reply, :func:`make_openai_engine` an adapter and engine on the
server's URL; :func:`weather` is the tool the scenarios call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rulvar_otel.engine import OpenAICompatAdapter, create_engine, tool
from tests._support._engine import TickClock, no_sleep

__all__ = ["FAKE_API_KEY", "FakeProvider", "SseChunks", "chat_completion", "make_openai_engine", "weather"]

FAKE_API_KEY = "sk-test0123456789abcdefghij"


class SseChunks(list[dict[str, Any]]):
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
                if isinstance(reply, SseChunks):
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


def chat_completion(
    *, content: str | None = None, calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
) -> dict[str, Any]:
    """A non-streamed chat completion with fixed usage: ``content``, or tool ``calls`` (id, name, args)."""
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


def make_openai_engine(url: str, **options: Any) -> Any:
    adapter = OpenAICompatAdapter(base_url=url, default_model="gpt-test", api_key=FAKE_API_KEY, timeout_s=5)
    return adapter, create_engine([adapter], clock=TickClock(), sleep=no_sleep, **options)
