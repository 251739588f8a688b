"""An OpenAI-compatible chat-completions adapter over httpx.

``httpx`` is imported when the adapter makes its first request, never at import time, so importing
``rulvar_otel.core`` stays free of network clients. Every request has bounded timeouts; failures
become typed :class:`AdapterError` values (``retryable`` for 429, 5xx, timeouts and connection
failures). Error messages name the status and the endpoint, never the prompt or the response body.

A request that opted into streaming (``ModelRequest.on_delta``) is sent with ``stream: true`` and
read as server-sent chunks (via ``httpx-sse``): text deltas go to ``on_delta`` as they arrive, tool
call fragments are joined by index, and ``stream_options.include_usage`` asks for the final usage.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from rulvar_otel.core.events import Usage
from rulvar_otel.engine.model import AdapterError, ModelRequest, ModelTurn, ToolCallRequest
from rulvar_otel.errors import ConfigError

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAICompatAdapter"]


class OpenAICompatAdapter:
    """``POST {base_url}/chat/completions`` with the OpenAI request and response shapes."""

    def __init__(
        self,
        *,
        base_url: str,
        default_model: str,
        adapter_id: str = "openai",
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        extra_headers: Mapping[str, str] | None = None,
        transport: Any = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not adapter_id or ":" in adapter_id:
            raise ConfigError(f"adapter id {adapter_id!r} must be non-empty and contain no ':'")
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ConfigError("timeouts must be > 0 seconds")
        self._adapter_id = adapter_id
        self._default_model = default_model
        self.base_url = base_url.rstrip("/")
        self._api_key = (
            api_key if api_key is not None else (os.environ.get(api_key_env) if api_key_env else None)
        )
        self._timeout = (timeout_s, connect_timeout_s)
        self._headers = dict(extra_headers or {})
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def adapter_id(self) -> str:
        return self._adapter_id

    @property
    def default_model(self) -> str:
        return self._default_model

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            headers = {"content-type": "application/json", **self._headers}
            if self._api_key:
                headers["authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(self._timeout[0], connect=self._timeout[1]),
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "messages": [dict(m) for m in request.messages]}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t.get("description", ""),
                        "parameters": t.get("parameters", {"type": "object"}),
                    },
                }
                for t in request.tools
            ]
        if request.response_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "result", "schema": dict(request.response_schema)},
            }
        return body

    def _check_status(self, status: int) -> None:
        if status == 429 or status >= 500:
            code = "rate_limited" if status == 429 else "overloaded"
            raise AdapterError(
                f"{self.base_url} answered HTTP {status}", code=code, retryable=True, data={"status": status}
            )
        if status >= 400:
            raise AdapterError(
                f"{self.base_url} refused the request: HTTP {status}",
                code="bad_request",
                data={"status": status},
            )

    def _malformed(self, exc: Exception) -> AdapterError:
        return AdapterError(
            f"{self.base_url} returned a malformed completion ({type(exc).__name__})",
            code="malformed_response",
        )

    async def turn(self, request: ModelRequest) -> ModelTurn:
        import httpx

        try:
            if request.on_delta is not None:
                return await self._stream(request, request.on_delta)
            response = await self._http().post("/chat/completions", content=orjson.dumps(self._body(request)))
        except httpx.TimeoutException as exc:
            raise AdapterError(
                f"request to {self.base_url} timed out", code="timeout", retryable=True
            ) from exc
        except httpx.TransportError as exc:
            raise AdapterError(
                f"cannot reach {self.base_url}: {type(exc).__name__}", code="unreachable", retryable=True
            ) from exc
        self._check_status(response.status_code)
        try:
            payload = orjson.loads(response.content)
            return _parse(payload)
        except _MALFORMED as exc:
            raise self._malformed(exc) from exc

    async def _stream(self, request: ModelRequest, on_delta: Callable[[str], None]) -> ModelTurn:
        from httpx_sse import SSEError, aconnect_sse

        body = self._body(request)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        turn = _StreamedTurn()
        async with aconnect_sse(
            self._http(), "POST", "/chat/completions", content=orjson.dumps(body)
        ) as source:
            self._check_status(source.response.status_code)
            try:
                async for message in source.aiter_sse():
                    if message.data.strip() == "[DONE]":
                        break
                    delta = turn.feed(orjson.loads(message.data))
                    if delta:
                        on_delta(delta)
                return turn.finish()
            except (SSEError, *_MALFORMED) as exc:
                raise self._malformed(exc) from exc


_MALFORMED = (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError)


class _StreamedTurn:
    """Folds chat-completion chunks into one turn: text, tool calls joined by index, usage."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Mapping[str, Any] | None = None
        self.response_id: str | None = None
        self.model: str | None = None

    def feed(self, chunk: Mapping[str, Any]) -> str:
        self.response_id = self.response_id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        out = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                out += content
            for part in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(part["index"]), {"id": None, "name": "", "arguments": ""})
                if part.get("id"):
                    call["id"] = str(part["id"])
                function = part.get("function") or {}
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
        return out

    def finish(self) -> ModelTurn:
        message: dict[str, Any] = {"content": "".join(self.text) if self.text else None}
        if self.calls:
            if any(c["id"] is None for c in self.calls.values()):
                raise ValueError("a streamed tool call never named its id")
            message["tool_calls"] = [
                {"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}}
                for _, c in sorted(self.calls.items())
            ]
        return _parse(
            {
                "id": self.response_id,
                "model": self.model,
                "choices": [{"message": message}],
                "usage": self.usage or {},
            }
        )


def _parse(payload: Mapping[str, Any]) -> ModelTurn:
    message = payload["choices"][0]["message"]
    calls: list[ToolCallRequest] = []
    for call in message.get("tool_calls") or []:
        function = call["function"]
        raw = function.get("arguments") or "{}"
        arguments = orjson.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(arguments, dict):
            raise ValueError("tool arguments are not an object")
        calls.append(ToolCallRequest(id=str(call["id"]), name=str(function["name"]), arguments=arguments))
    usage_in = payload.get("usage") or {}
    prompt_details = usage_in.get("prompt_tokens_details") or {}
    completion_details = usage_in.get("completion_tokens_details") or {}
    reasoning = completion_details.get("reasoning_tokens")
    usage = Usage(
        input_tokens=int(usage_in.get("prompt_tokens") or 0),
        output_tokens=int(usage_in.get("completion_tokens") or 0),
        cache_read_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(reasoning) if isinstance(reasoning, int) else None,
    )
    content = message.get("content")
    return ModelTurn(
        text=content if isinstance(content, str) else None,
        tool_calls=calls,
        usage=usage,
        response_id=payload.get("id"),
        served_model=payload.get("model"),
    )
