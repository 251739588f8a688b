"""Golden conformance: every reference span tree, rebuilt by ``to_otel`` from the same stream.

Each reference span is matched to ours in start order (both exporters open spans in stream order)
and checked on its opening event (type, seq, start time), name, parent, attributes, span events
(with their times), status and end time. Where we deliberately differ, the test applies a named
adjustment that cites the section of ``docs/otel-mapping.md`` stating the difference; nothing else
may differ. A test below proves every cited section exists.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import Span
from opentelemetry.trace import StatusCode

from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._attributes import provider_name
from tests import _support as fx
from tests._support import Export, export, ms

MAPPING_DOC = Path(__file__).resolve().parent.parent / "docs" / "otel-mapping.md"


def doc(anchor: str) -> str:
    """A section of the mapping contract, as code and tests cite it."""
    return f"docs/otel-mapping.md#{anchor}"


# The sections of docs/otel-mapping.md that state each deliberate difference from the reference.
ONE_TRACE_PER_RUN = doc("one-trace-per-run")
PARENTS = doc("parents")
MASKED_NAMES = doc("spans-and-their-names")
OPERATION_NAMES = doc("operation-names-and-span-kinds")
MODELS_AND_PROVIDERS = doc("models-and-providers")
USAGE_ON_ONE_LEVEL = doc("token-usage-on-one-level")
ERRORS = doc("errors")
CONVERSATION_ID = doc("conversation-id-and-code-location")
OPENINFERENCE = doc("openinference-span-kinds")
CLOSERS_AS_EVENTS = doc("span-events")
EVENT_FACTS = doc("what-a-span-event-carries")
NO_STREAM_DELTAS = doc("no-stream-deltas")
INFERRED_ENDS = doc("ending-spans-without-a-closer")
SUSPENSIONS = doc("suspensions")

OPENERS = {
    "run:start": "run ",
    "phase:start": "phase ",
    "agent:start": "agent ",
    "agent:phase:start": "invocation ",
    "tool:start": "tool ",
    "child:start": "workflow ",
}
CLOSERS_THE_REFERENCE_DROPS = {"run:end", "agent:end", "agent:phase:end", "child:end"}

# Attributes the reference never writes, whose presence and values the rule tests below and the
# mapper tests (tests/test_mapper_*.py) pin: the usage breakdown (USAGE_ON_ONE_LEVEL), error.type
# (ERRORS), the inferred-parent markers (ONE_TRACE_PER_RUN) and the inferred-end marker (INFERRED_ENDS).
ADDITIVE = {
    sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    sc.RULVAR_USAGE_CACHE_READ_INPUT_TOKENS,
    sc.RULVAR_USAGE_CACHE_CREATION_INPUT_TOKENS,
    sc.RULVAR_USAGE_REASONING_OUTPUT_TOKENS,
    sc.ERROR_TYPE,
    sc.PARENT_INFERRED,
    sc.PARENT_SPAN_ID,
    sc.END_INFERRED,
    sc.SUSPENDED,
}
JSON_ATTRIBUTES = {key for _, key in sc.RUN_JSON_FACTS}
KIND_BY_OPENER = {
    "run:start": "run",
    "phase:start": "phase",
    "agent:start": "agent",
    "agent:phase:start": "invocation",
    "tool:start": "tool",
    "child:start": "child",
}


@dataclass(frozen=True)
class SpanCase:
    """What an adjustment may read about one span: its opener, kind and place in our tree."""

    kind: str
    opener: Mapping[str, Any]
    run_id: str
    has_invocation_children: bool
    masker: SecretMasker


Adjustment = Callable[[SpanCase, dict[str, Any]], None]


def _operation_names(case: SpanCase, expected: dict[str, Any]) -> None:
    """The convention's operations: run and child spans invoke_workflow (with the workflow's
    name), agents invoke_agent and invocations chat (the role moves to rulvar.agent.role), tools
    execute_tool."""
    if case.kind in ("agent", "invocation"):
        expected[sc.AGENT_ROLE] = expected.pop(sc.GEN_AI_OPERATION_NAME)
        expected[sc.GEN_AI_OPERATION_NAME] = "invoke_agent" if case.kind == "agent" else "chat"
        agent_type = case.opener.get("agentType")
        if case.kind == "agent" and isinstance(agent_type, str) and agent_type:
            expected[sc.GEN_AI_AGENT_NAME] = case.masker.mask(agent_type)
    elif case.kind in ("run", "child"):
        expected[sc.GEN_AI_OPERATION_NAME] = "invoke_workflow"
        workflow = case.opener.get("workflow")
        if isinstance(workflow, str) and workflow:
            expected[sc.GEN_AI_WORKFLOW_NAME] = case.masker.mask(workflow)
    elif case.kind == "tool":
        expected[sc.GEN_AI_OPERATION_NAME] = "execute_tool"
        expected[sc.GEN_AI_TOOL_NAME] = expected[sc.TOOL_NAME]
        if sc.TOOL_CALL_ID in expected:
            expected[sc.GEN_AI_TOOL_CALL_ID] = expected[sc.TOOL_CALL_ID]


def _models_and_providers(case: SpanCase, expected: dict[str, Any]) -> None:
    """The model id after the adapter prefix; the whole masked ref in rulvar.model_ref."""
    if case.kind not in ("agent", "invocation"):
        return
    ref = expected[sc.GEN_AI_REQUEST_MODEL]
    expected[sc.MODEL_REF] = ref
    adapter, colon, model_id = ref.partition(":")
    if colon:
        expected[sc.GEN_AI_REQUEST_MODEL] = model_id
        if adapter:
            expected[sc.GEN_AI_PROVIDER_NAME] = provider_name(adapter)


def _usage_on_one_level(case: SpanCase, expected: dict[str, Any]) -> None:
    """An agent with invocation children reports its totals as rulvar.usage.*."""
    if case.kind == "agent" and case.has_invocation_children:
        for gen_ai, rulvar in (
            (sc.GEN_AI_USAGE_INPUT_TOKENS, sc.RULVAR_USAGE_INPUT_TOKENS),
            (sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.RULVAR_USAGE_OUTPUT_TOKENS),
        ):
            if gen_ai in expected:
                expected[rulvar] = expected.pop(gen_ai)


def _conversation_id(case: SpanCase, expected: dict[str, Any]) -> None:
    if case.kind in ("run", "agent"):
        expected[sc.GEN_AI_CONVERSATION_ID] = case.run_id


_OPENINFERENCE_KINDS = {
    "run": "CHAIN",
    "phase": "CHAIN",
    "child": "CHAIN",
    "agent": "AGENT",
    "invocation": "LLM",
    "tool": "TOOL",
}


def _openinference(case: SpanCase, expected: dict[str, Any]) -> None:
    expected[sc.OPENINFERENCE_SPAN_KIND] = _OPENINFERENCE_KINDS[case.kind]


# Applied in this order to the reference's attributes of every span.
ATTRIBUTE_ADJUSTMENTS: dict[str, Adjustment] = {
    OPERATION_NAMES: _operation_names,
    MODELS_AND_PROVIDERS: _models_and_providers,
    USAGE_ON_ONE_LEVEL: _usage_on_one_level,
    CONVERSATION_ID: _conversation_id,
    OPENINFERENCE: _openinference,
}


def _github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def doc_anchors() -> set[str]:
    if not MAPPING_DOC.is_file():
        raise fx.MissingFixtureError(f"the mapping contract is missing: {MAPPING_DOC}")
    lines = MAPPING_DOC.read_text(encoding="utf-8").splitlines()
    return {_github_anchor(line.lstrip("#")) for line in lines if line.startswith("#")}


CASES = [p for p in fx.reference_files() if "invalid-pattern" not in p.name and ".flat." not in p.name]


def _ts_ms(event: Mapping[str, Any]) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(event["ts"]).timestamp() * 1000 + 0.5)


def _openers(events: list[dict[str, Any]], result: Export) -> list[dict[str, Any]]:
    """The opening event of each of our spans, by walking the stream in order."""
    out: list[dict[str, Any]] = []
    spans = iter(result.spans)
    current = next(spans, None)
    for event in events:
        if current is None:
            break
        prefix = OPENERS.get(event["type"])
        if prefix is None:
            continue
        if (
            current.name.startswith(prefix)
            and current.attributes is not None
            and current.attributes.get(sc.ENTRY_SEQ) == event["seq"]
            and ms(current.start_time) == _ts_ms(event)
        ):
            out.append(event)
            current = next(spans, None)
    assert len(out) == len(result.spans), "every span must come from an opening event, in order"
    return out


def _segment_last_ms(events: list[dict[str, Any]]) -> dict[int, int]:
    """For each event (by identity), the time of the last event of its segment.

    A segment runs from a run:start (of a span id not seen before) to just before the next one.
    """
    out: dict[int, int] = {}
    seen: set[str] = set()
    bounds: list[int] = []
    for i, e in enumerate(events):
        if e["type"] == "run:start" and e["spanId"] not in seen:
            seen.add(e["spanId"])
            bounds.append(i)
    bounds.append(len(events))
    for a, b in itertools.pairwise(bounds):
        last = _ts_ms(events[b - 1])
        for e in events[a:b]:
            out[id(e)] = last
    for e in events[: bounds[0]]:
        out[id(e)] = _ts_ms(events[bounds[0] - 1])
    return out


def _descendant_end_ms(result: Export) -> dict[int, int]:
    """For each span id, the latest end time among its descendants."""
    best: dict[int, int] = {}
    for span in result.spans:
        end = ms(span.end_time)
        node: Span | None = span
        while end is not None and node is not None and node.parent is not None:
            pid = node.parent.span_id
            if best.get(pid, -1) < end:
                best[pid] = end
            node = result.by_id.get(pid)
    return best


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name.removesuffix(".json"))
def test_reference_span_tree(path: Path) -> None:
    ref = fx.load_reference(path)
    name = ref["scenario"]
    events = fx.events(name)
    patterns = ref["options"].get("patterns")
    masker = compile_secret_masker(patterns)
    result = export(events, fx.outcome(name), patterns=patterns)

    assert result.returned == ref["returned"] == ref["spanCount"]
    assert len(result.spans) == ref["spanCount"]
    assert len(result.ended) == len(result.spans), "every span ends"
    # ONE_TRACE_PER_RUN: the reference splits runs; ours is one trace.
    assert len({s.context.trace_id for s in result.spans}) == 1
    openers = _openers(events, result)
    segment_last = _segment_last_ms(events)
    descendant_end = _descendant_end_ms(result)
    invocation_parents = {
        s.parent.span_id for s in result.spans if s.name.startswith("invocation ") and s.parent is not None
    }
    by_seq: dict[tuple[str, int], set[int]] = {}
    for e in events:
        by_seq.setdefault((e["type"], e["seq"]), set()).add(_ts_ms(e))

    for index, (ours, theirs) in enumerate(zip(result.spans, ref["spans"], strict=True)):
        opener = openers[index]
        where = f"{path.name} span {index} ({theirs['name']})"
        attrs = dict(ours.attributes or {})
        # Opening event, start time.
        assert attrs.get(sc.ENTRY_SEQ) == theirs["initialAttributes"]["rulvar.entry_seq"], where
        assert ms(ours.start_time) == theirs["startTime"], where
        # MASKED_NAMES
        assert ours.name == masker.mask(theirs["name"]), where

        # Parents.
        ref_parent = theirs["parent"]
        our_parent = result.parent_index(ours)
        if ref_parent is not None:
            assert our_parent == ref_parent, where
            assert sc.PARENT_INFERRED not in attrs, where
        elif index == 0:
            assert our_parent is None, where
        elif opener["type"] == "run:start":
            assert our_parent == 0, f"{where}: a later segment hangs off the first run span"
        else:
            # ONE_TRACE_PER_RUN: grouped under the right scope.
            assert our_parent is not None, where
            parent_opener = openers[our_parent]
            if attrs.get(sc.PARENT_INFERRED) is True:
                assert parent_opener["type"] in {"phase:start", "child:start", "run:start"}, where
                if "parentSpanId" in opener:
                    assert attrs[sc.PARENT_SPAN_ID] == masker.mask(opener["parentSpanId"]), where
            else:
                # PARENTS: found among ended spans too.
                assert parent_opener["spanId"] == opener.get("parentSpanId", opener["spanId"]), where

        # Attributes: the reference's, as the named adjustments change them, plus the additive set.
        case = SpanCase(
            kind=KIND_BY_OPENER[opener["type"]],
            opener=opener,
            run_id=masker.mask(events[0]["runId"]),
            has_invocation_children=ours.context.span_id in invocation_parents,
            masker=masker,
        )
        expected = dict(theirs["attributes"])
        for adjust in ATTRIBUTE_ADJUSTMENTS.values():
            adjust(case, expected)
        got = {k: v for k, v in attrs.items() if k not in ADDITIVE}
        for key in JSON_ATTRIBUTES & expected.keys():
            expected[key] = json.loads(expected[key])
            got[key] = json.loads(str(got.get(key)))
        assert got == expected, where

        # Status (and the settled-false messages). SUSPENSIONS: where the reference is red only
        # because the run suspended, ours is UNSET (a suspended closer, or a span ended by it).
        waiting = attrs.get(sc.STATUS) == "suspended" or attrs.get(sc.SUSPENDED) is True
        if waiting and theirs["status"]["code"] == StatusCode.ERROR.value:
            assert ours.status.status_code is StatusCode.UNSET, f"{where}: {SUSPENSIONS}"
            assert sc.ERROR_TYPE not in attrs, f"{where}: {SUSPENSIONS}"
            theirs = {**theirs, "status": {"code": StatusCode.UNSET.value}}
        assert ours.status.status_code.value == theirs["status"]["code"], where
        if "message" in theirs["status"]:
            assert ours.status.description == theirs["status"]["message"], where
        elif ours.status.status_code is StatusCode.ERROR and sc.STATUS in attrs:
            assert ours.status.description == attrs[sc.STATUS], f"{where}: {ERRORS}"
        else:
            assert not ours.status.description, where
        if ours.status.status_code is StatusCode.ERROR:
            assert attrs.get(sc.ERROR_TYPE), f"{where}: {ERRORS}"

        # End times. Difference "ending spans without a closer": no export-time stamps.
        if theirs["endTime"] is not None:
            assert ms(ours.end_time) == theirs["endTime"], where
            assert sc.END_INFERRED not in attrs, where
        else:
            assert attrs.get(sc.END_INFERRED) is True, where
            if opener["type"] == "phase:start":
                candidates = [theirs["startTime"], *(ms(e.timestamp) for e in ours.events)]
                if (latest := descendant_end.get(ours.context.span_id)) is not None:
                    candidates.append(latest)
                assert ms(ours.end_time) == max(c for c in candidates if c is not None), (
                    f"{where}: {INFERRED_ENDS}"
                )
            else:
                assert ms(ours.end_time) == segment_last[id(opener)], f"{where}: {INFERRED_ENDS}"

        # Span events: the reference's, less stream deltas (NO_STREAM_DELTAS), plus closers that
        # found nothing (CLOSERS_AS_EVENTS), each stamped with its event's ts (EVENT_FACTS).
        ref_events = [e for e in theirs["events"] if e["name"] != "agent:stream"]
        our_events = [
            e
            for e in ours.events
            if e.name not in CLOSERS_THE_REFERENCE_DROPS and not (e.attributes or {}).get(sc.REPLAYED)
        ]
        assert [(e.name, (e.attributes or {}).get(sc.ENTRY_SEQ)) for e in our_events] == [
            (e["name"], e["attributes"].get("rulvar.entry_seq")) for e in ref_events
        ], where
        for ours_event, ref_event in zip(our_events, ref_events, strict=True):
            our_attrs = dict(ours_event.attributes or {})
            for key, value in ref_event["attributes"].items():
                assert our_attrs.get(key) == value, where
            if sc.CODE_FILEPATH in our_attrs:
                assert our_attrs[sc.CODE_FILE_PATH] == our_attrs[sc.CODE_FILEPATH], CONVERSATION_ID
                assert our_attrs.get(sc.CODE_LINE_NUMBER) == our_attrs.get(sc.CODE_LINENO), CONVERSATION_ID
            seq = our_attrs[sc.ENTRY_SEQ]
            assert isinstance(seq, int), where
            assert ms(ours_event.timestamp) in by_seq[(ours_event.name, seq)], where
            assert not any(
                k.endswith(("_msg", "_message", "_data", "_prompt", "_delta", "_label", "_frame"))
                for k in our_attrs
            ), where


@pytest.mark.parametrize("path", [p for p in fx.reference_files() if "invalid-pattern" in p.name])
def test_invalid_pattern_refuses_before_any_span(path: Path) -> None:
    ref = fx.load_reference(path)
    assert ref["threw"]["name"] == "ConfigError"
    with pytest.raises(ConfigError, match=r"patterns\[0\]"):
        export(fx.events(ref["scenario"]), fx.outcome(ref["scenario"]), patterns=ref["options"]["patterns"])


def test_every_stream_has_a_reference_tree() -> None:
    covered = {fx.load_reference(p)["scenario"] for p in fx.reference_files()}
    assert set(fx.stream_names()) - covered == set()


def test_large_run_span_keeps_every_event() -> None:
    result = export(fx.events("large"), fx.outcome("large"))
    run = result.spans[0]
    assert len(run.events) == 5000
    assert run.status.status_code is StatusCode.OK


# --- the contract document ------------------------------------------------------------------------


def test_every_section_the_code_and_tests_cite_exists_in_the_mapping_doc() -> None:
    anchors = doc_anchors()
    root = MAPPING_DOC.parent.parent
    cited: dict[str, set[str]] = {}
    for path in [*root.glob("rulvar_otel/**/*.py"), *root.glob("tests/*.py"), *root.glob("*.md")]:
        for anchor in re.findall(r"otel-mapping\.md#([\w-]+)", path.read_text(encoding="utf-8")):
            cited.setdefault(anchor, set()).add(str(path.relative_to(root)))
    for constant in (
        ONE_TRACE_PER_RUN,
        PARENTS,
        CLOSERS_AS_EVENTS,
        EVENT_FACTS,
        NO_STREAM_DELTAS,
        ERRORS,
        SUSPENSIONS,
    ):
        cited.setdefault(constant.partition("#")[2], set()).add(__file__)
    for adjustment in ATTRIBUTE_ADJUSTMENTS:
        cited.setdefault(adjustment.partition("#")[2], set()).add(__file__)
    assert len(cited) >= 10
    missing = {anchor: sorted(paths) for anchor, paths in cited.items() if anchor not in anchors}
    assert missing == {}, "cited sections missing from docs/otel-mapping.md"


def test_the_mapping_doc_states_the_semconv_release_and_every_genai_name_we_emit() -> None:
    text = MAPPING_DOC.read_text(encoding="utf-8")
    assert f"release {sc.SEMCONV_VERSION}" in text and sc.SCHEMA_URL in text
    names = [
        value
        for key, value in vars(sc).items()
        if key.startswith(("GEN_AI_", "RULVAR_USAGE_", "CODE_", "OPENINFERENCE_"))
        and isinstance(value, str)
        and "." in value
        and not key.startswith("GEN_AI_CLIENT_")  # metric names: docs/metrics.md
        and key != "GEN_AI_TOKEN_TYPE"  # a metric attribute
    ]
    assert len(names) >= 20
    assert [n for n in names if f"`{n}`" not in text] == []


# --- attribute rules over the whole corpus (docs/otel-mapping.md#genai-semantic-conventions) -------


OPERATION_BY_KIND = {
    "run": "invoke_workflow",
    "child": "invoke_workflow",
    "agent": "invoke_agent",
    "invocation": "chat",
    "tool": "execute_tool",
}


def _kind(span: Span) -> str:
    return {"run": "run", "phase": "phase", "agent": "agent", "invocation": "invocation", "tool": "tool"}.get(
        span.name.split(" ", 1)[0], "child"
    )


@pytest.fixture(scope="module")
def corpus() -> dict[str, Export]:
    return {name: export(fx.events(name), fx.outcome(name)) for name in fx.stream_names()}


def test_corpus_has_every_stream(corpus: dict[str, Export]) -> None:
    assert len(corpus) >= fx.MIN_STREAMS


def test_every_run_child_agent_invocation_and_tool_span_names_its_operation(
    corpus: dict[str, Export],
) -> None:
    seen = set()
    for name, result in corpus.items():
        for span in result.spans:
            kind = _kind(span)
            attrs = span.attributes or {}
            if kind in OPERATION_BY_KIND:
                seen.add(kind)
                assert attrs.get(sc.GEN_AI_OPERATION_NAME) == OPERATION_BY_KIND[kind], (name, span.name)
                if kind in ("run", "child"):
                    # The workflow's name rides beside the operation; the span name still holds it.
                    workflow = attrs.get(sc.GEN_AI_WORKFLOW_NAME)
                    assert workflow is None or span.name.endswith(" " + str(workflow)), (name, span.name)
            else:
                assert sc.GEN_AI_OPERATION_NAME not in attrs, (name, span.name)
    assert seen == set(OPERATION_BY_KIND)


def test_request_model_is_never_an_adapter_ref(corpus: dict[str, Export]) -> None:
    checked = 0
    for name, result in corpus.items():
        for span in result.spans:
            attrs = span.attributes or {}
            ref = attrs.get(sc.MODEL_REF)
            if not isinstance(ref, str):
                continue
            model = attrs[sc.GEN_AI_REQUEST_MODEL]
            if ":" in ref:
                checked += 1
                assert model == ref.split(":", 1)[1] and ":" not in str(model), (name, span.name, ref)
                assert attrs[sc.GEN_AI_PROVIDER_NAME] == provider_name(ref.split(":", 1)[0])
            else:
                assert model == ref
    assert checked > 1000


def test_no_agent_span_with_invocation_children_carries_genai_usage(corpus: dict[str, Export]) -> None:
    checked = 0
    for name, result in corpus.items():
        parents = {s.parent.span_id for s in result.spans if _kind(s) == "invocation" and s.parent}
        for span in result.spans:
            if _kind(span) == "agent" and span.context.span_id in parents:
                checked += 1
                usage = [k for k in (span.attributes or {}) if k.startswith("gen_ai.usage.")]
                assert usage == [], (name, span.name)
    assert checked > 1000


def test_summing_genai_usage_over_a_trace_gives_the_runs_tokens_once(corpus: dict[str, Export]) -> None:
    """On every engine-recorded stream, the trace's gen_ai.usage.* sums equal the run envelope's."""
    manifest = json.loads((fx.REFERENCE / "manifest.json").read_text(encoding="utf-8"))
    engine_streams = [Path(row["stream"]).stem for row in manifest if row["kind"].startswith("engine")]
    checked = 0
    for name in engine_streams:
        envelopes = [e["envelope"] for e in fx.events(name) if e["type"] == "run:end" and "envelope" in e]
        for field, key in (
            ("inputTokens", sc.GEN_AI_USAGE_INPUT_TOKENS),
            ("outputTokens", sc.GEN_AI_USAGE_OUTPUT_TOKENS),
        ):
            attrs = [span.attributes or {} for span in corpus[name].spans]
            traced = sum(int(v) for a in attrs if isinstance(v := a.get(key), int))
            assert traced == envelopes[-1]["usage"][field], (name, field)
        checked += 1
    assert checked >= 20


def test_every_error_span_has_an_error_type(corpus: dict[str, Export]) -> None:
    errors = 0
    for name, result in corpus.items():
        for span in result.spans:
            if span.status.status_code is StatusCode.ERROR:
                errors += 1
                assert (span.attributes or {}).get(sc.ERROR_TYPE), (name, span.name)
            else:
                assert sc.ERROR_TYPE not in (span.attributes or {}), (name, span.name)
    assert errors > 30


def test_every_span_event_lies_within_its_span(corpus: dict[str, Export]) -> None:
    events = 0
    for name, result in corpus.items():
        for span in result.spans:
            assert span.start_time is not None and span.end_time is not None
            for event in span.events:
                events += 1
                assert span.start_time <= event.timestamp <= span.end_time, (name, span.name, event.name)
    assert events > 5000


def test_every_span_has_its_openinference_kind_and_conversation_where_due(corpus: dict[str, Export]) -> None:
    for name, result in corpus.items():
        run_id = fx.events(name)[0]["runId"]
        for span in result.spans:
            attrs = span.attributes or {}
            kind = _kind(span)
            assert attrs[sc.OPENINFERENCE_SPAN_KIND] == _OPENINFERENCE_KINDS[kind], (name, span.name)
            if kind in ("run", "agent"):
                assert attrs[sc.GEN_AI_CONVERSATION_ID] == compile_secret_masker(None).mask(run_id)
            else:
                assert sc.GEN_AI_CONVERSATION_ID not in attrs
