"""``--progress auto`` off a terminal writes milestones; ``--progress lines`` writes every fact."""

from __future__ import annotations

import io
from typing import Any

import pytest

from rulvar_otel.cli._progress import open_progress, summary_lines
from rulvar_otel.core.masking import MASKED_SECRET
from rulvar_otel.core.progress import ProgressLines, ProgressState
from tests._support import events, outcome, stream_names


class _StepClock:
    """A clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _lines(mode: str, stream: list[dict[str, Any]], clock: _StepClock | None = None) -> list[str]:
    out = io.StringIO()
    view = open_progress(mode, stream=out, clock=clock or _StepClock(0.0))
    for event in stream:
        view.feed(event)
    view.close(None)
    return out.getvalue().splitlines()


@pytest.fixture(autouse=True)
def _not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


def test_auto_off_a_terminal_prints_milestones_not_one_line_per_event() -> None:
    stream = events("large")
    agents = sum(1 for e in stream if e["type"] == "agent:start")
    phases = sum(1 for e in stream if e["type"] == "phase:start")
    runs = sum(1 for e in stream if e["type"] in ("run:start", "run:end"))
    auto = _lines("auto", stream)
    per_event = _lines("lines", stream)
    assert agents >= 1000
    assert not any(line.startswith(("agent ", "tool ")) for line in auto)
    # The run's starts and ends, its phases and the closing summary (3 or 4 lines): nothing else.
    assert runs + phases + 3 <= len(auto) <= runs + phases + 4
    assert auto[0].startswith("run ") and auto[0].endswith(" started")
    assert sum(1 for line in per_event if line.startswith("agent ") and " started" in line) == agents
    assert len(per_event) > 5 * len(auto)


def test_a_counts_line_comes_every_interval_of_the_injected_clock() -> None:
    stream = events("large")
    # Each feed reads the clock once or twice; at 1 s a read, a 5 s interval gives a line every
    # few events: far more than the milestones alone, far fewer than the events.
    lines = _lines("auto", stream, _StepClock(1.0))
    counts = [line for line in lines if line.startswith("… ")]
    assert len(stream) / 6 <= len(counts) <= len(stream) / 2
    last = counts[-1]
    assert " events  " in last and " spans" in last and "agents " in last and " ok" in last
    assert "spent $" in last
    assert not _counts(_lines("auto", stream, _StepClock(0.0)))


def _counts(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("… ")]


def test_counts_line_counts_events_spans_and_agents_by_status() -> None:
    stream = events("tools")
    clock = _StepClock(0.0)
    out = io.StringIO()
    view = open_progress("auto", stream=out, clock=clock)
    for event in stream:
        view.feed(event)
    clock.step = 10.0  # the next feed is past the interval
    view.feed({"type": "log", "level": "info", "message": "m"})
    counts = _counts(out.getvalue().splitlines())
    assert len(counts) == 1
    spans = {e["spanId"] for e in stream if isinstance(e.get("spanId"), str)}
    assert counts[0].startswith(f"… {len(stream) + 1:,} events  {len(spans):,} spans  agents ")


def test_counts_line_masks_a_secret_planted_in_an_agent_status() -> None:
    secret = "sk-abcdefghijklmnopqrstuvwx"
    stream = [
        {"type": "run:start", "runId": "r", "workflow": "w", "spanId": "s0", "ts": 1},
        {"type": "agent:start", "spanId": "a", "parentSpanId": "s0", "ts": 2, "label": f"x {secret}"},
        {"type": "agent:end", "spanId": "a", "status": f"odd {secret}", "ts": 3},
    ]
    lines = _lines("auto", stream, _StepClock(10.0))
    assert _counts(lines)
    assert all(secret not in line for line in lines)
    assert any(MASKED_SECRET in line for line in _counts(lines))


@pytest.mark.parametrize("name", stream_names())
def test_the_summary_only_fold_reads_every_printed_fact_as_the_full_fold_does(name: str) -> None:
    full, lean = ProgressState(), ProgressState(summary_only=True)
    full_lines, lean_lines = ProgressLines(state=full), ProgressLines(state=lean)
    printed: tuple[list[str], list[str]] = ([], [])
    for event in events(name):
        for printer, out in ((full_lines, printed[0]), (lean_lines, printed[1])):
            if event.get("type") in ("run:start", "run:end", "phase:start"):
                out.extend(printer.lines(event))
            else:
                printer.state.apply(event)
    assert printed[0] == printed[1]

    def counts(state: ProgressState) -> tuple[object, ...]:
        return state.events, state.status_counts(), state.total_tokens(), state.spent_usd, state.tool_failures

    assert counts(full) == counts(lean)
    settled = outcome(name)
    assert summary_lines(full, settled) == summary_lines(lean, settled)
