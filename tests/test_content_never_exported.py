"""Content never rides a span event, a closer or a name (docs/otel-mapping.md#what-a-span-event-carries).

Markers are planted in every place a producer can put content: under arbitrary field names, in
content-like names, nested in lists and objects, as wrong-kind values of the allow-listed fields,
in unknown types and their names, on every catalog type, as a paired closer and as an orphan.
Every output is read: the SDK pipeline's OTLP bytes, the direct pipeline's protobuf request and
OTLP/JSON line, the printed span tree, ``inspect`` (text and JSON) and the metric labels. A
marker is no secret, so the masker cannot be what hides it: only the allow-list can.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

from rulvar_otel.cli._inspect import run_inspect
from rulvar_otel.cli._tree import print_span_tree
from rulvar_otel.core.events import ENVELOPE_FIELDS, KNOWN_EVENT_TYPES
from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.core.masking import default_masker
from rulvar_otel.otel import _attributes as ax
from rulvar_otel.otel import _event_facts as facts
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel import to_otel
from rulvar_otel.otel._encode import EncodedBatch
from rulvar_otel.otel.direct import export_events_direct
from rulvar_otel.otel.ids import RulvarIdGenerator
from tests._support import OK_OUTCOME, ev

MARK = "QzqMark"
MAPPING_DOC = Path(__file__).resolve().parent.parent / "docs" / "otel-mapping.md"

# Content-like field names a producer may write on any event (the issue's 32 shapes).
CONTENT_NAMES = (
    "text", "msg", "message", "messages", "content", "contents", "prompt", "prompts",
    "completion", "completions", "response", "responses", "input", "output", "inputs", "outputs",
    "error", "data", "delta", "label", "frame", "result", "reasoning", "thinking", "arguments",
    "args", "body", "raw", "providerRaw", "transcript", "instructions", "toolInput",
)  # fmt: skip
# Span attributes every opener carries from its envelope, by contract (docs/otel-mapping.md#attributes).
OPENER_ENVELOPE = frozenset(ENVELOPE_FIELDS | {"scope"})
# The fields of the run span's JSON facts that export by their shape (their names are no marker).
SHAPE_FIELDS = frozenset({"child", "status", "salvage", "evidence", *facts.RUN_JSON_SHAPES})
SHAPE_FIELDS |= {"recordedEntries", "minEntries", "met", "waivedBySalvage", "floorRequired"}
CLOSER_OF = {"run:end": "s0", "agent:end": "a1", "agent:phase:end": "a1", "tool:end": "a1", "child:end": "c1"}

_counter = itertools.count()


def marker() -> str:
    return f"{MARK}{next(_counter):05d}x"


def test_the_content_names_are_the_issues_thirty_two() -> None:
    assert len(set(CONTENT_NAMES)) == 32


def test_the_allow_list_covers_exactly_the_catalog() -> None:
    assert set(facts.EVENT_FACTS) == KNOWN_EVENT_TYPES


def test_no_content_name_is_an_allowed_string_fact() -> None:
    """A content-like name exports a string nowhere, except run:end and orchestrator:acceptance's
    ``completion`` (the semantic completion enum: three literal values, never text)."""
    for kind, table in facts.EVENT_FACTS.items():
        for name in CONTENT_NAMES:
            fact = table.get(name)
            if fact is None:
                continue
            assert (kind, name, fact.kind) in {
                ("run:end", "completion", facts.ENUM_KIND),
                ("orchestrator:acceptance", "completion", facts.ENUM_KIND),
                ("agent:end", "error", facts.WIRE_ERROR_KIND),
                ("agent:error", "error", facts.WIRE_ERROR_KIND),
            }, (kind, name)


def test_the_mapping_doc_lists_every_allowed_field_of_every_type() -> None:
    text = MAPPING_DOC.read_text(encoding="utf-8")
    section = text.split("### What a span event carries", 1)[1].split("\n## ", 1)[0]
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(r"^\| `([a-z:-]+)` \| (.*) \|$", section, flags=re.MULTILINE)
    }
    for kind, table in facts.EVENT_FACTS.items():
        assert kind in rows, kind
        assert sorted(re.findall(r"`([A-Za-z]+)`", rows[kind])) == sorted(table), kind


# --- planting -----------------------------------------------------------------------------------


def _valid(fact: facts.Fact) -> Any:
    """A value of the fact's own kind (no marker: an allowed fact exports it)."""
    return {
        facts.NUMBER_KIND: 1,
        facts.FLAG_KIND: True,
        facts.TEXT_KIND: "v",
        facts.NUMBER_OR_TEXT_KIND: 2,
        facts.ENUM_KIND: min(fact.values) if fact.values else "v",
        facts.NUMBERS_KIND: [1, 2],
        facts.WIRE_ERROR_KIND: {"code": "E1", "retryable": False},
    }[fact.kind]


def _wrong_kind(fact: facts.Fact, planted: Any) -> Any:
    """A marker where the fact expects something else: a string for a number, flag or enum; a
    nested value for a string; an error object's message and data."""
    if fact.kind == facts.WIRE_ERROR_KIND:
        return {"code": "E1", "message": marker(), "retryable": False, "data": planted}
    if fact.kind in (facts.TEXT_KIND, facts.NUMBER_OR_TEXT_KIND):
        return planted if not isinstance(planted, str) else [planted]
    return marker()


def _base(kind: str) -> dict[str, Any]:
    return {field: _valid(fact) for field, fact in facts.EVENT_FACTS.get(kind, {}).items()}


def _planted_event(kind: str, seq: int, span: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    body = {**_base(kind), **extra}
    if kind == "tool:end" and "toolCallId" not in extra:
        body["toolCallId"] = "c-live" if span == "a1" else "c-none"
    # Merged after the envelope: a planted field may be called anything ("kind" too).
    return {**ev(kind, seq, span), **{k: v for k, v in body.items() if k not in OPENER_ENVELOPE}}


def _stream(planted: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """A run with every kind of span open, then each planted event as a paired closer (when it
    is one), an orphan, and a repeat; the run ends with a planted run:end too."""
    events = [
        ev("run:start", 0, "s0", workflow="wf"),
        ev("phase:start", 1, "p1", "s0", phase="ph"),
        ev("child:start", 2, "c1", "p1", workflow="kid", scope="k"),
        ev("agent:start", 3, "a1", "c1", agentType="w", model="openai:gpt-x", role="loop"),
        ev("agent:phase:start", 4, "a1", agentType="w", role="loop", model="openai:gpt-x", invocation=1),
        ev("tool:start", 5, "a1", toolName="t", toolCallId="c-live"),
    ]
    seq = 10
    closers: list[dict[str, Any]] = []
    for kind, extra in planted:
        if kind in CLOSER_OF:
            closers.append(_planted_event(kind, 900 + len(closers), CLOSER_OF[kind], extra))
        for span in ("zz", "a1"):
            if kind in CLOSER_OF and span == "a1":
                continue
            events.append(_planted_event(kind, seq, span, extra))
            seq += 1
    # Inner closers first, so each finds its span open.
    order = ["tool:end", "agent:phase:end", "agent:end", "child:end", "run:end"]
    closers.sort(key=lambda e: order.index(e["type"]))
    for i, closer in enumerate(closers):
        closer["seq"] = 900 + i
    return events + closers


# --- every output -------------------------------------------------------------------------------


class _Batches(SpanExporter):
    def __init__(self) -> None:
        self.batches: list[EncodedBatch] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        assert isinstance(spans, EncodedBatch)
        self.batches.append(spans)
        return SpanExportResult.SUCCESS


def _outputs(events: list[dict[str, Any]]) -> dict[str, str]:
    """Every output of one stream, as text (protobuf bytes decoded leniently: only their strings
    can carry a marker)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(id_generator=RulvarIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("content")
    asyncio.run(to_otel(handle_from_events(events, OK_OUTCOME), provider.get_tracer("t"), meter=meter))
    spans = memory.get_finished_spans()
    assert spans
    kept = _Batches()
    export_events_direct(events, kept, outcome=OK_OUTCOME, id_generator=RulvarIdGenerator())
    assert kept.batches
    tree = io.StringIO()
    print_span_tree(spans, Console(file=tree, width=200, color_system=None))
    data = reader.get_metrics_data()
    labels = (
        [
            f"{key}={value}"
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            for point in metric.data.data_points
            for key, value in (point.attributes or {}).items()
        ]
        if data is not None
        else []
    )
    out = {
        "SDK OTLP protobuf": encode_spans(spans).SerializeToString().decode("utf-8", "replace"),
        "direct OTLP protobuf": "".join(b.request_bytes().decode("utf-8", "replace") for b in kept.batches),
        "direct OTLP/JSON": "".join(b.otlp_json().decode() for b in kept.batches),
        "span tree": tree.getvalue(),
        "metric labels": "\n".join(labels),
    }
    out.update(_inspect_outputs(events))
    return out


def _inspect_outputs(events: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        for as_json in (False, True):
            text, err = io.StringIO(), io.StringIO()
            assert run_inspect(str(path), as_json=as_json, out=text, err=err) == 0, err.getvalue()
            out["inspect --json" if as_json else "inspect"] = text.getvalue() + err.getvalue()
    return out


def test_inspect_never_prints_an_agent_label() -> None:
    label = marker()
    events = [
        ev("run:start", 0, "s0", workflow="wf"),
        ev("agent:start", 1, "a1", "s0", agentType="w", model="m", role="loop", label=label),
        ev("agent:end", 2, "a1", agentType="w", status="ok", label=label),
        ev("run:end", 3, "s0", status="ok"),
    ]
    _assert_no_marker(_inspect_outputs(events))


def test_inspect_never_prints_a_phase_outcome_outside_its_enum() -> None:
    events = [
        ev("run:start", 0, "s0", workflow="wf"),
        ev("agent:start", 1, "a1", "s0", agentType="w", model="m", role="loop"),
        ev("agent:phase:start", 2, "a1", role="loop", model="m", invocation=1),
        ev("agent:phase:end", 3, "a1", role="loop", model="m", invocation=1, outcome=marker()),
        ev("run:end", 4, "s0", status="ok"),
    ]
    _assert_no_marker(_inspect_outputs(events))


def _assert_no_marker(outputs: Mapping[str, str]) -> None:
    leaks = {where: sorted(set(re.findall(MARK + r"\d+x", text))) for where, text in outputs.items()}
    assert {where: found for where, found in leaks.items() if found} == {}


# --- the deterministic corpus: 32 content names on every type -----------------------------------


def _content_plant(kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    table = facts.EVENT_FACTS.get(kind, {})
    for name in CONTENT_NAMES:
        fact = table.get(name)
        nested = {"text": marker(), "items": [marker(), {"content": marker()}]}
        out[name] = _wrong_kind(fact, nested) if fact is not None else marker()
    # Nested text in the run span's JSON facts, beside the fields their shapes keep.
    if kind == "run:end":
        child = {"child": "w1", "status": "ok", "note": marker(), "evidence": {"met": True, "why": marker()}}
        out["acceptanceChildren"] = [child, marker(), {"text": marker()}]
        out["degradedReasons"] = ["ok reason", {"text": marker()}]
        out["salvagedTerminalOutputChildren"] = [{"id": marker()}]
        out["childStatusCounts"] = {"ok": 1, "error": marker()}
    return out


UNKNOWN_TYPES = ("some:future-event", "x", f"{MARK}99999x:thing", f"custom:{MARK}99998x Text")


@pytest.mark.parametrize("kind", sorted(KNOWN_EVENT_TYPES) + list(UNKNOWN_TYPES))
def test_thirty_two_content_names_on_every_event_type_reach_no_output(kind: str) -> None:
    events = _stream([(kind, _content_plant(kind))])
    _assert_no_marker(_outputs(events))


@pytest.mark.parametrize("kind", sorted(KNOWN_EVENT_TYPES))
def test_a_value_of_the_wrong_kind_in_an_allowed_field_reaches_no_output(kind: str) -> None:
    """A string where a number, flag or enum value belongs; nested text where a string belongs."""
    table = facts.EVENT_FACTS[kind]
    nested = {"text": marker(), "items": [marker()]}
    planted = {name: _wrong_kind(fact, nested) for name, fact in table.items()}
    _assert_no_marker(_outputs(_stream([(kind, planted)])))


def test_allowed_facts_still_reach_the_span_events() -> None:
    """The planting above is not vacuous: the allow-listed facts beside the markers do export."""
    events = _stream([(kind, _content_plant(kind)) for kind in ("quota:denied", "tool:end", "log")])
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    asyncio.run(to_otel(handle_from_events(events, OK_OUTCOME), provider.get_tracer("t")))
    attrs = {
        (e.name, key) for s in spans.get_finished_spans() for e in s.events for key in (e.attributes or {})
    }
    assert ("quota:denied", "rulvar.event.retry_after_ms") in attrs
    assert ("quota:denied", "rulvar.event.reason") in attrs
    assert ("tool:end", "rulvar.event.duration_ms") in attrs
    assert ("log", "rulvar.event.level") in attrs


# --- hypothesis: arbitrary names and values --------------------------------------------------------

_MARKED = st.builds(lambda glue: f"{glue}{marker()}{glue}", st.sampled_from(["", " ", "\n", "a", "-"]))
_LEAF = _MARKED | st.none() | st.just(True)
# Nested values: markers in lists and objects, marker keys too (never a number leaf: a number
# under an arbitrary key is a count a record shape may keep, and numbers carry no text).
_NESTED = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(_MARKED | st.sampled_from(CONTENT_NAMES) | st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_NAMES = st.sampled_from(CONTENT_NAMES) | st.text(max_size=10) | _MARKED
_TYPES = (
    st.sampled_from(sorted(KNOWN_EVENT_TYPES))
    | st.sampled_from(UNKNOWN_TYPES[:2])
    | st.builds(lambda m, tail: m + tail, _MARKED, st.sampled_from(["", ":x", " y"]))
)


@st.composite
def _planted(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(_TYPES)
    table = facts.EVENT_FACTS.get(kind, {})
    extra: dict[str, Any] = {}
    for name in draw(st.lists(_NAMES, max_size=5)):
        if name in OPENER_ENVELOPE or name in table:
            continue
        if kind == "run:end" and name in SHAPE_FIELDS:
            continue
        extra[name] = draw(_NESTED)
    for name in draw(st.lists(st.sampled_from(sorted(table)), max_size=4)) if table else []:
        extra[name] = _wrong_kind(table[name], draw(_NESTED))
    if kind == "run:end":
        for name in draw(st.lists(st.sampled_from(sorted(facts.RUN_JSON_SHAPES)), max_size=2)):
            rows = draw(st.lists(st.dictionaries(_NAMES.filter(lambda n: n not in SHAPE_FIELDS), _NESTED)))
            # A string item is a reason or child name these lists export by contract: only what
            # lies outside the shape is planted.
            extra[name] = [*rows, draw(_NESTED.filter(lambda v: not isinstance(v, str)))]
    return kind, extra


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_planted(), min_size=1, max_size=4))
def test_markers_planted_anywhere_reach_no_output(planted: list[tuple[str, dict[str, Any]]]) -> None:
    _assert_no_marker(_outputs(_stream(planted)))


@settings(max_examples=300, deadline=None)
@given(_planted())
def test_event_attributes_of_any_planted_event_hold_no_marker(planted: tuple[str, dict[str, Any]]) -> None:
    kind, extra = planted
    event = {**_base(kind), **extra, "type": kind, "seq": 1}
    mask = default_masker().clean
    attrs = {**ax.event_attributes(event, mask), **ax.run_close_attributes(event, mask)}
    assert MARK not in repr(attrs)
    assert MARK not in ax.event_name(kind, mask)


# --- composed names --------------------------------------------------------------------------------

TOKEN = "abcdefghijklmnopqrstuvwxyz0123"


@pytest.mark.parametrize(
    ("opener", "fields"),
    [
        ("agent:start", {"agentType": "Bearer", "role": TOKEN, "model": "m"}),
        ("agent:phase:start", {"role": f"Bearer {TOKEN}", "model": "m", "invocation": 1}),
        ("tool:start", {"toolName": f"Bearer {TOKEN}"}),
        ("phase:start", {"phase": f"Bearer {TOKEN}"}),
        ("child:start", {"workflow": f"Bearer {TOKEN}", "scope": "k"}),
    ],
)
def test_a_span_name_composed_of_parts_is_masked_as_a_whole(opener: str, fields: dict[str, Any]) -> None:
    events = [ev("run:start", 0, "s0", workflow="wf"), ev(opener, 1, "a1", "s0", **fields)]
    outputs = _names_of(events)
    assert outputs and all(TOKEN not in name for name in outputs), outputs
    assert any(default_masker().mask("Bearer " + TOKEN) in name for name in outputs)


def _names_of(events: list[dict[str, Any]]) -> list[str]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    asyncio.run(to_otel(handle_from_events(events, OK_OUTCOME), provider.get_tracer("t")))
    kept = _Batches()
    export_events_direct(events, kept, outcome=OK_OUTCOME)
    requests = [batch.request() for batch in kept.batches]
    direct = [s.name for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return [s.name for s in memory.get_finished_spans()] + direct


def test_an_unknown_type_is_named_only_when_it_has_the_catalogs_shape() -> None:
    mask = default_masker().clean
    assert ax.event_name("some:future-event", mask) == "some:future-event"
    assert ax.event_name("tool:end", mask) == "tool:end"
    for odd in ("Some text: a sentence", f"{MARK}1", "x", "a:" + "b" * 80, 7, None):
        assert ax.event_name(odd, mask) == "(unknown)", odd
    assert sc.EVENT_FIELD_PREFIX == "rulvar.event."
