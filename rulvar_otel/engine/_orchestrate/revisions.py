"""Plan revisions: decide a ``plan_revise`` call (rebase, admission, guards) and apply its entry.

The decision embeds everything live state decided (each op's outcome, the admission verdict of
every added task, the revision budget and dropped streak), so applying the entry, live or on
replay, needs nothing but the entry and the plan head it was decided against.
"""

from __future__ import annotations

from typing import Any

from rulvar_otel.core import events as ce
from rulvar_otel.engine._orchestrate import events as ev
from rulvar_otel.engine._orchestrate.landing import abandon
from rulvar_otel.engine._orchestrate.plan import NodeState, OpOutcome, PlanNode
from rulvar_otel.engine.journal import JournalEntry
from rulvar_otel.errors import WorkflowError

# The orchestrator's state and children (orchestrator.Orchestration, .Child), typed loosely here:
# naming them would import the module that imports this one.
Orchestration = Any

__all__ = ["apply_revision", "decide_revision"]


async def decide_revision(orch: Orchestration, ops: Any, base: Any) -> JournalEntry:
    escalations = {nid: bool(e["decided"]) for nid, e in orch.escalations.items()}
    if orch.revision_units <= 0:
        outcomes = [OpOutcome(0, "?", "dropped", "revision_budget")]
    elif isinstance(base, dict) and (base.get("digestSeq"), base.get("planHash")) != (
        orch.digest_seq,
        orch.plan.hash,
    ):
        count = len(ops) if isinstance(ops, list) else 1
        outcomes = [OpOutcome(i, "?", "dropped", "bad_base") for i in range(count)]
    else:
        outcomes = orch.plan.rebase(ops, frozen=orch.frozen, escalations=escalations)
    adds: dict[str, Any] = {}
    for outcome in outcomes:
        if outcome.op == "add" and outcome.outcome != "dropped":
            node_id, task_id = orch.mint()
            args = outcome.args
            node = PlanNode(
                node_id, task_id, str(args["agent_type"]), str(args["prompt"]), list(args["deps"])
            )
            readd = orch.is_readd(node.agent_type, node.prompt)
            ready = all(orch.plan.nodes[d].state == NodeState.DONE for d in node.deps)
            admission = orch.admit(node, fresh=bool(args.get("fresh")), readd=readd) if ready else None
            adds[str(outcome.index)] = {
                "node": node.to_json(),
                "readd": readd,
                "admission": admission.to_json() if admission else None,
            }
    applied = sum(1 for o in outcomes if o.outcome != "dropped")
    exhausted = orch.revision_units <= 0
    units = max(0, orch.revision_units - 1)
    streak = 0 if applied else orch.dropped_streak + 1
    data = {
        "op": "revision",
        "outcomes": [o.to_json() for o in outcomes],
        "adds": adds,
        "planHashBefore": orch.plan.hash,
        "revisionUnitsRemaining": units,
        "droppedStreak": streak,
        "exhausted": exhausted,
        "minted": orch.minted,
    }
    entry: JournalEntry = await orch.decide(data)
    return entry


def apply_revision(orch: Orchestration, entry: JournalEntry) -> None:
    data = entry.data
    orch.minted = max(orch.minted, int(data.get("minted", orch.minted)))
    outcomes = [OpOutcome.from_json(o) for o in data["outcomes"]]
    for outcome in outcomes:
        if outcome.outcome == "dropped":
            if outcome.reason == "already_resolved" and outcome.node_id in orch.escalations:
                esc = orch.escalations[outcome.node_id]
                ev.emit(
                    orch,
                    ce.ResolutionSuperseded,
                    target_ref=esc["ref"],
                    entry_ref=entry.seq,
                    superseded_by=esc["decidedRef"],
                    reason="already_resolved",
                )
            continue
        _apply_op(orch, entry, outcome, data["adds"].get(str(outcome.index)))
    orch.plan.promote()
    applied = sum(1 for o in outcomes if o.outcome != "dropped")
    orch.revision_units = int(data["revisionUnitsRemaining"])
    orch.dropped_streak = int(data["droppedStreak"])
    ev.emit(
        orch,
        ce.PlanRevised,
        entry_ref=entry.seq,
        plan_hash=orch.plan.hash,
        applied=applied,
        dropped=len(outcomes) - applied,
        revision_units_remaining=orch.revision_units,
    )
    phi = orch.revision_units + orch.gate.spawn_units - orch.gate.admitted
    ev.emit(
        orch,
        ce.TerminationDebit,
        entry_ref=entry.seq,
        counter="revisionUnits",
        remaining=orch.revision_units,
        phi=phi,
    )
    tripped = None
    if data.get("exhausted"):
        tripped = ("revisionUnits", "exhausted")
    elif orch.dropped_streak >= orch.options.dropped_revision_limit:
        tripped = ("droppedRevisions", "streak_limit")
    if tripped is not None:
        ev.emit(orch, ce.TerminationDenied, entry_ref=entry.seq, counter=tripped[0], code=tripped[1])
        orch.frozen = True
        orch.must_finish = True
        if orch.options.fallback == "fail-run":
            # Raised by the loop once the turn ends: a tool call must not swallow it.
            orch.failure = WorkflowError(
                f"the plan guards ended the orchestration ({tripped[0]}: {tripped[1]})",
                code="fail_run",
                data={"source": "plan_guards", "verdictRef": entry.seq},
            )


def _apply_op(orch: Orchestration, entry: JournalEntry, outcome: OpOutcome, add: Any) -> None:
    op, args = outcome.op, outcome.args
    if op == "add":
        raw = add["node"]
        node = PlanNode(
            raw["nodeId"], raw["logicalTaskId"], raw["agentType"], raw["prompt"], list(raw["deps"])
        )
        if add["admission"] is None:
            orch.plan.add(node)  # waits for its dependencies; scheduled when ready
            return
        orch.take_effect(entry, node, add["admission"], bool(add["readd"]), add=True)
        return
    node = orch.plan.nodes[str(outcome.node_id)]
    if op == "amend":
        node.prompt = str(args["prompt"])
    elif op == "park":
        node.state = NodeState.PARKED
        ev.emit(orch, ce.NodeParked, node_id=node.node_id, logical_task_id=node.logical_task_id)
    elif op == "unpark":
        node.state = NodeState.PENDING
    elif op == "rewire":
        node.deps = list(args["deps"])
        if node.state == NodeState.READY:
            node.state = NodeState.PENDING
    elif op == "waive":
        node.deps = [d for d in node.deps if d != args["dep"]]
    elif op == "cancel" and outcome.outcome == "transformed":
        _resolve(orch, entry, node, "cancel", {})
    elif op == "cancel":
        cancel_node(orch, node, entry.seq)
    elif op == "resolve":
        _resolve(orch, entry, node, str(args["decision"]), args)


def cancel_node(orch: Orchestration, node: PlanNode, entry_ref: int) -> None:
    """Cancel a node and its unstarted dependents; a running child is stopped and abandoned."""
    cascade = [node, *orch.plan.dependents(node.node_id)]
    for target in cascade:
        child = orch.children.get(target.node_id)
        was_running = target.state == NodeState.RUNNING
        target.state = NodeState.CANCELLED
        if child is not None and was_running:
            if child.task is not None and not child.task.done():
                child.task.cancel()
            abandon(orch, target, child, entry_ref=entry_ref)
        elif child is not None and target.node_id in orch.escalations:
            abandon(orch, target, child, entry_ref=entry_ref)
        ev.emit(orch, ce.NodeCancelled, node_id=target.node_id, logical_task_id=target.logical_task_id)


def _resolve(orch: Orchestration, entry: JournalEntry, node: PlanNode, decision: str, args: Any) -> None:
    esc = orch.escalations[node.node_id]
    esc["decided"] = True
    esc["decidedRef"] = entry.seq
    ev.emit(
        orch,
        ce.EscalationDecided,
        entry_ref=entry.seq,
        decision=decision,
        by="orchestrator",
        counts_against_limit=esc["kind"] == "scope_bigger",
    )
    ev.emit(orch, ce.ResolutionApplied, target_ref=esc["ref"], entry_ref=entry.seq, by="orchestrator")
    if decision == "accept":
        node.state = NodeState.DONE
    elif decision == "cancel":
        cancel_node(orch, node, entry.seq)
    elif decision == "retry":
        if isinstance(args.get("prompt"), str) and args["prompt"]:
            node.prompt = args["prompt"]
        node.state = NodeState.READY
        orch.children.pop(node.node_id, None)
    else:  # decompose: the parts are new nodes one level deeper, admitted when scheduled
        node.state = NodeState.SKIPPED
        for part in args.get("tasks") or []:
            if (
                isinstance(part, dict)
                and isinstance(part.get("agent_type"), str)
                and isinstance(part.get("prompt"), str)
            ):
                node_id, task_id = orch.mint()
                orch.plan.add(
                    PlanNode(node_id, task_id, part["agent_type"], part["prompt"], [], depth=node.depth + 1)
                )
