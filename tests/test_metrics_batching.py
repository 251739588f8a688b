"""The recorder folds in batches and sums counters before the SDK sees them; none of it may show.

The reference below records every observation of every registry fold straight into the SDK, one
``add``/``record`` per observation as each event arrives: the plainest reading of the registry.
The recorder must produce exactly its data points (counts, sums, buckets, min and max) over every
reference stream, and a reader collecting in the middle of a run must see every event observed
so far.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.metrics import Meter, NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import COLLECT_HOOK_NAME, REGISTRY, MetricsRecorder
from rulvar_otel.otel.metrics.registry import FINISH, FoldState, InstrumentKind
from tests._support import adaptive_outcome, adaptive_stream, events, outcome, stream_names

Points = dict[str, dict[frozenset[tuple[str, Any]], Any]]


def _points(reader: InMemoryMetricReader) -> Points:
    """name -> {attribute set: value}; histograms with count, sum, buckets, min and max."""
    out: Points = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                series = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    key = frozenset((point.attributes or {}).items())
                    if isinstance(point, HistogramDataPoint):
                        series[key] = (
                            point.count,
                            point.sum,
                            tuple(point.bucket_counts),
                            point.min,
                            point.max,
                        )
                    elif isinstance(point, NumberDataPoint):
                        series[key] = point.value
    return out


def _reference(stream: Iterable[Mapping[str, Any]], result: RunOutcome | BaseException | None) -> Points:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("reference")
    masker = compile_secret_masker()
    state = FoldState(masker)
    instruments: dict[str, Any] = {}
    for d in REGISTRY:
        if d.kind is InstrumentKind.HISTOGRAM:
            instruments[d.name] = meter.create_histogram(
                d.name, unit=d.unit, explicit_bucket_boundaries_advisory=list(d.buckets or ())
            )
        elif d.kind is InstrumentKind.COUNTER:
            instruments[d.name] = meter.create_counter(d.name, unit=d.unit)
        else:
            instruments[d.name] = meter.create_up_down_counter(d.name, unit=d.unit)

    def fold(kind: str, event: Mapping[str, Any]) -> None:
        for d in REGISTRY:
            if kind not in d.on:
                continue
            for value, raw in d.fold(state, event):
                attributes = {
                    key: masker.mask(v)[:128] if isinstance(v, str) else v
                    for key, v in zip(d.attributes, raw, strict=True)
                    if isinstance(v, str | bool)
                }
                instrument = instruments[d.name]
                if d.kind is InstrumentKind.HISTOGRAM:
                    instrument.record(value, attributes)
                else:
                    instrument.add(value, attributes)

    for event in stream:
        if event.get("replayed") is True:
            continue
        fold(event["type"], event)
        state.advance(event)
    state.outcome = result
    fold(FINISH, {})
    data = _points(reader)
    provider.shutdown()
    return data


@pytest.fixture
def sdk() -> Iterator[tuple[Meter, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider.get_meter("rulvar_otel"), reader
    provider.shutdown()


def _record(meter: Meter, stream: Iterable[Mapping[str, Any]], result: Any) -> MetricsRecorder:
    recorder = MetricsRecorder(meter)
    for event in stream:
        recorder.observe(event)
    recorder.finish(result)
    return recorder


@pytest.mark.parametrize("name", stream_names())
def test_batched_recording_equals_one_call_per_observation(sdk: Any, name: str) -> None:
    meter, reader = sdk
    _record(meter, events(name), outcome(name))
    got = _points(reader)
    assert got == _reference(events(name), outcome(name))
    assert COLLECT_HOOK_NAME not in got  # the hook never reports a value


def test_batched_recording_equals_the_reference_on_the_adaptive_stream(sdk: Any) -> None:
    meter, reader = sdk
    _record(meter, adaptive_stream(), adaptive_outcome())
    assert _points(reader) == _reference(adaptive_stream(), adaptive_outcome())


def test_large_records_what_it_should_in_few_calls(sdk: Any) -> None:
    meter, reader = sdk
    stream = events("large")
    _record(meter, stream, outcome("large"))
    data = _points(reader)
    tool_ends = [e for e in stream if e["type"] == "tool:end"]
    assert sum(data[sc.METRIC_TOOL_CALLS].values()) == len(tool_ends) == 5000
    assert sum(p[0] for p in data[sc.METRIC_TOOL_DURATION].values()) == 5000
    assert sum(data[sc.METRIC_AGENT_INVOCATIONS].values()) == 1000


def test_a_collection_mid_run_sees_every_event_observed_so_far(sdk: Any) -> None:
    meter, reader = sdk
    stream = events("large")
    recorder = MetricsRecorder(meter)
    seen_tools = 0
    for index, event in enumerate(stream, 1):
        recorder.observe(event)
        seen_tools += event["type"] == "tool:end"
        if index in (1, 700, 5_001, 12_345):  # inside batches, never at a run:end
            data = _points(reader)
            calls = sum(data.get(sc.METRIC_TOOL_CALLS, {}).values())
            durations = sum(p[0] for p in data.get(sc.METRIC_TOOL_DURATION, {}).values())
            assert calls == durations == seen_tools
    recorder.finish(outcome("large"))
    # Collections in between change nothing the end of the run reports.
    final = _points(reader)
    expected = _reference(events("large"), outcome("large"))
    assert final.keys() == expected.keys()
    for name, series in expected.items():
        for key, value in series.items():
            got = final[name][key]
            if isinstance(value, tuple):  # histograms: sums may differ in the last bits only
                assert got[0] == value[0] and got[2:] == value[2:]
                assert got[1] == pytest.approx(value[1], rel=1e-12)
            else:
                assert got == pytest.approx(value, rel=1e-12)


def test_a_recorder_dropped_without_finish_still_hands_over_what_it_folded(sdk: Any) -> None:
    meter, reader = sdk
    recorder = MetricsRecorder(meter)
    stream = [e for e in events("tools") if e["type"] != "run:end"]
    for event in stream:
        recorder.observe(event)
    del recorder
    gc.collect()
    tool_ends = sum(e["type"] == "tool:end" for e in stream)
    assert tool_ends > 0
    assert sum(_points(reader)[sc.METRIC_TOOL_CALLS].values()) == tool_ends


def test_a_meter_without_observable_gauges_is_recorded_event_by_event() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    real = provider.get_meter("rulvar_otel")

    class NoGauges(NoOpMeter):
        """Hands out the real instruments but cannot register the collect hook."""

        def create_counter(self, *args: Any, **kwargs: Any) -> Any:
            return real.create_counter(*args, **kwargs)

        def create_up_down_counter(self, *args: Any, **kwargs: Any) -> Any:
            return real.create_up_down_counter(*args, **kwargs)

        def create_histogram(self, *args: Any, **kwargs: Any) -> Any:
            return real.create_histogram(*args, **kwargs)

        def create_observable_gauge(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no asynchronous instruments here")

    recorder = MetricsRecorder(NoGauges("x"))
    stream = events("tools")
    for event in stream[:-1]:
        recorder.observe(event)
    # Without a hook nothing waits for a batch: a collection now sees every folded tool call.
    seen = sum(e["type"] == "tool:end" for e in stream[:-1])
    assert sum(_points(reader)[sc.METRIC_TOOL_CALLS].values()) == seen
    recorder.observe(stream[-1])
    recorder.finish(outcome("tools"))
    assert _points(reader) == _reference(events("tools"), outcome("tools"))
    provider.shutdown()


def test_collections_on_another_thread_while_recording(sdk: Any) -> None:
    meter, reader = sdk
    stop = threading.Event()
    collections = 0

    def collect() -> None:
        nonlocal collections
        while not stop.is_set():
            reader.get_metrics_data()
            collections += 1

    thread = threading.Thread(target=collect)
    thread.start()
    try:
        _record(meter, events("large"), outcome("large"))
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert collections > 0
    data = _points(reader)
    assert sum(data[sc.METRIC_TOOL_CALLS].values()) == 5000
    assert sum(p[0] for p in data[sc.METRIC_TOOL_DURATION].values()) == 5000
    assert sum(p[0] for p in data[sc.METRIC_INVOCATION_TOKEN_USAGE].values()) == 4000


def test_recorders_on_one_meter_share_one_hook_and_stay_independent(sdk: Any) -> None:
    meter, reader = sdk
    first, second = MetricsRecorder(meter), MetricsRecorder(meter)
    tools = events("tools")
    for event in tools:
        first.observe(event)
    for event in events("quota"):
        second.observe(event)
    data = _points(reader)  # neither finished: the hook folds both
    assert sum(data[sc.METRIC_TOOL_CALLS].values()) == sum(e["type"] == "tool:end" for e in tools)
    assert sc.METRIC_QUOTA_DENIALS in data
    first.finish(outcome("tools"))
    second.finish(outcome("quota"))


def test_the_same_event_object_observed_twice_is_folded_twice_from_the_state_of_its_time(sdk: Any) -> None:
    meter, reader = sdk
    stream = events("tools")
    at = next(i for i, e in enumerate(stream) if e["type"] == "agent:end")
    stream.insert(at, stream[at])  # one object, twice: the second finds its agent already ended
    _record(meter, stream, outcome("tools"))
    got = _points(reader)
    assert got == _reference(stream, outcome("tools"))
    models = {dict(key)[sc.GEN_AI_REQUEST_MODEL] for key in got[sc.METRIC_AGENT_INVOCATIONS]}
    assert "unknown" in models and len(models) > 1
