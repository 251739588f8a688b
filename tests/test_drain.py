"""drain feeds every sink the same events and finishes each with the same outcome, whatever breaks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.drain import FanOut, Sink, drain, drain_events
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
