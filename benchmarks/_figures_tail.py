"""Figure 9: a live tail keeping up with a busy run through the server's 20-frame limit.

The repo's Rulvar test server (``tests._support.RulvarTestServer``) emits a run live at a fixed
rate and, like the real server's ``maxPendingEventsPerClient = 20``, replays a backlog in chunks
of 20 frames, closing after each with the real server's slow-consumer note. The tail
(``follow_server_run`` drained by ``to_otel`` into an SDK tracer) starts one second late, so it
must catch up through those chunks while the run keeps emitting. Measured: how fast it caught
up, and how far behind it was when the run ended (the time from the server emitting the final
``run:end`` to the tail delivering it). Target: at most 1 s behind at run end.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from benchmarks._report import Figure

__all__ = ["bench_tail"]

_RUN = "01M8MAV4AESBHNV5V3MVF0NJJB"
_PENDING_LIMIT = 20


def _event(seq: int, kind: str, span: str, **extra: Any) -> dict[str, Any]:
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return {"runId": _RUN, "seq": seq, "ts": ts, "spanId": span, "type": kind, **extra}


def _body(seq: int) -> dict[str, Any]:
    """The run's events after run:start (seq 0): agents each making one tool call, in fours."""
    agent = f"a{(seq - 1) // 4}"
    step = (seq - 1) % 4
    if step == 0:
        return _event(seq, "agent:start", agent, parentSpanId="s0", agentType="w", role="loop")
    if step == 1:
        return _event(seq, "tool:start", agent, toolName="search", toolCallId=f"c{seq}")
    if step == 2:
        return _event(seq, "tool:end", agent, toolName="search", toolCallId=f"c{seq - 1}", outcome="ok")
    return _event(seq, "agent:end", agent, status="ok")


async def _measure(rate: int, seconds: float, late_s: float) -> dict[str, float]:
    from opentelemetry.sdk.trace import TracerProvider

    from rulvar_otel.otel import to_otel
    from rulvar_otel.sources.sse import follow_server_run
    from tests._support import RulvarTestServer, ServedRun

    run = ServedRun([], {"runId": _RUN, "status": "ok", "live": True}, producing=True)
    server = RulvarTestServer({_RUN: run}, max_pending=_PENDING_LIMIT)
    await server.start()
    total = int(rate * seconds)
    emitted_at: dict[int, float] = {}
    delivered_at: dict[int, float] = {}

    async def produce() -> None:
        started = time.monotonic()
        server.publish(_RUN, _event(0, "run:start", "s0", workflow="busy"))
        emitted_at[0] = started
        seq = 1
        while seq < total:
            due = min(total, 1 + int((time.monotonic() - started) * rate))
            while seq < due:
                last = seq == total - 1
                event = _event(seq, "run:end", "s0", status="ok") if last else _body(seq)
                server.publish(_RUN, event, last=last)
                emitted_at[seq] = time.monotonic()
                seq += 1
            await asyncio.sleep(0.002)

    async def tail() -> tuple[int, int]:
        await asyncio.sleep(late_s)
        handle = follow_server_run(server.url, _RUN)
        handle.on("*", lambda e: delivered_at.setdefault(e["seq"], time.monotonic()))  # type: ignore[index]
        spans = await to_otel(handle, TracerProvider().get_tracer("bench"))
        return spans, handle.stats.connections

    try:
        _, (spans, connections) = await asyncio.gather(produce(), tail())
    finally:
        await server.stop()
    start = min(delivered_at.values())
    # Caught up: the first delivery within one 20-frame chunk of the newest emitted event.
    caught = next(
        (
            at
            for seq, at in sorted(delivered_at.items())
            if seq >= _latest_before(emitted_at, at) - _PENDING_LIMIT
        ),
        delivered_at[total - 1],
    )
    backlog = sum(1 for at in emitted_at.values() if at <= caught)
    return {
        "events": total,
        "delivered": len(delivered_at),
        "spans": spans,
        "connections": connections,
        "catch_up_s": caught - start,
        "catch_up_rate": backlog / max(caught - start, 1e-9),
        "lag_at_end_s": delivered_at[total - 1] - emitted_at[total - 1],
    }


def _latest_before(emitted_at: dict[int, float], moment: float) -> int:
    return max((seq for seq, at in emitted_at.items() if at <= moment), default=0)


def bench_tail(quick: bool) -> list[Figure]:
    rate = 2_000
    seconds = 2.0 if quick else 6.0
    r = asyncio.run(_measure(rate, seconds, late_s=1.0))
    complete = r["delivered"] == r["events"]
    return [
        Figure(
            "tail",
            f"tail of a run emitting {rate} ev/s for {seconds:g} s, started 1 s late, through a "
            f"{_PENDING_LIMIT}-frame server limit: {int(r['delivered'])}/{int(r['events'])} events over "
            f"{int(r['connections'])} connections, caught up in {r['catch_up_s']:.2f} s",
            f"{r['lag_at_end_s'] * 1e3:8.1f} ms behind at run end, "
            f"catch-up {r['catch_up_rate'] / 1e3:5.1f}k ev/s",
            f"the run's rate {rate / 1e3:.1f}k ev/s",
            r["catch_up_rate"] / rate,
            "<= 1 s behind at run end, every event",
            complete and r["lag_at_end_s"] <= 1.0,
        )
    ]
