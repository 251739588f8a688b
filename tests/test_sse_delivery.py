"""The SSE source's delivery rules: seqs tracked as a set, bounded reads, truthful outcomes.

Against the repo's Rulvar test server on 127.0.0.1 (real HTTP, real sockets), with the real
server's wording for its notes and status bodies.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rulvar_otel.errors import ResponseLimitError, SourceError
from rulvar_otel.sources._seq_set import SeqSet
from rulvar_otel.sources.sse import STATUS_BODY_LIMIT, ReconnectPolicy, follow_server_run
from tests._support import RulvarTestServer, frame, serve, served

pytestmark = pytest.mark.timeout(60)

FAST = ReconnectPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, max_attempts=5, read_timeout_s=10)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n"


async def _drain(handle: Any) -> list[dict[str, Any]]:
    return await asyncio.wait_for(_collect(handle), 30)


async def _collect(handle: Any) -> list[dict[str, Any]]:
    return [e async for e in handle.events]


class _Scripted(RulvarTestServer):
    """Sends ``script`` (lists of events, one per connection), then closes each connection."""

    script: tuple[list[dict[str, Any]], ...] = ()
    answered = 0

    async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        batch = self.script[self.answered] if self.answered < len(self.script) else []
        self.answered += 1
        for event in batch:
            writer.write(frame(event))
        await writer.drain()


async def test_events_out_of_order_export_and_true_duplicates_drop() -> None:
    run_id, run = served("tools")
    evs = run.events
    middle = len(evs) // 2
    shuffled = evs[middle:-1] + evs[:middle]  # the second half first, then the first half
    server = _Scripted({run_id: run})
    # One connection out of order, the next repeats all of it and adds the run:end.
    server.script = (shuffled, [*shuffled, evs[-1]])
    await server.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await _drain(handle)
    finally:
        await server.stop()
    assert sorted(e["seq"] for e in got) == [e["seq"] for e in evs]  # every event once
    assert handle.stats.duplicates_dropped == len(shuffled)


async def test_one_frame_with_a_huge_seq_does_not_make_later_events_duplicates() -> None:
    run_id, run = served("tools")
    evs = run.events
    huge = dict(evs[1], seq=2**62)
    server = _Scripted({run_id: run})
    server.script = ([evs[0], huge, *evs[1:]],)
    await server.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await _drain(handle)
    finally:
        await server.stop()
    assert [e["seq"] for e in got] == [0, 2**62, *(e["seq"] for e in evs[1:])]
    assert handle.stats.duplicates_dropped == 0


@given(st.lists(st.integers(min_value=0, max_value=300), max_size=400), st.integers(2, 8))
def test_seq_set_is_a_set_until_its_bound_and_never_forgets_a_delivered_seq(
    seqs: list[int], bound: int
) -> None:
    delivered = SeqSet(max_ranges=bound)
    seen: set[int] = set()
    for seq in seqs:
        new = delivered.add(seq)
        if delivered.forgotten == 0:
            assert new == (seq not in seen)  # exactly a set while nothing was merged
        elif seq in seen:
            assert not new  # a delivered seq is never delivered twice, merged or not
        seen.add(seq)
        assert delivered.ranges <= bound
    assert all(seq in delivered for seq in seen)


def test_seq_set_memory_stays_bounded_on_every_other_seq() -> None:
    delivered = SeqSet()
    tracemalloc.start()
    try:
        for seq in range(0, 2_000_000, 2):
            delivered.add(seq)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert delivered.ranges <= 4096 and delivered.forgotten > 0
    assert peak < 4 * 1024 * 1024


class _BigStatus(RulvarTestServer):
    """``GET /runs/:id`` answers 64 MiB of JSON in 1 MiB writes (gzip-encoded when ``gzipped``)."""

    gzipped = False

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        target = request.split(b" ", 2)[1].decode()
        try:
            if target.endswith("/events"):
                writer.write(HEAD + b": run is not live in this process\n\n")
                return
            packer = zlib.compressobj(wbits=31) if self.gzipped else None
            encoding = b"content-encoding: gzip\r\n" if self.gzipped else b""
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + encoding + b"\r\n")
            chunk = b"x" * (1 << 20)
            for index in range(64):
                raw = (b'{"status": "ok", "pad": "' if index == 0 else b"") + chunk
                writer.write(packer.compress(raw) if packer is not None else raw)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("gzipped", [False, True])
async def test_a_status_body_past_its_bound_is_a_typed_error_read_no_further(gzipped: bool) -> None:
    run_id, run = served("minimal", live=False)
    server = _BigStatus({run_id: run})
    server.gzipped = gzipped  # a small gzip body that inflates past the bound counts inflated
    await server.start()
    tracemalloc.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        await _drain(handle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await server.stop()
    # The status could not be read: the outcome falls back to the stream's (no run:end).
    with pytest.raises(SourceError):
        await handle.result
    assert peak < 3 * STATUS_BODY_LIMIT


async def test_fetch_run_status_raises_response_limit_error() -> None:
    import httpx

    from rulvar_otel.sources.sse import fetch_run_status

    run_id, run = served("minimal")
    server = _BigStatus({run_id: run})
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            with pytest.raises(ResponseLimitError, match=f"passed {STATUS_BODY_LIMIT} bytes"):
                await fetch_run_status(client, run_id, server=server.url)
    finally:
        await server.stop()


async def test_a_run_the_server_calls_running_but_unsettled_is_reported_as_such() -> None:
    # The real server after a restart: the stream says "not live", the status says running,
    # live: false and terminalUnavailable: unsettled.
    run_id, run = served("tools")
    streamed = run.events[:6]
    status = {
        "runId": run_id,
        "status": "running",
        "live": False,
        "capabilities": {"events": False},
        "terminalUnavailable": {
            "reason": "unsettled",
            "message": "no run settle is journaled for this run: nothing durable records a terminal",
        },
    }

    class Restarted(RulvarTestServer):
        async def _events(self, rid: str, last: str | None, writer: asyncio.StreamWriter) -> None:
            writer.write(HEAD)
            if last is None:
                for event in streamed:
                    writer.write(frame(event))
            else:
                writer.write(b": run is not live in this process\n\n")
            await writer.drain()

    run.status = status
    async with serve({run_id: run}) as plain:
        url = plain.url  # a free port for the restarted server below
    server = Restarted({run_id: run}, port=0)
    await server.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=FAST)
        got = await _drain(handle)
        with pytest.raises(SourceError) as caught:
            await handle.result
    finally:
        await server.stop()
    assert got == streamed and url
    message = str(caught.value)
    assert "is unsettled" in message and "answers status 'running', live: false" in message
    assert "terminalUnavailable: unsettled" in message and "6 streamed events" in message
    assert "without a run:end" not in message
    json.dumps(status)


class _GzipBombStream(RulvarTestServer):
    """``GET .../events`` answers a gzip-encoded stream of kilobytes that inflates to 64 MiB of one
    frame's data line; the status route answers 404."""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        target = request.split(b" ", 2)[1].decode()
        try:
            if not target.endswith("/events"):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                return
            packer = zlib.compressobj(wbits=31)
            writer.write(HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: gzip\r\n\r\n"))
            writer.write(packer.compress(b"data: "))
            chunk = b"x" * (1 << 20)
            for _ in range(64):
                writer.write(packer.compress(chunk))
                await writer.drain()
            writer.write(packer.flush())
        except ConnectionError:
            pass
        finally:
            writer.close()


async def test_a_gzip_bomb_event_stream_is_inflated_piecewise_and_refused_at_the_frame_bound() -> None:
    run_id, run = served("minimal")
    server = _GzipBombStream({run_id: run})
    await server.start()
    policy = ReconnectPolicy(
        initial_backoff_s=0.001,
        max_backoff_s=0.01,
        max_attempts=2,
        read_timeout_s=10,
        max_frame_bytes=1 << 20,
    )
    tracemalloc.start()
    try:
        handle = follow_server_run(server.url, run_id, policy=policy)
        with pytest.raises(SourceError, match="a frame passed 1048576 bytes"):
            await _drain(handle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await server.stop()
    # 64 MiB inflated never sits in memory: a frame is refused at its 1 MiB bound.
    assert peak < 8 * (1 << 20), peak
