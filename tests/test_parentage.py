"""Runs inside their hosts' traces: parent=ambient|link|none|Context (docs/otel-mapping.md#parentage)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from rulvar_otel.engine import Reply, ScriptedAdapter, workflow
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import export_events, to_otel
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.ids import RulvarIdGenerator, derive_span_id
from tests._support import events, make_engine, outcome

STREAM = "approval"


def _provider(*, deterministic: bool = False) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(id_generator=RulvarIdGenerator() if deterministic else None)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _ours(spans: tuple[ReadableSpan, ...], host: str = "host") -> list[ReadableSpan]:
    return [s for s in spans if s.name != host]


def _root(spans: list[ReadableSpan]) -> ReadableSpan:
    return next(s for s in spans if s.name.startswith("run "))


def test_ambient_puts_the_run_under_the_host_span_in_its_trace() -> None:
    provider, memory = _provider()
    tracer = provider.get_tracer("host")
    with tracer.start_as_current_span("host") as host:
        count = export_events(events(STREAM), tracer, outcome=outcome(STREAM))
    host_ctx = host.get_span_context()
    ours = _ours(memory.get_finished_spans())
    assert len(ours) == count > 3
    assert {s.context.trace_id for s in ours} == {host_ctx.trace_id}
    root = _root(ours)
    assert root.parent is not None and root.parent.span_id == host_ctx.span_id
    # Every other span descends from the run span, never from the host directly.
    assert [s.name for s in ours if s.parent is not None and s.parent.span_id == host_ctx.span_id] == [
        root.name
    ]


def test_no_host_span_means_a_trace_of_its_own_as_before() -> None:
    provider, memory = _provider()
    export_events(events(STREAM), provider.get_tracer("t"), outcome=outcome(STREAM))
    root = _root(list(memory.get_finished_spans()))
    assert root.parent is None


def test_none_makes_its_own_trace_even_inside_a_host_span() -> None:
    provider, memory = _provider()
    tracer = provider.get_tracer("host")
    with tracer.start_as_current_span("host") as host:
        export_events(events(STREAM), tracer, outcome=outcome(STREAM), parent="none")
    ours = _ours(memory.get_finished_spans())
    assert host.get_span_context().trace_id not in {s.context.trace_id for s in ours}
    assert _root(ours).parent is None and not _root(ours).links


def test_link_keeps_its_own_trace_and_links_both_ways() -> None:
    provider, memory = _provider()
    tracer = provider.get_tracer("host")
    with tracer.start_as_current_span("host") as host:
        export_events(events(STREAM), tracer, outcome=outcome(STREAM), parent="link")
    host_ctx = host.get_span_context()
    spans = memory.get_finished_spans()
    back = [s for s in spans if s.name.startswith("rulvar run ")]
    assert len(back) == 1
    run = _root([s for s in spans if s not in back and s.name != "host"])
    # The run: its own trace, a root, linked to the caller's span.
    assert run.parent is None and run.context.trace_id != host_ctx.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in run.links] == [
        (host_ctx.trace_id, host_ctx.span_id)
    ]
    # The caller's trace: a zero-length child of the host span linking to the run's root.
    link_span = back[0]
    assert link_span.context.trace_id == host_ctx.trace_id
    assert link_span.parent is not None and link_span.parent.span_id == host_ctx.span_id
    assert link_span.start_time == link_span.end_time == run.start_time
    assert [(link.context.trace_id, link.context.span_id) for link in link_span.links] == [
        (run.context.trace_id, run.context.span_id)
    ]
    assert link_span.attributes is not None and sc.RUN_ID in link_span.attributes


def test_an_explicit_context_parents_the_run_and_deterministic_span_ids_stay_derived() -> None:
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    given = trace.set_span_in_context(NonRecordingSpan(remote))
    provider, memory = _provider(deterministic=True)
    export_events(events(STREAM), provider.get_tracer("t"), outcome=outcome(STREAM), parent=given)
    spans = list(memory.get_finished_spans())
    assert {s.context.trace_id for s in spans} == {0xABC}
    root = _root(spans)
    assert root.parent is not None and root.parent.span_id == 0xDEF
    run_start = events(STREAM)[0]
    assert root.context.span_id == derive_span_id(run_start["runId"], "run:" + run_start["spanId"])


def test_the_direct_path_parents_the_same_way() -> None:
    memory = InMemorySpanExporter()
    provider, _ = _provider()
    with provider.get_tracer("host").start_as_current_span("host") as host:
        export_events(events(STREAM), exporter=memory, outcome=outcome(STREAM))
    spans = list(memory.get_finished_spans())
    host_ctx = host.get_span_context()
    assert {s.context.trace_id for s in spans} == {host_ctx.trace_id}
    root = _root(spans)
    assert root.parent is not None and root.parent.span_id == host_ctx.span_id


@pytest.mark.parametrize("bad", ["ambiant", "", 3])
def test_an_unknown_parent_mode_is_refused_before_any_span(bad: Any) -> None:
    provider, memory = _provider()
    with pytest.raises(ConfigError, match="parent must be one of ambient, link, none"):
        export_events(events(STREAM), provider.get_tracer("t"), parent=bad)
    assert memory.get_finished_spans() == ()


@workflow("review")
async def _review(ctx: Any, args: Any) -> Any:
    await ctx.agent("scan the repo", model="fake:fake-model")
    return {"ok": True}


def _engine() -> Any:
    return make_engine([ScriptedAdapter("fake", script=[Reply("done", usage=(4, 2))] * 4)])


def test_to_otel_in_another_task_finds_the_context_engine_run_was_called_in() -> None:
    provider, memory = _provider()
    tracer = provider.get_tracer("host")

    async def scenario() -> tuple[SpanContext, int]:
        engine = _engine()
        with tracer.start_as_current_span("host") as host:
            handle = engine.run(_review, {})
        # Outside the host span, in a task of its own: the capture, not the current context.
        assert not trace.get_current_span().get_span_context().is_valid
        count = await asyncio.create_task(to_otel(handle, tracer))
        return host.get_span_context(), count

    host_ctx, count = asyncio.run(scenario())
    ours = _ours(memory.get_finished_spans())
    assert len(ours) == count >= 2
    assert {s.context.trace_id for s in ours} == {host_ctx.trace_id}
    assert _root(ours).parent is not None and _root(ours).parent.span_id == host_ctx.span_id  # type: ignore[union-attr]


def test_link_mode_uses_the_captured_context_too() -> None:
    provider, memory = _provider()
    tracer = provider.get_tracer("host")

    async def scenario() -> SpanContext:
        engine = _engine()
        with tracer.start_as_current_span("host") as host:
            handle = engine.run(_review, {})
        await to_otel(handle, tracer, parent="link")
        return host.get_span_context()

    host_ctx = asyncio.run(scenario())
    back = [s for s in memory.get_finished_spans() if s.name.startswith("rulvar run ")]
    assert len(back) == 1 and back[0].context.trace_id == host_ctx.trace_id


def test_a_resume_in_the_same_engine_joins_the_trace_of_the_first_segment() -> None:
    provider, memory = _provider()
    tracer = provider.get_tracer("host")

    async def scenario() -> tuple[SpanContext, SpanContext]:
        engine = _engine()
        with tracer.start_as_current_span("first request") as first:
            handle = engine.run(_review, {}, run_id="RUN-RESUMED")
        await to_otel(handle, tracer)
        with tracer.start_as_current_span("second request") as second:
            resumed = engine.resume("RUN-RESUMED", _review)
        await to_otel(resumed, tracer)
        return first.get_span_context(), second.get_span_context()

    first, second = asyncio.run(scenario())
    runs = [s for s in memory.get_finished_spans() if s.name.startswith("run ")]
    assert len(runs) == 2
    assert {s.context.trace_id for s in runs} == {first.trace_id} != {second.trace_id}


@pytest.mark.parametrize(
    "secret", ["sk-PLANTEDplantedPLANTED0123", "ghp_PLANTEDplantedPLANTEDplanted0123", "AKIAPLANTEDPLANTED12"]
)
def test_the_back_link_span_and_the_workflow_name_pass_the_masker(secret: str) -> None:
    stream = [{**e, "runId": f"run {secret}", "workflow": f"wf {secret}"} for e in events(STREAM)]
    provider, memory = _provider(deterministic=True)
    tracer = provider.get_tracer("host")
    with tracer.start_as_current_span("host"):
        export_events(stream, tracer, outcome=outcome(STREAM), parent="link")
    spans = memory.get_finished_spans()
    back = [s for s in spans if s.name.startswith("rulvar run ")]
    assert len(back) == 1 and "[masked-secret]" in back[0].name
    texts = [s.name for s in spans] + [str(v) for s in spans for v in (s.attributes or {}).values()]
    assert not [t for t in texts if "PLANTED" in t]
    run = _root([s for s in spans if s not in back and s.name != "host"])
    assert "[masked-secret]" in str((run.attributes or {})[sc.GEN_AI_WORKFLOW_NAME])
