"""A deterministic model adapter for tests and the demo: every turn is scripted.

Turns are looked up per request in queues keyed by the agent's label, then its agent type, then
the invocation role, then ``"*"``; each key has its own queue, so parallel agents stay
deterministic whatever order they run in. When every matching queue is empty the ``fallback``
turn answers (by default a short text reply).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from rulvar_otel.core.events import Usage
from rulvar_otel.engine.model import AdapterError, ModelRequest, ModelTurn, ToolCallRequest
from rulvar_otel.errors import ConfigError

__all__ = ["Fail", "Hang", "Reply", "ScriptedAdapter", "ToolCalls", "ScriptTurn"]

_DEFAULT_USAGE = Usage(input_tokens=10, output_tokens=5)
_WORDS = re.compile(r"\s*\S+\s*|\s+")


def _usage(value: Usage | tuple[int, int] | None) -> Usage:
    if value is None:
        return _DEFAULT_USAGE
    if isinstance(value, Usage):
        return value
    return Usage(input_tokens=value[0], output_tokens=value[1])


@dataclass(frozen=True)
class Reply:
    """A text answer (JSON text for an extract turn).

    A streaming call receives the text as deltas: ``deltas`` when given (they must join to
    ``text``), else one delta per word with its surrounding whitespace.
    """

    text: str
    usage: Usage | tuple[int, int] | None = None
    deltas: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.deltas is not None and "".join(self.deltas) != self.text:
            raise ConfigError("Reply.deltas must join to exactly Reply.text")

    def pieces(self) -> list[str]:
        if self.deltas is not None:
            return [d for d in self.deltas if d]
        return _WORDS.findall(self.text)


@dataclass(frozen=True)
class ToolCalls:
    """Tool calls: ``(name, arguments)`` pairs, or ``(name, arguments, id)`` to fix the id."""

    calls: Sequence[tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]]
    usage: Usage | tuple[int, int] | None = None


@dataclass(frozen=True)
class Fail:
    """A typed wire error (``retryable`` decides whether the engine retries it)."""

    code: str = "agent"
    message: str = "scripted failure"
    retryable: bool = False
    data: Any = None


@dataclass(frozen=True)
class Hang:
    """A turn that never answers until cancelled (or until ``release`` is set)."""

    release: asyncio.Event | None = field(default=None, compare=False)
    then: Reply | ToolCalls | None = None


ScriptTurn: TypeAlias = Reply | ToolCalls | Fail | Hang


class ScriptedAdapter:
    """A :class:`ModelAdapter` answering from scripts; records every request it served."""

    def __init__(
        self,
        adapter_id: str = "fake",
        *,
        default_model: str = "model",
        script: Mapping[str, Iterable[ScriptTurn]] | Iterable[ScriptTurn] | None = None,
        fallback: ScriptTurn | None = Reply("done"),
        count_failure: Fail | None = None,
    ) -> None:
        if not adapter_id or ":" in adapter_id:
            raise ConfigError(f"adapter id {adapter_id!r} must be non-empty and contain no ':'")
        self._adapter_id = adapter_id
        self._default_model = default_model
        self._queues: dict[str, deque[ScriptTurn]] = {}
        if isinstance(script, Mapping):
            for key, turns in script.items():
                self._queues[key] = deque(turns)
        elif script is not None:
            self._queues["*"] = deque(script)
        self.fallback = fallback
        self.requests: list[ModelRequest] = []
        self.count_requests: list[ModelRequest] = []
        self.count_failure = count_failure
        self._minted = 0

    @property
    def adapter_id(self) -> str:
        return self._adapter_id

    @property
    def default_model(self) -> str:
        return self._default_model

    @property
    def calls(self) -> int:
        """How many requests reached this adapter (a replay must leave it unchanged)."""
        return len(self.requests)

    def add(self, key: str, *turns: ScriptTurn) -> None:
        self._queues.setdefault(key, deque()).extend(turns)

    def _next(self, request: ModelRequest) -> ScriptTurn:
        for key in (request.label, request.agent_type, request.role, "*"):
            if key and (queue := self._queues.get(key)):
                return queue.popleft()
        if self.fallback is None:
            raise AdapterError(
                f"no scripted turn left for label={request.label!r} agent_type={request.agent_type!r}",
                code="script_exhausted",
            )
        return self.fallback

    async def count_tokens(self, request: ModelRequest) -> int:
        """A deterministic estimate (a token per four characters of messages and tool specs)."""
        self.count_requests.append(request)
        await asyncio.sleep(0)
        if self.count_failure is not None:
            failure = self.count_failure
            raise AdapterError(failure.message, code=failure.code, retryable=failure.retryable)
        chars = sum(len(str(m.get("content") or "")) for m in request.messages)
        chars += sum(len(str(t)) for t in request.tools)
        return max(1, chars // 4)

    async def turn(self, request: ModelRequest) -> ModelTurn:
        self.requests.append(request)
        step = self._next(request)
        # A real provider call yields to the loop; so does this one, so parallel agents interleave.
        await asyncio.sleep(0)
        if isinstance(step, Hang):
            await (step.release.wait() if step.release is not None else asyncio.Event().wait())
            if step.then is None:
                raise AdapterError("the hanging turn was released without an answer", code="released")
            step = step.then
        if isinstance(step, Fail):
            raise AdapterError(step.message, code=step.code, retryable=step.retryable, data=step.data)
        self._minted += 1
        response_id = f"resp-{self._minted}"
        if isinstance(step, ToolCalls):
            calls = []
            for index, call in enumerate(step.calls):
                call_id = call[2] if len(call) == 3 else f"id-{self._minted - 1}-{index}"
                calls.append(ToolCallRequest(id=call_id, name=call[0], arguments=dict(call[1])))
            return ModelTurn(tool_calls=calls, usage=_usage(step.usage), response_id=response_id)
        if request.on_delta is not None:
            for piece in step.pieces():
                request.on_delta(piece)
                await asyncio.sleep(0)  # deltas arrive over time: other tasks run in between
        return ModelTurn(text=step.text, usage=_usage(step.usage), response_id=response_id)
