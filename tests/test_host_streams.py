"""What a host hands over is exported whole: junk items are skipped, reused dicts are copied, and a
cancelled export still ends and exports every span it had started."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rulvar_otel.core.drain import drain, drain_events
from rulvar_otel.core.handle import EventLike, RunOutcome, handle_from_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel import export_events, to_otel
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.testing import MetricCapture, SpanCapture
from tests._support import events, outcome, stream_names

# Items no event can be read from: each is counted and skipped, never the end of the stream.
_JUNK: tuple[object, ...] = (
    42,
    None,
    3.5,
    True,
    "run:start",
    b"{}",
    ["run:end"],
    (),
    object(),
    {},
    {"type": ["agent:start"]},
    {"type": {"nested": "dict"}},
    {"type": 7, "spanId": "x"},
    {"type": None, "runId": ["r"]},
)


class HostHandle:
    """A host's own RunHandle: yields ``items`` as they are, then resolves with ``result``."""

    def __init__(self, items: Iterable[object], result: RunOutcome) -> None:
        self._items = items
        self._result = result
        self.run_id = next(
            (i["runId"] for i in list(items) if isinstance(i, dict) and isinstance(i.get("runId"), str)), ""
        )

    @property
    def events(self) -> AsyncIterator[EventLike]:
        async def stream() -> AsyncIterator[EventLike]:
            for item in self._items:
                yield item  # type: ignore[misc] # junk on purpose

        return stream()

    @property
    def result(self) -> Any:
        async def settle() -> RunOutcome:
            return self._result

        return settle()

    def on(self, type: str, callback: Callable[[EventLike], object]) -> Callable[[], None]:  # noqa: A002
        return lambda: None


def _rows(spans: Iterable[ReadableSpan], *, whole: bool) -> list[tuple[Any, ...]]:
    spans = list(spans)
    names = {s.context.span_id: s.name for s in spans}
    rows: list[tuple[Any, ...]] = []
    for span in spans:
        row: tuple[Any, ...] = (
            span.name,
            names.get(span.parent.span_id) if span.parent is not None else None,
            span.status.status_code.name,
            tuple(sorted((k, str(v)) for k, v in (span.attributes or {}).items())),
        )
        if whole:
            events = tuple(
                (e.name, e.timestamp, tuple(sorted((e.attributes or {}).items()))) for e in span.events
            )
            row = (*row, span.start_time, span.end_time, events)
        rows.append(row)
    return sorted(rows, key=repr)


def _shape(spans: Iterable[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Each span's name, parent's name, status and attributes (the tree, without times)."""
    return _rows(spans, whole=False)


def _full(spans: Iterable[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Everything about each span: the tree, its times and its span events."""
    return _rows(spans, whole=True)


def _export(handle: Any) -> list[ReadableSpan]:
    capture = SpanCapture()
    asyncio.run(to_otel(handle, capture.tracer))
    return capture.ended


def _plant(stream: list[dict[str, Any]], plants: list[tuple[int, int]]) -> list[object]:
    """``stream`` with ``_JUNK[j]`` inserted before position ``i`` for each ``(i, j)``."""
    out: list[object] = list(stream)
    for position, junk in sorted(plants, reverse=True):
        out.insert(min(position, len(out)), _JUNK[junk % len(_JUNK)])
    return out


# --- junk items ---------------------------------------------------------------------------------


@pytest.mark.parametrize("junk", _JUNK, ids=repr)
def test_one_junk_item_anywhere_in_a_recorded_stream_costs_no_span(junk: object) -> None:
    stream, result = events("nested"), outcome("nested")
    assert isinstance(result, RunOutcome)
    clean = _export(handle_from_events(stream, result))
    for position in range(len(stream) + 1):
        planted = [*stream[:position], junk, *stream[position:]]
        spans = _export(handle_from_events(planted, result))  # type: ignore[arg-type]
        assert _shape(spans) == _shape(clean), f"junk at position {position}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["tools", "orchestrate", "phases", "error"]),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 100)), min_size=1, max_size=12),
)
def test_junk_planted_anywhere_is_skipped_exactly_as_a_custom_handles_junk(
    name: str, plants: list[tuple[int, int]]
) -> None:
    stream, result = events(name), outcome(name)
    assert isinstance(result, RunOutcome)
    planted = _plant(stream, plants)
    recorded = _export(handle_from_events(planted, result))  # type: ignore[arg-type]
    hosted = _export(HostHandle(planted, result))
    assert _full(recorded) == _full(hosted)
    assert _shape(recorded) == _shape(_export(handle_from_events(stream, result)))


def test_drain_counts_each_junk_item_and_reports_no_source_error() -> None:
    stream, result = events("tools"), outcome("tools")
    planted = _plant(stream, [(i * 3, i) for i in range(len(_JUNK))])
    mapper = SpanMapper(SpanCapture().tracer, compile_secret_masker())
    drained = asyncio.run(drain(handle_from_events(planted), mapper))  # type: ignore[arg-type]
    assert drained.source_error is None
    assert drained.events == len(planted) == len(stream) + len(_JUNK)
    assert isinstance(drained.outcome, RunOutcome)
    assert drained.outcome.status == (result.status if isinstance(result, RunOutcome) else None)


def test_a_recorded_handle_with_junk_first_still_names_its_run_and_calls_listeners() -> None:
    stream = events("minimal")
    handle = handle_from_events([None, {"type": ["x"]}, *stream])  # type: ignore[list-item]
    seen: list[object] = []
    handle.on("*", seen.append)
    handle.on("run:end", seen.append)
    assert list(handle.iter_sync())[2:] == stream
    assert handle.run_id == stream[0]["runId"]
    assert len(seen) == len(stream) + 2 + 1  # every item for "*", and the run:end once more


# --- a host that refills one dict -----------------------------------------------------------------


def _untimed_head(name: str, untimed: int = 3) -> list[dict[str, Any]]:
    """The corpus stream with its first events' ``ts`` removed (they wait for a usable one)."""
    stream = events(name)
    for event in stream[:untimed]:
        event.pop("ts", None)
    return stream


def _refilled(stream: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The host that reuses one dict (and fresh nested values) for every event."""
    one: dict[str, Any] = {}
    for event in stream:
        one.clear()
        one.update(copy.deepcopy(event))
        yield one


_REUSE_STREAMS = [
    n for n in stream_names() if n in {"nested", "orchestrate", "phases", "tools", "error", "quota"}
]


@pytest.mark.parametrize("name", _REUSE_STREAMS)
def test_a_host_reusing_one_dict_exports_what_fresh_dicts_export(name: str) -> None:
    stream, result = _untimed_head(name), outcome(name)
    fresh_spans, fresh_metrics = SpanCapture(), MetricCapture()
    asyncio.run(to_otel(handle_from_events(stream, result), fresh_spans.tracer, meter=fresh_metrics.meter))
    ways: dict[str, Callable[[SpanCapture, MetricCapture], object]] = {
        "handle_from_events": lambda s, m: asyncio.run(
            to_otel(handle_from_events(_refilled(stream), result), s.tracer, meter=m.meter)
        ),
        "custom handle": lambda s, m: asyncio.run(
            to_otel(HostHandle(_RefilledList(stream), result), s.tracer, meter=m.meter)
        ),
        "export_events": lambda s, m: export_events(
            _refilled(stream), s.tracer, outcome=result, meter=m.meter
        ),
    }
    for way, run in ways.items():
        spans, metrics = SpanCapture(), MetricCapture()
        run(spans, metrics)
        assert _full(spans.ended) == _full(fresh_spans.ended), way
        assert metrics.points() == fresh_metrics.points(), way
        metrics.shutdown()
    fresh_metrics.shutdown()


class _Kept:
    """A sink keeping every event it is fed, as given."""

    def __init__(self) -> None:
        self.fed: list[Mapping[str, Any]] = []

    def feed(self, event: Mapping[str, Any]) -> None:
        self.fed.append(event)

    def finish(self, outcome: object) -> None:
        return None


def test_a_list_of_dicts_is_read_as_it_is_and_any_other_source_is_copied() -> None:
    stream = events("tools")
    for source, copied in (
        (stream, False),
        (tuple(stream), False),
        (iter(stream), True),
        (_RefilledList(stream), True),
    ):
        kept = _Kept()
        drain_events(source, kept)  # type: ignore[arg-type]
        assert kept.fed == stream
        # Nothing refills a list's dicts while it drains: no copy; a producer's, one each.
        assert all((fed is not given) == copied for fed, given in zip(kept.fed, stream, strict=True)), source


class _RefilledList(list[object]):
    """A list whose iteration refills one dict per item (so a custom handle reuses it too)."""

    def __iter__(self) -> Iterator[object]:
        return iter(_refilled(list(super().__iter__())))  # type: ignore[arg-type]


def test_events_waiting_for_a_ts_are_copied_whole_when_fed_to_a_mapper_directly() -> None:
    stream = _untimed_head("orchestrate", untimed=6)
    result = outcome("orchestrate")
    fresh, reused = SpanCapture(), SpanCapture()
    for capture, feed in ((fresh, [copy.deepcopy(e) for e in stream]), (reused, _refilled(stream))):
        mapper = SpanMapper(capture.tracer, compile_secret_masker())
        for event in feed:
            mapper.feed(event)
            if isinstance(event, dict) and capture is reused:
                # The host scribbles over its dict, nested values included, once it is fed.
                for value in event.values():
                    if isinstance(value, dict):
                        value.clear()
                event.clear()
        mapper.finish(result)
    assert _full(reused.ended) == _full(fresh.ended)


# --- cancellation ---------------------------------------------------------------------------------


class StalledRun:
    """A live run that emits the first half of a corpus stream, then waits forever."""

    def __init__(self, name: str) -> None:
        stream = events(name)
        self.head = stream[: len(stream) // 2]
        self.run_id = str(stream[0]["runId"])
        self.emitted = asyncio.Event()

    @property
    def events(self) -> AsyncIterator[EventLike]:
        async def stream() -> AsyncIterator[EventLike]:
            for event in self.head:
                yield event
            self.emitted.set()
            await asyncio.Event().wait()

        return stream()

    @property
    def result(self) -> Any:
        async def never() -> RunOutcome:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        return never()

    def on(self, type: str, callback: Callable[[EventLike], object]) -> Callable[[], None]:  # noqa: A002
        return lambda: None


def _assert_ended_unsettled(spans: list[ReadableSpan], started: int) -> None:
    assert len(spans) == started > 2
    closed = [s for s in spans if not (s.attributes or {}).get(sc.END_INFERRED)]
    inferred = [s for s in spans if (s.attributes or {}).get(sc.END_INFERRED) is True]
    assert inferred, "the spans still open at cancellation end, marked as ended without a closer"
    for span in inferred:
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})[sc.ERROR_TYPE] == sc.ERROR_TYPE_OTHER
    runs = [s for s in inferred if s.name.startswith("run ")]
    assert runs and all((s.attributes or {})[sc.RUN_SETTLED] is False for s in runs)
    assert all(sc.RUN_SETTLED not in (s.attributes or {}) for s in closed)


@pytest.mark.parametrize("name", ["nested", "orchestrate"])
def test_a_to_otel_timed_out_by_wait_for_exports_every_span_it_started(name: str) -> None:
    exporter = InMemorySpanExporter()
    run = StalledRun(name)

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(to_otel(run, exporter=exporter), timeout=0.3)

    asyncio.run(main())
    assert run.emitted.is_set()
    spans = list(exporter.get_finished_spans())
    started = len(_export(handle_from_events(run.head)))  # the same events, settled
    _assert_ended_unsettled(spans, started)


@pytest.mark.parametrize("name", ["nested", "orchestrate"])
def test_a_cancelled_to_otel_task_ends_its_spans_on_the_hosts_tracer_and_reraises(name: str) -> None:
    capture = SpanCapture()
    run = StalledRun(name)

    async def main() -> None:
        task = asyncio.ensure_future(to_otel(run, capture.tracer))
        await run.emitted.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(capture.ended) == len(capture.spans)
    _assert_ended_unsettled(capture.ended, len(capture.spans))


def test_a_cancelled_drain_finishes_every_sink_with_the_cancellation() -> None:
    finished: list[object] = []

    class Sink:
        def feed(self, event: Mapping[str, Any]) -> None:
            pass

        def finish(self, outcome: object) -> None:
            finished.append(outcome)

    run = StalledRun("tools")

    async def main() -> None:
        task = asyncio.ensure_future(drain(run, Sink(), Sink()))
        await run.emitted.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(finished) == 2 and all(isinstance(o, asyncio.CancelledError) for o in finished)
