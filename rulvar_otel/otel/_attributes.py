"""Pure attribute extraction: ``event -> {key: value}``.

Nothing here holds state (beyond memos of key spellings) or touches OpenTelemetry; the span state
machine in ``_mapper`` decides which span the attributes land on. Every string value passes the
caller's masker. Each function returns a fresh dict in a fixed key order: plain dict building, no
generators, since these run several times per event on the export's hot path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias, TypeGuard

import orjson

from rulvar_otel.core.masking import map_strings
from rulvar_otel.core.wire import ENVELOPE_FIELDS
from rulvar_otel.otel import semconv as sc

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "AttrValue",
    "Masker",
    "agent_close_attributes",
    "agent_open_attributes",
    "compact_json",
    "error_type",
    "event_attributes",
    "invocation_close_attributes",
    "invocation_open_attributes",
    "provider_name",
    "run_close_attributes",
    "scope_span_name",
    "text",
    "tool_close_attributes",
    "tool_open_attributes",
]

AttrValue: TypeAlias = str | bool | int | float | tuple[int | float, ...]
Attrs: TypeAlias = dict[str, AttrValue]
Masker: TypeAlias = Callable[[str], str]

UNKNOWN: Final = "(unknown)"

# Fields a span event never carries: the envelope, and everything that is or may be content.
_EVENT_SKIP: Final = frozenset(
    ENVELOPE_FIELDS
    | {"msg", "message", "data", "prompt", "delta", "label", "frame"}
    # Permission-audit payloads are free-form JSON that can quote tool arguments: treated as content.
    | {"risk", "rule", "advisory"}
)
# determinism:warning exports these under their own names.
_DETERMINISM_OWN: Final = frozenset({"category", "provenance", "file", "line"})

_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# A field name becomes part of an attribute key: only identifier-like names qualify (a key can be
# anything a producer wrote, a credential or escape bytes included).
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_:.-]{0,63}")
# An event's field names (in order) -> the (field, attribute key) pairs a span event may carry.
# Events of one type share a shape, so most events cost one lookup instead of a test per field.
# Indexed by "is a determinism:warning" (those export some fields under their own names).
_SHAPE_PLAN_LIMIT: Final = 4096
_shape_plans: tuple[dict[tuple[str, ...], tuple[tuple[str, str], ...]], ...] = ({}, {})


def _snake(name: str) -> str:
    return _CAMEL_BOUNDARY.sub("_", name).replace("-", "_").replace(":", "_").lower()


def _plan_shape(shape: tuple[str, ...], determinism: bool) -> tuple[tuple[str, str], ...]:
    plan = tuple(
        (field, sc.EVENT_FIELD_PREFIX + _snake(field))
        for field in shape
        # A non-string key cannot name an attribute.
        if isinstance(field, str)
        and _IDENTIFIER.fullmatch(field) is not None
        and field not in _EVENT_SKIP
        and not (determinism and field in _DETERMINISM_OWN)
    )
    plans = _shape_plans[determinism]
    if len(plans) >= _SHAPE_PLAN_LIMIT:
        plans.clear()
    plans[shape] = plan
    return plan


# OTLP carries integers as int64: a wider one makes the encoder refuse the whole batch, so it is
# not an attribute value at all.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def _is_number(value: object) -> TypeGuard[int | float]:
    # What a JSON number can be: an int OTLP can carry or a finite float (NaN and infinities come
    # only from Python callers, and a NaN's sign would not survive the OTLP/JSON file).
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


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


_SCALAR_TYPES: Final = frozenset({int, float, bool})
# A numeric array fact keeps at most this many items: the SDK bounds string lengths but not array
# lengths, and a 100k-item array would cost megabytes per span event (docs/otel-mapping.md#limits).
MAX_ARRAY_ITEMS: Final = 256
# usage field -> the convention's name (invocation spans, agents without invocations), and the
# rulvar.* name an agent span with invocation children carries its totals under instead.
_USAGE_FIELDS: Final = (
    ("inputTokens", sc.GEN_AI_USAGE_INPUT_TOKENS),
    ("outputTokens", sc.GEN_AI_USAGE_OUTPUT_TOKENS),
    ("cacheReadTokens", sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
    ("cacheWriteTokens", sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS),
    ("reasoningTokens", sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS),
)
_AGENT_TOTAL_FIELDS: Final = (
    ("inputTokens", sc.RULVAR_USAGE_INPUT_TOKENS),
    ("outputTokens", sc.RULVAR_USAGE_OUTPUT_TOKENS),
    ("cacheReadTokens", sc.RULVAR_USAGE_CACHE_READ_INPUT_TOKENS),
    ("cacheWriteTokens", sc.RULVAR_USAGE_CACHE_CREATION_INPUT_TOKENS),
    ("reasoningTokens", sc.RULVAR_USAGE_REASONING_OUTPUT_TOKENS),
)


# Attribute keys the hot functions use, bound once (a global lookup instead of a module attribute).
_AGENT_TYPE: Final = sc.AGENT_TYPE
_AGENT_ROLE: Final = sc.AGENT_ROLE
_AGENT_NAME: Final = sc.GEN_AI_AGENT_NAME
_MODEL_REF: Final = sc.MODEL_REF
_REQUEST_MODEL: Final = sc.GEN_AI_REQUEST_MODEL
_PROVIDER_NAME: Final = sc.GEN_AI_PROVIDER_NAME
_OPERATION_NAME: Final = sc.GEN_AI_OPERATION_NAME
_EXECUTE_TOOL: Final = sc.GEN_AI_OPERATION_EXECUTE_TOOL
_TOOL_NAME: Final = sc.TOOL_NAME
_GEN_AI_TOOL_NAME: Final = sc.GEN_AI_TOOL_NAME
_TOOL_CALL_ID: Final = sc.TOOL_CALL_ID
_GEN_AI_TOOL_CALL_ID: Final = sc.GEN_AI_TOOL_CALL_ID
_COST_USD: Final = sc.COST_USD
_ENTRY_SEQ: Final = sc.ENTRY_SEQ


def _add_usage(out: Attrs, usage: object, fields: tuple[tuple[str, str], ...] = _USAGE_FIELDS) -> None:
    # Parsed JSON is a plain dict: skip the Mapping ABC check (a Python-level call) for it.
    if type(usage) is not dict and not isinstance(usage, Mapping):
        return
    u: Mapping[str, Any] = usage  # pyright: ignore[reportUnknownVariableType]
    get = u.get
    for field, key in fields:
        value: Any = get(field)
        # _is_number, inlined: this runs for every usage field of every closer.
        kind = type(value)
        if (kind is float and math.isfinite(value)) or (kind is int and INT64_MIN <= value <= INT64_MAX):
            out[key] = value


def provider_name(adapter_id: str) -> str:
    """``gen_ai.provider.name`` for an (already masked) adapter id: the convention's well-known
    value when the adapter is one of them, else the adapter id itself."""
    return sc.GEN_AI_PROVIDER_NAMES.get(adapter_id.lower(), adapter_id)


def _model_attributes(
    event: Mapping[str, Any], mask: Masker, operation: str, *, agent: bool = False
) -> Attrs:
    """What agent and invocation spans share (docs/otel-mapping.md#models-and-providers); with
    ``agent``, an agent span's ``gen_ai.agent.name`` too."""
    # text(), inlined for the common case (a plain string): these run for every opener.
    model = event.get("model")
    agent_type = event.get("agentType")
    role = event.get("role")
    model_ref = mask(model) if type(model) is str else text(model, mask)
    out: Attrs = {
        _AGENT_TYPE: mask(agent_type) if type(agent_type) is str else text(agent_type, mask),
        _OPERATION_NAME: operation,
        _AGENT_ROLE: mask(role) if type(role) is str else text(role, mask),
        _MODEL_REF: model_ref,
    }
    # Split the *masked* ref, so a credential in it cannot leak through the split.
    adapter, colon, model_id = model_ref.partition(":") if isinstance(model, str) else ("", "", "")
    if colon:
        out[_REQUEST_MODEL] = model_id or UNKNOWN
        if adapter:
            out[_PROVIDER_NAME] = provider_name(adapter)
    else:
        out[_REQUEST_MODEL] = model_ref
    if agent and isinstance(agent_type, str) and agent_type:
        out[_AGENT_NAME] = mask(agent_type)
    return out


def scope_span_name(kind: str, event: Mapping[str, Any], mask: Masker) -> str:
    """The name of a phase, child workflow or agent span (``kind`` is its opener's type)."""
    if kind == "phase:start":
        return "phase " + text(event.get("phase"), mask)
    if kind == "child:start":
        return "workflow " + text(event.get("workflow"), mask)
    agent_type = event.get("agentType")
    label = (mask(agent_type) if agent_type else "(anon)") if isinstance(agent_type, str) else UNKNOWN
    return f"agent {label} {text(event.get('role'), mask)}"


def agent_open_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    return _model_attributes(event, mask, sc.GEN_AI_OPERATION_INVOKE_AGENT, agent=True)


def workflow_open_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    """Run and child-workflow spans: the GenAI conventions' ``invoke_workflow`` operation."""
    out: Attrs = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_INVOKE_WORKFLOW}
    workflow = event.get("workflow")
    if isinstance(workflow, str) and workflow:
        out[sc.GEN_AI_WORKFLOW_NAME] = mask(workflow)
    return out


def invocation_open_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    out = _model_attributes(event, mask, sc.GEN_AI_OPERATION_CHAT)
    invocation = event.get("invocation")
    if _is_number(invocation):
        out[sc.INVOCATION] = invocation
    elif isinstance(invocation, str):
        out[sc.INVOCATION] = mask(invocation)
    return out


def _money(value: object) -> TypeGuard[int | float]:
    return _is_number(value)


def _spend(event: Mapping[str, Any], usage_fields: tuple[tuple[str, str], ...] = _USAGE_FIELDS) -> Attrs:
    out: Attrs = {}
    _add_usage(out, event.get("usage"), usage_fields)
    cost = event.get("costUsd")
    # _money, inlined.
    if type(cost) is float:
        if math.isfinite(cost):
            out[_COST_USD] = cost
    elif type(cost) is int and INT64_MIN <= cost <= INT64_MAX:
        out[_COST_USD] = cost
    return out


def agent_close_attributes(event: Mapping[str, Any], *, had_invocations: bool = False) -> Attrs:
    """An agent's closing facts; with invocation children, its usage goes out as ``rulvar.usage.*``
    so the tokens are counted once, on the invocations (docs/otel-mapping.md#token-usage-on-one-level).
    """
    out = _spend(event, _AGENT_TOTAL_FIELDS if had_invocations else _USAGE_FIELDS)
    if _is_number(retry := event.get("retryCount")):
        out[sc.RETRY_COUNT] = retry
    exploration = event.get("exploration")
    if exploration is not None and isinstance(exploration, Mapping):
        ex: Mapping[str, Any] = exploration  # pyright: ignore[reportUnknownVariableType]
        for field, key in sc.EXPLORATION_FIELDS:
            if _is_number(value := ex.get(field)):
                out[key] = value
    return out


def invocation_close_attributes(event: Mapping[str, Any]) -> Attrs:
    out = _spend(event)
    if _is_number(retries := event.get("retries")):
        out[sc.RETRIES] = retries
    return out


def tool_open_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    tool = event.get("toolName")
    name = mask(tool) if type(tool) is str else text(tool, mask)
    call_id = event.get("toolCallId")
    if isinstance(call_id, str):
        masked = mask(call_id)
        return {
            _TOOL_NAME: name,
            _GEN_AI_TOOL_NAME: name,
            _OPERATION_NAME: _EXECUTE_TOOL,
            _TOOL_CALL_ID: masked,
            _GEN_AI_TOOL_CALL_ID: masked,
        }
    return {_TOOL_NAME: name, _GEN_AI_TOOL_NAME: name, _OPERATION_NAME: _EXECUTE_TOOL}


def tool_close_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    guard = event.get("guard")
    return {sc.TOOL_GUARD: mask(guard)} if isinstance(guard, str) else {}


def run_close_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    out: Attrs = {}
    completion = event.get("completion")
    if isinstance(completion, str):
        out[sc.RUN_COMPLETION] = mask(completion)
    for field, key in sc.RUN_JSON_FACTS:
        if field in event and event[field] is not None:
            try:
                # Cleaned before encoding: JSON escapes ("\\n", "\\u001b") would hide a key's start.
                out[key] = mask(compact_json(map_strings(event[field], mask)))
            except (TypeError, orjson.JSONEncodeError):
                continue
    envelope = event.get("envelope")
    if isinstance(envelope, Mapping):
        env: Mapping[str, Any] = envelope  # pyright: ignore[reportUnknownVariableType]
        if _money(total := env.get("totalUsd")):
            out[sc.RUN_TOTAL_USD] = total
        if _is_number(spawned := env.get("agentsSpawned")):
            out[sc.RUN_AGENTS_SPAWNED] = spawned
    if event.get("settled") is False:
        out[sc.RUN_SETTLED] = False
        reason = event.get("settledReason")
        if isinstance(reason, str):
            out[sc.RUN_SETTLED_REASON] = mask(reason)
    return out


def error_type(event: Mapping[str, Any], mask: Masker) -> str | None:
    """The code a failed closer names for ``error.type`` (never a message); None when it has none
    (the caller then uses ``_OTHER``)."""
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


def event_attributes(event: Mapping[str, Any], mask: Masker) -> Attrs:
    """Attributes of a payload-only event become span-event attributes (content excluded)."""
    seq: Any = event.get("seq")
    seq_kind = type(seq)
    out: Attrs = (
        {_ENTRY_SEQ: seq}
        if (seq_kind is float and math.isfinite(seq)) or (seq_kind is int and INT64_MIN <= seq <= INT64_MAX)
        else {}
    )
    determinism = event.get("type") == "determinism:warning"
    if determinism:
        if isinstance(category := event.get("category"), str):
            out[sc.DETERMINISM_CATEGORY] = mask(category)
        if isinstance(provenance := event.get("provenance"), str):
            out[sc.DETERMINISM_PROVENANCE] = mask(provenance)
        if isinstance(file := event.get("file"), str):
            out[sc.CODE_FILEPATH] = out[sc.CODE_FILE_PATH] = mask(file)
        if _is_int(line := event.get("line")):
            out[sc.CODE_LINENO] = out[sc.CODE_LINE_NUMBER] = line
    shape = tuple(event)
    plan = _shape_plans[determinism].get(shape)
    if plan is None:
        plan = _plan_shape(shape, determinism)
    for field, key in plan:
        if mask(field) != field:  # a key the masker changes is a secret: not exported at all
            continue
        value = event[field]
        kind = type(value)
        if kind in _SCALAR_TYPES:
            if (
                kind is bool
                or (kind is int and INT64_MIN <= value <= INT64_MAX)
                or (kind is float and math.isfinite(value))
            ):
                out[key] = value
        elif kind is str or isinstance(value, str):
            out[key] = mask(value)
        elif field == "error":
            if isinstance(value, Mapping):
                err: Mapping[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
                if isinstance(code := err.get("code"), str):
                    out[sc.EVENT_FIELD_PREFIX + "error_code"] = mask(code)
                if isinstance(retryable := err.get("retryable"), bool):
                    out[sc.EVENT_FIELD_PREFIX + "error_retryable"] = retryable
        elif isinstance(value, list) and value:
            items: list[Any] = value[:MAX_ARRAY_ITEMS]  # pyright: ignore[reportUnknownVariableType]
            if all(_is_int(item) for item in items):
                out[key] = tuple(items)
            elif all(_is_number(item) for item in items):
                # OTel arrays are homogeneous: a mixed int/float array goes out as floats.
                out[key] = tuple(float(item) for item in items)
    return out
