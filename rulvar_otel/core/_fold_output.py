"""The frame the reducers share: their frozen output base model and how a whole stream is fed.

Owns :class:`FoldOutput` (frozen, camelCase JSON with absent figures left out), the millisecond
reading of an event timestamp, and :func:`reduce_events`, which feeds a fold sink a whole stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from rulvar_otel.core.drain import FoldSink
from rulvar_otel.core.handle import EventLike, as_wire
from rulvar_otel.core.wire import ts_ns

__all__ = ["FoldOutput", "reduce_events", "ts_ms"]

_Result = TypeVar("_Result")


class FoldOutput(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase JSON with absent figures left out (absent, never null)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def ts_ms(value: object) -> float | None:
    ns = ts_ns(value)
    return None if ns is None else round(ns / 1e6, 3)


def reduce_events(fold: FoldSink[_Result], events: Iterable[EventLike]) -> _Result:
    for event in events:
        fold.feed(as_wire(event))
    return fold.finish()
