"""Deterministic ids: re-exporting a run gives the same trace and span ids."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from rulvar_otel.otel import export_events
from rulvar_otel.otel.ids import SPAN_IDENTITY, RulvarIdGenerator, derive_span_id, derive_trace_id
from tests._support import events, outcome

SCENARIOS = ["tools", "nested", "orchestrate", "phases", "approval", "large"]


def _export(name: str, id_generator: IdGenerator | None) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=id_generator) if id_generator else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    export_events(events(name), provider.get_tracer("test"), outcome=outcome(name))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _identity(spans: list[ReadableSpan]) -> list[tuple[Any, ...]]:
    return sorted(
        (s.name, s.context.trace_id, s.context.span_id, s.parent.span_id if s.parent else None) for s in spans
    )


@pytest.mark.parametrize("name", SCENARIOS)
def test_exporting_twice_gives_identical_ids(name: str) -> None:
    first = _export(name, RulvarIdGenerator())
    second = _export(name, RulvarIdGenerator())
    assert first and _identity(first) == _identity(second)
    # Every span of the run shares one trace, derived from the run id.
    run_id = events(name)[0]["runId"]
    assert {s.context.trace_id for s in first} == {derive_trace_id(run_id)}
    # Span ids are unique within the run.
    assert len({s.context.span_id for s in first}) == len(first)


def test_random_ids_without_the_generator() -> None:
    first = _export("tools", None)
    second = _export("tools", None)
    assert {s.context.trace_id for s in first}.isdisjoint({s.context.trace_id for s in second})


def test_two_runs_never_share_a_trace_id() -> None:
    trace_ids = {
        _export(name, RulvarIdGenerator())[0].context.trace_id
        for name in ("tools", "nested", "orchestrate", "phases", "minimal", "error")
    }
    assert len(trace_ids) == 6
    # And a span key means something different in another run.
    assert derive_span_id("run-a", "agent:s2") != derive_span_id("run-b", "agent:s2")
    # Length-prefixed parts: moving a character across the boundary changes the id.
    assert derive_span_id("ab", "c") != derive_span_id("a", "bc")


def test_generator_falls_back_to_random_when_the_identity_is_unset() -> None:
    gen = RulvarIdGenerator()
    assert SPAN_IDENTITY.get() is None
    assert len({gen.generate_span_id() for _ in range(50)}) == 50
    token = SPAN_IDENTITY.set(("run-x", "run:s0"))
    try:
        assert gen.generate_span_id() == gen.generate_span_id() == derive_span_id("run-x", "run:s0")
        assert gen.generate_trace_id() == derive_trace_id("run-x")
        assert 0 < gen.generate_trace_id() < 2**128 and 0 < gen.generate_span_id() < 2**64
    finally:
        SPAN_IDENTITY.reset(token)


def test_a_wrapped_tracer_still_gets_deterministic_ids() -> None:
    # The mapper only skips setting the span identity where it is certainly unread (a no-op
    # tracer, or the SDK's stock random generator); a host's wrapper around a tracer is neither.
    class Wrapper:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            return self._inner.start_span(*args, **kwargs)

    def run_once() -> list[ReadableSpan]:
        exporter = InMemorySpanExporter()
        provider = TracerProvider(id_generator=RulvarIdGenerator())
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        export_events(events("tools"), Wrapper(provider.get_tracer("t")), outcome=outcome("tools"))  # type: ignore[arg-type]
        return list(exporter.get_finished_spans())

    first, second = run_once(), run_once()
    assert _identity(first) == _identity(second)
    assert {s.context.trace_id for s in first} == {derive_trace_id(events("tools")[0]["runId"])}
