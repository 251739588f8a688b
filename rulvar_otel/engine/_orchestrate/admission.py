"""The one admission gate of an orchestration: every spawn is admitted or rejected here.

The gate reads the limits (spawn units, total spawns, depth, attempts per logical task), the run
budget's room for the child's reserve, the oscillation guard and the donors left by abandoned
branches, and returns a verdict. It decides only: the caller journals the verdict before any
effect, so a replay never re-evaluates admission against a live budget.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Admission", "AdmissionGate", "Donor", "Limits"]

_EPSILON_USD = 1e-12


@dataclass(frozen=True)
class Limits:
    """The admission limits of one orchestration."""

    max_total_spawns: int = 128
    max_depth: int = 2
    max_attempts_per_task: int = 8
    max_oscillations_per_key: int = 2
    reuse: bool = True


@dataclass(frozen=True)
class Donor:
    """A finished or severed branch the orchestrator abandoned: reusable by its spawn key."""

    node_id: str
    logical_task_id: str
    entry_ref: int
    status: str  # the donor's landed status: ok, escalated, cancelled, error
    cost_usd: float
    value: Any = None


@dataclass(frozen=True)
class Admission:
    admitted: bool
    verdict: str | None = None  # admit, reuse_full, admit_graft
    code: str | None = None  # the rejection code
    reserve_usd: float = 0.0
    spawn_units_after: int = 0
    donor: Donor | None = None
    oscillation: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"admitted": self.admitted, "reserveUsd": self.reserve_usd}
        out["spawnUnitsAfter"] = self.spawn_units_after
        if self.verdict is not None:
            out["verdict"] = self.verdict
        if self.code is not None:
            out["code"] = self.code
        if self.donor is not None:
            out["donor"] = {
                "nodeId": self.donor.node_id,
                "logicalTaskId": self.donor.logical_task_id,
                "entryRef": self.donor.entry_ref,
                "status": self.donor.status,
                "costUsd": self.donor.cost_usd,
                "value": self.donor.value,
            }
        if self.oscillation:
            out["oscillation"] = self.oscillation
        return out


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class AdmissionGate:
    """Counts what the limits count; :meth:`decide` is pure given that state and the budget."""

    limits: Limits
    spawn_units: int
    admitted: int = 0
    attempts: dict[str, int] = field(default_factory=dict[str, int])
    live_tasks: set[str] = field(default_factory=set[str])
    readds: dict[str, int] = field(default_factory=dict[str, int])
    donors: dict[str, Donor] = field(default_factory=dict[str, Donor])

    def decide(
        self,
        *,
        spawn_key: str,
        logical_task_id: str,
        depth: int,
        reserve_usd: float,
        budget_room_usd: float | None,
        fresh: bool = False,
        readd: bool = False,
    ) -> Admission:
        units = self.spawn_units - self.admitted
        oscillation = self.readds.get(spawn_key, 0) + 1 if readd else 0

        def reject(code: str) -> Admission:
            return Admission(False, code=code, spawn_units_after=units, oscillation=oscillation)

        if units <= 0:
            return reject("spawn_units_exhausted")
        if self.admitted >= self.limits.max_total_spawns:
            return reject("max_total_spawns")
        if depth > self.limits.max_depth:
            return reject("max_depth")
        if logical_task_id in self.live_tasks:
            return reject("lineage_busy")
        if self.attempts.get(logical_task_id, 0) >= self.limits.max_attempts_per_task:
            return reject("max_attempts")
        if oscillation > self.limits.max_oscillations_per_key:
            return reject("oscillation")
        donor = self.donors.get(spawn_key) if self.limits.reuse and not fresh else None
        if donor is not None and donor.status in ("ok", "escalated"):
            return Admission(True, "reuse_full", None, 0.0, units - 1, donor, oscillation)
        if budget_room_usd is not None and reserve_usd > budget_room_usd + _EPSILON_USD:
            return reject("budget_reserve")
        verdict = "admit_graft" if donor is not None and donor.cost_usd > 0 else "admit"
        return Admission(True, verdict, None, reserve_usd, units - 1, donor, oscillation)

    def book(self, admission: Admission, *, spawn_key: str, logical_task_id: str, readd: bool) -> None:
        """Count a journaled verdict (live and on replay alike)."""
        if readd:
            self.readds[spawn_key] = self.readds.get(spawn_key, 0) + 1
        if not admission.admitted:
            return
        self.admitted += 1
        self.attempts[logical_task_id] = self.attempts.get(logical_task_id, 0) + 1
        if admission.verdict != "reuse_full":
            self.live_tasks.add(logical_task_id)
        if admission.donor is not None:
            self.donors.pop(spawn_key, None)
