"""An agent's conversation: its invocations (phases), the tool loop, compaction, finalize, extract,
and each model turn with its pre-wire limits (budget, quota, exposure) and transport retries.

A turn the journal holds is replayed from it (no provider call); a live turn is journaled with its
price once the provider answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import TypeAdapter, ValidationError

from rulvar_otel.core.events import (
    AgentError,
    AgentPhaseEnd,
    AgentPhaseStart,
    AgentSchemaRetry,
    AgentStream,
    BudgetExposureWait,
    QuotaDenied,
    Usage,
)
from rulvar_otel.engine import determinism
from rulvar_otel.engine.budget import BudgetAccount
from rulvar_otel.engine.cost import Slice
from rulvar_otel.engine.journal import JournalKind
from rulvar_otel.engine.model import ModelAdapter, ModelRequest, ModelTurn, add_usage, usage_dict
from rulvar_otel.engine.provider_metrics import NO_TIMER, RequestTimer
from rulvar_otel.engine.scope import AgentAbortError
from rulvar_otel.errors import (
    AdapterError,
    AgentFailedError,
    BudgetExhaustedError,
    QuotaExhaustedError,
    SchemaValidationError,
)

if TYPE_CHECKING:
    from rulvar_otel.engine.agent_state import AgentState
    from rulvar_otel.engine.tool_calls import ToolCallHandler

__all__ = ["Conversation", "Invocation", "QuotaDenials"]

_FINALIZE_PROMPT = "Write the final answer now."
_EXTRACT_PROMPT = "Return the answer as JSON matching the schema."
# A rough input-size estimate for the quota limiter: about four characters per token.
_CHARS_PER_TOKEN = 4


@dataclass
class Invocation:
    """One phase activation of the agent (a role on a model): one agent:phase start/end pair."""

    role: str
    model: str
    number: int
    started: float
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    unpriced: bool = False
    retries: int = 0


@dataclass
class QuotaDenials:
    """The quota limiter's denials of this agent's requests, for ``agent:end``."""

    total: int = 0
    requests: int = 0
    tokens: int = 0
    recovered: int = 0

    def to_wire(self) -> dict[str, int] | None:
        if not self.total:
            return None
        return {
            "total": self.total,
            "requests": self.requests,
            "tokens": self.tokens,
            "recovered": self.recovered,
        }


class Conversation:
    """The messages, invocations, usage and cost of one live agent."""

    def __init__(self, agent: AgentState, tool_calls: ToolCallHandler) -> None:
        self.agent = agent
        self.tool_calls = tool_calls
        self.run = agent.run
        self.options = agent.options
        self.messages: list[dict[str, Any]] = []
        self.invocations = 0
        self.turns = 0
        self.open: list[Invocation] = []
        self.slices: list[Slice] = []
        self.usage = Usage()
        self.cost = 0.0
        self.wire_requests = 0
        self.retry_count = 0
        self.denials = QuotaDenials()

    # --- invocations ---------------------------------------------------------------------------

    def start_invocation(self, role: str, model: str) -> Invocation:
        self.invocations += 1
        invocation = Invocation(role, model, self.invocations, time.perf_counter())
        self.open.append(invocation)
        self.agent.emit(AgentPhaseStart, role=role, model=model, invocation=invocation.number)
        return invocation

    def end_invocation(self, invocation: Invocation, outcome: str) -> None:
        if invocation in self.open:
            self.open.remove(invocation)
        cost = None if invocation.unpriced else invocation.cost
        self.slices.append(
            Slice(invocation.role, invocation.model, invocation.number, invocation.usage, cost)
        )
        self.agent.emit(
            AgentPhaseEnd,
            role=invocation.role,
            model=invocation.model,
            invocation=invocation.number,
            duration_ms=round((time.perf_counter() - invocation.started) * 1000),
            usage=usage_dict(invocation.usage),
            cost_usd=invocation.cost,
            cost_basis="per-call",
            outcome=outcome,
            retries=invocation.retries or None,
        )

    def close_open_invocations(self) -> None:
        for invocation in reversed(self.open):
            self.end_invocation(invocation, "error")
        self.open.clear()

    # --- the conversation ----------------------------------------------------------------------

    async def run_to_answer(self, prompt: str) -> Any:
        """The tool loop, then finalize and extract when asked; returns the text or schema value."""
        options = self.options
        models = self.agent.models
        if options.system:
            self.messages.append({"role": "system", "content": options.system})
        self.messages.append({"role": "user", "content": prompt})
        loop = self.start_invocation(options.role, models.loop)
        text: str | None = None
        answered = False
        for _ in range(options.max_turns):
            turn = await self.call(loop, models.loop, tools=True)
            if not turn.tool_calls:
                text = turn.text or ""
                self.messages.append({"role": "assistant", "content": text})
                answered = True
                break
            self.messages.append(_assistant_with_tool_calls(turn))
            for call in turn.tool_calls:
                content = await self.tool_calls.handle(call)
                self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            if options.compact_at_tokens is not None and turn.usage.input_tokens >= options.compact_at_tokens:
                await self._summarize()
        if not answered and not options.finalize:
            raise AgentAbortError(
                AgentFailedError(f"no final answer within {options.max_turns} turns", code="max_turns")
            )
        self.end_invocation(loop, "ok")
        if options.finalize:
            final = self.start_invocation("finalize", models.finalize)
            self.messages.append({"role": "user", "content": _FINALIZE_PROMPT})
            turn = await self.call(final, models.finalize, tools=False)
            text = turn.text or ""
            self.messages.append({"role": "assistant", "content": text})
            self.end_invocation(final, "ok")
        if options.schema is None:
            return text
        return await self._extract()

    async def _summarize(self) -> None:
        model = self.agent.models.summarize
        invocation = self.start_invocation("summarize", model)
        turn = await self.call(invocation, model, tools=False)
        self.end_invocation(invocation, "ok")
        # Compaction: the conversation restarts from the task and the summary.
        head = [m for m in self.messages[:2] if m["role"] in ("system", "user")]
        self.messages = [*head, {"role": "assistant", "content": turn.text or ""}]

    async def _extract(self) -> Any:
        options = self.options
        model = self.agent.models.extract
        validator = TypeAdapter(options.schema)
        schema_json = validator.json_schema()
        invocation = self.start_invocation("extract", model)
        self.messages.append({"role": "user", "content": _EXTRACT_PROMPT})
        for attempt in range(1, options.schema_attempts + 1):
            turn = await self.call(invocation, model, tools=False, schema=schema_json)
            try:
                value = validator.validate_json(turn.text or "")
            except ValidationError as exc:
                if attempt < options.schema_attempts:
                    self.run.emit(
                        AgentSchemaRetry,
                        self.agent.span,
                        self.agent.scope.span_id,
                        agent_type=options.agent_type,
                        attempt=attempt,
                        max_attempts=options.schema_attempts,
                    )
                    retry = f"The JSON was invalid ({exc.error_count()} errors). Retry."
                    self.messages.append({"role": "user", "content": retry})
                    continue
                raise AgentAbortError(
                    SchemaValidationError(f"structured output invalid after {attempt} attempt(s)")
                ) from exc
            self.end_invocation(invocation, "ok")
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    # --- one model turn ------------------------------------------------------------------------

    async def call(
        self, invocation: Invocation, model_ref: str, *, tools: bool, schema: Mapping[str, Any] | None = None
    ) -> ModelTurn:
        """One model turn: replayed from the journal, or sent (with limits and retries) and journaled."""
        run = self.run
        key = f"{self.agent.key}/turn{self.turns}"
        self.turns += 1
        recorded = run.journal.lookup(JournalKind.TURN, key)
        if recorded is not None:
            turn = ModelTurn.from_json(recorded.data["turn"])
            cost = recorded.data.get("costUsd")
            self.wire_requests += int(recorded.data.get("wireRequests") or 1)
            self._account(invocation, turn.usage, float(cost) if isinstance(cost, int | float) else None)
            return turn
        run.journal.ensure_writable()  # never pay for a turn nothing could record
        _, adapter, model_name = run.engine.resolve_model(model_ref)
        request = ModelRequest(
            model=model_name,
            role=invocation.role,
            messages=[dict(m) for m in self.messages],
            tools=[t.spec() for t in self.options.tools] if tools else (),
            response_schema=schema,
            agent_type=self.options.agent_type,
            label=self.options.label,
            turn=self.turns - 1,
            on_delta=self._stream_delta if self.options.stream else None,
        )
        turn, wires = await self._send(invocation, model_ref, adapter, request)
        cost = run.engine.pricing.usd(model_ref, turn.usage)
        data = {
            "turn": turn.to_json(),
            "role": invocation.role,
            "model": model_ref,
            "costUsd": cost,
            "wireRequests": wires,
        }
        run.journal.append(JournalKind.TURN, key, data)
        self._account(invocation, turn.usage, cost)
        return turn

    async def _send(
        self, invocation: Invocation, model_ref: str, adapter: ModelAdapter, request: ModelRequest
    ) -> tuple[ModelTurn, int]:
        """Send one request through the pre-wire limits, retrying retryable wire errors.

        Returns the turn and how many provider requests it took; a refusal or a final failure
        raises AgentAbortError after announcing it (``agent:error``).
        """
        run = self.run
        failures = 0
        wires = 0
        while True:
            try:
                run.budget.check_call()
            except BudgetExhaustedError as exc:
                raise AgentAbortError(exc) from exc
            await self._quota(model_ref)
            estimate = self.agent.reserve_usd
            await self._exposure(model_ref, estimate)
            wires += 1
            self.wire_requests += 1
            request_timer = self._request_timer(model_ref)
            try:
                with determinism.suppressed():
                    turn = await adapter.turn(request)
            except AdapterError as exc:
                request_timer.failed(exc.code)
                failures += 1
                will_retry = exc.retryable and failures <= run.engine.retry.max_retries
                self.agent.emit(AgentError, error=exc.to_wire(), will_retry=will_retry)
                if not will_retry:
                    raise AgentAbortError(exc) from exc
                invocation.retries += 1
                self.retry_count += 1
                if run.engine.retry.backoff_ms:
                    await run.engine.sleep(run.engine.retry.backoff_ms * failures / 1000)
                continue
            except asyncio.CancelledError:
                request_timer.failed("cancelled")
                raise
            except Exception as exc:
                request_timer.failed(type(exc).__name__)
                wrapped = AdapterError(
                    f"adapter {adapter.adapter_id!r} raised {type(exc).__name__}", code="adapter"
                )
                self.agent.emit(AgentError, error=wrapped.to_wire(), will_retry=False)
                raise AgentAbortError(wrapped) from exc
            finally:
                if run.exposure is not None:
                    run.exposure.release(estimate)
            request_timer.answered(turn.usage)
            return turn, wires

    def _request_timer(self, model_ref: str) -> RequestTimer:
        metrics = self.run.engine.provider_metrics
        return metrics.timer(model_ref) if metrics is not None else NO_TIMER

    def _stream_delta(self, text: str) -> None:
        # Live telemetry only: a delta is never journaled, so a replayed turn streams nothing.
        if isinstance(text, str) and text and not self.run.bus.closed:
            self.run.emit(AgentStream, self.agent.span, self.agent.scope.span_id, delta=text)

    def _account(self, invocation: Invocation, usage: Usage, cost: float | None) -> None:
        invocation.usage = add_usage(invocation.usage, usage)
        self.usage = add_usage(self.usage, usage)
        if cost is None:
            invocation.unpriced = True
        else:
            invocation.cost += cost
            self.cost += cost
        self.run.budget.charge(cost)

    async def _quota(self, model_ref: str) -> None:
        limiter = self.run.engine.quota
        if limiter is None:
            return
        denied = 0
        while True:
            size = sum(len(str(m.get("content") or "")) for m in self.messages) // _CHARS_PER_TOKEN
            decision = limiter.acquire(model_ref, size)
            if decision.allowed:
                if denied:
                    self.denials.recovered += 1
                return
            denied += 1
            self.denials.total += 1
            reason = decision.reason or ""
            if "request" in reason.lower():
                self.denials.requests += 1
            else:
                self.denials.tokens += 1
            if denied > self.run.engine.max_denials:
                exc = QuotaExhaustedError(
                    f"quota denied {denied} times for {model_ref}: {reason}",
                    data={"model": model_ref, "denials": denied},
                )
                self.agent.emit(AgentError, error=exc.to_wire(), will_retry=False)
                raise AgentAbortError(exc)
            self.agent.emit(
                QuotaDenied,
                model=model_ref,
                reason=decision.reason,
                retry_after_ms=decision.retry_after_ms,
                will_retry=True,
            )
            await self.run.engine.sleep((decision.retry_after_ms or 0.0) / 1000)

    async def _exposure(self, model_ref: str, estimate: float) -> None:
        gate = self.run.exposure
        if gate is None:
            return
        while not gate.fits(estimate):
            will_wait = gate.holds > 0
            self.agent.emit(
                BudgetExposureWait,
                model=model_ref,
                scope="child" if self.agent.scope.in_child_workflow else "root",
                cap_usd=gate.cap_usd,
                spent_usd=self.run.budget.spent_usd,
                in_flight_usd=gate.in_flight_usd,
                estimate_usd=estimate,
                will_wait=will_wait,
            )
            if not will_wait:
                raise AgentAbortError(BudgetAccount.exposure_drained(gate, estimate))
            await gate.wait_release()
        gate.hold(estimate)


def _assistant_with_tool_calls(turn: ModelTurn) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": turn.text,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": orjson.dumps(dict(c.arguments)).decode()},
            }
            for c in turn.tool_calls
        ],
    }
