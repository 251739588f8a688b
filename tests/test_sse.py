"""The SSE source against a protocol-faithful Rulvar server on 127.0.0.1 (real HTTP, real sockets).

The server (``tests._support.RulvarTestServer``) replays corpus streams with dropped connections,
slow-consumer and gap notes, replay windows, suspensions and unknown runs; the source must
deliver every event exactly once, in order, and take terminal facts only from the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.errors import ConfigError, RunNotFoundError, SourceError
from rulvar_otel.otel import export_events, to_otel
from rulvar_otel.sources.sse import ReconnectPolicy, ServerRunHandle, follow_server_run
from rulvar_otel.testing import SpanCapture
from tests._support import (
    OLD_SLOW_NOTE,
    SLOW_NOTE,
    DropMode,
    RulvarTestServer,
    ServedRun,
    events,
    frame,
    serve,
    served,
    skip_status_line,
)

FAST = ReconnectPolicy(
    initial_backoff_s=0.001,
    max_backoff_s=0.01,
    max_attempts=5,
    read_timeout_s=10,
)


async def drain(handle: ServerRunHandle) -> list[dict[str, Any]]:
    return [e async for e in handle.events]  # type: ignore[misc]


@pytest.mark.parametrize("mode", ["slow", "old-slow", "midframe", "clean"])
@pytest.mark.parametrize("every", [1, 3, 7])
async def test_every_event_exactly_once_across_repeated_drops(mode: str, every: int) -> None:
    run_id, run = served("tools")
    note = OLD_SLOW_NOTE if mode == "old-slow" else SLOW_NOTE
    drop: DropMode = "slow" if mode == "old-slow" else mode  # type: ignore[assignment]
    async with serve({run_id: run}, drop_every=every, drop_mode=drop, slow_note=note) as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
        outcome = await handle.result
    assert [e["seq"] for e in got] == [e["seq"] for e in run.events]  # 0 lost, 0 duplicated, in order
    assert got == run.events
    assert (
        handle.stats.reconnects == len(server.requests) - 2
    )  # every events request but the first; one status GET
    # Each reconnect resumed exactly after the last delivered seq.
    cursors = [lei for target, lei in server.requests if target.endswith("/events")]
    assert cursors[0] is None
    assert [int(c) for c in cursors[1:] if c is not None] == [
        run.events[i - 1]["seq"] for i in range(every, len(run.events), every)
    ]
    slow = [n for n in handle.notes if n.kind == "slow-consumer"]
    assert len(slow) == (len(cursors) - 1 if drop == "slow" else 0)
    assert not [n for n in handle.notes if n.kind == "comment"]  # keep-alives are not notes
    assert outcome.status == "ok" and outcome.envelope == run.status["envelope"]


async def test_duplicates_from_an_at_least_once_server_are_dropped_by_seq() -> None:
    run_id, run = served("minimal")

    class Replaying(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            # An at-least-once server: it repeats what the client already has before the new events.
            if last is not None:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
                for event in run.events:
                    if event["seq"] <= int(last):
                        writer.write(frame(event))
                writer.write = skip_status_line(writer.write)  # type: ignore[method-assign]
            await super()._events(rid, last, writer)

    server = Replaying({run_id: run}, drop_every=4, drop_mode="clean")
    await server.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
    finally:
        await server.stop()
    assert [e["seq"] for e in got] == [e["seq"] for e in run.events]
    assert handle.stats.duplicates_dropped == 4 + 8  # the second connection repeats 4, the third 8


async def test_gap_note_is_a_typed_diagnostic() -> None:
    run_id, run = served("tools", window=10)
    async with serve({run_id: run}) as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
    assert got == run.events[-10:]
    (gap,) = [n for n in handle.notes if n.kind == "gap"]
    assert gap.first_retained_seq == run.events[-10]["seq"]
    assert gap.dropped == len(run.events) - 10
    assert gap.after_seq is None and "replay window starts at seq" in gap.text


async def test_not_live_stops_retrying_and_takes_the_status_outcome() -> None:
    run_id, run = served("minimal", live=False)
    run.status["live"] = False
    run.status["envelope"] = dict(run.status["envelope"], provenance="journal")
    async with serve({run_id: run}) as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
        outcome = await handle.result
    assert [n.kind for n in handle.notes] == ["not-live"]
    assert handle.stats.not_live and handle.stats.connections == 1 and handle.stats.reconnects == 0
    assert handle.stats.terminal_facts_only and handle.stats.terminal_facts_time_source == "run id"
    assert outcome.status == "ok" and isinstance(outcome.envelope, dict)
    assert outcome.envelope["provenance"] == "journal"
    # No event ever streams, so the terminal facts become a run span's pair of events, on the
    # run's own root span id and dated only by the time the ULID run id encodes.
    assert [e["type"] for e in got] == ["run:start", "run:end"]
    assert {e["spanId"] for e in got} == {run.events[0]["spanId"]} == {"s0"}
    assert got[0]["ts"] == got[1]["ts"] == "2026-11-29T18:59:53.294Z"  # 01M8MAV4AE...: its ULID time
    assert got[1]["status"] == "ok" and got[1]["envelope"] == outcome.envelope
    assert got[0]["workflow"] == run.status["workflow"]
    capture = SpanCapture()
    assert export_events(got, capture.tracer, outcome=outcome) == 1
    (span,) = capture.ended
    assert span.name == f"run {run.status['workflow']}"
    assert span.start_time == span.end_time == 1_795_978_793_294_000_000
    assert (
        span.attributes is not None
        and span.attributes["rulvar.run.total_usd"] == outcome.envelope["totalUsd"]
    )


def test_terminal_facts_use_only_the_servers_facts() -> None:
    from datetime import UTC, datetime

    from rulvar_otel.sources.sse import terminal_facts_events, ulid_time

    assert ulid_time("01M8MAV4AESBHNV5V3MVF0NJJA") == datetime(2026, 11, 29, 18, 59, 53, 294000, UTC)
    assert ulid_time("GOLDEN-SUSPEND-1") is None and ulid_time("81M8MAV4AESBHNV5V3MVF0NJJA") is None
    outcome = RunOutcome(status="ok")
    # Explicit times in the status body win over the run id's.
    got, source = terminal_facts_events(
        "01M8MAV4AESBHNV5V3MVF0NJJA",
        outcome,
        {"startedAt": "2026-11-29T18:59:53.299Z", "endedAt": "2026-11-29T18:59:54.000Z"},
    )
    assert source == "status" and [e["ts"] for e in got] == [
        "2026-11-29T18:59:53.299Z",
        "2026-11-29T18:59:54.000Z",
    ]
    # Nothing dates a run whose id is no ULID: no span rather than one stamped "now".
    assert terminal_facts_events("GOLDEN-SUSPEND-1", outcome, {"status": "ok"}) == ([], None)


async def test_not_live_without_a_settled_terminal_keeps_terminal_unavailable() -> None:
    run_id, run = served("unsettled", live=False)
    async with serve({run_id: run}) as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        outcome = await handle.result
    assert outcome.status == "error"
    assert (outcome.model_extra or {})["terminalUnavailable"]["reason"] == "unsettled"


async def test_failed_before_settling_note_ends_the_stream() -> None:
    # The run rejected before any run:end: the note is the only word on the stream.
    run_id, run = served("unsettled", failed_note=True)
    run.events = [e for e in run.events if e["type"] != "run:end"]
    async with serve({run_id: run}) as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
        outcome = await handle.result
    assert got == run.events
    assert [n.kind for n in handle.notes] == ["run-failed"], handle.notes
    assert handle.stats.run_failed and outcome.status == "error"


async def test_unknown_run_is_run_not_found() -> None:
    async with serve({}) as server:
        handle = follow_server_run(server.url, "nope", policy=FAST)
        with pytest.raises(RunNotFoundError, match=r"run 'nope' not found .*code config"):
            await drain(handle)
        with pytest.raises(RunNotFoundError):
            await handle.result


async def test_a_dead_endpoint_gives_up_after_bounded_attempts() -> None:
    server = RulvarTestServer({})
    await server.start()
    url = server.url
    await server.stop()  # nothing listens on this port any more
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = ReconnectPolicy(max_attempts=4, initial_backoff_s=0.5, max_backoff_s=1.5, connect_timeout_s=1)
    handle = ServerRunHandle(url, "r", policy=policy, sleep=sleep)
    with pytest.raises(SourceError, match="after 4 attempts without progress"):
        await drain(handle)
    assert slept == [0.5, 1.0, 1.5]  # bounded exponential backoff


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="--server must be an http"):
        follow_server_run("ftp://x", "r")
    with pytest.raises(ConfigError, match="--run"):
        follow_server_run("http://127.0.0.1:1", "")
    with pytest.raises(ConfigError, match="max_attempts"):
        ReconnectPolicy(max_attempts=0)


def _suspended_then_resumed() -> list[dict[str, Any]]:
    """suspension-live, then its resumed segment (seqs from 2**33) rebuilt from the dry-run replay."""
    live = events("suspension-live")
    resumed = events("suspension-dryrun")
    assert resumed[0]["seq"] == 8589934592 and live[0]["runId"] == resumed[0]["runId"]
    return live + resumed


async def test_suspended_run_end_is_not_the_end_on_one_connection() -> None:
    evs = _suspended_then_resumed()
    resume = asyncio.Event()
    run = ServedRun(evs, {"runId": evs[0]["runId"], "status": "ok", "live": True}, resume=resume)
    async with serve({evs[0]["runId"]: run}) as server:
        handle = follow_server_run(server.url, evs[0]["runId"], policy=FAST)
        seen: list[dict[str, Any]] = []

        async def consume() -> None:
            async for event in handle.events:
                seen.append(event)  # type: ignore[arg-type]

        task = asyncio.create_task(consume())
        for _ in range(200):
            if seen and seen[-1]["type"] == "run:end":
                break
            await asyncio.sleep(0.01)
        assert seen[-1]["status"] == "suspended" and not task.done()
        resume.set()
        await asyncio.wait_for(task, 10)
    assert seen == evs
    assert [t for t, _ in server.requests if t.endswith("/events")] == [f"/runs/{evs[0]['runId']}/events"]

    # Both segments export into one trace.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from rulvar_otel.core.handle import handle_from_events

    count = await to_otel(handle_from_events(seen, RunOutcome(status="ok")), provider.get_tracer("t"))
    spans = exporter.get_finished_spans()
    assert count == len(spans) > 0
    assert len({s.context.trace_id for s in spans}) == 1
    live_only = InMemorySpanExporter()
    live_provider = TracerProvider()
    live_provider.add_span_processor(SimpleSpanProcessor(live_only))
    await to_otel(handle_from_events(events("suspension-live")), live_provider.get_tracer("t"))
    # The resumed segment's spans joined the same trace instead of starting another one.
    assert len(spans) > len(live_only.get_finished_spans())


async def test_until_suspended_stops_at_the_first_suspension() -> None:
    evs = _suspended_then_resumed()
    run = ServedRun(
        evs, {"runId": evs[0]["runId"], "status": "suspended", "live": True}, resume=asyncio.Event()
    )
    async with serve({evs[0]["runId"]: run}) as server:
        handle = follow_server_run(server.url, evs[0]["runId"], until_suspended=True, policy=FAST)
        got = await asyncio.wait_for(drain(handle), 10)
        outcome = await handle.result
    assert got == events("suspension-live")
    assert handle.stats.suspended_stops == 1 and outcome.status == "suspended"


async def test_to_otel_over_a_dropping_server_exports_every_span_once() -> None:
    run_id, run = served("nested")
    async with serve({run_id: run}, drop_every=5, drop_mode="midframe") as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        live_count = await to_otel(handle, provider.get_tracer("t"))
    reference = InMemorySpanExporter()
    ref_provider = TracerProvider()
    ref_provider.add_span_processor(SimpleSpanProcessor(reference))
    from rulvar_otel.core.handle import handle_from_events

    ref_count = await to_otel(handle_from_events(run.events), ref_provider.get_tracer("t"))
    assert live_count == ref_count
    assert sorted(s.name for s in exporter.get_finished_spans()) == sorted(
        s.name for s in reference.get_finished_spans()
    )
    assert len({s.context.trace_id for s in exporter.get_finished_spans()}) == 1


async def test_hostile_notes_are_masked_and_sanitized() -> None:
    run_id, run = served("minimal")

    class Hostile(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            writer.write(b": odd \x1b]0;title\x07 note sk-abcdefghijklmnopqrstuvwx\n\n")
            writer.write(b"id: 0\ndata: not json\n\n")
            for event in run.events:
                writer.write(frame(event))

    server = Hostile({run_id: run})
    await server.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
    finally:
        await server.stop()
    assert got == run.events
    comment = next(n for n in handle.notes if n.kind == "comment")
    assert "\x1b" not in comment.text and "\x07" not in comment.text and "sk-abc" not in comment.text
    assert [n.kind for n in handle.notes] == ["comment", "bad-frame"]


async def test_not_live_and_still_running_elsewhere_is_said_so_not_exported() -> None:
    run_id, run = served("minimal", live=False)
    run.status = {"runId": run_id, "status": "running", "live": False}
    async with serve({run_id: run}) as server:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await drain(handle)
        with pytest.raises(SourceError, match=r"is unsettled: .* answers status 'running', live: false"):
            await handle.result
    assert got == [] and not handle.stats.terminal_facts_only
