"""The mapper's memory stays bounded by open spans without changing what a long stream exports."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
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
        assert not mapper._invocations.open  # closed invocations keep only their keys
        mapper.finish(OK)


def _agents(first: int, count: int) -> list[dict[str, Any]]:
    """``count`` agents under phase ``p``, one after another, each with an invocation and a tool."""
    out: list[dict[str, Any]] = []
    for index in range(first, first + count):
        seq = 10 + 8 * index
        agent = f"a{index}"
        out += [
            ev("agent:start", seq, agent, "p", agentType="w", model="m:x", role="loop"),
            ev("agent:phase:start", seq + 1, agent, "p", role="loop", invocation=1),
            ev("tool:start", seq + 2, agent, "p", toolName="t", toolCallId=f"c{index}"),
            ev("tool:end", seq + 3, agent, "p", toolName="t", toolCallId=f"c{index}", outcome="ok"),
            ev("agent:phase:end", seq + 4, agent, "p", invocation=1, outcome="ok"),
            ev("agent:end", seq + 5, agent, agentType="w", status="ok"),
        ]
    return out


def _tracked_after(mapper: Any, events: list[dict[str, Any]]) -> int:
    for event in events:
        mapper.feed(event)
    gc.collect()
    return len(gc.get_objects())


@pytest.mark.parametrize("path", ["sdk", "noop"])
def test_ended_spans_leave_nothing_for_the_garbage_collector_to_walk(path: str) -> None:
    """A full collection walks every tracked object: state kept per ended span must not be one, or
    a long stream's collections grow with its length (each costs more, at the same rate)."""
    sdk = TracerProvider()  # no processor: an ended SDK span is dropped, not kept for a test
    mapper = create_mapper(sdk.get_tracer("t") if path == "sdk" else NoOpTracer())
    opening = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("phase:start", 1, "p", "s0", phase="w"),
    ]
    before = _tracked_after(mapper, opening + _agents(0, 100))  # caches settle first
    after = _tracked_after(mapper, _agents(100, 2_000))
    # 2,000 more agents, invocations and tools ended: one record kept per agent would be 2,000
    # objects; what stays is bounded (the open stack keeps up to 256 ended spans between prunes).
    assert after - before < 1_000
    mapper.finish(OK)


def test_a_late_child_of_a_deep_chain_of_ended_spans_finds_its_parent() -> None:
    """An ended span is rebuilt with its ended ancestors without recursion, however deep."""
    depth = 3_000
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("phase:start", 1, "p", "s0", phase="w"),
    ]
    parent = "p"
    for index in range(depth):
        events.append(ev("child:start", 2 + index, f"c{index}", parent, workflow="sub"))
        parent = f"c{index}"
    for index in reversed(range(depth)):
        events.append(ev("child:end", 2 * depth + 2 - index, f"c{index}", status="ok"))
    last = 2 * depth + 10
    events += [
        # Late, under the deepest ended child: parented to it, though every ancestor up to the
        # phase has ended and is kept only by key.
        ev("agent:start", last, "late", f"c{depth - 1}", agentType="w", model="m:x", role="late"),
        ev("agent:end", last + 1, "late", agentType="w", status="ok"),
        ev("run:end", last + 2, "s0", status="ok", totalUsd=0),
    ]
    result = export(events, OK)
    (late,) = result.named("agent w late")
    (deepest,) = [s for s in result.named("workflow sub") if s.end_time == t(depth + 3)]
    assert late.parent is not None and late.parent.span_id == deepest.context.span_id
    assert sc.PARENT_INFERRED not in (late.attributes or {})
    # The late agent still ends the phase: its end reached the open phase through the chain.
    (phase,) = result.named("phase w")
    assert phase.end_time == t(last + 1)


@pytest.mark.parametrize(
    ("repeat", "repeats"),
    [(1, True), (1.0, True), (True, True), ("1", False), (1.5, False), (2, False)],
)
def test_a_closed_invocation_is_repeated_by_an_equal_key_only(repeat: object, repeats: bool) -> None:
    """Closed invocations keep their key in a compact form: equal keys (1, 1.0, True) still match."""
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("agent:start", 1, "a", "s0", agentType="w", model="m:x", role="loop"),
        ev("agent:phase:start", 2, "a", "s0", role="loop", invocation=1),
        ev("agent:phase:end", 3, "a", "s0", invocation=1, outcome="ok"),
        ev("agent:phase:start", 4, "a", "s0", role="loop", invocation=repeat),
        ev("agent:phase:end", 5, "a", "s0", invocation=repeat, outcome="ok"),
        ev("agent:end", 6, "a", agentType="w", status="ok"),
        ev("run:end", 7, "s0", status="ok", totalUsd=0),
    ]
    result = export(events, OK)
    invocations = result.named("invocation loop")
    assert len(invocations) == (1 if repeats else 2)
    agent_events = [e.name for e in result.named("agent w loop")[0].events]
    assert agent_events == (["agent:phase:start", "agent:phase:end"] if repeats else [])
