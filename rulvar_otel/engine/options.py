"""How one agent is dispatched: :class:`AgentOptions`, frozen and shareable between dispatches."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from rulvar_otel.engine.tools import Permissions, Tool
from rulvar_otel.errors import ConfigError

__all__ = ["AgentOptions"]


@dataclass(frozen=True, kw_only=True)
class AgentOptions:
    """How one agent is dispatched. Build it once and share it, or pass its fields to ``ctx.agent``.

    ``model`` (and the per-role ``*_model``) are ``adapter:model`` refs, default the engine's first
    adapter's model; ``reserve_usd`` defaults to the engine's ``default_reserve_usd`` (or a
    countTokens-priced reserve); ``approval_timeout_s`` defaults to the engine's.
    """

    agent_type: str = ""
    label: str | None = None
    tools: Sequence[Tool] = ()
    schema: Any = None
    model: str | None = None
    role: str = "loop"
    max_turns: int = 16
    compact_at_tokens: int | None = None
    summarize_model: str | None = None
    finalize: bool = False
    finalize_model: str | None = None
    extract_model: str | None = None
    schema_attempts: int = 2
    reserve_usd: float | None = None
    permissions: Permissions | None = None
    deny_repeated_calls: bool = False
    tool_caps: Mapping[str, int] = field(default_factory=dict[str, int])
    system: str | None = None
    stream: bool = False
    approval_timeout_s: float | None = None

    def __post_init__(self) -> None:
        # Frozen copies, so one options object can be shared by many dispatches.
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "tool_caps", MappingProxyType(dict(self.tool_caps or {})))
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"agent {self.label or self.agent_type!r}: two tools share a name")
        if self.max_turns < 1 or self.schema_attempts < 1:
            raise ConfigError("max_turns and schema_attempts must be >= 1")
        if self.approval_timeout_s is not None and not self.approval_timeout_s > 0:
            raise ConfigError("approval_timeout_s must be > 0")

    def with_overrides(self, overrides: Mapping[str, Any]) -> AgentOptions:
        """A copy with ``overrides`` applied; an unknown name is a ConfigError naming it."""
        if not overrides:
            return self
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"unknown agent option(s): {', '.join(unknown)}")
        return replace(self, **overrides)
