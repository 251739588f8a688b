"""The typed tools of a wake turn and of a child: thin adapters from a model's call to a decision.

A tool never changes the plan itself: it asks the orchestration to decide (journal, then apply)
and returns a deterministic render of what was decided. Malformed arguments are a decided
``dropped`` outcome or a tool error the model reads, never a crashed run.
"""

from __future__ import annotations

from typing import Any

import orjson

from rulvar_otel.engine._orchestrate.plan import PlanNode
from rulvar_otel.engine.tools import Tool

# The orchestrator's state and children (orchestrator.Orchestration, .Child), typed loosely here:
# naming them would import the module that imports this one.
Orchestration = Any
Child = Any

__all__ = ["ESCALATION_KINDS", "child_tools", "turn_tools"]

ESCALATION_KINDS = ("scope_bigger", "scope_different", "blocked_with_evidence")


def _render(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def turn_tools(orch: Orchestration) -> tuple[Tool, ...]:
    """The orchestrator's toolset for one wake turn, bound to its orchestration."""
    from rulvar_otel.engine._orchestrate.revisions import decide_revision

    async def spawn_agent(agent_type: str, prompt: str, deps: list[str] | None = None) -> str:
        """Add one task to the plan and spawn it through admission."""
        if orch.frozen:
            return _render({"admitted": False, "code": "plan_frozen"})
        node_id, task_id = orch.mint()
        node = PlanNode(node_id, task_id, agent_type, prompt, list(deps or []))
        readd = orch.is_readd(agent_type, prompt)
        admission = orch.admit(node, readd=readd)
        data = {
            "op": "spawn",
            "node": node.to_json(),
            "admission": admission.to_json(),
            "readd": readd,
            "minted": orch.minted,
        }
        entry = await orch.decide(data)
        return _render(
            {"entryRef": entry.seq, "nodeId": node_id, "logicalTaskId": task_id, **admission.to_json()}
        )

    def wait_for_events(timeout_s: float | None = None) -> str:
        """Sleep until children land (or ``timeout_s`` passes); you are woken with a digest. End your turn."""
        orch.requests.wait = "events"
        orch.requests.timeout_s = timeout_s if timeout_s is None or timeout_s > 0 else None
        return "sleeping until the next event; end this turn"

    def await_all() -> str:
        """Sleep until every running child has landed. End your turn after this call."""
        orch.requests.wait = "all"
        return "sleeping until every child lands; end this turn"

    def plan_view() -> str:
        """The plan as the engine holds it, pinned to the last wake digest."""
        return f"digest {orch.digest_seq}\n{orch.plan.render()}"

    async def plan_revise(ops: Any = None, base: Any = None) -> str:
        """Revise the plan with typed ops (add, amend, park, unpark, cancel, rewire, waive, resolve)."""
        entry = await decide_revision(orch, ops, base)
        return _render(
            {"entryRef": entry.seq, "planHash": orch.plan.hash, "outcomes": entry.data["outcomes"]}
        )

    async def ledger_append(op: str, text: str = "", fact: int | None = None, task: str | None = None) -> str:
        """Write one run-ledger op: brief_set, fact_add, fact_supersede, lesson_add, observation_add."""
        args: dict[str, Any] = {"text": text}
        if fact is not None:
            args["fact"] = fact
        if task is not None:
            args["task"] = task
        tasks = {n.logical_task_id for n in orch.plan.nodes.values()}
        reason = check_ledger(orch, op, args, tasks)
        entry = await orch.decide({"op": "ledger", "ledgerOp": op, "args": args, "reason": reason})
        return _render({"entryRef": entry.seq, "ok": reason is None, "reason": reason})

    def ledger_read() -> str:
        """The run ledger: brief, facts, lessons, observations."""
        return str(orch.ledger.render())

    def finish(summary: str = "") -> str:
        """Finish the orchestration with a summary. End your turn after this call."""
        orch.requests.finish = summary or "finished"
        return "finishing; end this turn"

    return tuple(
        Tool(fn)
        for fn in (
            spawn_agent,
            wait_for_events,
            await_all,
            plan_view,
            plan_revise,
            ledger_append,
            ledger_read,
            finish,
        )
    )


def check_ledger(orch: Orchestration, op: str, args: dict[str, Any], tasks: set[str]) -> str | None:
    from rulvar_otel.engine._orchestrate.ledger import check_ledger_op

    return check_ledger_op(orch.ledger, op, args, tasks)


def child_tools(child: Child) -> tuple[Tool, ...]:
    """What a child may call besides its profile's tools: ``escalate`` (files a typed report)."""

    def escalate(kind: str, reason: str = "", estimate: str = "") -> str:
        """Report that the task is bigger, different, or blocked; then end with a short summary."""
        if kind not in ESCALATION_KINDS:
            return f"error: kind must be one of {', '.join(ESCALATION_KINDS)}"
        child.report = {"kind": kind, "reason": reason[:400], "estimate": estimate[:200]}
        return "escalation filed; end your turn with a short summary"

    return (Tool(escalate),)
