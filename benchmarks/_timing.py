"""Interleaved timing: every case runs once per round, in the same round, so drift hits all alike.

This machine class drifts by tens of percent within a minute; comparing medians taken minutes
apart would measure the drift. Each round runs every case (A B A B ...), a ratio is taken within
the round, and the figures reported are medians over rounds.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["Timings", "interleaved"]


@dataclass
class Timings:
    """Seconds per round for each case, in round order."""

    seconds: dict[str, list[float]] = field(default_factory=dict)

    def median(self, case: str) -> float:
        return statistics.median(self.seconds[case])

    def ratio(self, case: str, baseline: str) -> float:
        """Median over rounds of the within-round ratio ``case / baseline``."""
        pairs = zip(self.seconds[case], self.seconds[baseline], strict=True)
        return statistics.median(a / b for a, b in pairs)


def interleaved(cases: Mapping[str, Callable[[], object]], rounds: int, *, warmup: int = 1) -> Timings:
    """Run each case once per round, alternating the order each round (A B, then B A, ...).

    Warm-up rounds (caches, imports, the allocator's arenas) are run but not recorded. A full
    collection before each run keeps one case's garbage out of the next case's time.
    """
    names = list(cases)
    out = Timings({name: [] for name in names})
    for index in range(warmup + rounds):
        order = names if index % 2 == 0 else list(reversed(names))
        for name in order:
            gc.collect()
            start = time.perf_counter()
            cases[name]()
            elapsed = time.perf_counter() - start
            if index >= warmup:
                out.seconds[name].append(elapsed)
    return out
