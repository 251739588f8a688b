"""What one agent dispatch shares with its conversation and tool calls: :class:`AgentState`.

The resolved model refs, options, permissions, reserve, journal key and span of one ``ctx.agent``
call, and its event helpers. The conversation (:mod:`~rulvar_otel.engine.turns`) and the tool calls
(:mod:`~rulvar_otel.engine.tool_calls`) work on this state; the dispatch
(:mod:`~rulvar_otel.engine.agent`) builds on it, so neither imports the dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rulvar_otel.core.events import EventModel
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.engine.scope import Scope
from rulvar_otel.engine.segment import SegmentState

__all__ = ["AgentState", "ModelRefs"]


@dataclass(frozen=True)
class ModelRefs:
    """The resolved ``adapter:model`` ref of each role an agent may run."""

    loop: str
    summarize: str
    finalize: str
    extract: str


class AgentState:
    """One ``ctx.agent`` call's resolved settings, key and span."""

    def __init__(self, run: SegmentState, scope: Scope, prompt: str, options: AgentOptions) -> None:
        engine = run.engine
        loop_ref = engine.resolve_model(options.model)[0]
        for name in (options.summarize_model, options.finalize_model, options.extract_model):
            if name is not None:
                engine.resolve_model(name)
        self.models = ModelRefs(
            loop=loop_ref,
            summarize=engine.resolve_model(options.summarize_model or loop_ref)[0],
            finalize=engine.resolve_model(options.finalize_model or loop_ref)[0],
            extract=engine.resolve_model(options.extract_model or loop_ref)[0],
        )
        self.run = run
        self.scope = scope
        self.prompt = prompt
        self.options = options
        self.permissions = engine.permissions.merged(options.permissions)
        self.approval_timeout_s = (
            engine.approval_timeout_s if options.approval_timeout_s is None else options.approval_timeout_s
        )
        self.reserve_usd = engine.default_reserve_usd if options.reserve_usd is None else options.reserve_usd
        self.key, _ = scope.next_key("agent")
        self.span = ""

    def emit(self, cls: type[EventModel], *, replayed: bool = False, **body: Any) -> None:
        """An agent-level event: on the agent's span, with its type and label."""
        self.run.emit(
            cls,
            self.span,
            self.scope.span_id,
            replayed=replayed,
            agent_type=self.options.agent_type,
            label=self.options.label,
            **body,
        )

    def emit_tool(self, cls: type[EventModel], *, replayed: bool = False, **body: Any) -> None:
        self.run.emit(cls, self.span, self.scope.span_id, replayed=replayed, **body)
