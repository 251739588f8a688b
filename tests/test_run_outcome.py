"""``RunOutcome``: how a run settled, a frozen value with its known fields checked and unknown ones kept."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rulvar_otel import OutcomeError, RunOutcome
from rulvar_otel.core.handle import outcome_from_json, outcome_from_run_end
from tests._support import STREAMS

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def test_known_fields_extra_fields_and_value_equality() -> None:
    outcome = RunOutcome(
        status="ok",
        value={"answer": [1, 2.5, None, True]},
        cost={"totalUsd": 0.25},
        completion="complete",
        childStatusCounts={"ok": 2, "error": 1},
        dropped=[],
        pending=["k"],
    )
    assert outcome.status == "ok" and outcome.value == {"answer": [1, 2.5, None, True]}
    assert outcome.error is None and outcome.childStatusCounts == {"ok": 2, "error": 1}
    assert outcome.model_extra == {"dropped": [], "pending": ["k"]}
    assert outcome.pending == ["k"]  # an extra field reads as an attribute too
    assert outcome == RunOutcome.model_validate(outcome.model_dump())
    assert outcome != RunOutcome.model_validate({**outcome.model_dump(), "pending": []})
    assert RunOutcome(status="ok") != RunOutcome(status="error")
    with pytest.raises(AttributeError, match="no field 'missing'"):
        _ = outcome.missing


def test_it_is_frozen_and_survives_copy_and_pickle() -> None:
    outcome = RunOutcome(status="ok", value=[1], extra_field={"a": 1})
    with pytest.raises(AttributeError, match="frozen"):
        outcome.status = "error"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del outcome.value
    assert copy.deepcopy(outcome) == outcome == pickle.loads(pickle.dumps(outcome))
    with pytest.raises(TypeError):
        hash(outcome)


@pytest.mark.parametrize(
    ("fields", "wrong"),
    [
        ({"status": 5}, ("status",)),
        ({"status": "ok", "value": object()}, ("value",)),
        ({"status": "ok", "envelope": {1: "non-string key"}}, ("envelope",)),
        ({"status": "ok", "completion": 3}, ("completion",)),
        ({"status": "ok", "childStatusCounts": {"ok": "two"}}, ("childStatusCounts",)),
        ({"status": None, "usage": {"x": {1, 2}}}, ("status", "usage")),
    ],
)
def test_a_wrong_field_is_an_outcome_error_naming_it_never_its_value(
    fields: dict[str, Any], wrong: tuple[str, ...]
) -> None:
    with pytest.raises(OutcomeError) as caught:
        RunOutcome.model_validate(fields)
    assert caught.value.fields == wrong
    assert isinstance(caught.value, ValueError)
    assert "non-string key" not in str(caught.value) and "two" not in str(caught.value)


@pytest.mark.parametrize("data", [[1, 2], "ok", {"value": 1}, {5: "ok"}])
def test_what_is_no_outcome_object_at_all_is_refused(data: Any) -> None:
    with pytest.raises(OutcomeError, match="not a RunOutcome"):
        RunOutcome.model_validate(data)


def test_a_cycle_is_refused_not_recursed_into() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(OutcomeError, match="value"):
        RunOutcome(status="ok", value=looped)


@given(_JSON, _JSON)
def test_any_json_value_is_kept_as_given(value: Any, envelope: Any) -> None:
    outcome = RunOutcome(status="ok", value=value, envelope=envelope)
    assert outcome.value == value and outcome.envelope == envelope
    assert RunOutcome.model_validate(outcome.model_dump()) == outcome


def test_the_corpus_outcomes_and_a_streams_run_end_read_back() -> None:
    for path in sorted(Path(STREAMS).glob("*.outcome.json")):
        read = outcome_from_json(json.loads(path.read_text()))
        assert isinstance(read, RunOutcome | RuntimeError)
    derived = outcome_from_run_end({"type": "run:end", "status": "ok", "envelope": {"totalUsd": 1}})
    assert derived == RunOutcome(status="ok", envelope={"totalUsd": 1})
