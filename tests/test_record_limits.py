"""A direct record ends as the SDK's span would: the same attribute limits, status rules and ids.

The direct path bounds attribute values without the SDK's ``BoundedAttributes`` and tells the
mapper's shared statuses apart by identity; whatever the values and the order of statuses, the
finished record must carry what an SDK span under the same ``SpanLimits`` carries.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from rulvar_otel.core.wire import as_number
from rulvar_otel.otel._records import STATUS_ERROR, STATUS_OK, RecordingTracer, SpanRecord

_text = st.text(max_size=24)
_values = st.one_of(
    _text,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.lists(_text, max_size=3),
    st.lists(_text, max_size=3).map(tuple),
)
_attributes = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _values, max_size=4)
_statuses = st.lists(
    st.sampled_from(
        [
            STATUS_OK,
            STATUS_ERROR,
            Status(StatusCode.ERROR, "why"),
            StatusCode.OK,
            StatusCode.UNSET,
            StatusCode.ERROR,
        ]
    ),
    max_size=4,
)


def _sdk_span(
    limits: SpanLimits, attributes: dict[str, Any], events: list[dict[str, Any]], statuses: list[Any]
) -> ReadableSpan:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("s", attributes=attributes, start_time=1)
    for index, attrs in enumerate(events):
        span.add_event(f"e{index}", attrs, timestamp=2 + index)
    for status in statuses:
        span.set_status(status)
    span.end(10)
    (finished,) = exporter.get_finished_spans()
    return finished


def _record(
    limits: SpanLimits, attributes: dict[str, Any], events: list[dict[str, Any]], statuses: list[Any]
) -> SpanRecord:
    ended: list[SpanRecord] = []
    span = RecordingTracer(ended.append, limits=limits).start_span("s", attributes=attributes, start_time=1)
    for index, attrs in enumerate(events):
        span.add_event(f"e{index}", attrs, timestamp=2 + index)
    for status in statuses:
        span.set_status(status)
    span.end(10)
    (record,) = ended
    return record


@settings(max_examples=200, deadline=None)
@given(
    _attributes,
    st.lists(_attributes, max_size=3),
    st.integers(min_value=1, max_value=12),
    _statuses,
)
def test_a_record_bounds_values_and_settles_status_as_an_sdk_span(
    attributes: dict[str, Any], events: list[dict[str, Any]], length: int, statuses: list[Any]
) -> None:
    limits = SpanLimits(max_span_attribute_length=length, max_attribute_length=length)
    want = _sdk_span(limits, attributes, events, statuses)
    got = _record(limits, attributes, events, statuses)
    assert dict(got.attributes) == dict(want.attributes or {})
    assert [dict(attrs) for _, _, attrs in got.events] == [dict(e.attributes or {}) for e in want.events]
    assert got.status.status_code is want.status.status_code
    assert got.status.description == want.status.description


def test_values_within_the_limit_keep_their_mapping() -> None:
    attributes = {"a": "short", "b": ("x", "y"), "c": 3}
    record = _record(SpanLimits(max_span_attribute_length=8), attributes, [], [])
    assert record.attributes == attributes
    assert record.attributes["b"] == ("x", "y")


def test_a_list_value_ends_as_a_tuple_and_a_long_item_is_cut() -> None:
    record = _record(SpanLimits(max_span_attribute_length=3), {"a": ["abcdef", "ab"]}, [], [])
    assert record.attributes == {"a": ("abc", "ab")}


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.none(), st.text(max_size=3)))
def test_as_number_is_a_finite_float_of_a_number_and_none_otherwise(value: object) -> None:
    got = as_number(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        assert got is None
    else:
        assert got == float(value) and type(got) is float


def test_as_number_refuses_an_int_past_a_floats_range() -> None:
    assert as_number(10**400) is None
    assert as_number(-(10**400)) is None
    assert as_number(2**63) == float(2**63)
