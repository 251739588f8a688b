"""How an orchestration is configured: :class:`OrchestrateOptions` (validated on construction)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rulvar_otel.engine._orchestrate.admission import Limits
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.errors import ConfigError

__all__ = ["OrchestrateOptions"]

_FALLBACKS = ("finish-with-partial", "fail-run")


@dataclass(frozen=True, kw_only=True)
class OrchestrateOptions:
    """The orchestrator's model and budget, the children's profiles, limits, gates and guards.

    ``profiles`` maps an agent type to the :class:`AgentOptions` its children run with (an
    unknown type runs with defaults unless ``strict_profiles``). ``verify`` maps an agent type to a
    mechanical gate ``value -> bool``. ``cap_usd`` is the orchestrator's own sub-account (at most
    ``cap_fraction`` of the run ceiling when there is one); ``finalize_reserve_usd`` is kept back
    from it for the final turn.
    """

    model: str | None = None
    profiles: Mapping[str, AgentOptions] = field(default_factory=dict[str, AgentOptions])
    strict_profiles: bool = False
    limits: Limits = field(default_factory=Limits)
    verify: Mapping[str, Callable[[Any], bool]] = field(default_factory=dict[str, Callable[[Any], bool]])
    cap_usd: float = 1.0
    cap_fraction: float = 0.2
    finalize_reserve_usd: float = 0.0
    max_wakes: int = 16
    max_turns_per_wake: int = 24
    max_revisions: int = 32
    dropped_revision_limit: int = 3
    fallback: str = "finish-with-partial"
    render_budget_chars: int = 400
    wake_timeout_s: float = 300.0
    system: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "profiles", MappingProxyType(dict(self.profiles)))
        object.__setattr__(self, "verify", MappingProxyType(dict(self.verify)))
        if self.fallback not in _FALLBACKS:
            raise ConfigError(f"fallback must be one of {', '.join(_FALLBACKS)}, got {self.fallback!r}")
        for name in ("max_wakes", "max_turns_per_wake", "dropped_revision_limit"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.max_revisions < 0 or self.render_budget_chars < 0:
            raise ConfigError("max_revisions and render_budget_chars must be >= 0")
        if not self.cap_usd > 0 or not 0 < self.cap_fraction <= 1 or self.finalize_reserve_usd < 0:
            raise ConfigError("cap_usd must be > 0, cap_fraction in (0, 1], finalize_reserve_usd >= 0")
        if not self.wake_timeout_s > 0:
            raise ConfigError("wake_timeout_s must be > 0")
        limits = self.limits
        if min(limits.max_total_spawns, limits.max_depth, limits.max_attempts_per_task) < 1:
            raise ConfigError("admission limits must be >= 1")
        if limits.max_oscillations_per_key < 1:
            raise ConfigError("max_oscillations_per_key must be >= 1")
