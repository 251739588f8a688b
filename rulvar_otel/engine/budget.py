"""The run's USD account: spent money, committed reserves, the ceiling.

Admission commits an agent's (or child workflow's) reserve against the ceiling and settlement
releases it; every priced turn is charged here. This is the one place the budget refusals
(:class:`BudgetExhaustedError`, and :class:`ExposureDrainedError` for the in-flight cap) are built.
"""

from __future__ import annotations

from collections.abc import Callable

from rulvar_otel.engine.limits import ExposureGate
from rulvar_otel.errors import BudgetExhaustedError, ExposureDrainedError

__all__ = ["BudgetAccount"]

# Float sums of prices drift in the last bits; a reserve that fits "exactly" must still fit.
_EPSILON_USD = 1e-12


class BudgetAccount:
    """Spent and committed USD against an optional ceiling; ``on_change`` reports every change."""

    def __init__(self, ceiling_usd: float | None, on_change: Callable[[], None]) -> None:
        self.ceiling_usd = ceiling_usd
        self.spent_usd = 0.0
        self.committed_usd = 0.0
        self._on_change = on_change

    @property
    def remaining_usd(self) -> float | None:
        return None if self.ceiling_usd is None else max(0.0, self.ceiling_usd - self.spent_usd)

    def admit(self, reserve_usd: float) -> None:
        """Commit ``reserve_usd`` against the ceiling, or refuse with BudgetExhaustedError."""
        ceiling = self.ceiling_usd
        if ceiling is not None and self.spent_usd + self.committed_usd + reserve_usd > ceiling + _EPSILON_USD:
            raise BudgetExhaustedError(
                f"budget ceiling reached: spent {self.spent_usd:.4f} USD plus committed reserves "
                f"{self.committed_usd:.4f} USD plus the proposed reserve {reserve_usd:.4f} USD does not "
                f"fit the ceiling {ceiling:.4f} USD",
                data={
                    "account": "run",
                    "spentUsd": self.spent_usd,
                    "committedReserveUsd": self.committed_usd,
                    "proposedReserveUsd": reserve_usd,
                    "ceilingUsd": ceiling,
                },
            )
        self.committed_usd += reserve_usd
        self._on_change()

    def release(self, reserve_usd: float) -> None:
        self.committed_usd -= reserve_usd
        if abs(self.committed_usd) < _EPSILON_USD:
            self.committed_usd = 0.0
        self._on_change()

    def check_call(self) -> None:
        """Refuse a provider request once the spend has reached the ceiling."""
        ceiling = self.ceiling_usd
        if ceiling is not None and self.spent_usd >= ceiling:
            raise BudgetExhaustedError(
                f"budget ceiling {ceiling:.4f} USD reached (spent {self.spent_usd:.4f} USD)",
                data={"account": "run", "spentUsd": self.spent_usd, "ceilingUsd": ceiling},
            )

    def charge(self, cost_usd: float | None) -> None:
        """Book one live turn's price (None: unpriced, nothing to add) and report the account."""
        if cost_usd is not None:
            self.spent_usd += cost_usd
        self._on_change()

    def rebook(self, cost_usd: float) -> None:
        """Book a replayed agent's journaled cost: money already spent, so no update event."""
        self.spent_usd += cost_usd

    @staticmethod
    def exposure_drained(gate: ExposureGate, estimate_usd: float) -> ExposureDrainedError:
        return ExposureDrainedError(
            f"in-flight exposure cap {gate.cap_usd} USD cannot fit the estimate {estimate_usd} USD "
            "and nothing in flight can release",
            data={"capUsd": gate.cap_usd, "estimateUsd": estimate_usd, "inFlightUsd": gate.in_flight_usd},
        )
