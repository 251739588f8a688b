"""``rulvar-otel inspect``: the reducers' tables in text and JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.cli._inspect import run_inspect
from rulvar_otel.core.masking import MASKED_SECRET
from tests._support import STREAMS, events


def _run(path: Path | str, *, as_json: bool, patterns: list[str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_inspect(str(path), as_json=as_json, patterns=patterns, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_text_form_prints_the_three_readings() -> None:
    code, out, _ = _run(STREAMS / "phases.jsonl", as_json=False)
    assert code == 0
    assert "Invocation table" in out and "By role" in out and "Critical path" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("s2 "))
    assert "longRunner" in row and "ok" in row and "240k" in row and "$0.241" in row and "per-call" in row
    phase_rows = [line for line in out.splitlines() if line.strip().startswith("#")]
    assert len(phase_rows) == 5 and "summarize" in phase_rows[1]
    assert "1 agent span, 0 open, 0 open phases" in out


def test_text_form_shows_the_post_fan_in_decomposition() -> None:
    code, out, _ = _run(STREAMS / "orchestrate.jsonl", as_json=False)
    assert code == 0
    assert "1 ms (9.1% of wall)" in out
    assert "await_all 0 ms x1, finish 1 ms x1" in out


def test_json_form_matches_the_reducers() -> None:
    code, out, _ = _run(STREAMS / "orchestrate.jsonl", as_json=True)
    assert code == 0
    doc = json.loads(out)
    assert doc["criticalPath"]["runWallMs"] == 11.0 and doc["criticalPath"]["workerSpans"] == 3
    assert [a["spanId"] for a in doc["invocationTable"]["agents"]] == ["s1", "s5", "s9", "s16"]
    assert doc["invocationTable"]["byRole"]["loop"]["phases"] == 3


def test_truncated_stream_shows_open_rows_and_absent_figures(tmp_path: Path) -> None:
    code, out, _ = _run(STREAMS / "synthetic-truncated-ok.jsonl", as_json=False)
    assert code == 0
    assert "1 agent span, 1 open, 1 open phase" in out
    run_wall = next(line for line in out.splitlines() if "run wall" in line)
    assert run_wall.split()[-1] == "-"


def test_hostile_and_secret_strings_are_masked_and_sanitized(tmp_path: Path) -> None:
    evs = events("minimal")
    for event in evs:
        if event["type"] in ("agent:start", "agent:end"):
            event["agentType"] = "bad\x1b[2J\nrow sk-abcdefghijklmnopqrstuvwx item-7"
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    code, out, _ = _run(path, as_json=False, patterns=[r"item-\d"])
    assert code == 0 and "\x1b" not in out and "sk-abc" not in out and "item-7" not in out
    assert MASKED_SECRET in out
    code, out, _ = _run(path, as_json=True, patterns=[r"item-\d"])
    # Sanitized before encoding, as every output: no escape survives, not even JSON-escaped.
    assert "\\u001b" not in out and "\x1b" not in out and "sk-abc" not in out
    agent_type = json.loads(out)["invocationTable"]["agents"][0]["agentType"]
    assert agent_type == f"bad row {MASKED_SECRET} {MASKED_SECRET}"


def test_bad_input_is_a_clear_error_with_exit_code_2(tmp_path: Path) -> None:
    code, _, err = _run(tmp_path / "missing.jsonl", as_json=False)
    assert code == 2 and "no such file" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    code, _, err = _run(empty, as_json=False)
    assert code == 2 and "invalid JSON" in err and "holds no events" in err
    code, _, err = _run(STREAMS / "minimal.jsonl", as_json=False, patterns=["("])
    assert code == 2 and "patterns[0]" in err


def test_the_cli_command() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["inspect", str(STREAMS / "minimal.jsonl"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["criticalPath"]["workerSpans"] == 1
    result = runner.invoke(app, ["inspect", "/nonexistent/x.jsonl"])
    assert result.exit_code == 2


def test_json_money_is_rounded_without_binary_noise() -> None:
    code, out, _ = _run(STREAMS / "orchestrate.jsonl", as_json=True)
    assert code == 0
    assert "0.00030000000000000003" not in out and "000000000" not in out
    doc = json.loads(out)
    coordinator = doc["invocationTable"]["agents"][0]
    assert coordinator["costUsd"] == 0.0003 and coordinator["phases"][0]["costUsd"] == 0.0003
    assert doc["invocationTable"]["totalCostUsd"] == 0.00078


def test_critical_path_hides_all_zero_rows_and_explains_its_terms() -> None:
    code, out, _ = _run(STREAMS / "orchestrate.jsonl", as_json=False)
    assert code == 0
    crit = out[out.index("Critical path") :]
    table = crit[: crit.index("  run wall          first to last event")].splitlines()
    # orchestrate has no synthesize call and no host rejection: those rows say nothing.
    for label in ("synthesis", "final composition", "claim judge", "host-rejected spans", "model only"):
        assert not any(line.strip().startswith(label + " ") for line in table), label
    assert "(8 rows whose figures are all zero not shown)" in crit
    assert "post-fan-in: coordination tools   1 ms (await_all 0 ms x1, finish 1 ms x1)" in crit
    # Figures the stream cannot support stay, as "-", and the legend says what "-" means.
    assert any(
        line.split()[:2] == ["first", "candidate"] and line.split()[-1] == "-" for line in crit.splitlines()
    )
    for term in ("run wall", "post-fan-in", "synthesis", "residue", "cannot support"):
        assert any(term in line for line in crit.splitlines()[-9:]), term


def test_an_agent_without_type_or_label_reads_anon() -> None:
    _, out, _ = _run(STREAMS / "orchestrate.jsonl", as_json=False)
    row = next(line for line in out.splitlines() if line.strip().startswith("s1 "))
    assert row.split()[1] == "(anon)"


# --- hostile input: only allow-listed facts print, and only masked --------------------------

MARK = "QzqInspect"
# Each credential and the part of it that must never print.
PLANTED_SECRETS = {
    "openai key": ("sk-proj-AbCdEfGhIjKlMnOpQrSt1234", "AbCdEfGhIjKlMnOpQrSt1234"),
    "bearer token": ("Bearer abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnopqrstuvwxyz012345"),
    "URL userinfo": ("https://alice:Hunter2Pass@example.com/x", "Hunter2Pass"),
}
WRAPS = {
    "plain": "{}",
    "SGR": "\x1b[31m{}\x1b[0m",
    "C1 CSI": "\x9b{}",
    "OSC title": "\x1b]0;{}\x07",
    "bidi": "\u202e{}\u202c",
    "newline": "x\n{}",
}
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\\u001b", "\\u009b", "\\u202e", "\\u0007")


def _hostile_orchestrate(value: str) -> list[dict[str, object]]:
    """The orchestrate stream with ``value`` in every string fact inspect prints, and content
    markers in the fields and shapes it must not print (labels, unknown fields and types, enum
    fields outside their enum, unlisted usage and tool-budget members)."""
    out: list[dict[str, object]] = []
    for event in events("orchestrate"):
        kind = str(event["type"])
        if kind.startswith("agent:"):
            event["label"] = f"{MARK}-label {value}"
            event["notes"] = {"text": f"{MARK}-nested", "items": [f"{MARK}-item", {"content": value}]}
            if event["spanId"] == "s5":
                event.update(agentType=value, model=value, role=value)
        if kind == "agent:end":
            event["status"] = value
            event["usage"] = {"inputTokens": 3, f"{MARK}-usage": 4, "outputTokens": f"{MARK}-n"}
            event["toolBudget"] = {"used": 1, "cap": f"{MARK}-cap", "limiter": f"{MARK}-lim", "why": value}
        if kind == "agent:phase:end" and event["spanId"] == "s9":
            event["outcome"] = f"{MARK}-outcome {value}"
        if kind.startswith("tool:"):
            event["toolName"] = value
        out.append(event)
    out.insert(3, {**out[2], "type": f"x:{MARK}-type", "label": value, MARK: value})
    return out


def _assert_nothing_escapes(out: str, body: str) -> None:
    assert body not in out
    assert MARK not in out
    assert not [c for c in CONTROLS if c in out]


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("secret", PLANTED_SECRETS)
def test_planted_secrets_controls_and_content_never_print(tmp_path: Path, secret: str, wrap: str) -> None:
    value, body = PLANTED_SECRETS[secret]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in _hostile_orchestrate(WRAPS[wrap].format(value))))
    code, text, err = _run(path, as_json=False)
    assert code == 0, err
    _assert_nothing_escapes(text + err, body)
    assert "Invocation table" in text and "post-fan-in: coordination tools" in text
    code, out, err = _run(path, as_json=True)
    assert code == 0, err
    _assert_nothing_escapes(out + err, body)
    doc = json.loads(out)
    worker = next(a for a in doc["invocationTable"]["agents"] if a["spanId"] == "s5")
    assert "label" not in worker and "notes" not in worker
    assert worker["usage"] == {"inputTokens": 3} and worker["toolBudget"] == {"used": 1}
    assert all(
        "outcome" not in phase
        for a in doc["invocationTable"]["agents"]
        if a["spanId"] == "s9"
        for phase in a["phases"]
    )


def test_cells_side_by_side_are_masked_as_the_line_reads(tmp_path: Path) -> None:
    """Two cells that each hold nothing secret can make a credential on one line."""
    evs = events("minimal")
    for event in evs:
        if event["type"] in ("agent:start", "agent:end"):
            event.update(agentType="Authorization:", role="hunter2SecretValue")
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    code, out, _ = _run(path, as_json=False)
    assert code == 0
    assert "hunter2SecretValue" not in out and MASKED_SECRET in out
