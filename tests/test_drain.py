"""drain feeds every sink the same events and finishes each with the same outcome, whatever breaks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.drain import FanOut, Interrupts, Sink, drain, drain_events, drain_run
from rulvar_otel.core.handle import RunOutcome, handle_from_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.core.progress import ProgressState
from rulvar_otel.core.reducers import (
    critical_path_fold,
    invocation_table_fold,
    reduce_critical_path,
    reduce_invocation_table,
)
from rulvar_otel.errors import RunRejectedError
from rulvar_otel.export import StreamedRun
from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel.metrics import MetricsRecorder
from rulvar_otel.testing import SpanCapture
from tests._support import ev, events


class Recording:
    """A sink that remembers what it was given."""

    def __init__(self) -> None:
        self.fed: list[Mapping[str, Any]] = []
        self.outcomes: list[RunOutcome | BaseException | None] = []

    def feed(self, event: Mapping[str, Any]) -> None:
        self.fed.append(event)

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        self.outcomes.append(outcome)


class Exploding(Recording):
    def feed(self, event: Mapping[str, Any]) -> None:
        super().feed(event)
        raise RuntimeError("sink bug")

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        super().finish(outcome)
        raise RuntimeError("sink bug at finish")


class BrokenSource:
    """Two events, then the connection dies; the result rejects."""

    run_id = "r1"

    def __init__(self, rejection: BaseException | None) -> None:
        self._rejection = rejection

    @property
    def events(self) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            yield ev("run:start", 0, "s0", workflow="w")
            yield ev("agent:start", 1, "a", "s0", agentType="t", model="m", role="loop")
            raise ConnectionError("stream died")

        return gen()

    @property
    def result(self) -> Any:
        async def settle() -> RunOutcome:
            if self._rejection is not None:
                raise self._rejection
            return RunOutcome(status="ok")

        return settle()

    def on(self, kind: str, callback: Any) -> Any:
        return lambda: None


def _every_kind_of_sink() -> tuple[list[Sink], SpanCapture, InMemoryMetricReader, ProgressState, Recording]:
    capture = SpanCapture()
    reader = InMemoryMetricReader()
    masker = compile_secret_masker()
    mapper = SpanMapper(capture.tracer, masker)
    metrics = MetricsRecorder(MeterProvider(metric_readers=[reader]).get_meter("t"), masker)
    progress = ProgressState()
    recording = Recording()
    return [mapper, metrics, progress, recording], capture, reader, progress, recording


@pytest.mark.parametrize("rejection", [RuntimeError("rejected"), None], ids=["rejecting", "resolving"])
def test_a_source_failing_midway_finishes_every_sink_with_the_runs_outcome(
    rejection: BaseException | None,
) -> None:
    sinks, spans, _, progress, recording = _every_kind_of_sink()
    drained = asyncio.run(drain(BrokenSource(rejection), *sinks))

    assert isinstance(drained.source_error, ConnectionError)
    assert drained.events == 2
    assert [e["type"] for e in recording.fed] == ["run:start", "agent:start"]
    # Every sink was finished exactly once with the same outcome.
    assert len(recording.outcomes) == 1
    assert recording.outcomes[0] is drained.outcome
    assert progress.outcome is drained.outcome
    if rejection is not None:
        assert drained.outcome is rejection
        # Spans the stream left open are ended, and not green: the run did not resolve.
        assert len(spans.ended) == 2
        assert all(s.status.status_code.name == "ERROR" for s in spans.ended)
        assert progress.status == "error"
    else:
        assert isinstance(drained.outcome, RunOutcome)
        assert all(s.status.status_code.name == "OK" for s in spans.ended)


def test_a_rejecting_result_reaches_every_sink_after_a_complete_stream() -> None:
    sinks, spans, reader, progress, recording = _every_kind_of_sink()
    stream = events("minimal")
    rejection = RunRejectedError("nope", name="SettlementError")
    drained = asyncio.run(drain(handle_from_events(stream, rejection), *sinks))

    assert drained.source_error is None
    assert drained.events == len(stream) == len(recording.fed)
    assert recording.outcomes == [rejection]
    assert progress.outcome is rejection
    assert spans.ended  # every span of the stream ended
    data = reader.get_metrics_data()
    assert data is not None and data.resource_metrics  # the recorder finished and flushed


@pytest.mark.parametrize("rejection", [RuntimeError("rejected"), None], ids=["rejecting", "resolving"])
def test_the_reducers_are_sinks_finished_by_the_same_drain(rejection: BaseException | None) -> None:
    table, path = invocation_table_fold(), critical_path_fold()
    drained = asyncio.run(drain(BrokenSource(rejection), table, path))
    assert drained.source_error is not None
    # Finished once by drain: the agent the stream opened is still open in the table.
    assert table.result is not None and table.result.open_agents == 1
    assert path.result is not None and path.result.segments == 1


def test_a_reducer_fold_over_drain_equals_the_reducer_function() -> None:
    stream = events("orchestrate")
    table, path = invocation_table_fold(), critical_path_fold()
    drain_events(stream, table, path)
    assert table.result == reduce_invocation_table(events("orchestrate"))
    assert path.result == reduce_critical_path(events("orchestrate"))


def test_drain_events_reads_the_outcome_from_the_last_run_end() -> None:
    recording = Recording()
    drained = drain_events(events("minimal"), recording)
    assert isinstance(drained.outcome, RunOutcome)
    assert recording.outcomes == [drained.outcome]
    assert drained.last_run_end is not None and drained.last_run_end["type"] == "run:end"


def test_a_source_raising_in_drain_events_is_kept_and_every_sink_still_finishes() -> None:
    def source() -> Any:
        yield ev("run:start", 0, "s0", workflow="w")
        raise ValueError("bad line")

    recording = Recording()
    drained = drain_events(source(), recording)
    assert isinstance(drained.source_error, ValueError)
    assert len(recording.fed) == 1 and len(recording.outcomes) == 1


def test_fan_out_keeps_feeding_the_other_sinks_when_one_raises() -> None:
    bad, good = Exploding(), Recording()
    drained = drain_events(events("minimal"), FanOut([bad, good]))
    assert len(good.fed) == len(bad.fed) == drained.events
    assert good.outcomes == bad.outcomes == [drained.outcome]


# --- one loop: sync and async, interrupts, failing sinks ---------------------------------------------


def _interrupted_midway(stop: BaseException) -> Any:
    def gen() -> Any:
        yield from events("minimal")[:2]
        raise stop

    return gen()


class Absorbing(Interrupts):
    """An interrupt policy that ends the stream at the stop, as the exporter's does."""

    def __init__(self) -> None:
        super().__init__()
        self.stops: list[BaseException] = []

    def absorb(self, stop: BaseException) -> bool:
        self.stops.append(stop)
        return True


def test_a_recorded_run_drains_without_an_event_loop_with_the_outcome_it_knows() -> None:
    stream, sink = events("tools"), Recording()
    drained = drain_run(StreamedRun(stream), sink)
    assert drained.events == len(sink.fed) == len(stream) and not drained.interrupted
    assert isinstance(drained.outcome, RunOutcome) and drained.outcome.status == stream[-1]["status"]
    assert sink.outcomes == [drained.outcome]


def test_drain_reads_a_recorded_run_the_same_way_its_sync_twin_does() -> None:
    stream = events("tools")
    sync_sink, async_sink = Recording(), Recording()
    by_loop = drain_run(handle_from_events(stream), sync_sink)
    awaited = asyncio.run(drain(handle_from_events(stream), async_sink))
    assert sync_sink.fed == async_sink.fed
    assert by_loop.outcome == awaited.outcome and by_loop.events == awaited.events


def test_a_ctrl_c_during_a_sync_drain_finishes_every_sink_unsettled_and_propagates() -> None:
    sink = Recording()
    with pytest.raises(KeyboardInterrupt):
        drain_events(_interrupted_midway(KeyboardInterrupt()), sink)
    assert len(sink.fed) == 2
    assert len(sink.outcomes) == 1 and isinstance(sink.outcomes[0], KeyboardInterrupt)


def test_an_absorbing_interrupt_hook_ends_the_stream_and_reports_interrupted() -> None:
    sink, hook = Recording(), Absorbing()
    drained = drain_events(_interrupted_midway(KeyboardInterrupt()), sink, interrupts=hook)
    assert drained.interrupted and drained.events == 2 and drained.source_error is None
    assert len(hook.stops) == 1 and isinstance(hook.stops[0], KeyboardInterrupt)
    assert sink.outcomes == [drained.outcome]


def test_a_requested_stop_ends_the_stream_before_the_next_read() -> None:
    hook = Interrupts()

    class StopAfterTwo(Recording):
        def feed(self, event: Mapping[str, Any]) -> None:
            super().feed(event)
            hook.requested = len(self.fed) >= 2  # a signal handler would set it

    sink = StopAfterTwo()
    drained = drain_events(events("tools"), sink, interrupts=hook)
    assert drained.interrupted and drained.events == len(sink.fed) == 2


def test_cancelling_an_async_drain_finishes_the_sinks_unless_the_hook_absorbs_it() -> None:
    async def stream(stop_after: int) -> AsyncIterator[Any]:
        for event in events("minimal")[:stop_after]:
            yield event
        raise asyncio.CancelledError

    class Live(BrokenSource):
        @property
        def events(self) -> AsyncIterator[Any]:
            return stream(2)

    sink = Recording()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(drain(Live(None), sink))
    assert len(sink.fed) == 2 and isinstance(sink.outcomes[0], asyncio.CancelledError)

    sink, hook = Recording(), Absorbing()
    drained = asyncio.run(drain(Live(None), sink, interrupts=hook))
    assert drained.interrupted and drained.events == 2
    assert isinstance(drained.outcome, asyncio.CancelledError)  # the result was not awaited


def test_a_broken_stream_result_is_awaited_unless_asked_not_to() -> None:
    awaited = asyncio.run(drain(BrokenSource(None), Recording()))
    assert isinstance(awaited.source_error, ConnectionError) and awaited.outcome == RunOutcome(status="ok")
    skipped = asyncio.run(drain(BrokenSource(None), Recording(), settle_broken=False))
    assert skipped.outcome is skipped.source_error


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_failing_sink_costs_no_other_sink_an_event_on_either_path(path: str) -> None:
    bad, good = Exploding(), Recording()
    stream = events("tools")
    if path == "sync":
        drained = drain_events(stream, bad, good)
    else:
        drained = asyncio.run(drain(handle_from_events(_as_async(stream)), bad, good))
    assert len(good.fed) == len(bad.fed) == drained.events == len(stream)
    assert good.outcomes == bad.outcomes == [drained.outcome]


async def _as_async(stream: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for event in stream:
        yield event
