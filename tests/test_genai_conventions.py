"""The GenAI conventions pinned in otel/semconv.py, checked over every corpus export.

Run and child-workflow spans invoke_workflow (tests/test_conformance.py checks the operation on
every span kind); here: the agent-level metrics' names, units and advisory buckets, what they count,
and token usage kept on one level of every trace.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.drain import drain_events
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.otel import DirectSpanSink, MetricsAggregator, SpanMapper
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import definition
from rulvar_otel.otel.metrics.registry import InstrumentKind
from tests._support import events, histogram_points, outcome, stream_names

AGENT_DURATION = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6)
CLIENT_DURATION = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
CALLS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
PINNED = {
    "gen_ai.invoke_agent.duration": ("s", AGENT_DURATION),
    "gen_ai.execute_tool.duration": ("s", CLIENT_DURATION),
    "gen_ai.invoke_workflow.duration": ("s", AGENT_DURATION),
    "gen_ai.invoke_agent.inference_calls": ("{inference_call}", CALLS),
    "gen_ai.invoke_agent.tool_calls": ("{tool_call}", CALLS),
}


def test_semconv_names_the_release_and_the_commit_it_follows() -> None:
    assert sc.SEMCONV_VERSION == "1.41.0"
    assert sc.GENAI_CONVENTIONS_REPOSITORY == "open-telemetry/semantic-conventions-genai"
    assert re.fullmatch(r"[0-9a-f]{40}", sc.GENAI_CONVENTIONS_COMMIT)
    assert sc.GEN_AI_OPERATION_INVOKE_WORKFLOW == "invoke_workflow"
    assert sc.GEN_AI_WORKFLOW_NAME == "gen_ai.workflow.name"


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_agent_level_metrics_have_the_conventions_units_and_advisory_buckets(name: str) -> None:
    entry = definition(name)
    unit, buckets = PINNED[name]
    assert (entry.kind, entry.unit, entry.buckets) == (InstrumentKind.HISTOGRAM, unit, buckets)
    assert sc.GEN_AI_OPERATION_NAME in entry.attributes


def _export(name: str) -> tuple[list[ReadableSpan], MetricsData]:
    masker = compile_secret_masker()
    memory = InMemorySpanExporter()
    sink = DirectSpanSink([memory])
    mapper = SpanMapper(sink.tracer(), masker)
    aggregator = MetricsAggregator(masker)
    drain_events(events(name), mapper, aggregator.run(spans=mapper), outcome=outcome(name))
    sink.shutdown()
    return list(memory.get_finished_spans()), aggregator.metrics_data()


def _live(stream: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in stream if e.get("type") == kind and e.get("replayed") is not True]


@pytest.mark.parametrize("name", stream_names())
def test_every_corpus_export_follows_the_pinned_conventions(name: str) -> None:
    spans, data = _export(name)
    stream = events(name)
    for metric, (_, buckets) in PINNED.items():
        for point in histogram_points(data, metric):
            assert tuple(point.explicit_bounds) == buckets, (name, metric)
            assert point.attributes is not None
            assert point.attributes[sc.GEN_AI_OPERATION_NAME] == metric.split(".")[1], (name, metric)
    # One observation per live agent:end (inference and tool calls) and per run terminal.
    agents_ended = sum(p.count for p in histogram_points(data, sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS))
    assert agents_ended == sum(p.count for p in histogram_points(data, sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS))
    assert agents_ended <= len(_live(stream, "agent:end"))
    calls = sum(p.sum for p in histogram_points(data, sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS))
    assert calls <= len(_live(stream, "agent:phase:end"))
    tools = sum(p.sum for p in histogram_points(data, sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS))
    assert tools <= len(_live(stream, "tool:end"))
    # invoke_workflow on every run and child span, with the workflow's name.
    for span in spans:
        attrs = span.attributes or {}
        if span.name.startswith(("run ", "workflow ")):
            assert attrs[sc.GEN_AI_OPERATION_NAME] == "invoke_workflow", (name, span.name)
    # Token usage on one level: each span level that carries gen_ai.usage.* is the only one.
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        if sc.GEN_AI_USAGE_INPUT_TOKENS not in (span.attributes or {}):
            continue
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        while parent is not None:
            assert sc.GEN_AI_USAGE_INPUT_TOKENS not in (parent.attributes or {}), (name, span.name)
            parent = by_id.get(parent.parent.span_id) if parent.parent is not None else None


def test_the_corpus_exercises_the_agent_level_metrics() -> None:
    counts = dict.fromkeys(PINNED, 0)
    for name in stream_names():
        _, data = _export(name)
        for metric in PINNED:
            counts[metric] += sum(p.count for p in histogram_points(data, metric))
    assert all(count > 0 for count in counts.values()), counts


def test_calls_per_agent_invocation_count_that_agents_own_invocations_and_tools() -> None:
    # approval: one agent, one invocation, two tool calls (one ran, one was denied).
    _, data = _export("approval")
    (inference,) = histogram_points(data, sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS)
    (tools,) = histogram_points(data, sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS)
    assert (inference.count, inference.sum, tools.count, tools.sum) == (1, 1, 1, 2)
    (tool_duration, *more) = histogram_points(data, sc.GEN_AI_EXECUTE_TOOL_DURATION)
    errors = {p.attributes.get(sc.ERROR_TYPE) for p in (tool_duration, *more) if p.attributes}
    assert None in errors and len(errors) == 2  # the denied call names its error type
