"""Each rule of docs/otel-mapping.md, on hand-built streams (including shapes no fixture has)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import Span
from opentelemetry.trace import SpanKind, StatusCode

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import MASKED_SECRET
from rulvar_otel.errors import ConfigError, RunRejectedError
from rulvar_otel.otel import export_events
from rulvar_otel.otel import semconv as sc
from rulvar_otel.testing import SpanCapture
from tests._support import Export, ev, export, t

OK = RunOutcome(status="ok")
USAGE = {
    "inputTokens": 10,
    "outputTokens": 5,
    "cacheReadTokens": 2,
    "cacheWriteTokens": 1,
    "reasoningTokens": 3,
}


def agent(seq: int, span: str, parent: str | None, agent_type: str = "w", **kw: Any) -> dict[str, Any]:
    return ev("agent:start", seq, span, parent, agentType=agent_type, model="openai:gpt-x", role="loop", **kw)


def agent_end(seq: int, span: str, status: str = "ok", **kw: Any) -> dict[str, Any]:
    return ev(
        "agent:end", seq, span, agentType="w", status=status, usage=USAGE, costUsd=0.5, entryRef=1, **kw
    )


def run(*body: dict[str, Any], status: str = "ok", end: bool = True) -> list[dict[str, Any]]:
    events = [ev("run:start", 0, "s0", workflow="wf", resumed=False), *body]
    if end:
        events.append(ev("run:end", 999, "s0", ts_ms=999, status=status, totalUsd=0))
    return events


def parent_of(result: Export, span: Span) -> Span | None:
    return result.by_id.get(span.parent.span_id) if span.parent is not None else None


def only(result: Export, name: str) -> Span:
    found = result.named(name)
    assert len(found) == 1, [s.name for s in result.spans]
    return found[0]


# --- tool pairing ------------------------------------------------------------------------------


def test_tool_ids_pair_exactly_whatever_order_they_end_in() -> None:
    result = export(
        run(
            agent(1, "a", "s0"),
            ev("tool:start", 2, "a", toolName="search", toolCallId="c1"),
            ev("tool:start", 3, "a", toolName="search", toolCallId="c2"),
            ev("tool:end", 4, "a", toolName="search", toolCallId="c2", outcome="ok", durationMs=1),
            ev(
                "tool:end",
                9,
                "a",
                toolName="search",
                toolCallId="c1",
                outcome="error",
                durationMs=7,
                errorCode="E_IO",
            ),
            agent_end(10, "a"),
        ),
        OK,
    )
    tools = {s.attributes[sc.TOOL_CALL_ID]: s for s in result.named("tool search")}  # type: ignore[index]
    assert tools["c1"].end_time == t(9) and tools["c1"].status.status_code is StatusCode.ERROR
    assert tools["c1"].attributes[sc.ERROR_TYPE] == "E_IO"  # type: ignore[index]
    assert tools["c2"].end_time == t(4) and tools["c2"].status.status_code is StatusCode.OK
    assert sc.ERROR_TYPE not in (tools["c2"].attributes or {})
    for span in tools.values():
        assert parent_of(result, span) is only(result, "agent w loop")
        assert span.attributes[sc.GEN_AI_OPERATION_NAME] == "execute_tool"  # type: ignore[index]
        assert span.attributes[sc.GEN_AI_TOOL_NAME] == "search"  # type: ignore[index]


def test_tools_without_ids_pair_fifo_per_agent_and_name() -> None:
    result = export(
        run(
            agent(1, "a", "s0"),
            ev("tool:start", 2, "a", toolName="x"),
            ev("tool:start", 3, "a", toolName="y"),
            ev("tool:start", 4, "a", toolName="x"),
            ev("tool:end", 5, "a", toolName="x", outcome="ok", durationMs=3),
            ev("tool:end", 6, "a", toolName="y", outcome="denied", durationMs=0, guard="per-tool-cap"),
            ev("tool:end", 7, "a", toolName="x", toolCallId="late-id", outcome="ok", durationMs=3),
            agent_end(8, "a"),
        ),
        OK,
    )
    xs = sorted(result.named("tool x"), key=lambda s: s.start_time or 0)
    assert [x.end_time for x in xs] == [t(5), t(7)]  # the id-bearing end fell back to the FIFO
    y = only(result, "tool y")
    assert y.attributes[sc.TOOL_GUARD] == "per-tool-cap"  # type: ignore[index]
    assert y.attributes[sc.STATUS] == "denied"  # type: ignore[index]


def test_orphan_tool_end_is_an_event_on_its_agent_and_never_closes_it() -> None:
    result = export(
        run(
            agent(1, "a", "s0"),
            ev("tool:end", 2, "a", toolName="ghost", outcome="ok", durationMs=1),
            agent_end(3, "a"),
        ),
        OK,
    )
    a = only(result, "agent w loop")
    assert [e.name for e in a.events] == ["tool:end"]
    assert a.events[0].timestamp == t(2)
    assert a.end_time == t(3)


def test_replayed_tool_start_on_an_open_call_id_opens_nothing() -> None:
    result = export(
        run(
            agent(1, "a", "s0"),
            ev("tool:start", 2, "a", toolName="x", toolCallId="c1"),
            ev("tool:start", 3, "a", toolName="x", toolCallId="c1", replayed=True),
            ev("tool:end", 4, "a", toolName="x", toolCallId="c1", outcome="ok", durationMs=2),
            agent_end(5, "a"),
        ),
        OK,
    )
    tool = only(result, "tool x")
    assert tool.attributes[sc.REPLAYED] is True  # type: ignore[index]
    assert tool.end_time == t(4)


# --- duplicate and replayed openers --------------------------------------------------------------


def test_duplicate_agent_start_never_opens_a_second_span() -> None:
    result = export(run(agent(1, "a", "s0"), agent(2, "a", "s0"), agent_end(3, "a")), OK)
    assert len(result.named("agent w loop")) == 1
    assert sc.REPLAYED not in (only(result, "agent w loop").attributes or {})


def test_replayed_opener_of_an_open_span_marks_it() -> None:
    result = export(run(agent(1, "a", "s0"), agent(2, "a", "s0", replayed=True), agent_end(3, "a")), OK)
    assert only(result, "agent w loop").attributes[sc.REPLAYED] is True  # type: ignore[index]


def test_replayed_opener_of_an_ended_span_becomes_a_replayed_span_event() -> None:
    result = export(
        run(
            ev("phase:start", 1, "p", "s0", phase="work"),
            agent(2, "a", "p"),
            agent_end(3, "a"),
            agent(4, "a", "p", replayed=True),
        ),
        OK,
    )
    assert len(result.named("agent w loop")) == 1
    phase = only(result, "phase work")  # the innermost open span at seq 4
    (event,) = phase.events
    assert event.name == "agent:start"
    assert event.attributes[sc.REPLAYED] is True  # type: ignore[index]
    assert event.timestamp == t(4)


# --- parents and scopes --------------------------------------------------------------------------


def test_never_opened_parent_groups_under_innermost_open_scope_in_one_trace() -> None:
    result = export(
        run(
            ev("phase:start", 1, "p", "s0", phase="fan"),
            agent(2, "a", "par-branch-0"),
            agent_end(3, "a"),
        ),
        OK,
    )
    a = only(result, "agent w loop")
    assert parent_of(result, a) is only(result, "phase fan")
    assert a.attributes[sc.PARENT_INFERRED] is True  # type: ignore[index]
    assert a.attributes[sc.PARENT_SPAN_ID] == "par-branch-0"  # type: ignore[index]
    assert len({s.context.trace_id for s in result.spans}) == 1


def test_parent_found_among_ended_spans() -> None:
    result = export(
        run(
            ev("child:start", 1, "c", "s0", workflow="kid", scope="wf:kid:0"),
            ev("child:end", 2, "c", workflow="kid", scope="wf:kid:0", status="ok"),
            agent(3, "a", "c"),
            agent_end(4, "a"),
        ),
        OK,
    )
    a = only(result, "agent w loop")
    assert parent_of(result, a) is only(result, "workflow kid")
    assert sc.PARENT_INFERRED not in (a.attributes or {})


def test_orphan_after_its_scope_closed_goes_to_the_next_open_scope() -> None:
    result = export(
        run(
            ev("phase:start", 1, "p", "s0", phase="outer"),
            ev("child:start", 2, "c", "p", workflow="kid", scope="wf:kid:0"),
            ev("phase:start", 3, "cp", "c", phase="inside-kid"),
            ev("child:end", 4, "c", workflow="kid", scope="wf:kid:0", status="ok"),
            agent(5, "a", "never-opened"),
            agent_end(6, "a"),
        ),
        OK,
    )
    # The child closed, and with it the phase inside it: the orphan lands in "outer".
    assert parent_of(result, only(result, "agent w loop")) is only(result, "phase outer")


def test_nested_child_workflows_close_inner_first() -> None:
    result = export(
        run(
            ev("child:start", 1, "c1", "s0", workflow="outer", scope="wf:outer:0"),
            ev("child:start", 2, "c2", "c1", workflow="inner", scope="wf:inner:0"),
            agent(3, "a", "ghost"),
            agent_end(4, "a"),
            ev("child:end", 5, "c2", workflow="inner", scope="wf:inner:0", status="error"),
            agent(6, "b", "ghost", agent_type="v"),
            agent_end(7, "b"),
            ev("child:end", 8, "c1", workflow="outer", scope="wf:outer:0", status="ok"),
            agent(9, "c", "ghost", agent_type="u"),
            agent_end(10, "c"),
        ),
        OK,
    )
    inner, outer = only(result, "workflow inner"), only(result, "workflow outer")
    assert parent_of(result, inner) is outer
    assert inner.status.status_code is StatusCode.ERROR and inner.end_time == t(5)
    assert inner.attributes[sc.SCOPE] == "wf:inner:0"  # type: ignore[index]
    assert parent_of(result, only(result, "agent w loop")) is inner
    assert parent_of(result, only(result, "agent v loop")) is outer
    assert parent_of(result, only(result, "agent u loop")) is result.spans[0]


def test_parentless_span_goes_to_innermost_scope_without_parent_span_id() -> None:
    result = export(
        run(ev("phase:start", 1, "p", "s0", phase="x"), agent(2, "a", None), agent_end(3, "a")), OK
    )
    a = only(result, "agent w loop")
    assert parent_of(result, a) is only(result, "phase x")
    assert sc.PARENT_SPAN_ID not in (a.attributes or {})


# --- segments, leftovers, phases -----------------------------------------------------------------


def test_several_segments_of_one_run_in_one_file() -> None:
    seg2 = 4_294_967_296
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("phase:start", 1, "p", "s0", phase="one"),
        agent(2, "a", "p"),  # never ends: a leftover of segment 1
        ev("run:end", 3, "s0", status="suspended", totalUsd=0),
        ev("log", 4, "s0", level="info", msg="tail of segment one"),
        ev("run:start", seg2, "s1", ts_ms=50, workflow="wf", resumed=True),
        agent(seg2 + 1, "b", "s1", ts_ms=51, agent_type="v"),
        agent_end(seg2 + 2, "b") | {"ts": ev("x", 0, "x", ts_ms=52)["ts"]},
        ev("run:end", seg2 + 3, "s1", ts_ms=53, status="ok", totalUsd=0),
    ]
    result = export(events, OK)
    first, second = result.named("run wf")
    assert parent_of(result, second) is first
    assert len({s.context.trace_id for s in result.spans}) == 1
    assert first.status.status_code is StatusCode.ERROR  # suspended
    leftover = only(result, "agent w loop")
    assert leftover.end_time == t(4)  # the last event of its segment, not of the file
    assert leftover.attributes[sc.END_INFERRED] is True  # type: ignore[index]
    assert leftover.status.status_code is StatusCode.OK  # the run resolved ok
    assert only(result, "phase one").end_time == t(4)  # its latest descendant
    assert parent_of(result, only(result, "agent v loop")) is second


def test_truncated_stream_ends_leftovers_at_last_event_and_refuses_green_on_rejection() -> None:
    events = run(
        ev("phase:start", 1, "p", "s0", phase="x"),
        agent(2, "a", "p"),
        ev("log", 7, "a", level="info", msg="m"),
        end=False,
    )
    result = export(events, RunRejectedError("boom"))
    assert result.returned == 3
    for span in result.spans:
        assert span.end_time == t(7)
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[sc.END_INFERRED] is True  # type: ignore[index]


def test_phase_without_descendants_ends_at_its_own_start() -> None:
    result = export(run(ev("phase:start", 5, "p", "s0", phase="empty")), OK)
    phase = only(result, "phase empty")
    assert phase.end_time == phase.start_time == t(5)


# --- terminal facts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (None, "settlement failed: nothing durable records this terminal; resume re-settles"),
        ("superseded", "superseded: a successor owns settlement; this stale terminal is withheld"),
    ],
)
def test_settled_false_is_never_green(reason: str | None, message: str) -> None:
    end = ev("run:end", 2, "s0", status="ok", totalUsd=0, settled=False)
    if reason:
        end["settledReason"] = reason
    result = export([ev("run:start", 0, "s0", workflow="wf", resumed=False), end], None)
    run_span = result.spans[0]
    assert run_span.status.status_code is StatusCode.ERROR
    assert run_span.status.description == message
    assert run_span.attributes[sc.RUN_SETTLED] is False  # type: ignore[index]
    assert run_span.attributes.get(sc.RUN_SETTLED_REASON) == reason  # type: ignore[union-attr]


def test_envelope_mirror_and_error_type_on_run_span() -> None:
    envelope = {"totalUsd": 1.25, "agentsSpawned": 4, "error": {"code": "BUDGET", "message": "secret text"}}
    result = export(
        [
            ev("run:start", 0, "s0", workflow="wf", resumed=False),
            ev(
                "run:end",
                1,
                "s0",
                status="exhausted",
                totalUsd=1.25,
                completion="partial",
                envelope=envelope,
                degradedReasons=["child x limit"],
                childStatusCounts={"ok": 2, "error": 1},
            ),
        ],
        None,
    )
    attrs = result.spans[0].attributes or {}
    assert attrs[sc.RUN_TOTAL_USD] == 1.25 and attrs[sc.RUN_AGENTS_SPAWNED] == 4
    assert attrs[sc.ERROR_TYPE] == "BUDGET"
    assert attrs[sc.RUN_COMPLETION] == "partial"
    assert attrs[sc.RUN_CHILD_STATUS_COUNTS] == '{"ok":2,"error":1}'
    assert attrs[sc.RUN_DEGRADED_REASONS] == '["child x limit"]'
    assert "secret text" not in repr(result.spans[0].to_json())
    # docs/otel-mapping.md#errors: the status literal, never the wire error's message.
    assert result.spans[0].status.description == "exhausted"


def test_export_without_outcome_reads_the_run_end() -> None:
    ok = export(run(ev("phase:start", 1, "p", "s0", phase="x")), None)
    assert only(ok, "phase x").status.status_code is StatusCode.OK
    bad = export(run(ev("phase:start", 1, "p", "s0", phase="x"), status="error"), None)
    assert only(bad, "phase x").status.status_code is StatusCode.ERROR


def test_agent_span_usage_cost_and_genai_attributes() -> None:
    result = export(
        run(
            agent(1, "a", "s0", agent_type="researcher"),
            ev(
                "agent:phase:start",
                2,
                "a",
                agentType="researcher",
                role="loop",
                model="openai:gpt-x",
                invocation=1,
            ),
            ev(
                "agent:phase:end",
                3,
                "a",
                agentType="researcher",
                role="loop",
                model="openai:gpt-x",
                invocation=1,
                durationMs=1,
                usage=USAGE,
                costUsd=0.25,
                outcome="ok",
                retries=2,
            ),
            agent_end(
                4,
                "a",
                status="error",
                retryCount=2,
                error={"code": "RATE", "message": "m", "retryable": True},
            ),
        ),
        OK,
    )
    a = only(result, "agent researcher loop")
    attrs = a.attributes or {}
    assert attrs[sc.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert attrs[sc.AGENT_ROLE] == "loop"
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == "gpt-x" and attrs[sc.MODEL_REF] == "openai:gpt-x"
    assert attrs[sc.GEN_AI_AGENT_NAME] == "researcher"
    assert attrs[sc.GEN_AI_CONVERSATION_ID] == "r1"
    assert attrs[sc.OPENINFERENCE_SPAN_KIND] == "AGENT"
    # docs/otel-mapping.md#token-usage-on-one-level: the agent had an invocation, so its totals
    # are rulvar.usage.* and the tokens are counted on the invocation only.
    assert not any(key.startswith("gen_ai.usage.") for key in attrs)
    assert attrs[sc.RULVAR_USAGE_INPUT_TOKENS] == 10 and attrs[sc.RULVAR_USAGE_OUTPUT_TOKENS] == 5
    assert attrs[sc.RULVAR_USAGE_CACHE_READ_INPUT_TOKENS] == 2
    assert attrs[sc.RULVAR_USAGE_CACHE_CREATION_INPUT_TOKENS] == 1
    assert attrs[sc.RULVAR_USAGE_REASONING_OUTPUT_TOKENS] == 3
    assert attrs[sc.RETRY_COUNT] == 2 and attrs[sc.ERROR_TYPE] == "RATE"
    assert a.status.description == "error"
    inv = only(result, "invocation loop")
    assert parent_of(result, inv) is a
    inv_attrs = inv.attributes or {}
    assert inv_attrs[sc.RETRIES] == 2 and inv_attrs[sc.INVOCATION] == 1
    assert inv_attrs[sc.GEN_AI_OPERATION_NAME] == "chat" and inv_attrs[sc.AGENT_ROLE] == "loop"
    assert inv_attrs[sc.GEN_AI_REQUEST_MODEL] == "gpt-x" and inv_attrs[sc.MODEL_REF] == "openai:gpt-x"
    assert inv_attrs[sc.OPENINFERENCE_SPAN_KIND] == "LLM"
    assert inv_attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == 10 and inv_attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert inv_attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 2
    assert inv_attrs[sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 1
    assert inv_attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 3
    assert sc.GEN_AI_CONVERSATION_ID not in inv_attrs
    assert inv.kind is SpanKind.INTERNAL  # docs/otel-mapping.md#operation-names-and-span-kinds


def test_agent_without_invocation_children_keeps_genai_usage() -> None:
    result = export(run(agent(1, "a", "s0"), agent_end(2, "a")), OK)
    attrs = only(result, "agent w loop").attributes or {}
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == 10 and attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert not any(key.startswith("rulvar.usage.") for key in attrs)


@pytest.mark.parametrize(
    ("model", "request_model", "provider"),
    [
        ("openai:gpt-4o", "gpt-4o", "openai"),
        ("anthropic:claude-x", "claude-x", "anthropic"),
        ("google:gemini-2.5-pro", "gemini-2.5-pro", "gcp.gemini"),
        ("Bedrock:anthropic.claude-v2:1", "anthropic.claude-v2:1", "aws.bedrock"),
        ("azure-openai:gpt-4o", "gpt-4o", "azure.ai.openai"),
        ("mistral:large", "large", "mistral_ai"),
        ("fake:model", "model", "fake"),
        ("gpt-x", "gpt-x", None),
        ("openai:", "(unknown)", "openai"),
    ],
)
def test_request_model_is_the_id_after_the_adapter_and_provider_is_well_known(
    model: str, request_model: str, provider: str | None
) -> None:
    result = export(run(ev("agent:start", 1, "a", "s0", agentType="x", model=model, role="loop")), OK)
    attrs = result.spans[1].attributes or {}
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == request_model
    assert attrs[sc.MODEL_REF] == model
    assert attrs.get(sc.GEN_AI_PROVIDER_NAME) == provider


def test_every_error_span_names_an_error_type_and_its_status_literal() -> None:
    result = export(
        run(
            ev("child:start", 1, "c", "s0", workflow="kid", scope="wf:kid:0"),
            agent(2, "a", "c"),
            ev("agent:phase:start", 3, "a", agentType="w", role="loop", model="m", invocation=1),
            ev(
                "agent:phase:end",
                4,
                "a",
                agentType="w",
                role="loop",
                model="m",
                invocation=1,
                outcome="error",
            ),
            ev("tool:start", 5, "a", toolName="x"),
            ev("tool:end", 6, "a", toolName="x", outcome="denied"),
            ev("agent:end", 7, "a", status="error", error={"code": "E_X", "message": "content"}),
            ev("child:end", 8, "c", status="error"),
            agent(9, "b", "s0", agent_type="v"),  # never ends: inferred, ERROR on a failed run
            status="error",
        ),
        RunOutcome(status="error"),
    )
    expected = {
        "run wf": ("_OTHER", "error"),
        "workflow kid": ("_OTHER", "error"),
        "agent w loop": ("E_X", "error"),
        "invocation loop": ("_OTHER", "error"),
        "tool x": ("_OTHER", "denied"),
        "agent v loop": ("_OTHER", None),
    }
    for name, (error_type, description) in expected.items():
        span = only(result, name)
        assert span.status.status_code is StatusCode.ERROR, name
        assert (span.attributes or {})[sc.ERROR_TYPE] == error_type, name
        assert span.status.description == description, name


def test_conversation_id_is_the_run_id_on_run_and_agent_spans_only() -> None:
    result = export(
        run(
            ev("phase:start", 1, "p", "s0", phase="x"),
            agent(2, "a", "p"),
            ev("tool:start", 3, "a", toolName="t"),
        ),
        OK,
    )
    carriers = {s.name for s in result.spans if sc.GEN_AI_CONVERSATION_ID in (s.attributes or {})}
    assert carriers == {"run wf", "agent w loop"}
    assert {(s.attributes or {})[sc.GEN_AI_CONVERSATION_ID] for s in result.spans if s.name in carriers} == {
        "r1"
    }


def test_openinference_span_kinds_on_every_span_and_switchable_off() -> None:
    stream = run(
        ev("phase:start", 1, "p", "s0", phase="x"),
        agent(2, "a", "p"),
        ev("agent:phase:start", 3, "a", agentType="w", role="loop", model="m", invocation=1),
        ev("tool:start", 4, "a", toolName="t"),
        ev("child:start", 5, "c", "p", workflow="kid", scope="wf:kid:0"),
    )
    kinds = {s.name: (s.attributes or {}).get(sc.OPENINFERENCE_SPAN_KIND) for s in export(stream, OK).spans}
    assert kinds == {
        "run wf": "CHAIN",
        "phase x": "CHAIN",
        "workflow kid": "CHAIN",
        "agent w loop": "AGENT",
        "invocation loop": "LLM",
        "tool t": "TOOL",
    }
    capture = SpanCapture()
    export_events(stream, capture.tracer, outcome=OK, conventions=())
    assert len(capture.ended) == 6
    assert not any(sc.OPENINFERENCE_SPAN_KIND in (s.attributes or {}) for s in capture.ended)


def test_unknown_convention_is_a_config_error_before_any_span() -> None:
    capture = SpanCapture()
    with pytest.raises(ConfigError, match="openinference"):
        export_events(run(), capture.tracer, conventions=("openinferense",))
    assert capture.spans == []


def test_anonymous_and_unknown_names() -> None:
    result = export(
        run(
            ev("agent:start", 1, "a", "s0", agentType="", model="m", role="loop"),
            ev("agent:start", 2, "b", "s0"),
            ev("phase:start", 3, "p", "s0"),
        ),
        OK,
    )
    names = {s.name for s in result.spans}
    assert {"agent (anon) loop", "agent (unknown) (unknown)", "phase (unknown)"} <= names
    assert sc.GEN_AI_AGENT_NAME not in (result.named("agent (anon) loop")[0].attributes or {})


def test_provider_name_is_derived_from_the_masked_ref() -> None:
    secret = "sk-" + "a" * 30
    result = export(run(ev("agent:start", 1, "a", "s0", agentType="x", model=f"{secret}:m", role="loop")), OK)
    attrs = result.spans[1].attributes or {}
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == MASKED_SECRET
    assert secret not in repr(attrs)


# --- span events ---------------------------------------------------------------------------------


def test_span_events_carry_operational_facts_but_no_content() -> None:
    result = export(
        run(
            agent(1, "a", "s0"),
            ev(
                "quota:denied",
                2,
                "a",
                agentType="w",
                label="my label",
                model="openai:gpt-x",
                reason="tokens",
                retryAfterMs=250,
                willRetry=True,
            ),
            ev(
                "budget:exposure-wait",
                3,
                "a",
                agentType="w",
                scope="root",
                capUsd=1,
                estimateUsd=0.5,
                willWait=False,
            ),
            ev(
                "agent:error",
                4,
                "a",
                agentType="w",
                error={"code": "E1", "message": "provider said X", "retryable": False},
                willRetry=False,
            ),
            ev("log", 5, "a", level="warn", msg="log text", data={"k": "v"}),
            ev("agent:stream", 6, "a", delta="token text"),
            ev(
                "some:future-event",
                7,
                "a",
                foo="bar",
                nested={"x": 1},
                nums=[1, 2.5],
                mixed=[1, "a"],
                empty=[],
            ),
            agent_end(8, "a"),
        ),
        OK,
    )
    a = only(result, "agent w loop")
    events = {e.name: dict(e.attributes or {}) for e in a.events}
    assert list(events) == ["quota:denied", "budget:exposure-wait", "agent:error", "log", "some:future-event"]
    assert events["quota:denied"] == {
        sc.ENTRY_SEQ: 2,
        "rulvar.event.agent_type": "w",
        "rulvar.event.model": "openai:gpt-x",
        "rulvar.event.reason": "tokens",
        "rulvar.event.retry_after_ms": 250,
        "rulvar.event.will_retry": True,
    }
    assert events["budget:exposure-wait"]["rulvar.event.will_wait"] is False
    assert events["agent:error"]["rulvar.event.error_code"] == "E1"
    assert events["agent:error"]["rulvar.event.error_retryable"] is False
    assert events["log"] == {sc.ENTRY_SEQ: 5, "rulvar.event.level": "warn"}
    assert events["some:future-event"] == {
        sc.ENTRY_SEQ: 7,
        "rulvar.event.foo": "bar",
        "rulvar.event.nums": (1.0, 2.5),
    }
    assert [e.timestamp for e in a.events] == [t(2), t(3), t(4), t(5), t(7)]
    dump = repr([s.to_json() for s in result.spans])
    for content in ("my label", "provider said X", "log text", "token text"):
        assert content not in dump


def test_determinism_warning_exports_code_location() -> None:
    result = export(
        run(
            ev(
                "determinism:warning",
                1,
                "s0",
                category="bare-math-random",
                provenance="workflow",
                frame="at body (/app/wf.py:12:9)",
                file="/app/wf.py",
                line=12,
                column=9,
            )
        ),
        OK,
    )
    (event,) = result.spans[0].events
    assert dict(event.attributes or {}) == {
        sc.ENTRY_SEQ: 1,
        sc.DETERMINISM_CATEGORY: "bare-math-random",
        sc.DETERMINISM_PROVENANCE: "workflow",
        sc.CODE_FILEPATH: "/app/wf.py",
        sc.CODE_LINENO: 12,
        # docs/otel-mapping.md#conversation-id-and-code-location: the current names beside them.
        sc.CODE_FILE_PATH: "/app/wf.py",
        sc.CODE_LINE_NUMBER: 12,
        "rulvar.event.column": 9,
    }


def test_event_hosts_on_spanid_owner_never_on_invocation_or_tool() -> None:
    result = export(
        run(
            agent(1, "a", "s0"),
            ev("agent:phase:start", 2, "a", agentType="w", role="loop", model="m", invocation=1),
            ev("tool:start", 3, "a", toolName="x", toolCallId="c"),
            ev("log", 4, "a", level="info", msg="m"),
            ev("log", 5, "nobody", level="info", msg="m"),
        ),
        OK,
    )
    assert [e.name for e in only(result, "agent w loop").events] == ["log"]
    assert [e.name for e in only(result, "tool x").events] == ["log"]  # innermost open span


def test_closers_that_find_nothing_become_span_events() -> None:
    result = export(
        run(
            ev("agent:end", 1, "ghost", status="ok"),
            ev("agent:phase:end", 2, "ghost", invocation=1, outcome="ok"),
            ev("child:end", 3, "ghost", status="ok", workflow="k", scope="x"),
        ),
        OK,
    )
    assert [e.name for e in result.spans[0].events] == ["agent:end", "agent:phase:end", "child:end"]
    assert len(result.spans) == 1


def test_events_before_anything_is_open_are_dropped_without_error() -> None:
    result = export([ev("log", 0, "s0", level="info", msg="early"), *run()], OK)
    assert result.spans[0].events == ()


def test_span_names_and_attributes_are_masked_with_host_patterns() -> None:
    result = export(
        run(ev("phase:start", 1, "p", "s0", phase="mail bob@example.com ghp_" + "x" * 30)),
        OK,
        patterns=[r"[a-z]+@example\.com"],
    )
    assert only(result, f"phase mail {MASKED_SECRET} {MASKED_SECRET}")


def test_clock_stepping_back_never_gives_negative_durations() -> None:
    result = export(run(agent(5, "a", "s0"), agent_end(6, "a") | {"ts": ev("x", 0, "x", ts_ms=1)["ts"]}), OK)
    a = only(result, "agent w loop")
    assert a.end_time == a.start_time


# --- span events respect closed scopes (docs/otel-mapping.md#where-a-span-event-lands) ------------


def _event_names(span: Span) -> list[str]:
    return [e.name for e in span.events]


def test_no_span_event_lands_inside_a_child_workflow_that_has_closed() -> None:
    result = export(
        run(
            ev("phase:start", 1, "p", "s0", phase="outer"),
            ev("child:start", 2, "c", "p", workflow="kid", scope="wf:kid:0"),
            ev("phase:start", 3, "cp", "c", phase="inside-kid"),
            agent(4, "a", "cp"),  # never ends
            ev("child:end", 5, "c", workflow="kid", scope="wf:kid:0", status="ok"),
            ev("log", 6, "cp", level="info", msg="m"),  # keyed to the closed child's phase
            ev("log", 7, "a", level="info", msg="m"),  # keyed to an agent inside it
            ev("budget:update", 8, "nobody", spentUsd=1),  # innermost open: not the stranded agent
        ),
        OK,
    )
    assert _event_names(only(result, "phase inside-kid")) == []
    assert _event_names(only(result, "agent w loop")) == []
    assert _event_names(only(result, "phase outer")) == ["log", "log", "budget:update"]
    # The stranded agent is still ended, at the last event of the segment.
    stranded = only(result, "agent w loop")
    assert stranded.end_time == t(999) and (stranded.attributes or {})[sc.END_INFERRED] is True


def test_no_span_event_lands_in_a_segment_that_has_ended() -> None:
    seg2 = 4_294_967_296
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        agent(1, "a", "s0"),  # a leftover of segment one
        ev("run:end", 2, "s0", status="suspended", totalUsd=0),
        ev("log", 3, "a", level="info", msg="after the segment ended"),
        ev("run:start", seg2, "s1", ts_ms=10, workflow="wf", resumed=True),
        ev("log", seg2 + 1, "a", ts_ms=11, level="info", msg="keyed to the old agent"),
        ev("run:end", seg2 + 2, "s1", ts_ms=12, status="ok", totalUsd=0),
    ]
    result = export(events, OK)
    leftover = only(result, "agent w loop")
    assert _event_names(leftover) == []
    assert leftover.end_time == t(3)
    _, second = result.named("run wf")
    assert _event_names(second) == ["log"]


def test_inferred_phase_end_covers_its_own_span_events() -> None:
    result = export(
        run(
            ev("phase:start", 1, "p", "s0", phase="quiet"),
            ev("log", 5, "p", level="info", msg="m"),
            ev("budget:update", 6, "p", spentUsd=1),
        ),
        OK,
    )
    phase = only(result, "phase quiet")
    assert phase.end_time == t(6)
    assert (phase.attributes or {})[sc.END_INFERRED] is True


def test_span_events_stay_within_their_span_when_the_clock_steps_back() -> None:
    result = export(
        run(
            agent(5, "a", "s0"),
            ev("log", 6, "a", ts_ms=2, level="info", msg="stamped before the agent started"),
            ev("log", 7, "a", ts_ms=9, level="info", msg="m"),
            agent_end(8, "a") | {"ts": ev("x", 0, "x", ts_ms=8)["ts"]},  # ends before its last event
        ),
        OK,
    )
    a = only(result, "agent w loop")
    assert [e.timestamp for e in a.events] == [t(5), t(9)]
    assert a.end_time == t(9)
    for span in result.spans:
        for event in span.events:
            assert span.start_time is not None and span.end_time is not None
            assert span.start_time <= event.timestamp <= span.end_time, span.name


def test_orphan_in_a_later_segment_groups_under_that_segments_open_phase() -> None:
    seg2 = 4_294_967_296
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("run:end", 1, "s0", status="suspended", totalUsd=0),
        ev("run:start", seg2, "s1", ts_ms=10, workflow="wf", resumed=True),
        ev("phase:start", seg2 + 1, "p2", "s1", ts_ms=11, phase="two"),
        agent(seg2 + 2, "a", "never-opened", ts_ms=12),
        ev("log", seg2 + 3, "nobody", ts_ms=13, level="info", msg="m"),
    ]
    result = export(events, OK)
    phase = only(result, "phase two")
    assert parent_of(result, only(result, "agent w loop")) is phase
    assert _event_names(only(result, "agent w loop")) == ["log"]  # the innermost open span


# --- the names are the convention's (docs/otel-mapping.md#genai-semantic-conventions) ------------


def test_genai_names_and_values_are_the_conventions_own() -> None:
    """Checked against opentelemetry-semantic-conventions, the registry the OTel project publishes."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv.attributes import code_attributes, error_attributes
    from opentelemetry.semconv.schemas import Schemas

    registry = {v for k, v in vars(gen_ai).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
    ours = {
        v
        for k, v in vars(sc).items()
        if k.startswith("GEN_AI_")
        and isinstance(v, str)
        and v.startswith("gen_ai.")
        and not k.startswith("GEN_AI_CLIENT_")  # metric names
    }
    assert len(ours) >= 12 and ours - registry == set()
    assert sc.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert (sc.CODE_FILE_PATH, sc.CODE_LINE_NUMBER) == (
        code_attributes.CODE_FILE_PATH,
        code_attributes.CODE_LINE_NUMBER,
    )
    operations = {v.value for v in gen_ai.GenAiOperationNameValues}
    assert {
        sc.GEN_AI_OPERATION_INVOKE_AGENT,
        sc.GEN_AI_OPERATION_CHAT,
        sc.GEN_AI_OPERATION_EXECUTE_TOOL,
    } <= operations
    providers = {v.value for v in gen_ai.GenAiProviderNameValues}
    assert set(sc.GEN_AI_PROVIDER_NAMES.values()) <= providers
    assert {key for key, value in sc.GEN_AI_PROVIDER_NAMES.items() if key == value} == providers
    assert sc.SCHEMA_URL in {s.value for s in Schemas}


# --- contract-scopes streams: generated nestings of segments, child workflows, phases, agents ----

_SCOPE_OPS = st.lists(
    st.sampled_from(["phase", "child", "child_end", "agent", "orphan", "agent_end", "event", "segment"])
    | st.tuples(st.just("event_on"), st.integers(0, 30)),
    max_size=50,
)


def _scope_stream(ops: list[Any], steps: list[int]) -> list[dict[str, Any]]:
    """A well-formed stream shaped by ``ops``; ``steps`` are the clock's increments (0 allowed)."""
    seq = 0
    clock = 0
    out: list[dict[str, Any]] = []
    scopes: list[str] = []  # the run, open child workflows and phases, innermost last
    children: set[str] = set()
    agents: list[str] = []
    known: list[str] = []
    segment = 0

    def emit(kind: str, span: str, parent: str | None = None, **body: Any) -> None:
        nonlocal seq, clock
        clock += steps[seq % len(steps)]
        out.append(ev(kind, seq, span, parent, ts_ms=clock, **body))
        seq += 1

    def run_start() -> None:
        root = f"run{segment}"
        emit("run:start", root, workflow="wf", resumed=segment > 0)
        scopes.append(root)
        known.append(root)

    run_start()
    for i, op in enumerate(ops):
        name = f"s{i}"
        if op == "phase":
            emit("phase:start", name, scopes[-1], phase=name)
            scopes.append(name)
        elif op == "child":
            emit("child:start", name, scopes[-1], workflow=name, scope=f"wf:{name}:0")
            scopes.append(name)
            children.add(name)
        elif op == "child_end":
            # The innermost child workflow closes; the phases inside it close with it as scopes.
            inner = [k for k in range(1, len(scopes)) if scopes[k] in children]
            if inner:
                emit("child:end", scopes[inner[-1]], status="ok", workflow=scopes[inner[-1]])
                del scopes[inner[-1] :]
        elif op in ("agent", "orphan"):
            emit(
                "agent:start", name, scopes[-1] if op == "agent" else f"never-{i}", agentType="w", role="loop"
            )
            agents.append(name)
        elif op == "agent_end" and agents:
            emit("agent:end", agents.pop(), status="ok")
        elif op == "event":
            emit("budget:update", scopes[-1], spentUsd=1)
        elif isinstance(op, tuple):
            emit("log", known[op[1] % len(known)], level="info", msg="m")
        elif op == "segment":
            emit("run:end", f"run{segment}", status="suspended", totalUsd=0)
            segment += 1
            scopes.clear()
            agents.clear()
            run_start()
        if op in ("phase", "child", "agent", "orphan"):
            known.append(name)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SCOPE_OPS, st.lists(st.integers(0, 3), min_size=1, max_size=5))
def test_generated_scopes_keep_every_event_inside_its_span_and_out_of_closed_scopes(
    ops: list[Any], steps: list[int]
) -> None:
    stream = _scope_stream(ops, steps)
    result = export(stream, OK)
    assert len(result.ended) == len(result.spans)
    by_seq = {e["seq"]: e for e in stream}
    closer_seq = {e["spanId"]: e["seq"] for e in stream if e["type"] in ("child:end", "run:end")}
    for span in result.spans:
        assert span.start_time is not None and span.end_time is not None
        for event in span.events:
            assert span.start_time <= event.timestamp <= span.end_time, span.name
            seq = (event.attributes or {})[sc.ENTRY_SEQ]
            # No child workflow or segment around the host had closed when the event came.
            node: Span | None = span
            while node is not None:
                opener = by_seq[(node.attributes or {})[sc.ENTRY_SEQ]]
                if opener["type"] in ("child:start", "run:start"):
                    closed_at = closer_seq.get(opener["spanId"])
                    assert closed_at is None or closed_at > seq, (span.name, event.name, seq)
                    if opener["type"] == "run:start":
                        break
                node = parent_of(result, node)


def test_to_otel_takes_the_same_conventions_option() -> None:
    import asyncio

    from rulvar_otel.core.handle import handle_from_events
    from rulvar_otel.otel import to_otel

    stream = run(agent(1, "a", "s0"), agent_end(2, "a"))
    capture = SpanCapture()
    tracer = capture.tracer
    assert asyncio.run(to_otel(handle_from_events(stream, OK), tracer, conventions=())) == 2
    assert not any(sc.OPENINFERENCE_SPAN_KIND in (s.attributes or {}) for s in capture.ended)
    with pytest.raises(ConfigError, match="unknown convention"):
        asyncio.run(to_otel(handle_from_events(stream, OK), tracer, conventions=["phoenix"]))
    assert len(capture.spans) == 2


def test_a_stranded_span_opened_before_any_run_is_still_ended_after_later_segments() -> None:
    seg2 = 4_294_967_296
    stream = [
        ev("child:start", 0, "c", "s0", workflow="k", scope="s"),  # the stream starts mid-run
        agent(1, "a", "p"),
        ev("child:end", 2, "c", status="ok"),
        ev("tool:end", 3, "a", toolName="t", outcome="ok"),  # finds no host inside the closed child
        ev("run:start", 4, "s0", workflow="w"),
        ev("run:start", seg2, "s9", ts_ms=5, workflow="w", resumed=True),
    ]
    result = export(stream, OK)
    assert len(result.ended) == len(result.spans) == 4
    stranded = only(result, "agent w loop")
    assert stranded.end_time == t(5) and (stranded.attributes or {})[sc.END_INFERRED] is True


def test_a_huge_numeric_array_fact_keeps_only_its_first_items() -> None:
    from rulvar_otel.otel._attributes import MAX_ARRAY_ITEMS, event_attributes

    attrs = event_attributes(
        {"type": "custom:thing", "seq": 3, "ts": "2026-01-01T00:00:00Z", "samples": list(range(100_000))},
        lambda s: s,
    )
    exported = attrs["rulvar.event.samples"]
    assert isinstance(exported, tuple)
    assert exported == tuple(range(MAX_ARRAY_ITEMS))


@pytest.mark.parametrize("huge", [2**63, -(2**63) - 1, 10**400])
def test_an_integer_wider_than_int64_is_no_attribute_and_loses_no_span(huge: int) -> None:
    from rulvar_otel.otel._attributes import event_attributes

    attrs = event_attributes({"type": "custom:thing", "seq": huge, "status": huge, "counts": [1, huge]}, str)
    assert attrs == {}
