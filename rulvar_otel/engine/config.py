"""The engine's validated configuration: :class:`EngineConfig` (frozen) and :class:`RetryPolicy`.

Everything a run reads from its engine lives here, checked once when the engine is built, so the
run, its agents and its suspensions depend on this leaf rather than on the engine that starts them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.engine.journal import InMemoryJournalStore, JournalStore
from rulvar_otel.engine.limits import ConcurrencyGate, QuotaLimiter
from rulvar_otel.engine.model import ModelAdapter
from rulvar_otel.engine.pricing import PricingTable
from rulvar_otel.engine.tools import Permissions
from rulvar_otel.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

    from rulvar_otel.engine.provider_metrics import ProviderCallMetrics

__all__ = ["EngineConfig", "RetryPolicy"]

_DETERMINISM_MODES = ("warn", "error", "off")
_TOKEN_COUNTING = ("off", "on")
_REDACTION_OPTIONS = {"mask_events", "maskEvents", "patterns"}

TokenCounting = str | Callable[[str], bool]


@dataclass(frozen=True)
class RetryPolicy:
    """Transport retries of a retryable wire error (``agent:error`` with ``willRetry``)."""

    max_retries: int = 2
    backoff_ms: float = 0.0


@dataclass(frozen=True, eq=False)
class EngineConfig:
    """What every run of one engine shares; build it with :meth:`build`, which validates."""

    adapters: Mapping[str, ModelAdapter]
    default_model: str
    journal: JournalStore
    pricing: PricingTable
    masker: SecretMasker | None
    clock: Callable[[], datetime]
    id_factory: Callable[[], str]
    default_reserve_usd: float
    max_in_flight_exposure_usd: float | None
    quota: QuotaLimiter | None
    max_denials: int
    permissions: Permissions
    retry: RetryPolicy
    determinism_mode: str
    determinism_allow: tuple[str, ...]
    sleep: Callable[[float], Awaitable[None]]
    max_spawn_units: int
    count_tokens: TokenCounting
    probe_output_tokens: int
    approval_timeout_s: float | None
    # One gate for the engine: every run it executes shares the same live-dispatch slots.
    concurrency: ConcurrencyGate | None
    provider_metrics: ProviderCallMetrics | None

    @classmethod
    def build(
        cls,
        *,
        adapters: Sequence[ModelAdapter],
        id_factory: Callable[[], str],
        journal: JournalStore | None = None,
        pricing: PricingTable | Mapping[str, Any] | None = None,
        redaction: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] | None = None,
        default_reserve_usd: float = 0.5,
        max_in_flight_exposure_usd: float | None = None,
        quota: QuotaLimiter | None = None,
        max_denials: int = 8,
        permissions: Permissions | None = None,
        retry: RetryPolicy | None = None,
        determinism_mode: str = "warn",
        determinism_allow: Sequence[str] = (),
        sleep: Callable[[float], Awaitable[None]] | None = None,
        max_spawn_units: int = 500,
        max_concurrency: int | None = None,
        count_tokens: TokenCounting = "off",
        probe_output_tokens: int = 1024,
        approval_timeout_s: float | None = None,
        meter: Meter | None = None,
    ) -> EngineConfig:
        """Check every option (a ConfigError names the first wrong one) and freeze them."""
        by_id = _adapters_by_id(adapters)
        table = pricing if isinstance(pricing, PricingTable) else PricingTable(pricing)
        masker = _event_masker(redaction)
        _check_options(
            default_reserve_usd=default_reserve_usd,
            max_in_flight_exposure_usd=max_in_flight_exposure_usd,
            max_denials=max_denials,
            determinism_mode=determinism_mode,
            count_tokens=count_tokens,
            probe_output_tokens=probe_output_tokens,
            approval_timeout_s=approval_timeout_s,
        )
        provider_metrics: ProviderCallMetrics | None = None
        if meter is not None:
            from rulvar_otel.engine.provider_metrics import ProviderCallMetrics

            # Metric attributes are exported strings: masked even when the event stream is not.
            provider_metrics = ProviderCallMetrics(meter, masker or compile_secret_masker(None))
        return cls(
            adapters=by_id,
            default_model=f"{adapters[0].adapter_id}:{adapters[0].default_model}",
            journal=journal if journal is not None else InMemoryJournalStore(),
            pricing=table,
            masker=masker,
            clock=clock or (lambda: datetime.now(UTC)),
            id_factory=id_factory,
            default_reserve_usd=default_reserve_usd,
            max_in_flight_exposure_usd=max_in_flight_exposure_usd,
            quota=quota,
            max_denials=max_denials,
            permissions=permissions or Permissions(),
            retry=retry or RetryPolicy(),
            determinism_mode=determinism_mode,
            determinism_allow=tuple(determinism_allow),
            sleep=sleep or asyncio.sleep,
            max_spawn_units=max_spawn_units,
            count_tokens=count_tokens,
            probe_output_tokens=probe_output_tokens,
            approval_timeout_s=approval_timeout_s,
            concurrency=ConcurrencyGate(max_concurrency) if max_concurrency is not None else None,
            provider_metrics=provider_metrics,
        )

    def resolve_model(self, model: str | None) -> tuple[str, ModelAdapter, str]:
        """``(adapter:model ref, adapter, model name)`` for a ref, a bare model name or None (default)."""
        ref = model or self.default_model
        adapter_id, sep, name = ref.partition(":")
        if not sep:
            adapter_id, name = next(iter(self.adapters)), ref
        adapter = self.adapters.get(adapter_id)
        if adapter is None:
            raise ConfigError(f"model {ref!r} names no configured adapter (have: {', '.join(self.adapters)})")
        return f"{adapter_id}:{name}", adapter, name


def _adapters_by_id(adapters: Sequence[ModelAdapter]) -> dict[str, ModelAdapter]:
    if not adapters:
        raise ConfigError("create_engine needs at least one model adapter")
    by_id: dict[str, ModelAdapter] = {}
    for adapter in adapters:
        if adapter.adapter_id in by_id:
            raise ConfigError(f"two adapters share the id {adapter.adapter_id!r}")
        by_id[adapter.adapter_id] = adapter
    return by_id


def _event_masker(redaction: Mapping[str, Any] | None) -> SecretMasker | None:
    options = dict(redaction or {})
    unknown = set(options) - _REDACTION_OPTIONS
    if unknown:
        raise ConfigError(f"unknown redaction option(s): {', '.join(sorted(unknown))}")
    mask = options.get("mask_events", options.get("maskEvents", True))
    if not isinstance(mask, bool):
        raise ConfigError("redaction option 'mask_events' must be a boolean")
    return compile_secret_masker(options.get("patterns")) if mask else None


def _check_options(
    *,
    default_reserve_usd: float,
    max_in_flight_exposure_usd: float | None,
    max_denials: int,
    determinism_mode: str,
    count_tokens: TokenCounting,
    probe_output_tokens: int,
    approval_timeout_s: float | None,
) -> None:
    if default_reserve_usd < 0:
        raise ConfigError("default_reserve_usd must be >= 0")
    if max_in_flight_exposure_usd is not None and max_in_flight_exposure_usd <= 0:
        raise ConfigError("max_in_flight_exposure_usd must be > 0")
    if max_denials < 0:
        raise ConfigError("max_denials must be >= 0")
    if determinism_mode not in _DETERMINISM_MODES:
        raise ConfigError("determinism_mode must be 'warn', 'error' or 'off'")
    if not callable(count_tokens) and count_tokens not in _TOKEN_COUNTING:
        raise ConfigError("count_tokens must be 'off', 'on' or a callable(model_ref) -> bool")
    if probe_output_tokens < 0:
        raise ConfigError("probe_output_tokens must be >= 0")
    if approval_timeout_s is not None and not approval_timeout_s > 0:
        raise ConfigError("approval_timeout_s must be > 0")
