"""``rulvar-otel tail``: a live export from a server that keeps dropping the connection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.otel import export_events
from tests._support import RulvarTestServer, ServedRun, events, outcome, serve_in_thread, served


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


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short backoffs for servers that close on purpose (the defaults wait up to 5 s)."""
    import functools

    from rulvar_otel.cli import _tail
    from rulvar_otel.sources.sse import ReconnectPolicy

    fast = functools.partial(ReconnectPolicy, initial_backoff_s=0.001, max_backoff_s=0.01)
    monkeypatch.setattr(_tail, "ReconnectPolicy", fast)


@pytest.mark.parametrize(("mode", "every"), [("slow", 2), ("midframe", 5), ("clean", 9)])
def test_tail_exports_every_event_exactly_once(
    tmp_path: Path, mode: str, every: int, fast_retries: None
) -> None:
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
        # One close per two frames, yet one line says so, with the count.
        (line,) = [line for line in result.stderr.splitlines() if "slow consumer" in line]
        closes = (len(run.events) - 1) // every
        assert f"closed the stream {closes} times as a slow consumer" in line


def test_tail_summarizes_the_real_servers_slow_consumer_closes_in_one_line(tmp_path: Path) -> None:
    # The real server's wording, closing every 20 frames, with the default reconnect policy.
    run_id, run = served("orchestrate")
    out = tmp_path / "spans.jsonl"
    with serve_in_thread({run_id: run}, drop_every=20, drop_mode="slow") as server:
        result = _tail(server.url, run_id, out)
        event_requests = [lei for target, lei in server.requests if target.endswith("/events")]
    assert result.exit_code == 0, result.output
    closes = len(run.events) // 20
    assert closes == 2 and len(event_requests) == closes + 1
    slow_lines = [line for line in result.stderr.splitlines() if "slow consumer" in line]
    assert slow_lines == [
        "rulvar-otel: the server closed the stream 2 times as a slow consumer (pending frames reached "
        "maxPendingEventsPerClient (20); reconnect with Last-Event-ID to continue); resumed each time "
        "with Last-Event-ID"
    ]
    assert f"{len(run.events)} events, 0 duplicates dropped" in result.stderr
    spans = _spans(out)
    assert len(spans) == _reference_span_count("orchestrate")  # 0 lost
    assert len({s["spanId"] for s in spans}) == len(spans)  # 0 duplicated


def _full_export_ids(name: str, tmp_path: Path) -> dict[str, str]:
    """name -> spanId of each span of a deterministic full export of the recorded run."""
    stream = tmp_path / f"{name}.jsonl"
    stream.write_text("".join(json.dumps(e) + "\n" for e in events(name)))
    out = tmp_path / f"{name}.full.otlp.jsonl"
    result = CliRunner().invoke(
        app,
        ["export", str(stream), "--out", str(out), "--deterministic-ids", "--progress", "off", "--no-tree"],
    )
    assert result.exit_code == 0, result.output
    return {s["name"]: s["spanId"] for s in _spans(out)}


def test_tail_of_a_run_that_is_not_live_uses_only_the_servers_facts(tmp_path: Path) -> None:
    run_id, run = served("minimal", live=False)
    run.status.update(live=False, envelope=dict(run.status["envelope"], provenance="journal"))
    out = tmp_path / "spans.jsonl"
    with serve_in_thread({run_id: run}) as server:
        result = _tail(server.url, run_id, out, "--deterministic-ids")
    assert result.exit_code == 0, result.output
    (span,) = _spans(out)
    full = _full_export_ids("minimal", tmp_path)
    assert span["spanId"] == full["run review"]  # the id the full export of the run gives
    # Its only time is the run's creation time its ULID id encodes; no "now", no duration.
    assert span["startTimeUnixNano"] == span["endTimeUnixNano"] == str(1_795_978_793_294_000_000)
    assert "only terminal facts were available (GET /runs/:id)" in result.stderr
    assert "creation time the run id encodes" in result.stderr
    assert "exporting its terminal facts" not in result.stderr


def test_tail_of_a_run_that_stops_being_live_never_claims_terminal_facts_only(tmp_path: Path) -> None:
    import asyncio

    run_id, run = served("orchestrate")

    class Restarting(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            if last is None:
                self.drop_every, self.drop_mode = 10, "clean"
                await super()._events(rid, last, writer)
            else:  # the server restarted: the run is no longer live in its process
                run.live = False
                await super()._events(rid, last, writer)

    out = tmp_path / "spans.jsonl"
    server = Restarting({run_id: run})
    with serve_in_thread({run_id: run}, server=server) as live:
        result = _tail(live.url, run_id, out)
    assert result.exit_code == 0, result.output
    assert len(_spans(out)) > 1
    assert "no longer live there after seq" in result.stderr
    assert "only terminal facts" not in result.stderr and "exporting its terminal facts" not in result.stderr


def test_tail_with_deterministic_ids_is_idempotent(tmp_path: Path, fast_retries: None) -> None:
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


def test_a_tail_across_a_suspension_never_gives_one_span_id_two_statuses_or_ends(tmp_path: Path) -> None:
    import asyncio

    live = events("suspension-live")
    resume = asyncio.Event()
    run = ServedRun(
        live + events("suspension-dryrun"),
        {"runId": live[0]["runId"], "status": "suspended", "live": True},
        resume=resume,
    )
    with serve_in_thread({live[0]["runId"]: run}) as server:
        first = _tail(
            server.url, live[0]["runId"], tmp_path / "a.jsonl", "--until-suspended", "--deterministic-ids"
        )
        resume.set()  # the run resumes; a second tail reads both segments
        run.status = {"runId": live[0]["runId"], "status": "ok", "live": True}
        second = _tail(server.url, live[0]["runId"], tmp_path / "b.jsonl", "--deterministic-ids")
    assert first.exit_code == second.exit_code == 0, first.output + second.output

    def facts(path: Path) -> dict[str, tuple[int, str]]:
        return {s["spanId"]: (s.get("status", {}).get("code", 0), s["endTimeUnixNano"]) for s in _spans(path)}

    before, after = facts(tmp_path / "a.jsonl"), facts(tmp_path / "b.jsonl")
    assert before and set(before) < set(after)
    assert {sid: after[sid] for sid in before} == before  # one status and one end per span id
    # Nothing is red because of a suspension: the waiting spans are UNSET (code 0 / absent).
    assert all(code != 2 for code, _ in before.values())
    waiting = [s for s in _spans(tmp_path / "a.jsonl") if s["name"].startswith("phase ")]
    assert waiting and all(
        {"key": "rulvar.suspended", "value": {"boolValue": True}} in s["attributes"] for s in waiting
    )
    assert "✗" not in first.stdout


LINES = ("--progress", "lines", "--no-tree", "--max-attempts", "2")


def test_progress_says_nothing_about_a_run_before_its_first_event(tmp_path: Path) -> None:
    with serve_in_thread({}) as server:
        unknown = CliRunner().invoke(
            app,
            [
                "tail",
                "--server",
                server.url,
                "--run",
                "missing-run",
                "--out",
                str(tmp_path / "x.jsonl"),
                *LINES,
            ],
        )
        url = server.url
    unreachable = CliRunner().invoke(
        app,
        ["tail", "--server", url, "--run", "r", "--out", str(tmp_path / "y.jsonl"), *LINES],
    )
    for result in (unknown, unreachable):
        assert result.exit_code == 2, result.output
        assert "run ?" not in result.stderr and "wall" not in result.stderr and "tokens" not in result.stderr
    assert "run 'missing-run' not found" in unknown.stderr


def test_terminal_facts_alone_count_no_streamed_event(tmp_path: Path) -> None:
    run_id, run = served("minimal", live=False)
    run.status.update(live=False)
    with serve_in_thread({run_id: run}) as server:
        result = _tail(server.url, run_id, tmp_path / "s.jsonl")
    assert result.exit_code == 0, result.output
    assert "exported 1 span from 0 stream events" in result.stderr
