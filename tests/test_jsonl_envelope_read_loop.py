"""The JSONL read loop checks the envelope inline: it must accept and word defects exactly as
:func:`check_envelope` does, for every mix of present, absent and mistyped envelope fields."""

from __future__ import annotations

import io
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from rulvar_otel.sources.jsonl import check_envelope, read_jsonl_events

_FIELDS = ("runId", "seq", "ts", "spanId", "type", "parentSpanId", "replayed")
_MISSING = object()
_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_VALUES = st.one_of(
    st.just(_MISSING),
    st.none(),
    st.booleans(),
    _INT64,
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    st.lists(_INT64, max_size=2),
    st.dictionaries(st.text(max_size=2), _INT64, max_size=1),
)
# Mostly well-typed values, so that accepted lines are common too.
_TYPED = {
    "runId": st.text(max_size=4),
    "seq": st.integers(min_value=0, max_value=2**40),
    "ts": st.text(max_size=4),
    "spanId": st.text(max_size=4),
    "type": st.text(max_size=4),
    "parentSpanId": st.one_of(st.just(_MISSING), st.none(), st.text(max_size=4)),
    "replayed": st.one_of(st.just(_MISSING), st.none(), st.booleans()),
}


@st.composite
def _objects(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for field in draw(st.permutations(_FIELDS)):
        value = draw(st.one_of(_TYPED[field], _VALUES) if draw(st.booleans()) else _TYPED[field])
        if value is not _MISSING:
            obj[field] = value
    if draw(st.booleans()):
        obj["extra"] = draw(_VALUES.filter(lambda v: v is not _MISSING))
    return obj


@settings(max_examples=400, deadline=None)
@given(st.lists(_objects(), min_size=1, max_size=12))
def test_the_read_loop_accepts_and_reports_exactly_what_check_envelope_says(
    objects: list[dict[str, Any]],
) -> None:
    lines = [orjson.dumps(obj) for obj in objects]
    events, errors = read_jsonl_events(io.BytesIO(b"\n".join(lines) + b"\n"))
    parsed = [orjson.loads(line) for line in lines]
    verdicts = [check_envelope(obj) for obj in parsed]
    assert events == [obj for obj, defect in zip(parsed, verdicts, strict=True) if defect is None]
    assert [(e.line_number, e.reason) for e in errors] == [
        (number, defect) for number, defect in enumerate(verdicts, start=1) if defect is not None
    ]
