"""Pure attribute extraction: ``event -> (key, value)`` pairs.

Nothing here holds state or touches OpenTelemetry; the span state machine in ``_mapper`` decides
which span the pairs land on. Every string value passes the caller's masker.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeAlias, TypeGuard

import orjson

from rulvar_otel.otel import semconv as sc

__all__ = [
    "AttrValue",
    "Masker",
    "agent_close_attributes",
    "agent_open_attributes",
    "compact_json",
    "event_attributes",
    "invocation_close_attributes",
    "invocation_open_attributes",
    "run_close_attributes",
    "text",
    "tool_close_attributes",
    "tool_open_attributes",
]

AttrValue: TypeAlias = str | bool | int | float | tuple[int | float, ...]
Pair: TypeAlias = tuple[str, AttrValue]
Masker: TypeAlias = Callable[[str], str]

UNKNOWN: Final = "(unknown)"

# Fields a span event never carries: the envelope, and everything that is or may be content.
_EVENT_SKIP: Final = frozenset(
    {"runId", "seq", "ts", "spanId", "parentSpanId", "replayed", "type"}
    | {"msg", "message", "data", "prompt", "delta", "label", "frame"}
    # Permission-audit payloads are free-form JSON that can quote tool arguments: treated as content.
    | {"risk", "rule", "advisory"}
)
# determinism:warning exports these under their own names.
_DETERMINISM_OWN: Final = frozenset({"category", "provenance", "file", "line"})

_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_snake_cache: dict[str, str] = {}


def _snake(name: str) -> str:
    out = _snake_cache.get(name)
    if out is None:
        out = _CAMEL_BOUNDARY.sub("_", name).replace("-", "_").replace(":", "_").lower()
        if len(_snake_cache) < 4096:
            _snake_cache[name] = out
    return out


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int


def _is_number(value: object) -> TypeGuard[int | float]:
    return (type(value) is int) or (type(value) is float)


def text(value: object, mask: Masker) -> str:
    """A masked string for a field a span name or attribute needs; ``(unknown)`` when absent."""
    if isinstance(value, str):
        return mask(value)
    if value is None:
        return UNKNOWN
    if isinstance(value, bool | int | float):
        return mask(str(value).lower() if isinstance(value, bool) else str(value))
    return UNKNOWN


def compact_json(value: object) -> str:
    """Compact JSON (no spaces, key order kept, non-ASCII kept)."""
    return orjson.dumps(value).decode()


def _usage_pairs(usage: object) -> Iterator[Pair]:
    if not isinstance(usage, Mapping):
        return
    u: Mapping[str, Any] = usage  # pyright: ignore[reportUnknownVariableType]
    if _is_number(inp := u.get("inputTokens")):
        yield sc.GEN_AI_USAGE_INPUT_TOKENS, inp
    if _is_number(out := u.get("outputTokens")):
        yield sc.GEN_AI_USAGE_OUTPUT_TOKENS, out
    if _is_number(cr := u.get("cacheReadTokens")):
        yield sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cr
    if _is_number(cw := u.get("cacheWriteTokens")):
        yield sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, cw
    if _is_number(rs := u.get("reasoningTokens")):
        yield sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, rs


def _model_pairs(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    agent_type = event.get("agentType")
    yield sc.AGENT_TYPE, text(agent_type, mask)
    model = event.get("model")
    masked_model = text(model, mask)
    yield sc.GEN_AI_REQUEST_MODEL, masked_model
    yield sc.GEN_AI_OPERATION_NAME, text(event.get("role"), mask)
    # Derived from the masked ref, so a credential in the ref cannot leak through the split.
    if isinstance(model, str) and ":" in masked_model:
        provider = masked_model.split(":", 1)[0]
        if provider:
            yield sc.GEN_AI_PROVIDER_NAME, provider
    if isinstance(agent_type, str) and agent_type:
        yield sc.GEN_AI_AGENT_NAME, mask(agent_type)


def agent_open_attributes(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    yield from _model_pairs(event, mask)


def invocation_open_attributes(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    yield from _model_pairs(event, mask)
    invocation = event.get("invocation")
    if _is_number(invocation):
        yield sc.INVOCATION, invocation
    elif isinstance(invocation, str):
        yield sc.INVOCATION, mask(invocation)


def _money(value: object) -> TypeGuard[int | float]:
    return _is_number(value) and math.isfinite(value)


def agent_close_attributes(event: Mapping[str, Any]) -> Iterator[Pair]:
    yield from _usage_pairs(event.get("usage"))
    if _money(cost := event.get("costUsd")):
        yield sc.COST_USD, cost
    if _is_number(retry := event.get("retryCount")):
        yield sc.RETRY_COUNT, retry
    exploration = event.get("exploration")
    if isinstance(exploration, Mapping):
        ex: Mapping[str, Any] = exploration  # pyright: ignore[reportUnknownVariableType]
        for field, key in sc.EXPLORATION_FIELDS:
            if _is_number(value := ex.get(field)):
                yield key, value


def invocation_close_attributes(event: Mapping[str, Any]) -> Iterator[Pair]:
    yield from _usage_pairs(event.get("usage"))
    if _money(cost := event.get("costUsd")):
        yield sc.COST_USD, cost
    if _is_number(retries := event.get("retries")):
        yield sc.RETRIES, retries


def tool_open_attributes(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    name = text(event.get("toolName"), mask)
    yield sc.TOOL_NAME, name
    yield sc.GEN_AI_TOOL_NAME, name
    yield sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_OPERATION_EXECUTE_TOOL
    call_id = event.get("toolCallId")
    if isinstance(call_id, str):
        masked = mask(call_id)
        yield sc.TOOL_CALL_ID, masked
        yield sc.GEN_AI_TOOL_CALL_ID, masked


def tool_close_attributes(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    guard = event.get("guard")
    if isinstance(guard, str):
        yield sc.TOOL_GUARD, mask(guard)


def run_close_attributes(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    completion = event.get("completion")
    if isinstance(completion, str):
        yield sc.RUN_COMPLETION, mask(completion)
    for field, key in sc.RUN_JSON_FACTS:
        if field in event and event[field] is not None:
            try:
                yield key, mask(compact_json(event[field]))
            except (TypeError, orjson.JSONEncodeError):
                continue
    envelope = event.get("envelope")
    if isinstance(envelope, Mapping):
        env: Mapping[str, Any] = envelope  # pyright: ignore[reportUnknownVariableType]
        if _money(total := env.get("totalUsd")):
            yield sc.RUN_TOTAL_USD, total
        if _is_number(spawned := env.get("agentsSpawned")):
            yield sc.RUN_AGENTS_SPAWNED, spawned
    if event.get("settled") is False:
        yield sc.RUN_SETTLED, False
        reason = event.get("settledReason")
        if isinstance(reason, str):
            yield sc.RUN_SETTLED_REASON, mask(reason)


def error_type(event: Mapping[str, Any], mask: Masker) -> str | None:
    """The ``error.type`` of a failed closer: a code, never a message."""
    kind = event.get("type")
    code: object = None
    if kind == "agent:end":
        error = event.get("error")
        if isinstance(error, Mapping):
            code = error.get("code")  # pyright: ignore[reportUnknownMemberType]
    elif kind == "tool:end":
        code = event.get("errorCode")
    elif kind == "run:end":
        envelope = event.get("envelope")
        if isinstance(envelope, Mapping):
            error = envelope.get("error")  # pyright: ignore[reportUnknownMemberType]
            if isinstance(error, Mapping):
                code = error.get("code")  # pyright: ignore[reportUnknownMemberType]
    return mask(code) if isinstance(code, str) and code else None


def event_attributes(event: Mapping[str, Any], mask: Masker) -> Iterator[Pair]:
    """Attributes of a payload-only event become span-event attributes (content excluded)."""
    seq = event.get("seq")
    if _is_number(seq):
        yield sc.ENTRY_SEQ, seq
    kind = event.get("type")
    determinism = kind == "determinism:warning"
    if determinism:
        if isinstance(category := event.get("category"), str):
            yield sc.DETERMINISM_CATEGORY, mask(category)
        if isinstance(provenance := event.get("provenance"), str):
            yield sc.DETERMINISM_PROVENANCE, mask(provenance)
        if isinstance(file := event.get("file"), str):
            yield sc.CODE_FILEPATH, mask(file)
        if _is_int(line := event.get("line")):
            yield sc.CODE_LINENO, line
    for field, value in event.items():
        if field in _EVENT_SKIP or (determinism and field in _DETERMINISM_OWN):
            continue
        if isinstance(value, str):
            yield sc.EVENT_FIELD_PREFIX + _snake(field), mask(value)
        elif isinstance(value, bool) or _is_number(value):
            yield sc.EVENT_FIELD_PREFIX + _snake(field), value
        elif field == "error":
            if isinstance(value, Mapping):
                err: Mapping[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
                if isinstance(code := err.get("code"), str):
                    yield sc.EVENT_FIELD_PREFIX + "error_code", mask(code)
                if isinstance(retryable := err.get("retryable"), bool):
                    yield sc.EVENT_FIELD_PREFIX + "error_retryable", retryable
        elif isinstance(value, list) and value:
            items: list[Any] = value  # pyright: ignore[reportUnknownVariableType]
            if all(_is_int(item) for item in items):
                yield sc.EVENT_FIELD_PREFIX + _snake(field), tuple(items)
            elif all(_is_number(item) for item in items):
                # OTel arrays are homogeneous: a mixed int/float array goes out as floats.
                yield sc.EVENT_FIELD_PREFIX + _snake(field), tuple(float(item) for item in items)
