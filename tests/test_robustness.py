"""Bad input never raises into the host, and every span opened is ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rulvar_otel.core.events import KNOWN_EVENT_TYPES
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.otel import export_events, to_otel
from tests._otel_harness import Recorder, ev, provider

_TYPES = st.sampled_from(sorted(KNOWN_EVENT_TYPES)) | st.text(max_size=12)
_SPAN_IDS = st.sampled_from(["s0", "s1", "s2", "s3", "x"]) | st.text(max_size=4)
_STRINGS = st.text(max_size=40) | st.sampled_from(["\x1b[31mred\n", "a" * 5000, "sk-" + "z" * 20, "\x00\x9b"])
_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _STRINGS
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_FIELDS = st.sampled_from(
    [
        "workflow",
        "phase",
        "agentType",
        "model",
        "role",
        "invocation",
        "toolName",
        "toolCallId",
        "status",
        "outcome",
        "usage",
        "costUsd",
        "envelope",
        "settled",
        "settledReason",
        "scope",
        "error",
        "exploration",
        "completion",
        "childStatusCounts",
        "category",
        "file",
        "line",
        "msg",
        "delta",
        "replayed",
        "guard",
    ]
) | st.text(max_size=10)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {}
    if draw(st.booleans()):
        event["runId"] = draw(st.sampled_from(["r1", "r2"]) | _STRINGS)
    event["seq"] = draw(st.integers(-5, 2**40) | _SCALARS)
    event["ts"] = draw(
        st.sampled_from(
            ["2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.500Z", "bad", "2025-12-31T23:59:59Z"]
        )
        | _SCALARS
    )
    event["spanId"] = draw(_SPAN_IDS | _SCALARS)
    if draw(st.booleans()):
        event["parentSpanId"] = draw(_SPAN_IDS | _SCALARS)
    event["type"] = draw(_TYPES | _SCALARS)
    for key, value in draw(st.dictionaries(_FIELDS, _VALUES, max_size=6)).items():
        event[key] = value
    return event


_OUTCOMES = (
    st.none()
    | st.builds(RunOutcome, status=st.sampled_from(["ok", "error", "weird"]))
    | st.just(RuntimeError("x"))
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), max_size=40), _OUTCOMES)
def test_any_event_sequence_exports_and_ends_every_span(stream: list[dict[str, Any]], outcome: Any) -> None:
    recorder = Recorder()
    tracer = provider(recorder).get_tracer("t")
    returned = export_events(stream, tracer, outcome=outcome)
    assert returned == len(recorder.started) == len(recorder.ended)
    for span in recorder.ended:
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time >= span.start_time


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                ev("run:start", 0, "s0", workflow="w"),
                ev("phase:start", 1, "p", "s0", phase="x"),
                ev("agent:start", 2, "a", "p", agentType="t", model="m", role="loop"),
                ev("agent:phase:start", 3, "a", invocation=1, role="loop"),
                ev("tool:start", 4, "a", toolName="t", toolCallId="c"),
                ev("tool:start", 5, "a", toolName="t"),
                ev("tool:end", 6, "a", toolName="t", outcome="ok"),
                ev("tool:end", 7, "a", toolName="t", toolCallId="c", outcome="ok"),
                ev("agent:phase:end", 8, "a", invocation=1, outcome="ok"),
                ev("agent:end", 9, "a", status="ok"),
                ev("child:start", 10, "c", "s0", workflow="k", scope="s"),
                ev("child:end", 11, "c", status="ok"),
                ev("run:end", 12, "s0", status="ok"),
                ev("log", 13, "a", level="info", msg="m"),
                ev("run:start", 4294967296, "s9", workflow="w", resumed=True),
                ev("agent:start", 14, "b", "gone", replayed=True),
            ]
        ),
        max_size=60,
    )
)
def test_any_order_of_well_formed_events_ends_every_span(stream: list[dict[str, Any]]) -> None:
    recorder = Recorder()
    returned = export_events(stream, provider(recorder).get_tracer("t"))
    assert returned == len(recorder.started) == len(recorder.ended)
    assert len({s.context.trace_id for s in recorder.ended}) <= 1


def test_a_failing_source_and_a_rejecting_result_never_fail_the_export() -> None:
    class Broken:
        run_id = "r1"

        @property
        def events(self) -> AsyncIterator[Any]:
            async def gen() -> AsyncIterator[Any]:
                yield ev("run:start", 0, "s0", workflow="w")
                yield ev("agent:start", 1, "a", "s0", agentType="t", model="m", role="loop")
                raise ConnectionError("stream died")

            return gen()

        @property
        def result(self) -> Any:
            async def fail() -> RunOutcome:
                raise RuntimeError("rejected")

            return fail()

        def on(self, kind: str, callback: Any) -> Any:
            return lambda: None

    recorder = Recorder()
    count = asyncio.run(to_otel(Broken(), provider(recorder).get_tracer("t")))
    assert count == 2 == len(recorder.ended)
    assert all(s.status.status_code.name == "ERROR" for s in recorder.ended)
