"""``rulvar-otel inspect``: the reducers' tables in text and JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path

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
        if event["type"] == "agent:start":
            event["label"] = "bad\x1b[2J\nrow sk-abcdefghijklmnopqrstuvwx item-7"
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in evs))
    code, out, _ = _run(path, as_json=False, patterns=[r"item-\d"])
    assert code == 0 and "\x1b" not in out and "sk-abc" not in out and "item-7" not in out
    assert MASKED_SECRET in out
    code, out, _ = _run(path, as_json=True, patterns=[r"item-\d"])
    # Sanitized before encoding, as every output: no escape survives, not even JSON-escaped.
    assert "\\u001b" not in out and "\x1b" not in out and "sk-abc" not in out
    label = json.loads(out)["invocationTable"]["agents"][0]["label"]
    assert label == f"bad row {MASKED_SECRET} {MASKED_SECRET}"


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
