"""``rulvar-otel demo`` and ``rulvar-otel replay`` end to end (OTLP/JSON file output, no network)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from rulvar_otel.cli import app


def _span_names(path: Path) -> list[str]:
    names: list[str] = []
    for line in path.read_text().splitlines():
        request: dict[str, Any] = json.loads(line)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                names += [span["name"] for span in scope["spans"]]
    return names


def _trace_ids(path: Path) -> set[str]:
    ids: set[str] = set()
    for line in path.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                ids |= {span["traceId"] for span in scope["spans"]}
    return ids


def test_demo_exports_live_then_replay_exports_the_same_tree(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    runner = CliRunner()
    journal, events, out = tmp_path / "journal", tmp_path / "events.jsonl", tmp_path / "trace.jsonl"
    result = runner.invoke(
        app,
        ["demo", "--journal", str(journal), "--events", str(events), "--out", str(out), "--progress", "off",
         "--run-id", "demo-cli"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert lines[0]["type"] == "run:start" and lines[-1]["type"] == "run:end"
    assert {"quota:denied", "spawn:admitted", "child:start", "tool:end"} <= {e["type"] for e in lines}
    assert any(e.get("outcome") == "denied" for e in lines if e["type"] == "tool:end")
    names = _span_names(out)
    for expected in ("run incident-review", "phase triage", "agent triager loop", "invocation summarize",
                     "tool restart_service", "workflow incident-report", "invocation extract"):  # fmt: skip
        assert expected in names
    assert len(_trace_ids(out)) == 1
    assert (journal / "demo-cli.jsonl").exists()

    replay_out = tmp_path / "replay.jsonl"
    replayed = runner.invoke(
        app, ["replay", "demo-cli", "--journal", str(journal), "--out", str(replay_out), "--progress", "off"]
    )
    assert replayed.exit_code == 0, replayed.output
    assert sorted(_span_names(replay_out)) == sorted(names)


def test_replay_of_an_unknown_run_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["replay", "nope", "--journal", str(tmp_path), "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    assert "no journal for run 'nope'" in result.output
