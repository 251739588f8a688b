"""Landings, abandonment and wake digests: how a child's end reaches the plan and the orchestrator.

A child's end is folded into the plan only by a journaled ``land`` decision, at a wake boundary
and in spawn order; its escalation report, its verification verdict and its cost travel in that
entry. A node cancelled after it was paid for is *abandoned*: its spend moves to the cost report's
``abandoned`` bucket and, when it finished, it becomes a donor a byte-identical re-add links to.
"""

from __future__ import annotations

from typing import Any

from rulvar_otel.core import events as ce
from rulvar_otel.engine._orchestrate import events as ev
from rulvar_otel.engine._orchestrate.admission import Donor
from rulvar_otel.engine._orchestrate.plan import NodeState, PlanNode
from rulvar_otel.engine.journal import JournalEntry

# The orchestrator's state and children (orchestrator.Orchestration, .Child), typed loosely here:
# naming them would import the module that imports this one.
Orchestration = Any
Child = Any

__all__ = ["abandon", "digest", "land"]

_STATE_OF = {
    "ok": NodeState.DONE,
    "escalated": NodeState.ESCALATED,
    "error": NodeState.FAILED,
    "cancelled": NodeState.CANCELLED,
}


def land(orch: Orchestration, entry: JournalEntry, child: Child, data: dict[str, Any]) -> None:
    node = orch.plan.nodes[child.node_id]
    child.landed = True
    child.status = str(data["status"])
    child.value = data.get("value")
    child.cost_usd = float(data.get("costUsd") or 0.0)
    child.entry_ref = int(data.get("entryRef", -1))
    orch.gate.live_tasks.discard(node.logical_task_id)
    orch.landed_now.append(child)
    if node.state == NodeState.CANCELLED:
        abandon(orch, node, child, entry_ref=entry.seq)
        return
    state = _STATE_OF.get(child.status, NodeState.FAILED)
    if state == NodeState.DONE and data.get("verified") is False:
        state = NodeState.FAILED
        ev.emit(
            orch,
            ce.VerifyFailed,
            entry_ref=entry.seq,
            logical_task_id=node.logical_task_id,
            rung=0,
            gate="mechanical",
        )
    node.state = state
    if state == NodeState.DONE:
        orch.results[node.node_id] = child.value
        orch.stall.pop(node.logical_task_id, None)
    else:
        streak = orch.stall.get(node.logical_task_id, 0) + 1
        orch.stall[node.logical_task_id] = streak
        ev.emit(orch, ce.StallDetected, logical_task_id=node.logical_task_id, stall_streak=streak)
    escalation = data.get("escalation")
    if state == NodeState.ESCALATED and isinstance(escalation, dict):
        orch.escalations[node.node_id] = {"ref": entry.seq, "kind": escalation["kind"], "decided": False}
        ev.emit(
            orch,
            ce.EscalationRaised,
            entry_ref=entry.seq,
            kind=escalation["kind"],
            logical_task_id=node.logical_task_id,
            cost_to_date_usd=float(escalation.get("costToDateUsd") or 0.0),
        )


def abandon(orch: Orchestration, node: PlanNode, child: Child, *, entry_ref: int) -> None:
    """Book a cancelled node's paid work as abandoned; a settled one becomes a reuse donor."""
    orch.facts.abandoned_scopes.add(child.scope.path)
    if child.landed and child.status in ("ok", "escalated", "cancelled", "error"):
        orch.gate.donors[node.key] = Donor(
            node.node_id, node.logical_task_id, entry_ref, child.status, child.cost_usd, child.value
        )


def digest(orch: Orchestration, *, timed_out: bool = False) -> dict[str, Any]:
    """The wake digest of the children landed since the last wake (spawn order), and its budget."""
    landed = sorted(orch.landed_now, key=lambda c: c.ordinal)
    orch.landed_now = []
    budget = orch.options.render_budget_chars
    lines = [f"wake digest {orch.digest_seq + 1}"]
    for child in landed:
        node = orch.plan.nodes[child.node_id]
        summary = str(child.value if child.value is not None else "")
        if len(summary) > budget:
            summary = summary[: max(0, budget - 3)] + "..." if budget >= 3 else summary[:budget]
        lines.append(f"{node.node_id} {node.state.value} {node.agent_type}: {summary}")
    pending = [nid for nid, e in orch.escalations.items() if not e["decided"]]
    if pending:
        lines.append("undecided escalations: " + ", ".join(pending))
    lines.append(orch.plan.render())
    run = orch.run
    spent = orch.orchestrator_spent()
    cap = orch.cap()
    reserve = orch.options.finalize_reserve_usd
    block = {
        "at_cap": False,
        "run_spent_usd": run.budget.spent_usd,
        "run_ceiling_usd": run.budget.ceiling_usd or 0,
        "orchestrator_spent_usd": spent,
        "orchestrator_cap_usd": cap,
        "finalize_reserve_usd": reserve,
        "orchestrator_share": spent / max(run.budget.spent_usd, 0.01),
        "soft_warning": spent + reserve >= cap,
    }
    lines.append(f"budget: run {block['run_spent_usd']:.6f} USD, orchestrator {spent:.6f} of {cap:.6f} USD")
    text = "\n".join(lines)
    trigger = (
        "escalation"
        if any(c.report for c in landed)
        else "child_terminal"
        if orch.running()
        else "quiescence"
    )
    return {
        "digestSeq": orch.digest_seq + 1,
        "planHash": orch.plan.hash,
        "coversToOrdinal": max((c.ordinal for c in landed), default=orch.spawned),
        "renderSize": len(text),
        "completed": sum(1 for c in landed if c.status == "ok"),
        "escalations": sum(1 for c in landed if c.report is not None),
        "budget": block,
        "trigger": trigger,
        "text": text,
    }
