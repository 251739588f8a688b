"""Progress views: plain lines, the line view, the live tree in a real pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import textwrap
from typing import Any

import pyte
import pytest

from rulvar_otel.cli._progress import open_progress, render_tree, summary_lines
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import MASKED_SECRET, compile_secret_masker
from rulvar_otel.core.progress import ProgressState, format_duration, format_usd, render_progress
from rulvar_otel.errors import ConfigError
from tests._support import STREAMS, events

HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\nFORGED LINE\x9b31m sk-abcdefghijklmnopqrstuvwx"


def _hostile_stream() -> list[dict[str, Any]]:
    evs = events("minimal")
    for event in evs:
        if event["type"].startswith("agent:"):
            event["label"] = HOSTILE
    return evs


def test_render_progress_lines_for_the_tools_run() -> None:
    lines = list(render_progress(events("tools")))
    assert lines[0] == "run 01M8MAV4BED0WYQSX6F3JK1TK5 tooling started"
    assert "tool fetch error 3ms" in lines
    assert any(line.startswith("tool rm_rf denied") for line in lines)
    assert "tool search denied 0ms guard repeated-signature" in lines
    assert "tool lookup denied 0ms guard per-tool-cap" in lines
    assert "agent side-b ok  8ms  in 20 out 10  $0.00012" in lines
    assert lines[-1] == "run 01M8MAV4BED0WYQSX6F3JK1TK5 ok  106ms  $0.00042"


def test_render_progress_names_suspension_settlement_and_errors() -> None:
    suspended = list(render_progress(events("suspension-live")))
    assert "waiting on external gate" in suspended
    assert suspended[-1].startswith("run GOLDEN-SUSPEND-1 suspended") and "resume" in suspended[-1]
    unsettled = list(render_progress(events("unsettled")))
    assert "settled=false (outcome withheld)" in unsettled[-1]
    assert "superseded" in list(render_progress(events("superseded")))[-1]
    error = list(render_progress(events("error")))
    assert any(line.startswith("agent flaky error") and line.endswith("(retrying)") for line in error)
    assert any(line.startswith("agent flaky error") and "final" in line for line in error)
    quota = list(render_progress(events("quota")))
    assert any("quota wait" in line for line in quota)


def test_content_never_reaches_the_lines() -> None:
    # Log text, prompts and error messages are content: only their level or code is shown.
    nested = events("nested")
    msgs = [e["msg"] for e in nested if e["type"] == "log"]
    assert msgs
    out = "\n".join(render_progress(nested))
    for msg in msgs:
        assert msg not in out
    prompt = next(e["prompt"] for e in events("suspension-live") if e["type"] == "external:waiting")
    assert prompt not in "\n".join(render_progress(events("suspension-live")))
    error_messages = [e["error"]["message"] for e in events("error") if e["type"] == "agent:error"]
    assert error_messages and all(
        m not in "\n".join(render_progress(events("error"))) for m in error_messages
    )


def test_hostile_label_is_masked_and_one_plain_line() -> None:
    lines = list(render_progress(_hostile_stream()))
    started = [line for line in lines if "started fake" in line]
    assert len(started) == 1
    line = started[0]
    assert "\x1b" not in line and "\n" not in line and "\x9b" not in line and "\x07" not in line
    assert "FORGED LINE" in line and MASKED_SECRET in line and "sk-abc" not in line
    assert all(line.isprintable() for line in lines)


def test_host_patterns_mask_labels() -> None:
    masker = compile_secret_masker([r"item-\d+"])
    evs = events("minimal")
    for event in evs:
        if event["type"] == "agent:start":
            event["label"] = "item-42"
    assert any(MASKED_SECRET in line for line in render_progress(evs, masker=masker))


def test_budget_lines_are_throttled_on_stream_time() -> None:
    evs = events("phases")  # eight budget:update events inside 6 ms of stream time
    budget = [line for line in render_progress(evs) if line.startswith("budget")]
    assert budget == ["budget $0.000"]
    every = [line for line in render_progress(evs, budget_interval_s=0) if line.startswith("budget")]
    # Every change of spend is shown once throttling is off; repeats of one figure never are.
    spends = [e["spentUsd"] for e in evs if e["type"] == "budget:update"]
    distinct = [s for i, s in enumerate(spends) if i == 0 or s != spends[i - 1]]
    assert len(every) == len(distinct)


def test_state_folds_tokens_cost_roles_and_ceiling() -> None:
    state = ProgressState()
    for event in events("phases"):
        state.apply(event)
    (row,) = state.agents.values()
    assert (row.input_tokens, row.output_tokens) == (240067, 50)
    assert row.cost_usd == pytest.approx(0.240567)
    assert set(row.role_seconds) == {"loop", "summarize", "finalize", "extract"}
    assert row.role_seconds["summarize"] == pytest.approx(0.001)
    assert state.finished and state.status == "ok"
    exhausted = ProgressState()
    for event in events("exhausted"):
        exhausted.apply(event)
    assert exhausted.ceiling_usd == pytest.approx(0.6)  # spent 0.6 + remaining 0
    assert ProgressState(ceiling_usd=2.0).ceiling_usd == 2.0


def test_state_degrades_a_malformed_row_instead_of_raising() -> None:
    state = ProgressState()
    state.apply({"type": "agent:start", "spanId": "a", "ts": 5, "model": ["x"], "label": {"a": 1}})
    state.apply({"type": "agent:end", "spanId": "a", "usage": "lots", "costUsd": "free", "status": 3})
    state.apply({"type": "agent:phase:end", "spanId": "b", "invocation": "one", "durationMs": None})
    state.apply({"type": "budget:update", "spentUsd": float("nan")})
    row = state.agents["a"]
    assert row.name == "(anon)" and row.model is None and row.status == "unknown"
    assert row.cost_usd is None and row.input_tokens is None
    render_tree(state)  # renders without raising


def test_stream_deltas_give_a_marked_estimate_until_exact_usage() -> None:
    state = ProgressState()
    state.apply({"type": "agent:start", "spanId": "a", "ts": "2026-01-01T00:00:00.000Z", "agentType": "w"})
    state.apply({"type": "agent:stream", "spanId": "a", "delta": "x" * 400})
    assert state.agents["a"].estimated_output_tokens == 100
    state.apply({"type": "agent:end", "spanId": "a", "status": "ok", "usage": {"outputTokens": 7}})
    assert state.agents["a"].estimated_output_tokens is None


def test_lines_view_writes_lines_and_the_summary() -> None:
    out = io.StringIO()
    view = open_progress("lines", stream=out, ceiling_usd=1.0)
    for event in events("phases"):
        view.feed(event)
    outcome = RunOutcome.model_validate(json.loads((STREAMS / "phases.outcome.json").read_text())["outcome"])
    view.close(outcome)
    view.close(outcome)  # idempotent
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == "run 01M8MAV4F32P1D3FWR9MK6K5VE phased started"
    assert "run 01M8MAV4F32P1D3FWR9MK6K5VE phased ok" in lines
    assert "  wall 6ms  spent $0.241 / $1.000  tokens in 240k out 50" in lines
    by_role = next(line for line in lines if line.startswith("  by role:"))
    assert "loop $0.240" in by_role and "summarize $0.00012" in by_role
    assert text.count("phased ok") == 1
    assert "\x1b" not in text


def test_off_view_prints_nothing_and_auto_picks_lines_for_a_pipe() -> None:
    out = io.StringIO()
    view = open_progress("off", stream=out)
    for event in events("minimal"):
        view.feed(event)
    view.close(None)
    assert out.getvalue() == ""
    auto = open_progress("auto", stream=out)
    auto.feed(events("minimal")[0])
    assert out.getvalue().startswith("run 01M8MAV4AESBHNV5V3MVF0NJJA review started\n")
    with pytest.raises(ConfigError, match="--progress must be one of"):
        open_progress("fancy")


def test_summary_of_a_failed_source_masks_then_sanitizes() -> None:
    state = ProgressState()
    lines = summary_lines(state, RuntimeError("boom sk-abcdefghijklmnopqrstuvwx\x1b[31m\nnext"))
    assert lines[0] == f"run ? failed: RuntimeError: boom {MASKED_SECRET} next"


def test_formatting() -> None:
    assert (
        format_duration(64) == "1m 04s" and format_duration(0.25) == "250ms" and format_duration(None) == "-"
    )
    assert format_duration(7380) == "2h 03m"
    assert format_usd(0.086) == "$0.086" and format_usd(0.000004) == "$0.000004"


_CHILD = textwrap.dedent(
    """
    import json, sys
    from rulvar_otel.cli._progress import open_progress
    events = [json.loads(line) for line in open(sys.argv[1])]
    for event in events:
        if event["type"].startswith("agent:") and event.get("agentType") == "worker":
            event["label"] = sys.argv[2]
    view = open_progress("auto", ceiling_usd=2.0)
    for event in events:
        view.feed(event)
    view.close(None)
    """
)


def _run_in_pty(stream: str, label: str, cols: int = 120, rows: int = 40) -> tuple[pyte.Screen, str]:
    master, slave = pty.openpty()
    # The window size the child's terminal library reads.
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(STREAMS / f"{stream}.jsonl"), label],
        stdin=slave,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            proc.kill()
            raise AssertionError("the progress view produced no output for 30 s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=30) == 0
    raw = b"".join(chunks).decode("utf-8", "replace")
    screen = pyte.Screen(cols, rows)
    pyte.Stream(screen).feed(raw)
    return screen, raw


def test_live_tree_in_a_pseudo_terminal_with_a_hostile_label() -> None:
    screen, raw = _run_in_pty("orchestrate", HOSTILE)
    shown = [line.rstrip() for line in screen.display if line.strip()]
    # The tree: header with spend against the ceiling, the coordinator and its workers.
    header = next(
        line for line in shown if "rulvar-orchestrate" in line and "run 01M8MAV4M9M6HFPDM9HGY1J281" in line
    )
    assert "/ $2.000" in header and "ok" in header
    worker_rows = [line for line in shown if "evil" in line]
    assert len(worker_rows) == 3
    for row in worker_rows:
        # Escapes collapsed to spaces, the newline too: the forged text stays on the row.
        assert "FORGED LINE" in row and MASKED_SECRET in row and "fake:model" in row and "✓" in row
    assert not any(line.strip().startswith("FORGED LINE") for line in shown)
    assert screen.title == ""  # the OSC title sequence never reached the terminal
    # The final summary follows the tree.
    assert any(line.startswith("run 01M8MAV4M9M6HFPDM9HGY1J281 rulvar-orchestrate ok") for line in shown)
    assert any(line.startswith("  agents: 4 ok") for line in shown)
    # A TTY run repaints: rich hides the cursor and moves it, a pipe run never does.
    assert "\x1b[?25l" in raw
    assert "sk-abcdefghijklmnopqrstuvwx" not in raw and "\x1b]0;pwned" not in raw


def test_no_color_keeps_the_tree_plain() -> None:
    os.environ["NO_COLOR"] = "1"
    try:
        out = io.StringIO()
        from rich.console import Console

        console = Console(file=out, force_terminal=True, width=100)
        state = ProgressState()
        for event in events("tools"):
            state.apply(event)
        console.print(render_tree(state))
    finally:
        del os.environ["NO_COLOR"]
    text = out.getvalue()
    assert "side-a" in text and "researcher" in text
    assert "\x1b[3" not in text  # no foreground colour codes


def test_live_tree_puts_branch_agents_under_their_phase_in_a_real_terminal() -> None:
    # tools: side-a and side-b are parented to branch spans that never open (s13, s14); they
    # belong under [fanout], the phase open when they started, not at the bottom of the tree.
    screen, _ = _run_in_pty("tools", "unused")
    shown = [line.rstrip() for line in screen.display if line.strip()]
    tree = shown[
        : next(i for i, line in enumerate(shown) if line.startswith("run 01M8MAV4BED0WYQSX6F3JK1TK5"))
    ]
    fanout = next(i for i, line in enumerate(tree) if line.strip() == "[fanout]")
    below = tree[fanout + 1 :]
    indent = len(tree[fanout]) - len(tree[fanout].lstrip())
    assert [line.split()[1] for line in below] == ["side-a", "side-b"], tree
    assert all(len(line) - len(line.lstrip()) > indent for line in below)
    research = next(i for i, line in enumerate(tree) if line.strip() == "[research]")
    assert "researcher" in tree[research + 1] and research < fanout


def test_lines_name_an_agent_without_type_or_label_anon() -> None:
    lines = list(render_progress(events("orchestrate")))
    assert "agent (anon) started fake:model orchestrate" in lines
    assert not any(line.startswith("agent agent ") for line in lines)


def test_a_huge_label_is_cut_in_every_progress_output() -> None:
    from rich.console import Console

    from rulvar_otel.cli._progress import MAX_LINE_CHARS

    evs = events("minimal")
    for event in evs:
        if event["type"].startswith("agent:"):
            event["label"] = "L" * 1_000_000
    out = io.StringIO()
    view = open_progress("lines", stream=out)
    for event in evs:
        view.feed(event)
    view.close(None)
    lines = out.getvalue().splitlines()
    assert any("LLLL" in line for line in lines)
    assert max(len(line) for line in lines) <= MAX_LINE_CHARS
    state = ProgressState()
    for event in evs:
        state.apply(event)
    tree = io.StringIO()
    Console(file=tree, width=10_000).print(render_tree(state))
    assert "LLLL" in tree.getvalue() and max(map(len, tree.getvalue().splitlines())) <= MAX_LINE_CHARS
