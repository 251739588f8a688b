"""A direct batch's request bytes are the exporter library's serialization, byte for byte.

The bytes are composed from memoised fragments (attribute fields, span tails) that repeat across
spans and batches; whatever the values (numbers of every type, equal values under different
types, arrays, unicode, empty strings, links, remote parents, dropped counts), the result must be
what ``encode_spans(...).SerializeToString()`` gives for the same spans.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags

from rulvar_otel.otel import semconv
from rulvar_otel.otel._encode import BatchHeader, EncodedBatch
from rulvar_otel.otel._records import RecordingTracer, SpanRecord

_scalars = st.one_of(
    st.text(max_size=40),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
_values = st.one_of(_scalars, st.lists(st.text(max_size=8), max_size=3).map(tuple))
_keys = st.sampled_from(["a", "b", "v", semconv.ENTRY_SEQ, semconv.TOOL_CALL_ID, "ключ"])
_attributes = st.dictionaries(_keys, _values, max_size=5)
_span = st.fixed_dictionaries(
    {
        "attributes": _attributes,
        "events": st.lists(st.tuples(st.text(max_size=10), _attributes), max_size=3),
        "error": st.one_of(st.none(), st.text(max_size=20)),
        "link": st.booleans(),
    }
)


def _batch(specs: list[dict[str, Any]], header: BatchHeader) -> EncodedBatch:
    ended: list[SpanRecord] = []
    tracer = RecordingTracer(ended.append)
    for index, spec in enumerate(specs):
        links = [Link(SpanContext(7, 9, True, TraceFlags(1)))] if spec["link"] else None
        span = tracer.start_span(f"span {index}", attributes=spec["attributes"], start_time=10, links=links)
        for offset, (name, attrs) in enumerate(spec["events"]):
            span.add_event(name, attrs, 11 + offset)
        if spec["error"] is not None:
            span.set_status(Status(StatusCode.ERROR, spec["error"]))
        span.end(20)
    return EncodedBatch(ended, header)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_span, min_size=1, max_size=6), min_size=1, max_size=3))
def test_request_bytes_are_the_library_serialization_across_batches_sharing_memos(
    batches: list[list[dict[str, Any]]],
) -> None:
    header = BatchHeader(Resource.create({"service.name": "s"}), InstrumentationScope("t", "1", "u"))
    for specs in batches:
        batch = _batch(specs, header)
        assert batch.request_bytes() == encode_spans(list(batch)).SerializeToString()


def test_a_value_remembered_under_one_type_is_not_reused_for_an_equal_value_of_another() -> None:
    header = BatchHeader(Resource.create({}), InstrumentationScope("t"))
    specs = [
        {"attributes": {"v": v}, "events": [("e", {"v": v})], "error": None, "link": False}
        for v in (1, True, 1.0, 0, False, 0.0, "1")
    ]
    first = _batch(specs, header)
    again = _batch(specs, header)  # every fragment now comes from the memo
    for batch in (first, again):
        assert batch.request_bytes() == encode_spans(list(batch)).SerializeToString()
    assert header.wire_memo.span_fields.ints == {"v": {1: ANY, 0: ANY}}  # True, 1.0 and "1" are not ints


def test_edge_scalars_encode_as_the_library_serializes_them() -> None:
    header = BatchHeader(Resource.create({}), InstrumentationScope("t"))
    edges: list[Any] = [0, 1, -1, 127, 128, -(2**63), 2**63 - 1, 0.0, -0.0, 5e-324, 1e308]
    edges += [float("inf"), float("-inf"), float("nan"), "", "é", "𝄞", "x" * 300, True, False]
    specs = [
        {"attributes": {"v": value}, "events": [("e", {"v": value})], "error": None, "link": False}
        for value in edges
    ]
    batch = _batch(specs, header)
    assert batch.request_bytes() == encode_spans(list(batch)).SerializeToString()
