"""``tail`` against hostile servers: every mode ends, bounded in time and memory, and says why.

Each server below speaks real HTTP on 127.0.0.1 and misbehaves one way: it never answers, answers
and then says nothing, sends one event per connection and closes (honouring ``Last-Event-ID`` or
not), sends an endless data line, or floods the stream with comments, heartbeats, bad frames and
frames for another run.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.errors import SourceError
from rulvar_otel.sources.sse import ReconnectPolicy, ServerRunHandle
from tests._support import RulvarTestServer, frame, serve, serve_in_thread, served

pytestmark = pytest.mark.timeout(60)

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n"


class Recorder:
    """A fake sleep that records every backoff (the follower never waits for real)."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


async def _drain(handle: ServerRunHandle, bound_s: float = 20) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        return [e async for e in handle.events]  # type: ignore[misc]

    return await asyncio.wait_for(run(), bound_s)


class Silent(RulvarTestServer):
    """Accepts the connection, reads the request, never answers."""

    async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3600)


class HeadOnly(RulvarTestServer):
    """Answers 200 with an event-stream head, then never sends a byte."""

    async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        await writer.drain()
        await asyncio.sleep(3600)


async def test_a_server_that_never_answers_is_a_failed_attempt_each_time() -> None:
    server = Silent({})
    await server.start()
    try:
        policy = ReconnectPolicy(max_attempts=3, response_timeout_s=0.2, read_timeout_s=300)
        sleep = Recorder()
        handle = ServerRunHandle(server.url, "r", policy=policy, sleep=sleep)
        with pytest.raises(SourceError, match=r"after 3 attempts .*\(last: no response within"):
            await _drain(handle)
    finally:
        await server.stop()
    assert handle.stats.connections == 3
    assert sleep.slept == [0.25, 0.5]  # and it backed off between them


async def test_a_server_that_answers_and_then_says_nothing_is_a_failed_attempt() -> None:
    server = HeadOnly({})
    await server.start()
    try:
        policy = ReconnectPolicy(max_attempts=2, read_timeout_s=0.2)
        handle = ServerRunHandle(server.url, "r", policy=policy, sleep=Recorder())
        with pytest.raises(SourceError, match=r"after 2 attempts without progress \(last: ReadTimeout\)"):
            await _drain(handle)
    finally:
        await server.stop()
    assert handle.stats.connections == 2


async def test_a_quiet_stream_that_is_alive_is_not_a_failed_attempt() -> None:
    # Heartbeats, then silence past the idle timeout, three times: a quiet run, not a dead server.
    run_id, run = served("minimal")

    class Quiet(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            if len(self.requests) <= 3:
                writer.write(HEAD + b": heartbeat\n\n")
                await writer.drain()
                await asyncio.sleep(3600)
            await super()._events(rid, last, writer)

    server = Quiet({run_id: run})
    await server.start()
    try:
        policy = ReconnectPolicy(max_attempts=2, read_timeout_s=0.2)
        handle = ServerRunHandle(server.url, run_id, policy=policy, sleep=Recorder())
        got = await _drain(handle)
    finally:
        await server.stop()
    assert got == run.events and handle.stats.heartbeats >= 3 and not handle.notes


class OneEventPerConnection(RulvarTestServer):
    """Sends one event, then closes; ``resume`` says whether it honours ``Last-Event-ID``."""

    resume = True

    async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
        run = self.runs[rid]
        writer.write(HEAD)
        cursor = int(last) if last is not None and self.resume else -1
        pending = [e for e in run.events if e["seq"] > cursor]
        writer.write(frame(pending[0]))
        await writer.drain()


async def test_a_connection_that_delivered_new_events_reconnects_at_once() -> None:
    run_id, run = served("minimal")
    server = OneEventPerConnection({run_id: run})
    await server.start()
    try:
        sleep = Recorder()
        handle = ServerRunHandle(server.url, run_id, policy=ReconnectPolicy(), sleep=sleep)
        got = await _drain(handle)
    finally:
        await server.stop()
    assert got == run.events  # each connection progressed by one event
    # Progress is never waited on: a replay in the server's bounded chunks keeps its pace.
    assert sleep.slept == []
    assert handle.stats.connections == len(run.events) and handle.stats.reconnects == len(run.events) - 1


class _ProgressThenNothing(RulvarTestServer):
    """Odd connections deliver the next event; even ones close at once with nothing."""

    calls = 0

    async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
        self.calls += 1
        writer.write(HEAD)
        if self.calls % 2 == 0:
            return
        cursor = int(last) if last is not None else -1
        writer.write(frame(next(e for e in self.runs[rid].events if e["seq"] > cursor)))
        await writer.drain()


async def test_only_connections_without_progress_back_off_and_progress_resets_the_backoff() -> None:
    run_id, run = served("minimal")
    server = _ProgressThenNothing({run_id: run})
    await server.start()
    try:
        sleep = Recorder()
        policy = ReconnectPolicy(max_attempts=2, initial_backoff_s=0.25)
        handle = ServerRunHandle(server.url, run_id, policy=policy, sleep=sleep)
        got = await _drain(handle)
    finally:
        await server.stop()
    assert got == run.events
    # One wait per empty connection, each the first step of the backoff: progress reset it.
    assert sleep.slept == [0.25] * (len(run.events) - 1)


async def test_a_server_that_repeats_its_first_event_and_closes_is_given_up_on() -> None:
    run_id, run = served("minimal")
    server = OneEventPerConnection({run_id: run})
    server.resume = False
    await server.start()
    try:
        sleep = Recorder()
        handle = ServerRunHandle(server.url, run_id, policy=ReconnectPolicy(max_attempts=4), sleep=sleep)
        with pytest.raises(SourceError, match="after 4 attempts without progress"):
            await _drain(handle)
    finally:
        await server.stop()
    assert handle.stats.delivered == 1 and handle.stats.duplicates_dropped == 4
    assert sleep.slept == [0.25, 0.5, 1.0]  # the first connection progressed: no wait


async def test_an_endless_data_line_is_cut_at_the_frame_limit() -> None:
    chunk = b"x" * 65536

    class Endless(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            writer.write(HEAD + b"id: 0\ndata: ")
            for _ in range(4096):  # 256 MiB if nobody stops reading
                writer.write(chunk)
                await writer.drain()

    server = Endless({})
    await server.start()
    tracemalloc.start()
    try:
        policy = ReconnectPolicy(max_attempts=2, max_frame_bytes=1024 * 1024)
        handle = ServerRunHandle(server.url, "r", policy=policy, sleep=Recorder())
        with pytest.raises(SourceError, match=r"last: a frame passed 1048576 bytes"):
            await _drain(handle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await server.stop()
    assert peak < 16 * 1024 * 1024, peak  # the limit plus a read buffer, never the line
    assert [n.kind for n in handle.notes] == ["oversize", "oversize"]


def _flooding_server(run_id: str, run: Any) -> RulvarTestServer:
    class Flood(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            writer.write(HEAD)
            other = dict(run.events[0], runId="another-run")
            for i in range(3000):
                writer.write(b":\n: heartbeat\n: ping\n\n")
                writer.write(f": note {i} from the server\n\n".encode())
                writer.write(frame(other))
                writer.write(b"data: {not json\n\n")
            await writer.drain()
            for event in run.events:
                writer.write(frame(event))
            await writer.drain()

    return Flood({run_id: run})


async def test_a_flood_of_comments_and_foreign_frames_is_counted_not_kept() -> None:
    run_id, run = served("tools")
    server = _flooding_server(run_id, run)
    await server.start()
    try:
        handle = ServerRunHandle(server.url, run_id, policy=ReconnectPolicy(), sleep=Recorder())
        got = await _drain(handle)
    finally:
        await server.stop()
    assert got == run.events
    assert handle.stats.heartbeats == 9000
    assert len(handle.notes) == 1000  # kept notes are bounded; the rest are only counted
    assert {n.kind for n in handle.notes} == {"comment", "other-run", "bad-frame"}


def test_tail_summarizes_a_flood_in_a_few_lines(tmp_path: Path) -> None:
    run_id, run = served("tools")
    out = tmp_path / "spans.jsonl"
    with serve_in_thread({}, server=_flooding_server(run_id, run)) as server:
        result = CliRunner().invoke(
            app,
            ["tail", "--server", server.url, "--run", run_id, "--out", str(out), "--progress", "off"],
        )
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) <= 6, lines
    assert "rulvar-otel: the server sent 3000 comment notes (first: note 0 from the server)" in lines
    assert "rulvar-otel: skipped 3000 frames naming another run" in lines
    assert any(line.startswith("rulvar-otel: skipped 3000 frames that were not events") for line in lines)
    spans = [
        s
        for line in out.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    assert spans and all(s["traceId"] == spans[0]["traceId"] for s in spans)


async def test_a_closed_port_is_given_up_on_with_bounded_waits() -> None:
    # Nothing listens any more: bounded attempts, bounded waits.
    async with serve({}) as server:
        url = server.url
    sleep = Recorder()
    handle = ServerRunHandle(url, "r", policy=ReconnectPolicy(max_attempts=8), sleep=sleep)
    with pytest.raises(SourceError, match="after 8 attempts"):
        await _drain(handle)
    assert len(sleep.slept) == 7 and sum(sleep.slept) <= 8 * ReconnectPolicy().max_backoff_s


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_sse_lines_split_the_same_at_every_chunk_boundary(ending: bytes) -> None:
    from rulvar_otel.sources._sse_lines import LineSplitter

    expected = [": note", "id: 1", 'data: {"a": "\u00e9"}', "", "data: x", ""]
    text = b"".join(line.encode() + ending for line in expected)
    for cut in range(len(text) + 1):
        splitter = LineSplitter(1024)
        assert splitter.feed(text[:cut]) + splitter.feed(text[cut:]) == expected, cut


def test_an_sse_line_over_the_limit_is_refused_before_it_grows() -> None:
    from rulvar_otel.sources._sse_lines import LineSplitter, OversizeLineError

    splitter = LineSplitter(1024)
    assert splitter.feed(b"data: " + b"x" * 1000) == []
    with pytest.raises(OversizeLineError):
        splitter.feed(b"x" * 100)


class _RepeatsFirstEvent(OneEventPerConnection):
    resume = False


class _EndlessLine(RulvarTestServer):
    async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + b"id: 0\ndata: ")
        for _ in range(4096):
            writer.write(b"y" * 65536)
            await writer.drain()


@pytest.mark.parametrize(
    ("server_class", "reason"),
    [
        (Silent, "no response within 0.3 s"),
        (HeadOnly, "ReadTimeout"),
        (_RepeatsFirstEvent, "the server closed the stream before the run ended"),
        (_EndlessLine, "a frame passed 1048576 bytes"),
    ],
)
def test_tail_gives_up_on_each_hostile_server_within_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_class: type[RulvarTestServer], reason: str
) -> None:
    import functools
    import time

    from rulvar_otel.cli import _tail

    policy = functools.partial(
        ReconnectPolicy, response_timeout_s=0.3, max_backoff_s=0.2, max_frame_bytes=1024 * 1024
    )
    monkeypatch.setattr(_tail, "ReconnectPolicy", policy)
    run_id, run = served("minimal")
    started = time.monotonic()
    with serve_in_thread({}, server=server_class({run_id: run})) as server:
        result = CliRunner().invoke(
            app,
            [
                "tail",
                "--server",
                server.url,
                "--run",
                run_id,
                "--out",
                str(tmp_path / "spans.jsonl"),
                "--progress",
                "off",
                "--max-attempts",
                "3",
                "--idle-timeout",
                "0.3",
            ],
        )
    elapsed = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert f"after 3 attempts without progress (last: {reason})" in result.stderr
    assert elapsed < 15, elapsed


def test_sse_frames_decode_the_same_at_every_chunk_boundary() -> None:
    from rulvar_otel.sources._sse_lines import FrameDecoder, SseItem

    text = b': note\n\nid: 1\nevent: x\ndata: {"a":\ndata:  1}\n\n:\n\ndata: tail-cut-mid-frame'
    expected = [SseItem(True, " note"), SseItem(False, '{"a":\n 1}'), SseItem(True, "")]
    for cut in range(len(text) + 1):
        decoder = FrameDecoder(1024)
        assert decoder.feed(text[:cut]) + decoder.feed(text[cut:]) == expected, cut


def test_a_frame_of_many_data_lines_over_the_limit_is_refused() -> None:
    from rulvar_otel.sources._sse_lines import FrameDecoder, OversizeLineError

    decoder = FrameDecoder(1024)
    with pytest.raises(OversizeLineError):
        for _ in range(200):
            decoder.feed(b"data: " + b"x" * 10 + b"\n")
