"""Exemplars: every registry histogram names the span each observation belongs to, on both paths."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, MetricsData
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.drain import drain_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel import DirectSpanSink, MetricsAggregator, SpanMapper, export_events
from rulvar_otel.otel.direct import export_events_direct
from rulvar_otel.otel.ids import RulvarIdGenerator
from rulvar_otel.otel.metrics import REGISTRY
from rulvar_otel.otel.metrics.registry import InstrumentKind
from tests._support import events, outcome

HISTOGRAMS = {entry.name for entry in REGISTRY if entry.kind is InstrumentKind.HISTOGRAM}
# Streams whose histograms cover agents, invocations, tools, runs and the per-run folds.
STREAMS = ("approval", "cancelled", "cassette-abandon-subtree")

# (metric, attributes, trace id, span id) of every exemplar
Exemplars = set[tuple[str, frozenset[tuple[str, Any]], int, int]]


def _exemplars(data: MetricsData | None) -> Exemplars:
    found: Exemplars = set()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if isinstance(point, HistogramDataPoint) and metric.name in HISTOGRAMS:
                        attrs = frozenset((point.attributes or {}).items())
                        for ex in point.exemplars:
                            assert ex.trace_id is not None and ex.span_id is not None
                            found.add((metric.name, attrs, ex.trace_id, ex.span_id))
    return found


def _histogram_points(data: MetricsData | None) -> set[tuple[str, frozenset[tuple[str, Any]]]]:
    assert data is not None
    return {
        (metric.name, frozenset((point.attributes or {}).items()))
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name in HISTOGRAMS
        for point in metric.data.data_points
    }


def _sdk_path(
    stream: list[dict[str, Any]], result: Any
) -> tuple[Exemplars, MetricsData | None, dict[int, str]]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(id_generator=RulvarIdGenerator())
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    export_events(stream, tracer_provider.get_tracer("t"), meter=meter, outcome=result)
    data = reader.get_metrics_data()
    names = {s.context.span_id: s.name for s in spans.get_finished_spans()}
    return _exemplars(data), data, names


def _direct_path(stream: list[dict[str, Any]], result: Any) -> tuple[Exemplars, MetricsData]:
    masker = compile_secret_masker()
    sink = DirectSpanSink([InMemorySpanExporter()])
    mapper = SpanMapper(sink.tracer(id_generator=RulvarIdGenerator()), masker)
    aggregator = MetricsAggregator(masker)
    drain_events(stream, mapper, aggregator.run(spans=mapper), outcome=result)
    sink.shutdown()
    data = aggregator.metrics_data()
    return _exemplars(data), data


def _kinds(exemplars: Iterable[tuple[str, Any, int, int]], names: dict[int, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for metric, _, _, span_id in exemplars:
        out.setdefault(metric, set()).add(names[span_id].split(" ", 1)[0])
    return out


@pytest.mark.parametrize("name", STREAMS)
def test_the_direct_and_sdk_paths_give_the_same_exemplar_trace_and_span_ids(name: str) -> None:
    stream, result = events(name), outcome(name)
    sdk, sdk_data, span_names = _sdk_path(stream, result)
    direct, direct_data = _direct_path(stream, result)
    assert sdk and sdk == direct
    # Every histogram point carries at least one exemplar, on both paths.
    assert {(m, a) for m, a, _, _ in sdk} == _histogram_points(sdk_data) == _histogram_points(direct_data)
    # ... and each names an exported span of the right kind.
    kinds = _kinds(sdk, span_names)
    for metric in ("rulvar.agent.duration", "gen_ai.invoke_agent.duration", "gen_ai.invoke_agent.tool_calls"):
        assert kinds.get(metric, {"agent"}) == {"agent"}, metric
    for metric in ("rulvar.tool.duration", "gen_ai.execute_tool.duration"):
        assert kinds.get(metric, {"tool"}) == {"tool"}, metric
    for metric in ("rulvar.invocation.duration", "rulvar.invocation.token.usage"):
        assert kinds.get(metric, {"invocation"}) == {"invocation"}, metric
    for metric in ("rulvar.run.duration", "rulvar.run.cost", "gen_ai.invoke_workflow.duration"):
        assert kinds.get(metric, {"run"}) == {"run"}, metric


def test_every_kind_of_registry_histogram_gets_exemplars_somewhere_in_the_corpus() -> None:
    seen: set[str] = set()
    for name in STREAMS:
        seen |= {metric for metric, _, _, _ in _direct_path(events(name), outcome(name))[0]}
    expected = {
        "rulvar.agent.duration",
        "rulvar.tool.duration",
        "rulvar.invocation.duration",
        "rulvar.invocation.token.usage",
        "rulvar.run.duration",
        "rulvar.run.cost",
        "gen_ai.invoke_agent.duration",
        "gen_ai.invoke_agent.inference_calls",
        "gen_ai.invoke_agent.tool_calls",
        "gen_ai.execute_tool.duration",
        "gen_ai.invoke_workflow.duration",
    }
    assert expected <= seen


class _ContextsOnly:
    """A span source with the protocol's two methods only (no ``event_span_ids``)."""

    def __init__(self, mapper: SpanMapper) -> None:
        self._mapper = mapper

    def event_span_context(self) -> Any:
        return self._mapper.event_span_context()

    def run_span_context(self) -> Any:
        return self._mapper.run_span_context()


@pytest.mark.parametrize("name", STREAMS)
def test_a_span_source_read_through_its_contexts_gives_the_same_exemplars_as_the_mappers_ids(
    name: str,
) -> None:
    stream, result = events(name), outcome(name)
    masker = compile_secret_masker()
    sink = DirectSpanSink([InMemorySpanExporter()])
    mapper = SpanMapper(sink.tracer(id_generator=RulvarIdGenerator()), masker)
    aggregator = MetricsAggregator(masker)
    drain_events(stream, mapper, aggregator.run(spans=_ContextsOnly(mapper)), outcome=result)
    sink.shutdown()
    through_contexts = _exemplars(aggregator.metrics_data())
    assert through_contexts and through_contexts == _direct_path(stream, result)[0]


@pytest.mark.parametrize("tracer", ["direct", "sdk"])
@pytest.mark.parametrize("name", STREAMS)
def test_the_mappers_span_ids_are_its_event_span_contexts_ids_after_every_event(
    name: str, tracer: str
) -> None:
    sink = DirectSpanSink([InMemorySpanExporter()])
    provider = TracerProvider(id_generator=RulvarIdGenerator())
    chosen = sink.tracer(id_generator=RulvarIdGenerator()) if tracer == "direct" else provider.get_tracer("t")
    mapper = SpanMapper(chosen, compile_secret_masker())
    seen = 0
    for event in events(name):
        mapper.feed(event)
        context = mapper.event_span_context()
        expected = (context.trace_id, context.span_id) if context is not None and context.is_valid else None
        assert mapper.event_span_ids() == expected
        seen += expected is not None
    mapper.finish(outcome(name))
    sink.shutdown()
    assert seen > 0


@pytest.mark.parametrize("name", STREAMS)
def test_export_events_direct_gives_its_aggregator_the_mappers_spans(name: str) -> None:
    stream, result = events(name), outcome(name)
    masker = compile_secret_masker()
    aggregator = MetricsAggregator(masker)
    export_events_direct(
        stream,
        InMemorySpanExporter(),
        outcome=result,
        masker=masker,
        aggregator=aggregator,
        id_generator=RulvarIdGenerator(),
    )
    exported = _exemplars(aggregator.metrics_data())
    assert exported and exported == _direct_path(stream, result)[0]


def test_without_a_span_source_there_are_no_exemplars() -> None:
    aggregator = MetricsAggregator()
    drain_events(events("approval"), aggregator.run(), outcome=outcome("approval"))
    assert _exemplars(aggregator.metrics_data()) == set()
