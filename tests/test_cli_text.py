"""The CLI's text leaf: one exit table, and every printed line masked after it is composed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.cli._inspect import run_inspect
from rulvar_otel.cli._text import (
    EXIT_CONFLICT,
    EXIT_EXPORT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    plural,
    say,
    terminal_safe,
)

SECRET = "sk-abc123def456ghi789jkl012"


def test_every_exit_code_is_distinct() -> None:
    codes = [EXIT_OK, EXIT_EXPORT_FAILED, EXIT_USAGE, EXIT_CONFLICT, EXIT_INTERRUPTED]
    assert len(set(codes)) == len(codes)


def test_plural_words_one_and_many() -> None:
    assert [plural(n, "span") for n in (0, 1, 2)] == ["0 spans", "1 span", "2 spans"]


@pytest.mark.parametrize(
    "message",
    [
        f"token {SECRET}",
        f"{SECRET[:10]}" + f"{SECRET[10:]} glued after composition",
        f"url https://user:{SECRET}@host/x",
        f"\x1b[31m{SECRET}\x1b[0m",
    ],
)
def test_say_masks_the_composed_message_and_strips_controls(message: str) -> None:
    err = io.StringIO()
    say(message, stream=err)
    printed = err.getvalue()
    assert printed.startswith("rulvar-otel: ")
    assert SECRET not in printed and "\x1b" not in printed
    assert terminal_safe(message) in printed


def test_an_asset_conflict_exits_with_its_own_code(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["assets", "write", str(tmp_path), "--only", "alerts"])
    assert first.exit_code == EXIT_OK, first.output
    rules = next(tmp_path.rglob("alerts.yml"))
    rules.write_text("# local edit\n")
    refused = runner.invoke(app, ["assets", "write", str(tmp_path), "--only", "alerts"])
    assert refused.exit_code == EXIT_CONFLICT != EXIT_USAGE
    assert rules.read_text() == "# local edit\n"


def test_inspect_prints_planted_secrets_and_controls_only_masked(tmp_path: Path) -> None:
    stream = tmp_path / "run.jsonl"
    base = {"runId": "r1", "ts": "2026-01-01T00:00:00Z"}
    lines = [
        {**base, "seq": 1, "type": "run:start", "spanId": "s0", "workflow": "wf"},
        {
            **base,
            "seq": 2,
            "type": "agent:start",
            "spanId": "s1",
            "parentSpanId": "s0",
            "agentType": f"\x1b]0;{SECRET}\x07agent",
            "label": f"label {SECRET}",
            "model": f"m:{SECRET}",
            "role": "loop",
        },
    ]
    stream.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out, err = io.StringIO(), io.StringIO()
    assert run_inspect(str(stream), as_json=False, out=out, err=err) == EXIT_OK
    printed = out.getvalue()
    # The label is free text: never printed; the agent type and model are, masked.
    assert "label" not in printed and "[masked-secret]" in printed
    assert SECRET not in printed and "\x1b" not in printed and "\x07" not in printed


def test_inspect_reports_an_empty_stream_through_the_masked_printer(tmp_path: Path) -> None:
    empty = tmp_path / f"{SECRET}.jsonl"
    empty.write_text("")
    err = io.StringIO()
    assert run_inspect(str(empty), as_json=False, out=io.StringIO(), err=err) == EXIT_USAGE
    assert "holds no events" in err.getvalue() and SECRET not in err.getvalue()
