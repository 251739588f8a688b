"""A protocol-faithful Rulvar server on 127.0.0.1 for the SSE source tests (real HTTP, real sockets).

:class:`RulvarTestServer` replays a fixture stream as SSE frames, honours ``Last-Event-ID``, drops
the connection every N events (after a slow-consumer note, or mid-frame without one), keeps a
bounded replay window (and says so with the gap note), sends the "not live" and "failed before
settling" notes, holds a suspended run's connection open and continues with its resumed
segment, and serves ``GET /runs/:id`` (404 with a JSON error for an unknown run). :func:`serve`
runs it on the caller's loop, :func:`serve_in_thread` on its own; :func:`served` builds a
:class:`ServedRun` from a corpus stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from tests._support._corpus import STREAMS, events

__all__ = [
    "OLD_SLOW_NOTE",
    "DropMode",
    "SLOW_NOTE",
    "RulvarTestServer",
    "ServedRun",
    "frame",
    "serve",
    "serve_in_thread",
    "served",
    "skip_status_line",
]

DropMode = Literal["none", "slow", "midframe", "clean"]
# The Rulvar server's slow-consumer close note, verbatim, and the wording older servers used.
SLOW_NOTE = (
    b": pending frames reached maxPendingEventsPerClient (20); reconnect with Last-Event-ID to continue\n\n"
)
OLD_SLOW_NOTE = b": slow consumer: the client fell behind; closing (reconnect with Last-Event-ID)\n\n"


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
    producing: bool = False  # still emitting: connections stay open for events published later
    feeds: set[asyncio.Queue[bytes | None]] = field(default_factory=set[asyncio.Queue[bytes | None]])


@dataclass
class RulvarTestServer:
    runs: dict[str, ServedRun]
    drop_every: int = 0
    drop_mode: DropMode = "none"
    slow_note: bytes = SLOW_NOTE
    # The real server's maxPendingEventsPerClient: a replay longer than this is sent in chunks of
    # this many frames, and a live connection whose queue reaches it is closed (0: no limit).
    max_pending: int = 0
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
        if run.producing:
            await self._live(run, cursor, writer)
            return
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

    def publish(self, run_id: str, event: dict[str, Any], *, last: bool = False) -> None:
        """Emit one event of a producing run to every connection (``last``: the run is done)."""
        run = self.runs[run_id]
        run.events.append(event)
        data = frame(event)
        for feed in list(run.feeds):
            if self.max_pending and feed.qsize() >= self.max_pending:
                feed.put_nowait(self.slow_note)  # the queued frames stay readable, then it closes
                feed.put_nowait(None)
                run.feeds.discard(feed)
            else:
                feed.put_nowait(data)
        if last:
            run.producing = False
            for feed in run.feeds:
                feed.put_nowait(None)
            run.feeds.clear()

    async def _live(self, run: ServedRun, cursor: int | None, writer: asyncio.StreamWriter) -> None:
        # Replay and subscribe in one step (no await between), as the real server does.
        backlog = [e for e in run.events if cursor is None or e["seq"] > cursor]
        cap = self.max_pending
        if cap and len(backlog) > cap:
            writer.write(b"".join(frame(e) for e in backlog[:cap]) + self.slow_note)
            await writer.drain()
            return
        feed: asyncio.Queue[bytes | None] = asyncio.Queue()
        run.feeds.add(feed)
        try:
            writer.write(b"".join(frame(e) for e in backlog))
            await writer.drain()
            while (data := await feed.get()) is not None:
                writer.write(data)
                if feed.empty():
                    await writer.drain()
        finally:
            run.feeds.discard(feed)


def skip_status_line(write: Any) -> Any:
    """Wrap ``write`` so the first call (the response head) is swallowed once."""
    state = {"first": True}

    def wrapped(data: bytes) -> None:
        if state["first"] and data.startswith(b"HTTP/1.1"):
            state["first"] = False
            return
        write(data)

    return wrapped


def _status_of(name: str, run_events: list[dict[str, Any]]) -> dict[str, Any]:
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
    return evs[0]["runId"], ServedRun(evs, _status_of(name, evs), **kw)
