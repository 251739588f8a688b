"""The SSE source against a protocol-faithful Rulvar server on 127.0.0.1 (real HTTP, real sockets).

The server replays a fixture stream as SSE frames, honours ``Last-Event-ID``, drops the
connection every N events (after a slow-consumer note, or mid-frame without one), keeps a
bounded replay window (and says so with the gap note), sends the "not live" and "failed before
settling" notes, holds a suspended run's connection open and continues with its resumed
segment, and serves ``GET /runs/:id`` (404 with a JSON error for an unknown run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.errors import ConfigError, RunNotFoundError, SourceError
from rulvar_otel.otel import export_events, to_otel
from rulvar_otel.sources.sse import ReconnectPolicy, ServerRunHandle, follow_server_run
from rulvar_otel.testing import SpanCapture
from tests._support import STREAMS, events

DropMode = Literal["none", "slow", "midframe", "clean"]
# The Rulvar server's slow-consumer close note, verbatim, and the wording older servers used.
SLOW_NOTE = (
    b": pending frames reached maxPendingEventsPerClient (20); reconnect with Last-Event-ID to continue\n\n"
)
OLD_SLOW_NOTE = b": slow consumer: the client fell behind; closing (reconnect with Last-Event-ID)\n\n"
FAST = ReconnectPolicy(
    initial_backoff_s=0.001,
    max_backoff_s=0.01,
    slow_consumer_backoff_s=0.001,
    max_attempts=5,
    read_timeout_s=10,
)


def frame(event: dict[str, Any]) -> bytes:
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


@dataclass
class ServedRun:
    events: list[dict[str, Any]]
    status: dict[str, Any]
    live: bool = True
    window: int | None = None  # replay window: only the last `window` events stay buffered
    failed_note: bool = False  # end the stream with the "failed before settling" note
    hold_after_suspend: bool = True  # keep the connection open after a suspended run:end
    resume: asyncio.Event | None = None  # set to release the resumed segment


@dataclass
class RulvarTestServer:
    runs: dict[str, ServedRun]
    drop_every: int = 0
    drop_mode: DropMode = "none"
    slow_note: bytes = SLOW_NOTE
    requests: list[tuple[str, str | None]] = field(default_factory=list[tuple[str, str | None]])
    host: str = "127.0.0.1"
    port: int = 0
    _server: asyncio.base_events.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set[asyncio.Task[None]])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        # Handlers may be parked on a suspension that never resumes: end them with the server.
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            lines = request.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
            self.requests.append((target, headers.get("last-event-id")))
            parts = target.split("/")
            if method == "GET" and len(parts) == 4 and parts[1] == "runs" and parts[3] == "events":
                await self._events(parts[2], headers.get("last-event-id"), writer)
            elif method == "GET" and len(parts) == 3 and parts[1] == "runs":
                run = self.runs.get(parts[2])
                if run is None:
                    self._json(
                        writer, 404, {"error": {"code": "config", "message": f"run '{parts[2]}' not found"}}
                    )
                else:
                    self._json(writer, 200, run.status)
            else:
                self._json(writer, 405, {"error": {"code": "config", "message": "no such route"}})
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    def _json(writer: asyncio.StreamWriter, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
            "connection: close\r\n\r\n".encode()
            + data
        )

    async def _events(self, run_id: str, last_event_id: str | None, writer: asyncio.StreamWriter) -> None:
        run = self.runs.get(run_id)
        if run is None:
            self._json(writer, 404, {"error": {"code": "config", "message": f"run '{run_id}' not found"}})
            return
        # No content-length, no chunking: the body is the bytes until the server closes.
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n")
        if not run.live:
            writer.write(b": run is not live in this process\n\n")
            return
        cursor = int(last_event_id) if last_event_id is not None else None
        buffer = run.events if run.window is None else run.events[-run.window :]
        dropped = len(run.events) - len(buffer)
        if dropped and (cursor is None or cursor < buffer[0]["seq"]):
            writer.write(
                f": replay window starts at seq {buffer[0]['seq']}; {dropped} earlier events were dropped "
                "from the in-memory buffer (the journal is the durable record)\n\n".encode()
            )
        writer.write(b":\n\n")  # a keep-alive comment, which is no note at all
        sent = 0
        for event in buffer:
            if cursor is not None and event["seq"] <= cursor:
                continue
            if self.drop_every and sent == self.drop_every:
                if self.drop_mode == "slow":
                    writer.write(self.slow_note)
                elif self.drop_mode == "midframe":
                    writer.write(frame(event)[:25])  # part of the next frame, then the socket closes
                await writer.drain()
                return
            writer.write(frame(event))
            sent += 1
            await writer.drain()
            suspended = event["type"] == "run:end" and event.get("status") == "suspended"
            if suspended and run.hold_after_suspend and run.resume is not None:
                await run.resume.wait()
        if run.failed_note:
            writer.write(b": run failed before settling: SettlementError (see GET /runs/:id)\n\n")


def _skip_status_line(write: Any) -> Any:
    """Wrap ``write`` so the first call (the response head) is swallowed once."""
    state = {"first": True}

    def wrapped(data: bytes) -> None:
        if state["first"] and data.startswith(b"HTTP/1.1"):
            state["first"] = False
            return
        write(data)

    return wrapped


def status_of(name: str, run_events: list[dict[str, Any]]) -> dict[str, Any]:
    outcome = json.loads((STREAMS / f"{name}.outcome.json").read_text())
    body = {"runId": run_events[0]["runId"], "workflow": run_events[0].get("workflow"), "live": True}
    if outcome["settled"] == "resolved":
        body.update(
            {k: outcome["outcome"][k] for k in ("status", "usage", "envelope") if k in outcome["outcome"]}
        )
    else:
        body.update(
            {"status": "error", "terminalUnavailable": {"reason": "unsettled", "message": "no settle"}}
        )
    return body


@contextlib.asynccontextmanager
async def serve(runs: dict[str, ServedRun], **kw: Any) -> AsyncIterator[RulvarTestServer]:
    server = RulvarTestServer(runs, **kw)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.contextmanager
def serve_in_thread(
    runs: dict[str, ServedRun], *, server: RulvarTestServer | None = None, **kw: Any
) -> Iterator[RulvarTestServer]:
    """The same server (or ``server``) on its own loop in a thread (for synchronous callers)."""
    loop = asyncio.new_event_loop()
    server = server if server is not None else RulvarTestServer(runs, **kw)
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def served(name: str, **kw: Any) -> tuple[str, ServedRun]:
    evs = events(name)
    return evs[0]["runId"], ServedRun(evs, status_of(name, evs), **kw)


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
                writer.write = _skip_status_line(writer.write)  # type: ignore[method-assign]
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
        with pytest.raises(SourceError, match="running in another process, not live on"):
            await handle.result
    assert got == [] and not handle.stats.terminal_facts_only
