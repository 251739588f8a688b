"""The engine-owned plan: a DAG of typed nodes and the rebase of the orchestrator's revision ops.

A node has an engine-minted id, a logical task id, a spawn key (its content identity), its
dependencies and a state. The orchestrator proposes ops; :meth:`Plan.rebase` decides each one
against the current head as ``applied``, ``transformed`` or ``dropped`` (with a reason) and never
raises on a malformed op. The plan is mutated only by applying those decided outcomes, so a
replay that applies the journaled outcomes reaches the same head and the same hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

__all__ = ["NodeState", "OpOutcome", "Plan", "PlanNode", "spawn_key"]


class NodeState(StrEnum):
    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PARKED = "parked"
    ESCALATED = "escalated"
    SKIPPED = "skipped"


# States whose node can no longer run: a dependency in one of them never becomes satisfied.
DEAD = frozenset({NodeState.FAILED, NodeState.CANCELLED, NodeState.SKIPPED})
# States an op may still rewrite (the node has not started).
UNSTARTED = frozenset({NodeState.PENDING, NodeState.READY, NodeState.PARKED})

_OPS = ("add", "amend", "park", "unpark", "cancel", "rewire", "waive", "resolve")
_DECISIONS = ("retry", "decompose", "cancel", "accept")


def spawn_key(agent_type: str, prompt: str) -> str:
    """The content identity of a task: byte equality of its agent type and prompt."""
    return hashlib.sha256(orjson.dumps([agent_type, prompt])).hexdigest()


@dataclass
class PlanNode:
    node_id: str
    logical_task_id: str
    agent_type: str
    prompt: str
    deps: list[str] = field(default_factory=list[str])
    state: NodeState = NodeState.PENDING
    depth: int = 1

    @property
    def key(self) -> str:
        return spawn_key(self.agent_type, self.prompt)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeId": self.node_id,
            "logicalTaskId": self.logical_task_id,
            "agentType": self.agent_type,
            "prompt": self.prompt,
            "deps": list(self.deps),
            "state": self.state.value,
            "depth": self.depth,
        }


@dataclass(frozen=True)
class OpOutcome:
    """One requested op as decided: ``applied``, ``transformed`` or ``dropped`` (with ``reason``)."""

    index: int
    op: str
    outcome: str
    reason: str | None = None
    node_id: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict[str, Any])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "op": self.op, "outcome": self.outcome}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.node_id is not None:
            out["nodeId"] = self.node_id
        if self.args:
            out["args"] = dict(self.args)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpOutcome:
        return cls(
            index=int(data["index"]),
            op=str(data["op"]),
            outcome=str(data["outcome"]),
            reason=data.get("reason"),
            node_id=data.get("nodeId"),
            args=dict(data.get("args") or {}),
        )


def _dropped(index: int, op: str, reason: str, node_id: str | None = None) -> OpOutcome:
    return OpOutcome(index, op, "dropped", reason, node_id)


class Plan:
    """The plan head: nodes in insertion order, and its content hash."""

    def __init__(self) -> None:
        self.nodes: dict[str, PlanNode] = {}

    def add(self, node: PlanNode) -> None:
        self.nodes[node.node_id] = node
        self.promote()

    def get(self, node_id: Any) -> PlanNode | None:
        return self.nodes.get(node_id) if isinstance(node_id, str) else None

    @property
    def hash(self) -> str:
        """sha256 of the canonical nodes (empty for an empty plan)."""
        if not self.nodes:
            return ""
        body = orjson.dumps([n.to_json() for n in self.nodes.values()], option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(body).hexdigest()

    def promote(self) -> list[PlanNode]:
        """Move pending nodes whose dependencies are all done to ready; returns the ready nodes."""
        for node in self.nodes.values():
            if node.state == NodeState.PENDING and all(
                self.nodes[d].state == NodeState.DONE for d in node.deps if d in self.nodes
            ):
                node.state = NodeState.READY
        return [n for n in self.nodes.values() if n.state == NodeState.READY]

    def dependents(self, node_id: str) -> list[PlanNode]:
        """Unstarted nodes that depend, directly or not, on ``node_id`` (the cancel cascade)."""
        out: list[PlanNode] = []
        frontier = [node_id]
        while frontier:
            current = frontier.pop()
            for node in self.nodes.values():
                if current in node.deps and node.state in UNSTARTED and node not in out:
                    out.append(node)
                    frontier.append(node.node_id)
        return out

    def would_cycle(self, node_id: str, deps: Iterable[str]) -> bool:
        graph = {n.node_id: list(n.deps) for n in self.nodes.values()}
        graph[node_id] = list(deps)
        seen: set[str] = set()
        frontier = list(graph[node_id])
        while frontier:
            current = frontier.pop()
            if current == node_id:
                return True
            if current not in seen:
                seen.add(current)
                frontier.extend(graph.get(current, []))
        return False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes.values():
            out[node.state.value] = out.get(node.state.value, 0) + 1
        return dict(sorted(out.items()))

    def render(self) -> str:
        """What ``plan_view`` shows: one line per node, deterministic."""
        lines = [f"plan {self.hash[:12] or '(empty)'}"]
        for node in self.nodes.values():
            deps = ",".join(node.deps) or "-"
            lines.append(f"{node.node_id} {node.state.value} {node.agent_type} deps={deps}")
        return "\n".join(lines)

    # --- rebase -----------------------------------------------------------------------------------

    def rebase(self, ops: Any, *, frozen: bool, escalations: Mapping[str, bool]) -> list[OpOutcome]:
        """Decide every requested op against the head (nothing is mutated here).

        ``escalations`` maps a node id with an escalation to whether it is already decided.
        """
        if not isinstance(ops, list):
            return [_dropped(0, "?", "malformed_op")]
        outcomes: list[OpOutcome] = []
        for index, raw in enumerate(ops):
            if not isinstance(raw, Mapping) or raw.get("op") not in _OPS:
                outcomes.append(_dropped(index, "?", "malformed_op"))
                continue
            op = str(raw["op"])
            if frozen:
                outcomes.append(_dropped(index, op, "plan_frozen"))
                continue
            outcomes.append(self._decide(index, op, raw, escalations))
        return outcomes

    def _decide(
        self, index: int, op: str, raw: Mapping[str, Any], escalations: Mapping[str, bool]
    ) -> OpOutcome:
        if op == "add":
            return self._decide_add(index, raw)
        node = self.get(raw.get("node"))
        if node is None:
            return _dropped(index, op, "unknown_node")
        nid = node.node_id
        state = node.state
        if op == "resolve":
            decision = raw.get("decision")
            if decision not in _DECISIONS or nid not in escalations:
                return _dropped(
                    index, op, "malformed_op" if decision not in _DECISIONS else "no_escalation", nid
                )
            if escalations[nid]:
                return _dropped(index, op, "already_resolved", nid)
            args = {"decision": decision, "prompt": raw.get("prompt"), "tasks": raw.get("tasks") or []}
            return OpOutcome(index, op, "applied", None, nid, _jsonish(args))
        if op == "cancel":
            if state == NodeState.DONE:
                return _dropped(index, op, "node_already_done", nid)
            if state in DEAD:
                return _dropped(index, op, "node_already_dead", nid)
            if state == NodeState.ESCALATED and not escalations.get(nid, True):
                return OpOutcome(index, op, "transformed", "resolved_escalation", nid, {"decision": "cancel"})
            return OpOutcome(index, op, "applied", None, nid)
        if op in ("amend", "park"):
            if state == NodeState.RUNNING:
                return _dropped(index, op, "node_running", nid)
            if state not in UNSTARTED:
                return _dropped(index, op, "node_settled", nid)
            if op == "amend":
                prompt = raw.get("prompt")
                if not isinstance(prompt, str) or not prompt:
                    return _dropped(index, op, "malformed_op", nid)
                return OpOutcome(index, op, "applied", None, nid, {"prompt": prompt})
            if state == NodeState.PARKED:
                return _dropped(index, op, "already_parked", nid)
            return OpOutcome(index, op, "applied", None, nid)
        if op == "unpark":
            if state != NodeState.PARKED:
                return _dropped(index, op, "not_parked", nid)
            return OpOutcome(index, op, "applied", None, nid)
        if op == "rewire":
            deps = raw.get("deps")
            if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
                return _dropped(index, op, "malformed_op", nid)
            if state not in UNSTARTED:
                return _dropped(index, op, "node_started", nid)
            if any(d not in self.nodes for d in deps):
                return _dropped(index, op, "unknown_node", nid)
            if self.would_cycle(nid, deps):
                return _dropped(index, op, "dep_cycle", nid)
            return OpOutcome(index, op, "applied", None, nid, {"deps": list(deps)})
        # waive
        dep = self.get(raw.get("dep"))
        if dep is None or dep.node_id not in node.deps:
            return _dropped(index, op, "unknown_dep", nid)
        if dep.state not in DEAD:
            return _dropped(index, op, "dep_live", nid)
        return OpOutcome(index, op, "applied", None, nid, {"dep": dep.node_id})

    def _decide_add(self, index: int, raw: Mapping[str, Any]) -> OpOutcome:
        agent_type, prompt = raw.get("agent_type"), raw.get("prompt")
        deps = raw.get("deps") or []
        if not isinstance(agent_type, str) or not agent_type or not isinstance(prompt, str) or not prompt:
            return _dropped(index, "add", "malformed_op")
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            return _dropped(index, "add", "malformed_op")
        if any(d not in self.nodes for d in deps):
            return _dropped(index, "add", "unknown_node")
        args = {
            "agent_type": agent_type,
            "prompt": prompt,
            "deps": list(deps),
            "fresh": bool(raw.get("fresh")),
        }
        return OpOutcome(index, "add", "applied", None, None, args)


def _jsonish(args: Mapping[str, Any]) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(dict(args), default=str))  # type: ignore[no-any-return]
