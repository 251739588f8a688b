"""An agent's tool calls: guards (repeats, per-tool caps), the permission chain, approvals, execution.

Each call ends in exactly one ``tool:start``/``tool:end`` pair with an outcome (``ok``, ``error``,
``denied``) and is journaled with its result, so a replay re-emits the pair and feeds the model the
same result without running the tool again. A tool's failure is the call's outcome, never the run's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from rulvar_otel.core.events import ApprovalPending, ToolEnd, ToolStart
from rulvar_otel.engine import determinism
from rulvar_otel.engine.journal import JournalKind
from rulvar_otel.engine.model import ToolCallRequest
from rulvar_otel.engine.suspension import Answer, SuspensionKind
from rulvar_otel.engine.tools import Decision, Tool
from rulvar_otel.engine.values import jsonable
from rulvar_otel.errors import DeadlineExceededError

if TYPE_CHECKING:
    from rulvar_otel.engine.agent_state import AgentState

__all__ = ["ExplorationCounters", "ToolCallHandler"]


@dataclass
class ExplorationCounters:
    """What the exploration guards counted, reported on ``agent:end`` when a guard is configured."""

    tool_calls_used: int = 0
    repeated_calls: int = 0
    denied_repeats: int = 0
    denied_tool_cap: int = 0


def _signature(call: ToolCallRequest) -> str:
    return call.name + orjson.dumps(dict(call.arguments), option=orjson.OPT_SORT_KEYS).decode()


class ToolCallHandler:
    """Runs (or replays) the tool calls of one agent and keeps their log and guard counters."""

    def __init__(self, agent: AgentState) -> None:
        self.agent = agent
        self.run = agent.run
        self.options = agent.options
        self.by_name = {t.name: t for t in self.options.tools}
        self.log: list[dict[str, Any]] = []
        self.signatures: set[str] = set()
        self.calls_by_tool: dict[str, int] = {}
        self.counters = ExplorationCounters()

    def exploration(self) -> dict[str, Any] | None:
        """The ``agent:end`` exploration block, when a repeat guard or a tool cap was configured."""
        options = self.options
        if not (
            options.deny_repeated_calls
            or options.tool_caps
            or any(t.max_calls is not None for t in options.tools)
        ):
            return None
        block: dict[str, Any] = {
            "toolCallsUsed": self.counters.tool_calls_used,
            "distinctSignatures": len(self.signatures),
            "repeatedCalls": self.counters.repeated_calls,
            "duplicateResultCalls": 0,
            "deniedRepeats": self.counters.denied_repeats,
            "byTool": dict(sorted(self.calls_by_tool.items())),
        }
        if self.counters.denied_tool_cap:
            block["deniedToolCap"] = self.counters.denied_tool_cap
        return block

    async def handle(self, call: ToolCallRequest) -> str:
        """Run or replay one call; returns the tool message content the model sees."""
        recorded = self.run.journal.lookup(JournalKind.TOOL, self._key(call))
        if recorded is not None:
            return self._replay(call, recorded.data)
        tool_def = self.by_name.get(call.name)
        self.agent.emit_tool(
            ToolStart, tool_name=call.name, tool_call_id=call.id, risk=tool_def.risk if tool_def else None
        )
        started = time.perf_counter()
        signature = _signature(call)
        end: dict[str, Any] = {}
        guard: str | None = None
        result: Any = None
        if self.options.deny_repeated_calls and signature in self.signatures:
            outcome, guard = "denied", "repeated-signature"
            self.counters.denied_repeats += 1
            result = "denied: this exact call was already made"
        elif self._over_cap(call.name, tool_def):
            outcome, guard = "denied", "per-tool-cap"
            self.counters.denied_tool_cap += 1
            result = f"denied: the call cap of {call.name} is spent"
        elif tool_def is None:
            outcome = "error"
            end["error_code"] = "unknown_tool"
            result = f"error: no tool named {call.name}"
        else:
            outcome, result = await self._decide_and_run(tool_def, call, end)
        duration = round((time.perf_counter() - started) * 1000)
        self._count(call, outcome, guard, signature)
        content = self._record(call, outcome, result, guard)
        data = {**self.log[-1], "result": jsonable(result), "durationMs": duration, **end}
        self.run.journal.append(JournalKind.TOOL, self._key(call), data)
        self.agent.emit_tool(
            ToolEnd,
            tool_name=call.name,
            tool_call_id=call.id,
            outcome=outcome,
            duration_ms=duration,
            guard=guard,
            **end,
        )
        return content

    def _key(self, call: ToolCallRequest) -> str:
        return f"{self.agent.key}/tool/{call.id}"

    def _replay(self, call: ToolCallRequest, data: Mapping[str, Any]) -> str:
        outcome, guard = data["outcome"], data.get("guard")
        self.agent.emit_tool(ToolStart, replayed=True, tool_name=call.name, tool_call_id=call.id)
        self._count(call, outcome, guard, _signature(call))
        self.agent.emit_tool(
            ToolEnd,
            replayed=True,
            tool_name=call.name,
            tool_call_id=call.id,
            outcome=outcome,
            duration_ms=0,
            guard=guard,
        )
        return self._record(call, outcome, data.get("result"), guard)

    async def _decide_and_run(
        self, tool_def: Tool, call: ToolCallRequest, end: dict[str, Any]
    ) -> tuple[str, Any]:
        decision = self.agent.permissions.decide(tool_def, call.arguments)
        end.update(_audit(decision))
        allowed = decision.verdict == "allow"
        if decision.verdict == "ask":
            answer = await self._approval(call)
            if answer.timed_out:
                end["error_code"] = DeadlineExceededError.code
                return "error", "error: nobody approved this call before its deadline"
            allowed = bool(answer.value)
        if not allowed:
            return "denied", "denied by the permission chain"
        outcome, result, code = await self._execute(tool_def, call)
        if code is not None:
            end["error_code"] = code
        return outcome, result

    def _over_cap(self, name: str, tool_def: Tool | None) -> bool:
        cap = self.options.tool_caps.get(name)
        if cap is None and tool_def is not None:
            cap = tool_def.max_calls
        return cap is not None and self.calls_by_tool.get(name, 0) >= cap

    def _count(self, call: ToolCallRequest, outcome: str, guard: str | None, signature: str) -> None:
        if guard is not None or outcome == "denied":
            return
        if signature in self.signatures:
            self.counters.repeated_calls += 1
        self.signatures.add(signature)
        self.counters.tool_calls_used += 1
        self.calls_by_tool[call.name] = self.calls_by_tool.get(call.name, 0) + 1

    def _record(self, call: ToolCallRequest, outcome: str, result: Any, guard: str | None) -> str:
        entry: dict[str, Any] = {"toolCallId": call.id, "toolName": call.name, "outcome": outcome}
        if guard is not None:
            entry["guard"] = guard
        self.log.append(entry)
        return result if isinstance(result, str) else orjson.dumps(jsonable(result)).decode()

    async def _execute(self, tool_def: Tool, call: ToolCallRequest) -> tuple[str, Any, str | None]:
        try:
            with determinism.suppressed():
                return "ok", await tool_def.invoke(call.arguments), None
        except asyncio.CancelledError:
            self.agent.emit_tool(
                ToolEnd,
                tool_name=call.name,
                tool_call_id=call.id,
                outcome="error",
                duration_ms=0,
                verdict="allow",
                decided_by="default",
                error_code="cancelled",
            )
            raise
        except Exception as exc:  # noqa: BLE001 - a tool failure is the call's outcome, never the run's
            code = getattr(exc, "code", None)
            return (
                "error",
                f"error: {type(exc).__name__}",
                code if isinstance(code, str) else type(exc).__name__,
            )

    async def _approval(self, call: ToolCallRequest) -> Answer:
        """The approver's answer, or a timed-out answer when the approval deadline passed first."""
        suspensions = self.run.suspensions
        suspension = suspensions.open(
            SuspensionKind.APPROVAL,
            f"{self.agent.key}/approval/{call.id}",
            {"toolName": call.name, "toolCallId": call.id},
            new_deadline=lambda: suspensions.deadline_after(self.agent.approval_timeout_s),
            miss=f"a dry-run never writes the journal (approval_pending {self.agent.key}/approval/{call.id})",
        )
        if suspension.answer is not None:
            return suspension.answer

        def announce() -> None:
            self.agent.emit_tool(
                ApprovalPending,
                replayed=suspension.replayed,
                tool_name=call.name,
                entry_ref=suspension.entry.seq,
                deadline_at=suspension.deadline,
            )

        return await suspensions.wait(suspension, (call.id, f"approval:{call.id}"), announce)


def _audit(decision: Decision) -> dict[str, Any]:
    audit: dict[str, Any] = {"verdict": decision.verdict, "decided_by": decision.decided_by}
    if decision.rule is not None:
        audit["rule"] = decision.rule.to_json()
    return audit
