"""The mapper's memory stays bounded by open spans without changing what a long stream exports."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.otel import create_mapper
from rulvar_otel.otel import semconv as sc
from rulvar_otel.testing import SpanCapture
from tests._support import ev, export, t

OK = RunOutcome(status="ok")
TOOLS = 700  # enough ended tool spans to prune the open stack more than once


def _long_run() -> list[dict[str, Any]]:
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("phase:start", 1, "p", "s0", phase="work"),
        ev("agent:start", 2, "a", "p", agentType="w", model="m:x", role="loop"),
        ev("agent:phase:start", 3, "a", "p", agentType="w", model="m:x", role="loop", invocation=1),
    ]
    seq = 4
    for index in range(TOOLS):
        events.append(ev("tool:start", seq, "a", "p", toolName="t", toolCallId=f"c{index}"))
        events.append(ev("tool:end", seq + 1, "a", "p", toolName="t", toolCallId=f"c{index}", outcome="ok"))
        seq += 2
    events += [
        ev("agent:phase:end", seq, "a", "p", invocation=1, outcome="ok"),
        # A duplicate opener and a closer of the closed invocation: span events, no second span.
        ev("agent:phase:start", seq + 1, "a", "p", role="loop", invocation=1, replayed=True),
        ev("agent:phase:end", seq + 2, "a", "p", invocation=1, outcome="ok"),
        # Payload-only event naming no open span: lands on the innermost open span (the agent).
        ev("budget:update", seq + 3, "nope", spentUsd=1),
        ev("agent:end", seq + 4, "a", agentType="w", status="ok"),
        # A late child of the ended agent: parented to it, in the one trace.
        ev("agent:start", seq + 5, "b", "a", agentType="w", model="m:x", role="late"),
        ev("agent:end", seq + 6, "b", agentType="w", status="ok"),
        ev("run:end", seq + 7, "s0", status="ok", totalUsd=0),
    ]
    return events


def test_a_long_stream_exports_the_same_shape_with_pruned_state() -> None:
    events = _long_run()
    result = export(events, OK)
    last = events[-1]["seq"]
    assert result.returned == 1 + 1 + 2 + 1 + TOOLS
    assert len(result.named("tool t")) == TOOLS
    (invocation,) = result.named("invocation loop")
    assert [e.name for e in invocation.events] == []
    agent = result.named("agent w loop")[0]
    assert [e.name for e in agent.events] == ["agent:phase:start", "agent:phase:end", "budget:update"]
    assert agent.events[0].attributes[sc.REPLAYED] is True  # type: ignore[index]
    late = result.named("agent w late")[0]
    assert late.parent is not None and late.parent.span_id == agent.context.span_id
    assert late.parent.trace_id == agent.context.trace_id
    assert sc.PARENT_INFERRED not in (late.attributes or {})
    assert len({s.context.trace_id for s in result.spans}) == 1
    phase = result.named("phase work")[0]
    assert phase.end_time == t(last - 1)  # its latest descendant: the late agent's end


def test_ended_records_are_released() -> None:
    memory = InMemorySpanExporter()
    sdk = SpanCapture().provider
    sdk.add_span_processor(SimpleSpanProcessor(memory))
    for tracer in (sdk.get_tracer("t"), NoOpTracer()):
        mapper = create_mapper(tracer)
        for event in _long_run()[:-4]:  # the agent still open, every tool ended
            mapper.feed(event)
        assert len(mapper._open) < 300  # pruned, not one entry per tool ever started
        assert all(rec.ended for rec in mapper._invocations.values())
        assert all(rec.span is None for rec in mapper._invocations.values())
        mapper.finish(OK)
