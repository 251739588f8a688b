"""Pre-wire limiters: the quota limiter (healthy throttling) and the in-flight exposure cap."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rulvar_otel.errors import ConfigError

__all__ = [
    "ConcurrencyGate",
    "ExposureGate",
    "QuotaDecision",
    "QuotaLimiter",
    "ScriptedQuota",
    "TokenWindowQuota",
]


@dataclass(frozen=True)
class QuotaDecision:
    allowed: bool
    reason: str | None = None
    retry_after_ms: float | None = None


@runtime_checkable
class QuotaLimiter(Protocol):
    """Asked before every provider request. A denial never reaches the provider."""

    def acquire(self, model_ref: str, estimated_tokens: int) -> QuotaDecision: ...


class ScriptedQuota:
    """Deterministic denials: the first ``deny[model_ref]`` requests of each model are denied."""

    def __init__(
        self,
        deny: Mapping[str, int],
        *,
        reason: str = "tokensPerMinute window exhausted",
        retry_after_ms: float = 1.0,
    ) -> None:
        self._left = dict(deny)
        self.reason = reason
        self.retry_after_ms = retry_after_ms

    def acquire(self, model_ref: str, estimated_tokens: int) -> QuotaDecision:
        left = self._left.get(model_ref, 0)
        if left > 0:
            self._left[model_ref] = left - 1
            return QuotaDecision(False, self.reason, self.retry_after_ms)
        return QuotaDecision(True)


class TokenWindowQuota:
    """A sliding one-minute window of requests and estimated tokens per model ref."""

    def __init__(
        self,
        *,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if requests_per_minute is None and tokens_per_minute is None:
            raise ConfigError("TokenWindowQuota needs requests_per_minute or tokens_per_minute")
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._clock = clock
        self._window: dict[str, deque[tuple[float, int]]] = {}

    def acquire(self, model_ref: str, estimated_tokens: int) -> QuotaDecision:
        now = self._clock()
        window = self._window.setdefault(model_ref, deque())
        while window and now - window[0][0] >= 60.0:
            window.popleft()
        retry_ms = max(1.0, (60.0 - (now - window[0][0])) * 1000) if window else 1.0
        if self.rpm is not None and len(window) >= self.rpm:
            return QuotaDecision(False, f"requestsPerMinute {self.rpm} exhausted", retry_ms)
        used = sum(tokens for _, tokens in window)
        if self.tpm is not None and window and used + estimated_tokens > self.tpm:
            return QuotaDecision(False, f"tokensPerMinute {self.tpm} exhausted", retry_ms)
        window.append((now, estimated_tokens))
        return QuotaDecision(True)


class ExposureGate:
    """The in-flight exposure cap: the worst-case USD of calls on the wire at once.

    A call whose estimate does not fit beside the live holds waits for a release (``willWait``
    true); when nothing is in flight there is nothing to wait for, so the refusal is terminal.
    """

    def __init__(self, cap_usd: float) -> None:
        if cap_usd <= 0:
            raise ConfigError("max_in_flight_exposure_usd must be > 0")
        self.cap_usd = cap_usd
        self.in_flight_usd = 0.0
        self.holds = 0
        self._released = asyncio.Event()

    def fits(self, estimate_usd: float) -> bool:
        return self.in_flight_usd + estimate_usd <= self.cap_usd + 1e-12

    def hold(self, estimate_usd: float) -> None:
        self.in_flight_usd += estimate_usd
        self.holds += 1

    def release(self, estimate_usd: float) -> None:
        self.in_flight_usd = max(0.0, self.in_flight_usd - estimate_usd)
        self.holds -= 1
        self._released.set()

    async def wait_release(self) -> None:
        self._released.clear()
        await self._released.wait()


class ConcurrencyGate:
    """The engine's concurrency limit: at most ``limit`` live agent dispatches at once.

    Waiters are served first come, first served: a release hands its slot straight to the oldest
    waiter, so a dispatch arriving later can never overtake one that is already queued.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ConfigError("max_concurrency must be >= 1")
        self.limit = limit
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_acquire(self) -> bool:
        """Take a slot at once when one is free and nobody is queued; False means queue."""
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return True
        return False

    async def wait(self) -> None:
        """Queue for a slot (after ``try_acquire`` said no); on return the caller holds one."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as the waiter was cancelled
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes on; ``active`` is unchanged
                return
        self.active -= 1
