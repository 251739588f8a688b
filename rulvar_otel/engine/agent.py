"""One agent dispatch: admission, exactly one ``agent:start``/``agent:end`` pair, and its terminal.

A dispatch whose terminal the journal holds is replayed from it (events re-emitted with
``replayed``, the journaled value returned or the journaled error raised). A live dispatch is
admitted against the budget (reserve flat, or priced by a countTokens probe), waits for a
concurrency slot, runs its conversation (:mod:`~rulvar_otel.engine.turns`) and journals its
terminal, whatever way it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pydantic import TypeAdapter

from rulvar_otel.core.events import (
    AgentEnd,
    AgentPhaseEnd,
    AgentPhaseStart,
    AgentQueued,
    AgentStart,
    ControlWire,
    ToolEnd,
    ToolStart,
    Usage,
)
from rulvar_otel.engine import determinism
from rulvar_otel.engine.agent_state import AgentState, ModelRefs
from rulvar_otel.engine.cost import UNJOURNALED_ORDER, AgentRecord, Slice
from rulvar_otel.engine.journal import JournalEntry, JournalKind
from rulvar_otel.engine.limits import ConcurrencyGate
from rulvar_otel.engine.model import ModelRequest, TokenCounter, usage_dict, wire_error
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.engine.scope import AgentAbortError, ReplayedCancellation, RunSuspended, Scope
from rulvar_otel.engine.segment import SegmentState
from rulvar_otel.engine.status import RunStatus, Site, status_for
from rulvar_otel.engine.tool_calls import ToolCallHandler
from rulvar_otel.engine.turns import Conversation
from rulvar_otel.engine.values import describe_failure, jsonable
from rulvar_otel.errors import (
    AgentFailedError,
    BudgetExhaustedError,
    ConfigError,
    ExposureDrainedError,
    JournalError,
    ReplayMissError,
    WorkflowError,
)

__all__ = ["NO_ENTRY_REF", "AgentDispatch", "ModelRefs", "dispatch_agent"]

# agent:end's entryRef when the terminal could not be journaled (the journal refused the write).
NO_ENTRY_REF = -1

# A journaled agent error is raised again on replay as the error the live run raised.
_REPLAYED_ERRORS: dict[str, type[WorkflowError]] = {
    ExposureDrainedError.code: ExposureDrainedError,
    BudgetExhaustedError.code: BudgetExhaustedError,
}


class AgentDispatch(AgentState):
    """One ``ctx.agent`` call."""

    def __init__(self, run: SegmentState, scope: Scope, prompt: str, options: AgentOptions) -> None:
        super().__init__(run, scope, prompt, options)
        self.tool_calls = ToolCallHandler(self)
        self.conversation = Conversation(self, self.tool_calls)

    # --- dispatch ------------------------------------------------------------------------------

    async def dispatch(self) -> Any:
        run = self.run
        terminal = run.journal.lookup(JournalKind.AGENT, self.key)
        if terminal is not None and (terminal.data.get("status") != RunStatus.CANCELLED or run.dry_run):
            return self._replay(terminal)
        if run.dry_run:
            raise ReplayMissError(
                f"dry-run: agent {self.options.label or self.options.agent_type!r} is not journaled"
            )
        run.journal.ensure_writable()
        reserve = await self._probe_reserve()
        self.reserve_usd = reserve
        run.budget.admit(reserve)
        run.agents_spawned += 1
        self.span = run.mint_span()
        gate = run.engine.concurrency
        held, cut_in_queue = await self._take_slot(gate)
        self.emit(AgentStart, model=self.models.loop, role=self.options.role)
        try:
            status, value, error, failure = await self._converse(cut_in_queue)
        finally:
            if held and gate is not None:
                gate.release()
        conversation = self.conversation
        # Usage is approximate only when a wire call was cut; a pre-wire refusal billed nothing.
        approx = (
            failure is not None
            and cut_in_queue is None
            and (status == RunStatus.CANCELLED or conversation.wire_requests > 0)
        )
        conversation.close_open_invocations()
        run.budget.release(reserve)
        self._end(status, value, error, approx)
        if failure is not None:
            raise failure
        return value

    async def _take_slot(self, gate: ConcurrencyGate | None) -> tuple[bool, asyncio.CancelledError | None]:
        """Take a live-dispatch slot (announcing ``agent:queued`` when it must wait).

        A cancellation while queued is returned, not raised: the dispatch still gets its one
        start/end pair and settles cancelled before any work.
        """
        if gate is None:
            return False, None
        if gate.try_acquire():
            return True, None
        self.emit(AgentQueued)
        try:
            await gate.wait()
        except asyncio.CancelledError as exc:
            return False, exc
        return True, None

    async def _converse(
        self, cut_in_queue: asyncio.CancelledError | None
    ) -> tuple[RunStatus, Any, dict[str, Any] | None, BaseException | None]:
        """Run the conversation; returns (status, value, wire error, the failure to raise)."""
        try:
            if cut_in_queue is not None:
                raise cut_in_queue
            return RunStatus.OK, await self.conversation.run_to_answer(self.prompt), None, None
        except (asyncio.CancelledError, RunSuspended) as exc:
            return status_for(exc, Site.AGENT), None, None, exc
        except Exception as exc:  # noqa: BLE001 - an unexpected failure still settles the agent
            failure = exc.cause if isinstance(exc, AgentAbortError) else exc
            return status_for(failure, Site.AGENT), None, _agent_error(failure), failure

    def _end(self, status: RunStatus, value: Any, error: dict[str, Any] | None, approx: bool) -> None:
        """Journal the terminal, book the cost record, emit ``agent:end``."""
        conversation = self.conversation
        entry_ref = self._journal_terminal(status, value, error, approx)
        self.run.records.append(
            AgentRecord(
                self.options.agent_type,
                self.scope.phase,
                self.scope.path,
                list(conversation.slices),
                approx,
                conversation.wire_requests,
                entry_ref if entry_ref is not None else UNJOURNALED_ORDER,
            )
        )
        self.emit(
            AgentEnd,
            status=status.value,
            usage=usage_dict(conversation.usage),
            cost_usd=conversation.cost,
            cost_basis="per-call",
            entry_ref=entry_ref if entry_ref is not None else NO_ENTRY_REF,
            error=error,
            exploration=self.tool_calls.exploration(),
            retry_count=conversation.retry_count or None,
            usage_approx=True if approx else None,
            quota_denials=conversation.denials.to_wire(),
        )

    def _journal_terminal(
        self, status: RunStatus, value: Any, error: dict[str, Any] | None, approx: bool
    ) -> int | None:
        """Journal the agent's terminal; None when the journal refused (the run settles on that)."""
        conversation = self.conversation
        data: dict[str, Any] = {
            "agentType": self.options.agent_type,
            "label": self.options.label,
            "model": self.models.loop,
            "role": self.options.role,
            "status": status.value,
            "value": jsonable(value),
            "usage": usage_dict(conversation.usage),
            "costUsd": conversation.cost,
            "slices": [s.to_json() for s in conversation.slices],
            "tools": self.tool_calls.log,
            "wireRequests": conversation.wire_requests,
            "phase": self.scope.phase,
            "scope": self.scope.path,
        }
        if error is not None:
            data["error"] = error
        if approx:
            data["usageApprox"] = True
        with contextlib.suppress(JournalError):
            return self.run.journal.append(JournalKind.AGENT, self.key, data).seq
        return None

    def _control_wire(self, **body: Any) -> None:
        # On the spawning scope's span: the agent's own span does not exist before admission.
        self.run.emit(
            ControlWire,
            self.scope.span_id,
            self.scope.parent_span_id,
            control_kind="countTokens",
            model=self.models.loop,
            **body,
        )

    async def _probe_reserve(self) -> float:
        """The admission reserve: flat, or priced from a countTokens probe when the policy allows.

        The probe is control egress (``control:wire``), live only and never journaled: a replay
        admits nothing, so it never probes.
        """
        options = self.options
        engine = self.run.engine
        policy = engine.count_tokens
        _, adapter, model_name = engine.resolve_model(self.models.loop)
        if policy == "off" or options.reserve_usd is not None or not isinstance(adapter, TokenCounter):
            return self.reserve_usd
        allowed = policy(self.models.loop) if callable(policy) else True
        if not allowed:
            self._control_wire(outcome="denied")
            return self.reserve_usd
        messages = [{"role": "system", "content": options.system}] if options.system else []
        messages.append({"role": "user", "content": self.prompt})
        request = ModelRequest(
            model=model_name,
            role=options.role,
            messages=messages,
            tools=[t.spec() for t in options.tools],
            agent_type=options.agent_type,
            label=options.label,
        )
        try:
            with determinism.suppressed():
                counted = int(await adapter.count_tokens(request))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a refused probe admits on the flat reserve instead
            self._control_wire(outcome="failed")
            return self.reserve_usd
        self._control_wire(outcome="ok", input_tokens=counted)
        priced = engine.pricing.usd(
            self.models.loop, Usage(input_tokens=counted, output_tokens=engine.probe_output_tokens)
        )
        return self.reserve_usd if priced is None else priced

    # --- replay --------------------------------------------------------------------------------

    def _replay(self, terminal: JournalEntry) -> Any:
        run = self.run
        data = terminal.data
        self.span = run.mint_span()
        run.agents_spawned += 1
        self.emit(AgentStart, replayed=True, model=str(data.get("model")), role=str(data.get("role", "loop")))
        for call in data.get("tools") or []:
            ids = {"tool_name": call["toolName"], "tool_call_id": call["toolCallId"]}
            self.emit_tool(ToolStart, replayed=True, **ids)
            self.emit_tool(
                ToolEnd, replayed=True, **ids, outcome=call["outcome"], duration_ms=0, guard=call.get("guard")
            )
        status = str(data.get("status"))
        slices = [Slice.from_json(s) for s in data.get("slices") or []]
        for part in slices:
            common = {"role": part.role, "model": part.model, "invocation": part.invocation}
            self.emit(AgentPhaseStart, replayed=True, **common)
            self.emit(
                AgentPhaseEnd,
                replayed=True,
                **common,
                duration_ms=0,
                usage=usage_dict(part.usage),
                cost_usd=part.cost_usd or 0.0,
                cost_basis="per-call",
                outcome="error" if status != RunStatus.OK and part is slices[-1] else "ok",
            )
        cost = float(data.get("costUsd") or 0.0)
        run.budget.rebook(cost)
        approx = bool(data.get("usageApprox"))
        run.records.append(
            AgentRecord(
                str(data.get("agentType") or ""),
                data.get("phase"),
                str(data.get("scope") or ""),
                slices,
                approx,
                int(data.get("wireRequests") or 0),
                terminal.seq,
            )
        )
        self.emit(
            AgentEnd,
            replayed=True,
            status=status,
            usage=data.get("usage") or {},
            cost_usd=cost,
            cost_basis="per-call",
            entry_ref=terminal.seq,
            error=data.get("error"),
            usage_approx=True if approx else None,
        )
        if status == RunStatus.OK:
            value = data.get("value")
            if self.options.schema is not None and value is not None:
                return TypeAdapter(self.options.schema).validate_python(value)
            return value
        if status == RunStatus.CANCELLED:
            raise ReplayedCancellation
        wire = data.get("error") or wire_error("agent", "the journaled agent failed")
        raise _REPLAYED_ERRORS.get(str(wire.get("code")), AgentFailedError).from_wire(wire)


def _agent_error(failure: Exception) -> dict[str, Any]:
    """The wire error of an agent that ``failure`` ended."""
    if isinstance(failure, WorkflowError):
        return failure.to_wire()
    if isinstance(failure, ConfigError):
        return wire_error("config", str(failure))
    return wire_error("error", describe_failure(failure))


async def dispatch_agent(run: SegmentState, scope: Scope, prompt: str, options: AgentOptions) -> Any:
    """One ``ctx.agent`` call: the dispatcher a run hands its ``ctx``."""
    return await AgentDispatch(run, scope, prompt, options).dispatch()
