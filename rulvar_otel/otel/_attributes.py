"""Pure attribute extraction: ``event -> {key: value}``.

Nothing here holds state (beyond memos of key spellings) or touches OpenTelemetry; the span state
machine in ``_mapper`` decides which span the attributes land on. Every string value passes the
caller's masker. Each function returns a fresh dict in a fixed key order: plain dict building, no
generators, since these run several times per event on the export's hot path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias, TypeGuard

import orjson

from rulvar_otel.core.wire import WireEvent
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._event_facts import (
    ENUM_KIND,
    EVENT_FACTS,
    EVENT_PLANS,
    FLAG_KIND,
    NUMBER_KIND,
    NUMBER_OR_TEXT_KIND,
    NUMBERS_KIND,
    RUN_JSON_SHAPES,
    TEXT_KIND,
    WIRE_ERROR_KIND,
    Fact,
    Shape,
)

__all__ = [
    "Event",
    "INT64_MAX",
    "INT64_MIN",
    "AttrValue",
    "Masker",
    "agent_close_attributes",
    "agent_open_attributes",
    "closer_status",
    "compact_json",
    "error_type",
    "event_attributes",
    "event_name",
    "fits_int64",
    "invocation_close_attributes",
    "invocation_open_attributes",
    "invocation_span_name",
    "project",
    "provider_name",
    "run_close_attributes",
    "run_span_name",
    "scope_span_name",
    "text",
    "tool_close_attributes",
    "tool_open_attributes",
    "tool_span_name",
]

AttrValue: TypeAlias = str | bool | int | float | tuple[int | float, ...]
Attrs: TypeAlias = dict[str, AttrValue]
Masker: TypeAlias = Callable[[str], str]
# An event as the mapper holds it (the mapper copies any mapping that is not a dict).
Event: TypeAlias = WireEvent

UNKNOWN: Final = "(unknown)"

# An unknown type's name is an event name only when it has the catalog's shape (lowercase words
# joined by ":" and "-"): any other type string may be anything a producer wrote.
_TYPE_SHAPE: Final = re.compile(r"[a-z][a-z0-9]*(?:[-:][a-z][a-z0-9]*){1,7}")
_TYPE_SHAPE_MAX: Final = 64


# OTLP carries integers as int64: a wider one makes the encoder refuse the whole batch, so it is
# not an attribute value at all.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


# The compiled build's short ints lie within +-(2**62 - 1): compared against these, a usual value
# is checked inline, where a comparison with the int64 bounds goes through Python's long compare.
_SHORT_INT_MAX: Final = 2**62 - 1


def fits_int64(value: int) -> bool:
    """Whether ``value`` fits the int64 OTLP carries (the usual small value checked inline)."""
    if -_SHORT_INT_MAX <= value <= _SHORT_INT_MAX:
        return True
    return INT64_MIN <= value <= INT64_MAX


def _finite(value: float) -> bool:
    """``math.isfinite``, compiled to float arithmetic (a module function is a generic call):
    ``x - x`` is 0.0 for every finite float and NaN for the infinities and NaN."""
    return value - value == 0.0


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int and fits_int64(value)


def _is_number(value: object) -> TypeGuard[int | float]:
    # What a JSON number can be: an int OTLP can carry or a finite float (NaN and infinities come
    # only from Python callers, and a NaN's sign would not survive the OTLP/JSON file).
    if type(value) is float:
        return _finite(value)
    return type(value) is int and fits_int64(value)


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
    # A plain dict is read with the compiled dict lookup, any other mapping through its get.
    u: dict[str, Any] = usage if type(usage) is dict else dict(usage)  # pyright: ignore
    for field, key in fields:
        value: Any = u.get(field)
        # _is_number, inlined: this runs for every usage field of every closer.
        kind = type(value)
        if (kind is float and _finite(value)) or (kind is int and fits_int64(value)):
            out[key] = value


def provider_name(adapter_id: str) -> str:
    """``gen_ai.provider.name`` for an (already masked) adapter id: the convention's well-known
    value when the adapter is one of them, else the adapter id itself."""
    return sc.GEN_AI_PROVIDER_NAMES.get(adapter_id.lower(), adapter_id)


def _model_attributes(
    event: Event, mask: Masker, operation: str, out: Attrs, *, agent: bool = False
) -> Attrs:
    """What agent and invocation spans share (docs/otel-mapping.md#models-and-providers), added
    to ``out``; with ``agent``, an agent span's ``gen_ai.agent.name`` too."""
    # text(), inlined for the common case (a plain string): these run for every opener.
    model = event.get("model")
    agent_type = event.get("agentType")
    role = event.get("role")
    model_ref = mask(model) if type(model) is str else text(model, mask)
    out[_AGENT_TYPE] = mask(agent_type) if type(agent_type) is str else text(agent_type, mask)
    out[_OPERATION_NAME] = operation
    out[_AGENT_ROLE] = mask(role) if type(role) is str else text(role, mask)
    out[_MODEL_REF] = model_ref
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
    """The name of a phase, child workflow or agent span (``kind`` is its opener's type), masked
    after composition: parts that pass one at a time (``Bearer`` and a token) may not together."""
    if kind == "phase:start":
        return mask("phase " + text(event.get("phase"), mask))
    if kind == "child:start":
        return mask("workflow " + text(event.get("workflow"), mask))
    agent_type = event.get("agentType")
    label = (mask(agent_type) if agent_type else "(anon)") if isinstance(agent_type, str) else UNKNOWN
    return mask(f"agent {label} {text(event.get('role'), mask)}")


def run_span_name(event: Event, mask: Masker) -> str:
    return mask("run " + text(event.get("workflow"), mask))


def invocation_span_name(event: Event, mask: Masker) -> str:
    return mask("invocation " + text(event.get("role"), mask))


def tool_span_name(masked_tool_name: AttrValue, mask: Masker) -> str:
    return mask(f"tool {masked_tool_name}")


# The *_open_attributes functions add a new span's attributes to ``out``, its envelope (see
# envelope_attributes): one dict per span, in the order the span carries them.


def agent_open_attributes(event: Event, mask: Masker, out: Attrs) -> Attrs:
    return _model_attributes(event, mask, sc.GEN_AI_OPERATION_INVOKE_AGENT, out, agent=True)


def workflow_open_attributes(event: Event, mask: Masker, out: Attrs) -> Attrs:
    """Run and child-workflow spans: the GenAI conventions' ``invoke_workflow`` operation."""
    out[sc.GEN_AI_OPERATION_NAME] = sc.GEN_AI_OPERATION_INVOKE_WORKFLOW
    workflow = event.get("workflow")
    if isinstance(workflow, str) and workflow:
        out[sc.GEN_AI_WORKFLOW_NAME] = mask(workflow)
    return out


def invocation_open_attributes(event: Event, mask: Masker, out: Attrs) -> Attrs:
    _model_attributes(event, mask, sc.GEN_AI_OPERATION_CHAT, out)
    invocation = event.get("invocation")
    if _is_number(invocation):
        out[sc.INVOCATION] = invocation
    return out


# The field a closer names its outcome in, and what it may hold (an enum for most closers).
_CLOSER_STATUS: Final = {
    kind: (field, EVENT_FACTS[kind][field])
    for kind, field in (
        ("run:end", "status"),
        ("child:end", "status"),
        ("agent:end", "status"),
        ("agent:phase:end", "outcome"),
        ("tool:end", "outcome"),
    )
}


def closer_status(event: Event, kind: str) -> str | None:
    """A closer's status literal as the allow-list permits it (unmasked), or None: a value outside
    its enum is no status (the span is then ERROR with ``error.type = _OTHER``). ``kind`` is the
    event's type, which the caller has read already."""
    entry = _CLOSER_STATUS.get(kind)
    if entry is None:
        return None
    field, fact = entry
    value = event.get(field)
    if not isinstance(value, str):
        return None
    return value if fact.kind == TEXT_KIND or value in fact.values else None


def _money(value: object) -> TypeGuard[int | float]:
    return _is_number(value)


def _spend(event: Event, usage_fields: tuple[tuple[str, str], ...] = _USAGE_FIELDS) -> Attrs:
    out: Attrs = {}
    _add_usage(out, event.get("usage"), usage_fields)
    cost = event.get("costUsd")
    # _money, inlined.
    if type(cost) is float:
        if _finite(cost):
            out[_COST_USD] = cost
    elif type(cost) is int and fits_int64(cost):
        out[_COST_USD] = cost
    return out


def agent_close_attributes(event: Event, *, had_invocations: bool = False) -> Attrs:
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


def invocation_close_attributes(event: Event) -> Attrs:
    out = _spend(event)
    if _is_number(retries := event.get("retries")):
        out[sc.RETRIES] = retries
    return out


def tool_open_attributes(event: Event, mask: Masker, out: Attrs) -> Attrs:
    tool = event.get("toolName")
    name = mask(tool) if type(tool) is str else text(tool, mask)
    out[_TOOL_NAME] = name
    out[_GEN_AI_TOOL_NAME] = name
    out[_OPERATION_NAME] = _EXECUTE_TOOL
    call_id = event.get("toolCallId")
    if isinstance(call_id, str):
        masked = mask(call_id)
        out[_TOOL_CALL_ID] = masked
        out[_GEN_AI_TOOL_CALL_ID] = masked
    return out


_TOOL_END_FACTS: Final = EVENT_FACTS["tool:end"]
_RUN_END_FACTS: Final = EVENT_FACTS["run:end"]


def _enum_value(value: object, fact: Fact) -> str | None:
    return value if isinstance(value, str) and value in fact.values else None


def tool_close_attributes(event: Event, mask: Masker) -> Attrs:
    guard = _enum_value(event.get("guard"), _TOOL_END_FACTS["guard"])
    return {sc.TOOL_GUARD: guard} if guard is not None else {}


def _project_fact(value: object, fact: Fact, mask: Masker) -> object:
    """``value`` as the fact allows it, or None."""
    if fact.kind == NUMBER_KIND:
        return value if _is_number(value) else None
    if fact.kind == FLAG_KIND:
        return value if type(value) is bool else None
    if fact.kind == TEXT_KIND:
        return mask(value) if isinstance(value, str) else None
    if fact.kind == ENUM_KIND:
        return _enum_value(value, fact)
    return None


def project(value: object, shape: Shape | Fact, mask: Masker) -> object:
    """The part of a JSON value ``shape`` allows (strings masked), or None when none of it fits:
    a run fact's nested text never rides along with the fields it is allowed to have."""
    if isinstance(shape, Fact):
        return _project_fact(value, shape, mask)
    if shape.items is not None:
        if not isinstance(value, list):
            return None
        items = (project(item, shape.items, mask) for item in value)  # pyright: ignore[reportUnknownVariableType]
        return [item for item in items if item is not None]
    if not isinstance(value, Mapping):
        return None
    mapping: Mapping[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
    if shape.counts:
        return {mask(k): v for k, v in mapping.items() if isinstance(k, str) and _is_number(v)}
    fields = shape.fields or {}
    out: dict[str, object] = {}
    for field, inner in fields.items():
        if (kept := project(mapping.get(field), inner, mask)) is not None:
            out[field] = kept
    return out


def run_close_attributes(event: Event, mask: Masker) -> Attrs:
    out: Attrs = {}
    completion = _enum_value(event.get("completion"), _RUN_END_FACTS["completion"])
    if completion is not None:
        out[sc.RUN_COMPLETION] = completion
    for field, key in sc.RUN_JSON_FACTS:
        kept = project(event.get(field), RUN_JSON_SHAPES[field], mask)
        if kept is not None:
            # Strings are cleaned before encoding (JSON escapes would hide a key's start), and the
            # encoded whole once more: a secret split across two strings meets again in it.
            out[key] = mask(compact_json(kept))
    envelope = event.get("envelope")
    if isinstance(envelope, Mapping):
        env: Mapping[str, Any] = envelope  # pyright: ignore[reportUnknownVariableType]
        if _money(total := env.get("totalUsd")):
            out[sc.RUN_TOTAL_USD] = total
        if _is_number(spawned := env.get("agentsSpawned")):
            out[sc.RUN_AGENTS_SPAWNED] = spawned
    if event.get("settled") is False:
        out[sc.RUN_SETTLED] = False
        reason = _enum_value(event.get("settledReason"), _RUN_END_FACTS["settledReason"])
        if reason is not None:
            out[sc.RUN_SETTLED_REASON] = reason
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


def event_name(kind: object, mask: Masker) -> str:
    """The name of a span event for an event of type ``kind``: the type when the catalog knows it
    or it has the catalog's shape (and the masker leaves it alone), else ``(unknown)``."""
    if not isinstance(kind, str):
        return UNKNOWN
    if kind in EVENT_PLANS:
        return kind
    if len(kind) <= _TYPE_SHAPE_MAX and _TYPE_SHAPE.fullmatch(kind) is not None and mask(kind) == kind:
        return kind
    return UNKNOWN


def _numbers(value: object) -> tuple[int | float, ...] | None:
    if not isinstance(value, list) or not value:
        return None
    items: list[Any] = value[:MAX_ARRAY_ITEMS]  # pyright: ignore[reportUnknownVariableType]
    if all(_is_int(item) for item in items):
        return tuple(items)
    if all(_is_number(item) for item in items):
        # OTel arrays are homogeneous: a mixed int/float array goes out as floats.
        return tuple(float(item) for item in items)
    return None


def event_attributes(event: Event, mask: Masker) -> Attrs:
    """A span event's attributes: ``rulvar.entry_seq`` and the facts its type's allow-list names
    (``_event_facts.EVENT_FACTS``), each only with a value of its kind. Unknown types and fields,
    and values of another kind, export nothing (docs/otel-mapping.md#what-a-span-event-carries)."""
    seq: Any = event.get("seq")
    seq_kind = type(seq)
    out: Attrs = (
        {_ENTRY_SEQ: seq}
        if (seq_kind is float and _finite(seq)) or (seq_kind is int and fits_int64(seq))
        else {}
    )
    kind = event.get("type")
    plan = EVENT_PLANS.get(kind) if type(kind) is str else None
    if not plan:
        return out
    for field, fact, values, keys in plan:
        value: Any = event.get(field)
        if value is None:
            continue
        vtype = type(value)
        exported: AttrValue | None = None
        if fact in (NUMBER_KIND, NUMBER_OR_TEXT_KIND):
            if (vtype is float and _finite(value)) or (vtype is int and fits_int64(value)):
                exported = value
            elif fact == NUMBER_OR_TEXT_KIND and vtype is str:
                exported = mask(value)
        elif fact == FLAG_KIND:
            if vtype is bool:
                exported = value
        elif fact == TEXT_KIND:
            if vtype is str:
                exported = mask(value)
        elif fact == ENUM_KIND:
            if vtype is str and value in values:
                exported = value
        elif fact == NUMBERS_KIND:
            exported = _numbers(value)
        elif fact == WIRE_ERROR_KIND and isinstance(value, Mapping):
            err: Mapping[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
            if isinstance(code := err.get("code"), str):
                out[keys[0]] = mask(code)
            if isinstance(retryable := err.get("retryable"), bool):
                out[keys[1]] = retryable
        if exported is not None:
            for key in keys:
                out[key] = exported
    return out
