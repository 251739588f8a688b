"""The engine's value types: model requests and turns, the adapter protocols, usage arithmetic.

Everything here is plain data; nothing performs I/O. The typed errors a run settles on live in
:mod:`rulvar_otel.errors` (re-exported here, where adapters have always imported them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import JsonValue

from rulvar_otel.core.events import Usage
from rulvar_otel.errors import (
    AdapterError,
    AgentFailedError,
    BudgetExhaustedError,
    DeadlineExceededError,
    DeterminismError,
    ExposureDrainedError,
    QuotaExhaustedError,
    ReplayMissError,
    SchemaValidationError,
    WorkflowError,
)

__all__ = [
    "AdapterError",
    "AgentFailedError",
    "BudgetExhaustedError",
    "DeadlineExceededError",
    "DeterminismError",
    "ExposureDrainedError",
    "ModelAdapter",
    "ModelRequest",
    "ModelTurn",
    "QuotaExhaustedError",
    "ReplayMissError",
    "SchemaValidationError",
    "TokenCounter",
    "ToolCallRequest",
    "WorkflowError",
    "add_usage",
    "usage_dict",
    "wire_error",
]


def wire_error(code: str, message: str, *, retryable: bool = False, data: JsonValue = None) -> dict[str, Any]:
    """The WireError shape (``code``, ``message``, ``retryable``, ``data?``) as a JSON dict."""
    out: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if data is not None:
        out["data"] = data
    return out


def usage_dict(usage: Usage) -> dict[str, int]:
    """The wire form of a Usage (only the fields that are set)."""
    out = usage.model_dump(by_alias=True, exclude_none=True)
    return {k: int(v) for k, v in out.items() if isinstance(v, int)}


def add_usage(a: Usage, b: Usage) -> Usage:
    """Field-wise sum; optional counters stay absent unless one side has them."""

    def opt(x: int | None, y: int | None) -> int | None:
        return None if x is None and y is None else (x or 0) + (y or 0)

    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_read_tokens=a.cache_read_tokens + b.cache_read_tokens,
        cache_write_tokens=a.cache_write_tokens + b.cache_write_tokens,
        reasoning_tokens=opt(a.reasoning_tokens, b.reasoning_tokens),
    )


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call a model asked for; ``id`` is minted by the model (provider)."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class ModelTurn:
    """One model turn out: text or tool calls, plus the usage the provider reported."""

    text: str | None = None
    tool_calls: Sequence[ToolCallRequest] = ()
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None
    served_model: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "toolCalls": [
                {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in self.tool_calls
            ],
            "usage": usage_dict(self.usage),
            "responseId": self.response_id,
            "servedModel": self.served_model,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelTurn:
        calls = [
            ToolCallRequest(id=str(c["id"]), name=str(c["name"]), arguments=dict(c.get("arguments") or {}))
            for c in data.get("toolCalls") or []
        ]
        return cls(
            text=data.get("text"),
            tool_calls=calls,
            usage=Usage.model_validate(data.get("usage") or {}),
            response_id=data.get("responseId"),
            served_model=data.get("servedModel"),
        )


@dataclass(frozen=True)
class ModelRequest:
    """One turn in. ``messages`` use the chat-completions shape (role/content/tool_calls)."""

    model: str
    role: str
    messages: Sequence[Mapping[str, Any]]
    tools: Sequence[Mapping[str, Any]] = ()
    response_schema: Mapping[str, Any] | None = None
    agent_type: str = ""
    label: str | None = None
    turn: int = 0
    # Set when the call opted into streaming: an adapter that can stream passes each text delta
    # here as it arrives (and still returns the whole turn); one that cannot simply ignores it.
    on_delta: Callable[[str], None] | None = field(default=None, compare=False, repr=False)


@runtime_checkable
class ModelAdapter(Protocol):
    """A model provider: one turn in, one :class:`ModelTurn` out, or a typed :class:`AdapterError`."""

    @property
    def adapter_id(self) -> str: ...

    @property
    def default_model(self) -> str: ...

    async def turn(self, request: ModelRequest) -> ModelTurn: ...


@runtime_checkable
class TokenCounter(Protocol):
    """An adapter that can count a request's input tokens without dispatching it (optional).

    The engine's ``count_tokens`` policy uses it at admission to size an agent's reserve; the probe
    is a provider request that is not a model dispatch, reported as ``control:wire``.
    """

    async def count_tokens(self, request: ModelRequest) -> int: ...
