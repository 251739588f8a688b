"""The shapes every event model shares: the base model config, the envelope, and the nested bodies.

Owns :class:`EventModel` (the envelope fields every event carries), :class:`UnknownEvent`, and
the nested value models (:class:`Usage`, :class:`WireError`, :class:`ExplorationSummary`,
:class:`ToolBudgetSummary`). The event families build on these; the public surface and the parser
are :mod:`rulvar_otel.core.events`.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

__all__ = [
    "Completion",
    "CostBasis",
    "EventModel",
    "ExplorationSummary",
    "RunStatus",
    "ToolBudgetSummary",
    "UnknownEvent",
    "Usage",
    "WireError",
]


RunStatus: TypeAlias = Literal["ok", "error", "cancelled", "exhausted", "suspended"]
Completion: TypeAlias = Literal["complete", "partial", "rejected"]
CostBasis: TypeAlias = Literal["per-call", "aggregate-estimate"]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="allow",
        alias_generator=to_camel,
        populate_by_name=True,
        ser_json_inf_nan="constants",
    )


class Usage(_Model):
    """Token counts of one call, phase, agent or run (cache counts are subsets of input)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None
    cache_write5m_tokens: int | None = Field(default=None, alias="cacheWrite5mTokens")
    cache_write1h_tokens: int | None = Field(default=None, alias="cacheWrite1hTokens")


class WireError(_Model):
    """The typed error shape every surface carries. ``message`` is content: never exported."""

    code: str
    message: str
    retryable: bool
    data: JsonValue = None


class ExplorationSummary(_Model):
    tool_calls_used: int = 0
    distinct_signatures: int = 0
    repeated_calls: int = 0
    duplicate_result_calls: int = 0
    denied_repeats: int = 0
    by_tool: dict[str, int] = Field(default_factory=dict[str, int])
    denied_tool_cap: int | None = None
    tool_units_used: float | None = None


class ToolBudgetSummary(_Model):
    used: int = 0
    cap: int | None = None
    units_used: float | None = None
    units_max: float | None = None
    extensions_granted: int | None = None
    notices_fired: list[int] | None = None
    finalization_reserve_used: bool | None = None
    finalization_window_entered: bool | None = None
    limiter: Literal["maxToolCalls", "toolUnits"] | None = None


class EventModel(_Model):
    """The envelope every event shares."""

    run_id: str
    seq: int
    ts: str
    span_id: str
    parent_span_id: str | None = None
    replayed: bool | None = None
    type: str


class UnknownEvent(EventModel):
    """An event of a type this version does not know; every field is kept in ``model_extra``."""
