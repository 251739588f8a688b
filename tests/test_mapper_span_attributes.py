"""What the span mapper puts on spans (docs/otel-mapping.md): terminal facts, statuses, GenAI and
OpenInference attributes, conventions, masking of names, and attribute value limits.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.trace import SpanKind, StatusCode

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import MASKED_SECRET
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import export_events
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._attributes import fits_int64
from rulvar_otel.testing import SpanCapture
from tests._support import OK_OUTCOME, USAGE, agent_end, agent_start, ev, export, run_stream

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
    ok = export(run_stream(ev("phase:start", 1, "p", "s0", phase="x")), None)
    assert ok.only("phase x").status.status_code is StatusCode.OK
    bad = export(run_stream(ev("phase:start", 1, "p", "s0", phase="x"), status="error"), None)
    assert bad.only("phase x").status.status_code is StatusCode.ERROR


def test_agent_span_usage_cost_and_genai_attributes() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0", agent_type="researcher"),
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
        OK_OUTCOME,
    )
    a = result.only("agent researcher loop")
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
    inv = result.only("invocation loop")
    assert result.parent_of(inv) is a
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
    result = export(run_stream(agent_start(1, "a", "s0"), agent_end(2, "a")), OK_OUTCOME)
    attrs = result.only("agent w loop").attributes or {}
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
    result = export(
        run_stream(ev("agent:start", 1, "a", "s0", agentType="x", model=model, role="loop")), OK_OUTCOME
    )
    attrs = result.spans[1].attributes or {}
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == request_model
    assert attrs[sc.MODEL_REF] == model
    assert attrs.get(sc.GEN_AI_PROVIDER_NAME) == provider


def test_every_error_span_names_an_error_type_and_its_status_literal() -> None:
    result = export(
        run_stream(
            ev("child:start", 1, "c", "s0", workflow="kid", scope="wf:kid:0"),
            agent_start(2, "a", "c"),
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
            agent_start(9, "b", "s0", agent_type="v"),  # never ends: inferred, ERROR on a failed run
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
        span = result.only(name)
        assert span.status.status_code is StatusCode.ERROR, name
        assert (span.attributes or {})[sc.ERROR_TYPE] == error_type, name
        assert span.status.description == description, name


def test_conversation_id_is_the_run_id_on_run_and_agent_spans_only() -> None:
    result = export(
        run_stream(
            ev("phase:start", 1, "p", "s0", phase="x"),
            agent_start(2, "a", "p"),
            ev("tool:start", 3, "a", toolName="t"),
        ),
        OK_OUTCOME,
    )
    carriers = {s.name for s in result.spans if sc.GEN_AI_CONVERSATION_ID in (s.attributes or {})}
    assert carriers == {"run wf", "agent w loop"}
    assert {(s.attributes or {})[sc.GEN_AI_CONVERSATION_ID] for s in result.spans if s.name in carriers} == {
        "r1"
    }


def test_openinference_span_kinds_on_every_span_and_switchable_off() -> None:
    stream = run_stream(
        ev("phase:start", 1, "p", "s0", phase="x"),
        agent_start(2, "a", "p"),
        ev("agent:phase:start", 3, "a", agentType="w", role="loop", model="m", invocation=1),
        ev("tool:start", 4, "a", toolName="t"),
        ev("child:start", 5, "c", "p", workflow="kid", scope="wf:kid:0"),
    )
    kinds = {
        s.name: (s.attributes or {}).get(sc.OPENINFERENCE_SPAN_KIND) for s in export(stream, OK_OUTCOME).spans
    }
    assert kinds == {
        "run wf": "CHAIN",
        "phase x": "CHAIN",
        "workflow kid": "CHAIN",
        "agent w loop": "AGENT",
        "invocation loop": "LLM",
        "tool t": "TOOL",
    }
    capture = SpanCapture()
    export_events(stream, capture.tracer, outcome=OK_OUTCOME, conventions=())
    assert len(capture.ended) == 6
    assert not any(sc.OPENINFERENCE_SPAN_KIND in (s.attributes or {}) for s in capture.ended)


def test_unknown_convention_is_a_config_error_before_any_span() -> None:
    capture = SpanCapture()
    with pytest.raises(ConfigError, match="openinference"):
        export_events(run_stream(), capture.tracer, conventions=("openinferense",))
    assert capture.spans == []


def test_anonymous_and_unknown_names() -> None:
    result = export(
        run_stream(
            ev("agent:start", 1, "a", "s0", agentType="", model="m", role="loop"),
            ev("agent:start", 2, "b", "s0"),
            ev("phase:start", 3, "p", "s0"),
        ),
        OK_OUTCOME,
    )
    names = {s.name for s in result.spans}
    assert {"agent (anon) loop", "agent (unknown) (unknown)", "phase (unknown)"} <= names
    assert sc.GEN_AI_AGENT_NAME not in (result.named("agent (anon) loop")[0].attributes or {})


def test_provider_name_is_derived_from_the_masked_ref() -> None:
    secret = "sk-" + "a" * 30
    result = export(
        run_stream(ev("agent:start", 1, "a", "s0", agentType="x", model=f"{secret}:m", role="loop")),
        OK_OUTCOME,
    )
    attrs = result.spans[1].attributes or {}
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == MASKED_SECRET
    assert secret not in repr(attrs)


# --- the names are the convention's (docs/otel-mapping.md#genai-semantic-conventions) ------------


# The GenAI conventions' agent-level metrics (pinned at semconv.GENAI_CONVENTIONS_COMMIT): newer
# than the opentelemetry-semantic-conventions release this test reads, so checked by name here
# and by unit and buckets in tests/test_genai_conventions.py.
GENAI_METRIC_NAMES = {
    sc.GEN_AI_INVOKE_AGENT_DURATION,
    sc.GEN_AI_EXECUTE_TOOL_DURATION,
    sc.GEN_AI_INVOKE_WORKFLOW_DURATION,
    sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS,
    sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS,
}


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
        and v not in GENAI_METRIC_NAMES  # the agent-level metrics, newer than this package
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


def test_to_otel_takes_the_same_conventions_option() -> None:
    import asyncio

    from rulvar_otel.core.handle import handle_from_events
    from rulvar_otel.otel import to_otel

    stream = run_stream(agent_start(1, "a", "s0"), agent_end(2, "a"))
    capture = SpanCapture()
    tracer = capture.tracer
    assert asyncio.run(to_otel(handle_from_events(stream, OK_OUTCOME), tracer, conventions=())) == 2
    assert not any(sc.OPENINFERENCE_SPAN_KIND in (s.attributes or {}) for s in capture.ended)
    with pytest.raises(ConfigError, match="unknown convention"):
        asyncio.run(to_otel(handle_from_events(stream, OK_OUTCOME), tracer, conventions=["phoenix"]))
    assert len(capture.spans) == 2


def test_a_huge_numeric_array_fact_keeps_only_its_first_items() -> None:
    from rulvar_otel.otel._attributes import MAX_ARRAY_ITEMS, event_attributes

    attrs = event_attributes(
        {"type": "journal:compat", "seq": 3, "ts": "2026-01-01T00:00:00Z", "window": list(range(100_000))},
        lambda s: s,
    )
    exported = attrs["rulvar.event.window"]
    assert isinstance(exported, tuple)
    assert exported == tuple(range(MAX_ARRAY_ITEMS))


@pytest.mark.parametrize("huge", [2**63, -(2**63) - 1, 10**400])
def test_an_integer_wider_than_int64_is_no_attribute_and_loses_no_span(huge: int) -> None:
    from rulvar_otel.otel._attributes import event_attributes

    attrs = event_attributes({"type": "custom:thing", "seq": huge, "status": huge, "counts": [1, huge]}, str)
    assert attrs == {}


@pytest.mark.parametrize("odd", [math.nan, -math.nan, math.inf, -math.inf])
def test_a_nan_or_infinite_float_is_no_attribute_and_loses_no_span(odd: float) -> None:
    usage = {"inputTokens": odd, "outputTokens": 7}
    stream = run_stream(
        agent_start(1, "a1", "s0"),
        ev("budget:exposure-wait", 2, "a1", capUsd=odd, estimateUsd=2.5, willWait=True),
        ev("journal:compat", 2, "a1", code="HASH_VERSION_TOO_OLD", found=1, window=[1.5, odd]),
        ev("agent:end", 3, "a1", agentType="w", status="ok", usage=usage, costUsd=odd, entryRef=1),
    )
    result = export(stream, OK_OUTCOME)
    assert [span.name for span in result.spans] == [result.spans[0].name, result.spans[1].name]
    agent = result.spans[1]
    assert agent.attributes is not None
    values = [*agent.attributes.values(), *(v for e in agent.events for v in (e.attributes or {}).values())]
    assert all(math.isfinite(v) for v in values if isinstance(v, float))
    assert all(math.isfinite(v) for t in values if isinstance(t, tuple) for v in t if isinstance(v, float))
    assert agent.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 7  # the finite neighbours stay
    assert sc.GEN_AI_USAGE_INPUT_TOKENS not in agent.attributes and sc.COST_USD not in agent.attributes
    wait, compat = agent.events
    assert wait.attributes is not None and wait.attributes["rulvar.event.estimate_usd"] == 2.5
    assert "rulvar.event.cap_usd" not in wait.attributes
    assert compat.attributes is not None and "rulvar.event.window" not in compat.attributes


_EDGES = [2**62 - 1, 2**62, 2**63 - 1, 2**63, 10**400]


@given(
    value=st.one_of(
        st.integers(),
        st.sampled_from([*_EDGES, *(-e for e in _EDGES), -(2**63), -(2**63) - 1]),
        st.sampled_from(_EDGES).flatmap(lambda e: st.integers(e - 3, e + 3)),
    )
)
def test_the_int64_check_takes_exactly_the_values_otlp_carries(value: int) -> None:
    assert fits_int64(value) == (-(2**63) <= value <= 2**63 - 1)
