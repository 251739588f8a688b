"""One agent lifecycle: every fold pairs agent:start with agent:end by the span mapper's rules."""

from __future__ import annotations

from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.reducers import reduce_critical_path
from tests._support import ev


def test_a_duplicate_opener_changes_nothing_while_the_span_is_open() -> None:
    agents = AgentLifecycle()
    first = agents.start(ev("agent:start", 1, "a", "s0", role="loop", model="m1", agentType="t"))
    assert first is not None and first.model == "m1" and first.start_ns is not None
    assert agents.start(ev("agent:start", 5, "a", "s0", role="loop", model="m2")) is None
    assert agents.get("a") is first and len(agents) == 1


def test_an_end_returns_its_start_once_and_an_unpaired_end_returns_nothing() -> None:
    agents = AgentLifecycle()
    agents.start(ev("agent:start", 1, "a", "s0", role="loop"))
    assert agents.end(ev("agent:end", 3, "a", "s0", status="ok")) is not None
    assert agents.end(ev("agent:end", 4, "a", "s0", status="ok")) is None
    assert agents.end(ev("agent:end", 4, "never", "s0", status="ok")) is None
    assert len(agents) == 0


def test_a_span_reopened_after_its_end_starts_a_new_record() -> None:
    agents = AgentLifecycle()
    agents.start(ev("agent:start", 1, "a", "s0", role="loop"))
    agents.end(ev("agent:end", 2, "a", "s0", status="ok"))
    again = agents.start(ev("agent:start", 3, "a", "s0", role="loop"))
    assert again is not None and again.start_ns is not None


def test_the_critical_path_counts_a_worker_once_even_when_its_end_repeats() -> None:
    stream = [
        ev("run:start", 0, "s0", workflow="w"),
        ev("agent:start", 1, "w1", "s0", role="work"),
        ev("agent:end", 5, "w1", "s0", status="ok"),
        ev("agent:end", 6, "w1", "s0", status="ok"),
        ev("run:end", 10, "s0", status="ok"),
    ]
    path = reduce_critical_path(stream)
    assert path.worker_spans == 1
    assert path.post_fan_in_ms == 5.0
