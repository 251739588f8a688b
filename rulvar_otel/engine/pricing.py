"""Pricing: USD per million tokens per ``adapterId:model`` ref, applied to each call's usage."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rulvar_otel.core.events import Usage
from rulvar_otel.errors import ConfigError

__all__ = ["Price", "PricingTable"]


@dataclass(frozen=True)
class Price:
    """Rates in USD per million tokens. Cache rates default to the input rate."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(f"price field {name!r} must be a finite number >= 0, got {value!r}")

    def usd(self, usage: Usage) -> float:
        """Price one call. Cache counts are subsets of input; reasoning is inside output."""
        cache_read = usage.cache_read_tokens
        cache_write = usage.cache_write_tokens
        uncached = max(0, usage.input_tokens - cache_read - cache_write)
        read_rate = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write_rate = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        return (
            uncached * self.input_per_mtok
            + cache_read * read_rate
            + cache_write * write_rate
            + usage.output_tokens * self.output_per_mtok
        ) / 1_000_000


class PricingTable:
    """A price per model ref. A model the table does not name is unpriced (never a silent zero)."""

    def __init__(self, prices: Mapping[str, Price | Mapping[str, float]] | None = None) -> None:
        self._prices: dict[str, Price] = {}
        for ref, price in (prices or {}).items():
            if not isinstance(ref, str) or ":" not in ref:
                raise ConfigError(f"pricing key {ref!r} must be an 'adapterId:model' ref")
            if isinstance(price, Price):
                self._prices[ref] = price
            elif isinstance(price, Mapping):
                try:
                    self._prices[ref] = Price(**price)
                except TypeError as exc:
                    raise ConfigError(f"pricing row {ref!r}: {exc}") from exc
            else:
                raise ConfigError(f"pricing row {ref!r} must be a Price or a mapping of rates")

    def price_of(self, model_ref: str) -> Price | None:
        return self._prices.get(model_ref)

    def usd(self, model_ref: str, usage: Usage) -> float | None:
        """The call's USD, or None when the model is unpriced."""
        price = self._prices.get(model_ref)
        return None if price is None else price.usd(usage)

    def __contains__(self, model_ref: object) -> bool:
        return model_ref in self._prices
