"""``rulvar-otel tail``: a live export from a server that keeps dropping the connection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.otel import export_events
from tests._fixtures import events, outcome
from tests.test_sse import ServedRun, serve_in_thread, served


def _spans(path: Path) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                spans.extend(ss["spans"])
    return spans


def _reference_span_count(name: str) -> int:
    from opentelemetry.sdk.trace import TracerProvider

    return export_events(events(name), TracerProvider().get_tracer("t"), outcome=outcome(name))


def _tail(url: str, run_id: str, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        app,
        [
            "tail",
            "--server",
            url,
            "--run",
            run_id,
            "--out",
            str(out),
            "--progress",
            "off",
            "--no-tree",
            *extra,
        ],
    )


@pytest.mark.parametrize(("mode", "every"), [("slow", 2), ("midframe", 5), ("clean", 9)])
def test_tail_exports_every_event_exactly_once(tmp_path: Path, mode: str, every: int) -> None:
    run_id, run = served("orchestrate")
    out = tmp_path / "spans.jsonl"
    with serve_in_thread({run_id: run}, drop_every=every, drop_mode=mode) as server:  # type: ignore[arg-type]
        result = _tail(server.url, run_id, out)
    assert result.exit_code == 0, result.output
    spans = _spans(out)
    assert len(spans) == _reference_span_count("orchestrate")
    assert len({s["spanId"] for s in spans}) == len(spans)  # nothing exported twice
    assert len({s["traceId"] for s in spans}) == 1
    assert "duplicates dropped" in result.stderr and "connections" in result.stderr
    if mode == "slow":
        assert "slow consumer" in result.stderr


def test_tail_with_deterministic_ids_is_idempotent(tmp_path: Path) -> None:
    run_id, run = served("tools")
    with serve_in_thread({run_id: run}, drop_every=4, drop_mode="midframe") as server:
        first = _tail(server.url, run_id, tmp_path / "a.jsonl", "--deterministic-ids")
        second = _tail(server.url, run_id, tmp_path / "b.jsonl", "--deterministic-ids")
        plain = _tail(server.url, run_id, tmp_path / "c.jsonl")
    assert first.exit_code == second.exit_code == plain.exit_code == 0

    def ids(path: Path) -> list[tuple[str, str, str]]:
        return sorted((s["traceId"], s["spanId"], s.get("parentSpanId", "")) for s in _spans(path))

    assert ids(tmp_path / "a.jsonl") == ids(tmp_path / "b.jsonl")
    assert ids(tmp_path / "a.jsonl") != ids(tmp_path / "c.jsonl")


def test_tail_unknown_run_exits_2(tmp_path: Path) -> None:
    with serve_in_thread({}) as server:
        result = _tail(server.url, "missing-run", tmp_path / "x.jsonl", "--max-attempts", "2")
    assert result.exit_code == 2
    assert "run 'missing-run' not found" in result.stderr


def test_tail_until_suspended_stops_at_the_suspension(tmp_path: Path) -> None:
    import asyncio

    live = events("suspension-live")
    run = ServedRun(
        live + events("suspension-dryrun"),
        {"runId": live[0]["runId"], "status": "suspended"},
        resume=asyncio.Event(),
    )
    with serve_in_thread({live[0]["runId"]: run}) as server:
        result = _tail(server.url, live[0]["runId"], tmp_path / "s.jsonl", "--until-suspended")
    assert result.exit_code == 0, result.output
    assert "stopped at the run's suspension" in result.stderr
    assert len(_spans(tmp_path / "s.jsonl")) == _reference_span_count("suspension-live")


def test_tail_refuses_a_bad_server_url(tmp_path: Path) -> None:
    result = _tail("not-a-url", "r", tmp_path / "x.jsonl")
    assert result.exit_code == 2 and "--server must be an http" in result.stderr
