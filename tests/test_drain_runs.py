"""Several runs in one stream: one mapper and one metrics sink per run id, each settled on its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel._runs import RunRouter
from tests._support import ev


class Seen:
    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []
        self.outcome: Any = "unset"

    def feed(self, event: Mapping[str, Any]) -> None:
        self.events.append(event)

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        self.outcome = outcome


def test_interleaved_runs_become_separate_traces_each_with_its_own_outcome() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sinks: list[Seen] = []

    def metrics(_spans: object) -> Seen:
        sinks.append(Seen())
        return sinks[-1]

    router = RunRouter(provider.get_tracer("t"), compile_secret_masker(), metrics=metrics)
    stream = [
        ev("run:start", 0, "s0", workflow="a", runId="A"),
        ev("run:start", 1, "s0", workflow="b", runId="B"),
        ev("run:end", 2, "s0", status="error", runId="B"),
        ev("agent:start", 3, "x", "s0", role="loop", runId="A"),
    ]
    for event in stream:
        router.feed(event)
    settled = RunOutcome(status="ok")
    assert router.finish(settled, "A") == 3
    assert router.run_ids == ("A", "B")
    traces = {span.context.trace_id for span in memory.get_finished_spans() if span.context}
    assert len(traces) == 2
    assert [len(s.events) for s in sinks] == [2, 2]
    assert sinks[0].outcome is settled  # the handle's outcome for the run it names
    assert isinstance(sinks[1].outcome, RunOutcome) and sinks[1].outcome.status == "error"  # its run:end
