"""A recorded run reads its stream the same way buffered or not, sync or async, and its listeners
can fail without touching the stream: each failure is logged once, masked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from rulvar_otel.core.handle import RecordedRunHandle, RunOutcome, handle_from_events
from rulvar_otel.core.masking import MASKED_SECRET
from rulvar_otel.core.run_source import Listeners, RecordedRun, as_sync_handle
from rulvar_otel.errors import SourceError
from rulvar_otel.export import StreamedRun
from rulvar_otel.sources.sse import ServerRunHandle
from tests._support import events

SECRET = "sk-abc123def456ghi789jkl012"


class Counted:
    """A plain-iterable source that counts the events taken from it."""

    def __init__(self, stream: list[dict[str, Any]]) -> None:
        self.stream = stream
        self.taken = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for event in self.stream:
            self.taken += 1
            yield event


async def _async_source(stream: list[dict[str, Any]], taken: list[int]) -> AsyncIterator[dict[str, Any]]:
    for event in stream:
        taken.append(1)
        yield event


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "rulvar_otel" and r.levelno == logging.WARNING
    ]


# --- listeners ------------------------------------------------------------------------------------


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_raising_listener_is_logged_once_and_the_stream_goes_on(
    buffered: bool, caplog: pytest.LogCaptureFixture
) -> None:
    stream = events("tools")
    run = RecordedRun(stream, buffered=buffered)
    seen: list[object] = []

    def boom(event: object) -> None:
        raise RuntimeError("listener bug")

    def other_boom(event: object) -> None:
        raise ValueError("another bug")

    run.on("*", boom)
    run.on("*", seen.append)
    run.on("run:end", other_boom)
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        assert list(run.iter_sync()) == stream
    assert len(seen) == len(stream)  # the listener after the failing one got every event
    logged = _warnings(caplog)
    assert len(logged) == 2  # once per failing listener, however often each raised
    assert any("RuntimeError" in text for text in logged) and any("ValueError" in text for text in logged)


def test_a_listeners_failure_text_is_masked(caplog: pytest.LogCaptureFixture) -> None:
    run = RecordedRun(events("minimal"))

    def leak(event: object) -> None:
        raise RuntimeError(f"listener leaked {SECRET}")

    run.on("*", leak)
    with caplog.at_level(logging.WARNING, logger="rulvar_otel"):
        list(run.iter_sync())
    (text,) = _warnings(caplog)
    assert SECRET not in text and MASKED_SECRET in text


def test_dispatch_returns_the_first_failure_and_off_stops_a_listener() -> None:
    listeners = Listeners()
    calls: list[str] = []
    first, second = RuntimeError("first"), RuntimeError("second")

    def a(event: object) -> None:
        calls.append("a")
        raise first

    def b(event: object) -> None:
        calls.append("b")
        raise second

    off_a = listeners.on("x", a)
    listeners.on("*", b)
    assert listeners.dispatch({}, "x") is first
    assert calls == ["a", "b"]  # the type's listeners, then every-type ones
    off_a()
    off_a()  # a second off does nothing
    assert listeners.dispatch({}, "x") is second
    assert listeners.dispatch({}, None) is second  # an untyped item reaches only "*"
    assert calls == ["a", "b", "b", "b"]


def test_a_listener_may_turn_itself_off_while_being_called() -> None:
    listeners = Listeners()
    calls: list[object] = []

    def once(event: object) -> None:
        calls.append(event)
        off()

    off = listeners.on("*", once)
    listeners.dispatch(1, "t")
    listeners.dispatch(2, "t")
    assert calls == [1]


# --- run_id never reads the stream ahead ---------------------------------------------------------


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_run_id_looks_at_the_first_event_only_and_hands_it_out_first(buffered: bool) -> None:
    stream = events("minimal")
    source = Counted(stream)
    run = RecordedRun(source, buffered=buffered)
    assert run.run_id == stream[0]["runId"]
    assert source.taken == 1  # nothing past the first event
    seen: list[object] = []
    run.on("*", seen.append)  # registered after run_id: the first event was not dispatched yet
    assert list(run.iter_sync()) == stream
    assert seen == stream


def test_run_id_of_an_async_source_reads_nothing() -> None:
    stream = events("minimal")
    taken: list[int] = []
    run = RecordedRun(_async_source(stream, taken), buffered=False)
    assert run.run_id == "" and taken == []

    async def read() -> list[Any]:
        return [e async for e in run.events]

    assert asyncio.run(read()) == stream
    assert run.run_id == stream[0]["runId"]  # seen as it passed


def test_a_given_run_id_wins_and_reads_nothing() -> None:
    source = Counted(events("minimal"))
    run = RecordedRun(source, run_id="given")
    assert run.run_id == "given" and source.taken == 0


# --- buffered and unbuffered ------------------------------------------------------------------------


def test_a_buffered_run_replays_its_events_to_every_consumer() -> None:
    stream = events("tools")
    source = Counted(stream)
    run = RecordedRun(source)

    async def read() -> list[Any]:
        return [e async for e in run.events]

    assert list(run.iter_sync()) == stream
    assert asyncio.run(read()) == stream
    assert source.taken == len(stream)  # read once, replayed from the buffer


def test_an_unbuffered_run_is_read_once() -> None:
    run = RecordedRun(events("minimal"), buffered=False)
    list(run.iter_sync())
    with pytest.raises(SourceError):
        run.iter_sync()
    with pytest.raises(SourceError):
        run.events  # noqa: B018 - the property claims the stream


def test_a_buffered_result_reads_the_rest_and_an_unbuffered_one_says_what_was_read() -> None:
    stream = events("minimal")
    assert stream[-1]["type"] == "run:end"
    buffered = RecordedRun(stream)
    assert asyncio.run(_settle(buffered)).status == stream[-1]["status"]
    unbuffered = RecordedRun(stream, buffered=False)
    with pytest.raises(SourceError):
        asyncio.run(_settle(unbuffered))  # nothing read yet: no run:end known
    list(unbuffered.iter_sync())
    assert asyncio.run(_settle(unbuffered)).status == stream[-1]["status"]


async def _settle(run: RecordedRun) -> RunOutcome:
    return await run.result


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_sync_and_async_sources_give_the_same_events(buffered: bool) -> None:
    stream = events("tools")

    async def read(run: RecordedRun) -> list[Any]:
        return [e async for e in run.events]

    assert asyncio.run(read(RecordedRun(stream, buffered=buffered))) == stream
    assert asyncio.run(read(RecordedRun(_async_source(stream, []), buffered=buffered))) == stream
    assert list(RecordedRun(stream, buffered=buffered).iter_sync()) == stream
    with pytest.raises(TypeError):
        RecordedRun(_async_source(stream, []), buffered=buffered).iter_sync()


# --- one name for the outcome ----------------------------------------------------------------------


def test_the_outcome_now_is_the_given_one_or_the_last_run_end_read() -> None:
    stream = events("minimal")
    given = RunOutcome(status="failed")
    assert RecordedRun(stream, given).outcome_now() is given
    assert RecordedRun(stream, {"status": "ok"}).given_outcome == RunOutcome(status="ok")
    derived = RecordedRun(stream)
    assert derived.given_outcome is None
    assert isinstance(derived.outcome_now(), SourceError)  # nothing read yet
    list(derived.iter_sync())
    outcome = derived.outcome_now()
    assert isinstance(outcome, RunOutcome) and outcome.status == stream[-1]["status"]


def test_every_recorded_handle_has_one_outcome_name() -> None:
    for cls in (RecordedRun, StreamedRun, ServerRunHandle):
        assert not hasattr(cls, "settle_now")
    assert RecordedRunHandle is RecordedRun
    assert isinstance(handle_from_events([]), RecordedRun)
    assert isinstance(StreamedRun([]), RecordedRun) and not StreamedRun([]).buffered


def test_a_recorded_run_is_recognized_without_touching_its_stream() -> None:
    run = StreamedRun(events("minimal"))
    assert as_sync_handle(run) and as_sync_handle(handle_from_events([]))
    assert not as_sync_handle(object())
    assert list(run.iter_sync()) == events("minimal")  # the check did not claim the stream
