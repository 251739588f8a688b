"""The event catalog is one list: the discriminated union; the known-type table is read off it."""

from __future__ import annotations

from typing import get_args

from pydantic import Tag

from rulvar_otel.core import events
from rulvar_otel.core.events import KNOWN_EVENT_TYPES, EventModel, UnknownEvent, WorkflowEvent


def _members() -> list[tuple[type[EventModel], str]]:
    union = get_args(WorkflowEvent)[0]
    out: list[tuple[type[EventModel], str]] = []
    for member in get_args(union):
        model, *metadata = get_args(member)
        tags = [m.tag for m in metadata if isinstance(m, Tag)]
        assert len(tags) == 1, f"{model.__name__} needs exactly one union tag"
        out.append((model, tags[0]))
    return out


def test_every_union_member_is_tagged_with_its_own_type() -> None:
    for model, tag in _members():
        if model is UnknownEvent:
            continue
        assert tag == model.model_fields["type"].default, f"{model.__name__} is tagged {tag!r}"


def test_the_known_table_is_exactly_the_union_less_the_fallback() -> None:
    members = [model for model, _ in _members() if model is not UnknownEvent]
    assert list(events._KNOWN) == members
    assert len(set(members)) == len(members)
    assert {m.model_fields["type"].default for m in members} == KNOWN_EVENT_TYPES


def test_every_model_in_the_module_is_in_the_union() -> None:
    models = {
        obj
        for name in events.__all__
        if isinstance(obj := getattr(events, name), type)
        and issubclass(obj, EventModel)
        and "type" in obj.model_fields
        and isinstance(obj.model_fields["type"].default, str)
    }
    assert models - {UnknownEvent} <= set(events._KNOWN)
