"""One orchestration: wake turns, the journaled decisions, children, landings, and finishing.

Every dynamic decision (a wake turn, a spawn and its admission verdict, a plan revision, a ledger
op, a landing, a wake, the cap, the finish) is one journal entry written before its effect, and
:meth:`Orchestration.apply` is the only place a decision takes effect and emits its events. A live
run decides and applies; a resumed or dry-run segment applies the journaled decisions in order
(children and wake turns replay from their own terminals, zero model calls), so a replay re-emits
the same adaptive events through the same path, with ``replayed`` only on ``spawn:*``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rulvar_otel.core import events as ce
from rulvar_otel.core.events import SpawnAdmitted, SpawnRejected
from rulvar_otel.engine import determinism
from rulvar_otel.engine._orchestrate import events as ev
from rulvar_otel.engine._orchestrate.admission import Admission, AdmissionGate, Donor, key_hash
from rulvar_otel.engine._orchestrate.ledger import RunLedger
from rulvar_otel.engine._orchestrate.options import OrchestrateOptions
from rulvar_otel.engine._orchestrate.plan import NodeState, Plan, PlanNode, spawn_key
from rulvar_otel.engine._orchestrate.tools import child_tools, turn_tools
from rulvar_otel.engine.cost import OrchestrationFacts
from rulvar_otel.engine.journal import JournalEntry, JournalKind
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.engine.scope import CURRENT_SCOPE, ReplayedCancellation, Scope
from rulvar_otel.errors import WorkflowError

if TYPE_CHECKING:
    from rulvar_otel.engine.segment import SegmentState

__all__ = ["Child", "Orchestration"]


@dataclass
class Child:
    """One attempt of a node: its scope, task and what it landed with."""

    node_id: str
    ordinal: int
    scope: Scope
    task: asyncio.Task[None] | None = None
    report: dict[str, Any] | None = None
    status: str = "running"
    value: Any = None
    cost_usd: float = 0.0
    entry_ref: int = -1
    landed: bool = False


@dataclass
class TurnRequests:
    """What the tools of the current wake turn asked for (applied after the turn ends)."""

    wait: str | None = None
    timeout_s: float | None = None
    finish: str | None = None
    decided: int = 0


@dataclass
class Orchestration:
    run: SegmentState
    scope: Scope
    goal: str
    options: OrchestrateOptions
    base: str
    plan: Plan = field(default_factory=Plan)
    ledger: RunLedger = field(default_factory=RunLedger)
    children: dict[str, Child] = field(default_factory=dict[str, Child])
    escalations: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    inbox: list[Child] = field(default_factory=list[Child])
    landed_now: list[Child] = field(default_factory=list[Child])
    stall: dict[str, int] = field(default_factory=dict[str, int])
    decisions: int = 0
    minted: int = 0
    spawned: int = 0
    digest_seq: int = 0
    wait_ref: int = -1
    revision_units: int = 0
    dropped_streak: int = 0
    frozen: bool = False
    must_finish: bool = False
    failure: WorkflowError | None = None
    finished: bool = False
    replaying: bool = False
    result: dict[str, Any] = field(default_factory=dict[str, Any])
    requests: TurnRequests = field(default_factory=TurnRequests)
    pending_digest: str = ""
    landed_event: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.revision_units = self.options.max_revisions
        self.gate = AdmissionGate(self.options.limits, self.run.engine.max_spawn_units)
        self.turn_scope = Scope(
            self.run,
            self.base,
            self.scope.span_id,
            self.scope.parent_span_id,
            self.scope.phase or "coordination",
            self.scope.workflow,
        )
        if self.run.orchestration is None:
            self.run.orchestration = OrchestrationFacts()
        self.facts: OrchestrationFacts = self.run.orchestration
        self.facts.orchestrator_scopes.add(self.base)

    # --- the loop -------------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        """Apply the journaled decisions, then carry on live until the orchestration finishes."""
        prefix = f"{self.base}/d#"
        journaled = [
            e
            for e in self.run.journal.entries
            if e.kind == JournalKind.ORCH and (e.key or "").startswith(prefix)
        ]
        self.replaying = True
        try:
            for entry in journaled:
                self.decisions += 1
                await self.apply(entry)
        finally:
            self.replaying = False
        if not journaled:
            self.pending_digest = f"Goal: {self.goal}"
        while not self.finished:
            if self.failure is not None:
                raise self.failure
            await self._live_step()
        return self.result

    async def _live_step(self) -> None:
        if self.must_finish or self.frozen or self.requests.finish is not None:
            await self.decide({"op": "finish", **self._finish_facts(forced=self.requests.finish is None)})
            return
        if self.digest_seq >= self.options.max_wakes:
            self.must_finish = True
            return
        self.requests = TurnRequests()
        await self.decide({"op": "turn", "prompt": self.pending_digest})
        if self.requests.finish is not None or self.must_finish:
            return
        cap = self.cap()
        if self.orchestrator_spent() >= cap:
            await self.decide(
                {
                    "op": "cap",
                    "spentUsd": self.orchestrator_spent(),
                    "capUsd": cap,
                    "finalizeReserveUsd": self.options.finalize_reserve_usd,
                }
            )
            return
        await self.decide({"op": "wait", "mode": self.requests.wait or "events"})
        timed_out = await self._wait(self.requests.wait or "events", self.requests.timeout_s)
        await self._land_inbox()
        await self._schedule_ready()
        await self.decide({"op": "wake", **self._digest(timed_out)})

    async def decide(self, data: dict[str, Any]) -> JournalEntry:
        """Journal one decision, then apply it (the one order: fact before effect)."""
        key = f"{self.base}/d#{self.decisions}"
        self.decisions += 1
        self.requests.decided += 1
        entry = self.run.journal.append(JournalKind.ORCH, key, data)
        await self.apply(entry)
        return entry

    async def apply(self, entry: JournalEntry) -> None:
        data = entry.data
        op = data.get("op")
        if op == "turn":
            await self._turn(str(data.get("prompt") or ""))
        elif op == "spawn":
            self._apply_spawn(entry, data)
        elif op == "schedule":
            node = self.plan.nodes[str(data["nodeId"])]
            self.take_effect(entry, node, dict(data["admission"]), False, add=False)
        elif op == "revision":
            from rulvar_otel.engine._orchestrate.revisions import apply_revision

            apply_revision(self, entry)
        elif op == "ledger":
            if data.get("reason") is None:
                self.ledger.apply(str(data["ledgerOp"]), data["args"])
                ev.emit(self, ce.LedgerOp, entry_ref=entry.seq, op=data["ledgerOp"])
        elif op == "wait":
            self.wait_ref = entry.seq
            if self.replaying:
                self.requests = TurnRequests(wait=str(data.get("mode")))
        elif op == "land":
            await self._apply_land(entry, data)
        elif op == "wake":
            self._apply_wake(entry, data)
        elif op == "cap":
            self.frozen = True
            ev.emit(
                self,
                ce.OrchestratorBudget,
                at_cap=True,
                spent_usd=data["spentUsd"],
                cap_usd=data["capUsd"],
                finalize_reserve_usd=data["finalizeReserveUsd"],
            )
        elif op == "finish":
            await self._apply_finish(data)

    # --- wake turns ------------------------------------------------------------------------------

    async def _turn(self, prompt: str) -> None:
        from rulvar_otel.engine.agent import AgentDispatch

        options = AgentOptions(
            agent_type="orchestrator",
            role="orchestrate",
            model=self.options.model,
            tools=turn_tools(self),
            max_turns=self.options.max_turns_per_wake,
            system=self.options.system,
        )
        try:
            await AgentDispatch(self.run, self.turn_scope, prompt, options).dispatch()
        except (WorkflowError, ReplayedCancellation):
            # A turn that fails ends the orchestration with what its children produced.
            self.must_finish = True

    def cap(self) -> float:
        ceiling = self.run.budget.ceiling_usd
        cap = self.options.cap_usd
        return min(cap, self.options.cap_fraction * ceiling) if ceiling else cap

    def orchestrator_spent(self) -> float:
        return sum(s.cost_usd or 0.0 for r in self.run.records if r.scope == self.base for s in r.slices)

    # --- spawning --------------------------------------------------------------------------------

    def mint(self) -> tuple[str, str]:
        self.minted += 1
        return (
            f"{self.base.rsplit('|', 1)[-1]}.n{self.minted}",
            f"{self.base.rsplit('|', 1)[-1]}.t{self.minted}",
        )

    def admit(self, node: PlanNode, *, fresh: bool = False, readd: bool = False) -> Admission:
        profile = self.profile(node.agent_type)
        if profile is None:
            return Admission(
                False, code="unknown_agent_type", spawn_units_after=self.gate.spawn_units - self.gate.admitted
            )
        budget = self.run.budget
        room = (
            None
            if budget.ceiling_usd is None
            else budget.ceiling_usd - budget.spent_usd - budget.committed_usd
        )
        reserve = self.run.engine.default_reserve_usd if profile.reserve_usd is None else profile.reserve_usd
        return self.gate.decide(
            spawn_key=node.key,
            logical_task_id=node.logical_task_id,
            depth=node.depth,
            reserve_usd=reserve,
            budget_room_usd=room,
            fresh=fresh,
            readd=readd,
        )

    def is_readd(self, agent_type: str, prompt: str) -> bool:
        key = spawn_key(agent_type, prompt)
        return any(
            n.key == key and n.state in (NodeState.CANCELLED, NodeState.SKIPPED)
            for n in self.plan.nodes.values()
        )

    def profile(self, agent_type: str) -> AgentOptions | None:
        found = self.options.profiles.get(agent_type)
        if found is None and self.options.strict_profiles:
            return None
        return found or AgentOptions()

    def _apply_spawn(self, entry: JournalEntry, data: dict[str, Any]) -> None:
        node = self.plan.get(data["node"]["nodeId"])
        if node is None:
            raw = data["node"]
            node = PlanNode(
                raw["nodeId"],
                raw["logicalTaskId"],
                raw["agentType"],
                raw["prompt"],
                list(raw["deps"]),
                NodeState.PENDING,
                int(raw["depth"]),
            )
            self.minted = max(self.minted, int(data.get("minted", self.minted)))
        self.take_effect(entry, node, data["admission"], bool(data.get("readd")), add=True)

    def take_effect(
        self, entry: JournalEntry, node: PlanNode, adm: dict[str, Any], readd: bool, *, add: bool
    ) -> None:
        """A journaled admission verdict takes effect: events, the node, and the child task."""
        donor_data = adm.get("donor")
        donor = (
            Donor(
                donor_data["nodeId"],
                donor_data["logicalTaskId"],
                donor_data["entryRef"],
                donor_data["status"],
                donor_data["costUsd"],
                donor_data.get("value"),
            )
            if donor_data
            else None
        )
        admission = Admission(
            bool(adm["admitted"]),
            adm.get("verdict"),
            adm.get("code"),
            float(adm["reserveUsd"]),
            int(adm["spawnUnitsAfter"]),
            donor,
            int(adm.get("oscillation", 0)),
        )
        self.gate.book(admission, spawn_key=node.key, logical_task_id=node.logical_task_id, readd=readd)
        if not admission.admitted:
            if admission.code == "oscillation":
                ev.emit(
                    self,
                    ce.GuardOscillation,
                    spawn_key_hash=key_hash(node.key),
                    oscillation_count=admission.oscillation,
                    limit=self.options.limits.max_oscillations_per_key,
                )
            self.run.emit(
                SpawnRejected,
                self.run.root_span,
                replayed=self.replaying,
                entry_ref=entry.seq,
                code=admission.code or "rejected",
                agent_type=node.agent_type,
                logical_task_id=node.logical_task_id,
            )
            if not add:
                node.state = NodeState.FAILED
            return
        if add:
            self.plan.add(node)
        if admission.verdict == "reuse_full" and donor is not None:
            node.logical_task_id = donor.logical_task_id
        self.run.emit(
            SpawnAdmitted,
            self.run.root_span,
            replayed=self.replaying,
            entry_ref=entry.seq,
            verdict=admission.verdict or "admit",
            agent_type=node.agent_type,
            logical_task_id=node.logical_task_id,
            spawn_units_after=admission.spawn_units_after,
            reserve_usd=admission.reserve_usd,
        )
        if admission.verdict == "reuse_full" and donor is not None:
            node.state = NodeState.DONE
            self.results[node.node_id] = donor.value
            ev.emit(
                self,
                ce.NodeLinked,
                node_id=node.node_id,
                logical_task_id=node.logical_task_id,
                donor_ref=donor.entry_ref,
                reclaimed_usd=donor.cost_usd,
            )
            self.plan.promote()
            return
        self._start_child(node)

    @property
    def results(self) -> dict[str, Any]:
        return self.result.setdefault("results", {})  # type: ignore[no-any-return]

    def _start_child(self, node: PlanNode) -> None:
        from rulvar_otel.engine.agent import AgentDispatch

        run = self.run
        self.spawned += 1
        attempt = self.gate.attempts.get(node.logical_task_id, 1)
        path = f"{self.base}/node:{node.node_id}/a{attempt}"
        phase = self.scope.phase or "fan-out"
        child = Child(
            node.node_id,
            self.spawned,
            Scope(run, path, run.mint_span(), self.scope.span_id, phase, self.scope.workflow),
        )
        self.children[node.node_id] = child
        node.state = NodeState.RUNNING
        profile = self.profile(node.agent_type) or AgentOptions()
        options = replace(profile, agent_type=node.agent_type, tools=(*profile.tools, *child_tools(child)))

        async def body() -> None:
            CURRENT_SCOPE.set(child.scope)
            try:
                child.value = await AgentDispatch(run, child.scope, node.prompt, options).dispatch()
                child.status = "escalated" if child.report is not None else "ok"
            except (asyncio.CancelledError, ReplayedCancellation):
                child.status = "cancelled"
            except WorkflowError:
                child.status = "error"
            record = next((r for r in reversed(run.records) if r.scope == path), None)
            if record is not None:
                child.cost_usd = sum(s.cost_usd or 0.0 for s in record.slices)
                child.entry_ref = record.order
            self.inbox.append(child)
            self.landed_event.set()

        detect = run.engine.determinism_mode != "off"

        async def driven() -> None:
            await determinism.drive(body(), detect)

        child.task = asyncio.get_running_loop().create_task(driven())

    async def _schedule_ready(self) -> None:
        for node in list(self.plan.promote()):
            if node.node_id in self.children and not self.children[node.node_id].landed:
                continue
            readd = False
            admission = self.admit(node)
            await self._decide_schedule(node, admission, readd)

    async def _decide_schedule(self, node: PlanNode, admission: Admission, readd: bool) -> None:
        await self.decide({"op": "schedule", "nodeId": node.node_id, "admission": admission.to_json()})

    # --- waiting and landing ---------------------------------------------------------------------

    def running(self) -> list[Child]:
        return [c for c in self.children.values() if not c.landed and c not in self.inbox]

    async def _wait(self, mode: str, timeout_s: float | None) -> bool:
        """Sleep until the mode's condition holds; True when the bound passed first."""
        bound = (
            self.options.wake_timeout_s if timeout_s is None else min(timeout_s, self.options.wake_timeout_s)
        )
        try:
            async with asyncio.timeout(bound):
                while self.running() and (mode == "all" or not self.inbox):
                    self.landed_event.clear()
                    await self.landed_event.wait()
        except TimeoutError:
            return True
        return False

    async def _land_inbox(self) -> None:
        for child in sorted(self.inbox, key=lambda c: c.ordinal):
            node = self.plan.nodes[child.node_id]
            verified: bool | None = None
            gate = self.options.verify.get(node.agent_type)
            if gate is not None and child.status == "ok":
                with determinism.suppressed():
                    verified = bool(gate(child.value))
            escalation = None
            if child.report is not None:
                escalation = {**child.report, "costToDateUsd": child.cost_usd}
            await self.decide(
                {
                    "op": "land",
                    "nodeId": child.node_id,
                    "status": child.status,
                    "value": child.value,
                    "costUsd": child.cost_usd,
                    "entryRef": child.entry_ref,
                    "escalation": escalation,
                    "verified": verified,
                }
            )
        self.inbox.clear()

    async def _apply_land(self, entry: JournalEntry, data: dict[str, Any]) -> None:
        from rulvar_otel.engine._orchestrate.landing import land

        child = self.children[str(data["nodeId"])]
        if self.replaying and child.task is not None:
            await child.task
            if child in self.inbox:
                self.inbox.remove(child)
        land(self, entry, child, data)

    def _digest(self, timed_out: bool) -> dict[str, Any]:
        from rulvar_otel.engine._orchestrate.landing import digest

        return digest(self, timed_out=timed_out)

    def _apply_wake(self, entry: JournalEntry, data: dict[str, Any]) -> None:
        self.digest_seq = int(data["digestSeq"])
        self.facts.wakes += 1
        self.pending_digest = str(data.get("text") or "")
        ev.emit(self, ce.OrchestratorBudget, **data["budget"])
        ev.emit(self, ce.ResolutionApplied, target_ref=self.wait_ref, entry_ref=entry.seq, by=data["trigger"])
        ev.emit(
            self,
            ce.OrchestratorWoke,
            digest_seq=self.digest_seq,
            plan_hash=data["planHash"],
            covers_to_ordinal=data["coversToOrdinal"],
            render_size=data["renderSize"],
            completed=data["completed"],
            escalations=data["escalations"],
        )

    # --- finishing -------------------------------------------------------------------------------

    def _finish_facts(self, *, forced: bool) -> dict[str, Any]:
        nodes = list(self.plan.nodes.values())
        live = [n for n in nodes if n.state not in (NodeState.CANCELLED, NodeState.SKIPPED)]
        done = [n for n in live if n.state == NodeState.DONE]
        completion = "complete" if live and len(done) == len(live) else "partial"
        verdict = "accepted" if done or not nodes else "rejected"
        if verdict == "rejected":
            completion = "rejected"
        return {
            "verdict": verdict,
            "completion": completion,
            "forced": forced,
            "summary": self.requests.finish or "",
        }

    async def _apply_finish(self, data: dict[str, Any]) -> None:
        from rulvar_otel.engine._orchestrate.landing import abandon

        for child in self.running():
            if child.task is not None:
                child.task.cancel()
        for child in list(self.children.values()):
            if child.task is not None:
                await asyncio.gather(child.task, return_exceptions=True)
            node = self.plan.nodes[child.node_id]
            if node.state == NodeState.RUNNING:
                node.state = NodeState.CANCELLED
                abandon(self, node, child, entry_ref=child.entry_ref)
                ev.emit(self, ce.NodeCancelled, node_id=node.node_id, logical_task_id=node.logical_task_id)
        self.inbox.clear()
        counts = self.plan.counts()
        self.facts.forced_finish = self.facts.forced_finish or bool(data.get("forced"))
        ev.emit(
            self,
            ce.OrchestratorAcceptance,
            verdict=data["verdict"],
            completion=data["completion"],
            child_status_counts=counts,
            spawned_children=self.spawned,
        )
        self.finished = True
        self.result.update(
            {
                "verdict": data["verdict"],
                "completion": data["completion"],
                "childStatusCounts": counts,
                "summary": data.get("summary") or "",
                "forcedFinish": bool(data.get("forced")),
            }
        )
        self.result.setdefault("results", {})
