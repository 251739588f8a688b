"""Finished span records: what the span state machine produces on the direct path.

:class:`RecordingTracer` is the tracer the :class:`~rulvar_otel.otel._mapper.SpanMapper` drives
when no SDK provider is involved. It makes the ids the SDK's tracer would make (same id
generator, same order of calls, so ``RulvarIdGenerator`` gives the same deterministic ids) and
keeps each span as a plain :class:`SpanRecord`; when the mapper ends a span the record is handed,
finished, to a callback (the direct sink). There is no context propagation, no span processor,
no lock and no per-attribute validation: the mapper's attributes are already valid OTel values.
The span limits the SDK would apply (``OTEL_SPAN_EVENT_COUNT_LIMIT`` and friends, as one
:class:`~opentelemetry.sdk.trace.SpanLimits`) are applied when a record ends.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from mypy_extensions import mypyc_attr
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import SpanLimits
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TraceState,
)
from opentelemetry.util.types import Attributes, AttributeValue

__all__ = [
    "SAMPLED",
    "STATUS_ERROR",
    "STATUS_OK",
    "RecordingTracer",
    "SpanRecord",
    "SpanRecorder",
    "update_as_sdk",
]

SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_EMPTY_STATE: Final = TraceState()
_UNSET: Final = Status(StatusCode.UNSET)
# The statuses the mapper sets, shared: told apart by identity (``status_code`` is a Python property).
STATUS_OK: Final = Status(StatusCode.OK)
STATUS_ERROR: Final = Status(StatusCode.ERROR)
_CODE_UNSET: Final = StatusCode.UNSET
_CODE_OK: Final = StatusCode.OK
_INTERNAL: Final = SpanKind.INTERNAL
_INVALID_SPAN_ID: Final = trace.INVALID_SPAN_ID

# (name, timestamp ns, attributes) of one span event.
RecordEvent = tuple[str, int, Mapping[str, AttributeValue]]


def update_as_sdk(own: dict[str, Any], attributes: Mapping[str, AttributeValue]) -> None:
    """Set ``attributes`` in ``own`` as the SDK's attribute mapping does: a key set again moves to
    the end (the exported order is the mapping's)."""
    # A plain dict (the mapper's own) is iterated by the compiled loop; another mapping is copied.
    given: dict[str, Any] = attributes if type(attributes) is dict else dict(attributes)
    for key, value in given.items():
        if key in own:
            del own[key]  # noqa: RUF051 - compiled, `in` and `del` are C calls; `pop` is a method call
        own[key] = value


# Span-shaped, not an OpenTelemetry ``Span`` subclass: compiled, it is a native class (its fields
# are struct slots, its methods direct calls), which a subclass of that ABC cannot be.
class SpanRecord:
    """One span: live while the mapper holds it, a finished record once ended.

    It has the part of OpenTelemetry's ``Span`` API the mapper uses (attributes, events, status,
    end, context, links). Fields (read them after :meth:`end`): ``name``, ``trace_id``,
    ``span_id``, ``parent_id`` (0 for a root), ``kind``, ``start_ns``, ``end_ns``, ``attributes``,
    ``events``, ``status``,
    ``dropped_events``, ``dropped_attributes``, ``links`` (span contexts, attribute-free),
    ``trace_state`` (the parent's W3C tracestate) and ``parent_remote`` (the parent came from
    another process, as a ``traceparent``).
    """

    __slots__ = (
        "_context",
        "_on_end",
        "attributes",
        "dropped_attributes",
        "dropped_events",
        "end_ns",
        "events",
        "kind",
        "links",
        "name",
        "parent_id",
        "parent_remote",
        "span_id",
        "start_ns",
        "status",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent_id: int,
        kind: SpanKind,
        start_ns: int,
        attributes: dict[str, AttributeValue],
        on_end: Callable[[SpanRecord], None] | None,
        trace_state: TraceState = _EMPTY_STATE,
        links: tuple[SpanContext, ...] = (),
        parent_remote: bool = False,
    ) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = -1
        self.attributes = attributes
        self.events: list[RecordEvent] = []
        self.status = _UNSET
        self.dropped_events = 0
        self.dropped_attributes = 0
        self.trace_state = trace_state
        self.links = links
        self.parent_remote = parent_remote
        self._context: SpanContext | None = None  # made on first use: the mapper rarely needs it
        self._on_end = on_end

    # --- the part of the Span API the mapper uses -------------------------------------------------

    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            context = self._context = SpanContext(
                self.trace_id, self.span_id, False, SAMPLED, self.trace_state
            )
        return context

    # As the SDK's attribute mapping: setting a key again moves it to the end.

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self._on_end is not None:
            attributes = self.attributes
            if key in attributes:
                del attributes[key]
            attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self._on_end is not None:
            update_as_sdk(self.attributes, attributes)

    def add_event(self, name: str, attributes: Attributes = None, timestamp: int | None = None) -> None:
        if self._on_end is not None:
            self.events.append((name, timestamp if timestamp is not None else 0, attributes or {}))

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # As the SDK: OK is final, and UNSET never overwrites. (A record starts as the shared
        # UNSET status: the first status set reads no property of it.)
        if self._on_end is None or _code(self.status) is _CODE_OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if _code(status) is not _CODE_UNSET:
            self.status = status

    def end(self, end_time: int | None = None) -> None:
        on_end = self._on_end
        if on_end is None:
            return
        self._on_end = None
        self.end_ns = end_time if end_time is not None else self.start_ns
        on_end(self)

    def is_recording(self) -> bool:
        return self._on_end is not None

    def update_name(self, name: str) -> None:
        if self._on_end is not None:
            self.name = name

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        """Links the mapper adds (to a host's span, docs/otel-mapping.md#parentage); no attributes."""
        if self._on_end is not None and context.is_valid:
            self.links = (*self.links, context)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """Exceptions can hold content; the mapping contract never records them."""


def _code(status: Status) -> StatusCode:
    if status is _UNSET:
        return _CODE_UNSET
    if status is STATUS_OK:
        return _CODE_OK
    return StatusCode.ERROR if status is STATUS_ERROR else status.status_code


class SpanRecorder:
    """Makes and ends the direct path's records: span ids, the name bound, the SDK's span limits
    on each finished record, and its delivery. Compiled, a native class the mapper calls directly.
    """

    def __init__(
        self,
        deliver: Callable[[SpanRecord], None],
        id_generator: IdGenerator,
        limits: SpanLimits,
        name_limit: int | None,
    ) -> None:
        self.id_generator = id_generator
        # The SDK's random generator, called in line: its method is a Python call per span.
        self._random_ids = type(id_generator) is RandomIdGenerator
        self.max_events: int | None = limits.max_events
        self.max_attributes: int | None = limits.max_span_attributes
        self.span_length: int | None = limits.max_span_attribute_length
        self.event_length: int | None = limits.max_attribute_length
        self.name_limit = name_limit
        self._deliver = deliver
        self.on_end: Callable[[SpanRecord], None] = self.limited

    def start_under(
        self, name: str, parent: SpanRecord, attributes: dict[str, Any], start_ns: int
    ) -> SpanRecord:
        """A child of a live record: no context object, no copy of ``attributes``.

        The same record :meth:`RecordingTracer.start_span` makes in ``parent``'s context, with
        the same id-generator call; ``attributes`` (a fresh dict the caller hands over) becomes
        the record's own.
        """
        return SpanRecord(
            self.bounded_name(name),
            parent.trace_id,
            self.span_id(),
            parent.span_id,
            _INTERNAL,
            start_ns,
            attributes,
            self.on_end,
            parent.trace_state,
        )

    def span_id(self) -> int:
        """The next span id from the id generator (the same random source as the SDK's)."""
        if not self._random_ids:
            return self.id_generator.generate_span_id()
        span_id = random.getrandbits(64)
        while span_id == _INVALID_SPAN_ID:
            span_id = random.getrandbits(64)
        return span_id

    def bounded_name(self, name: str) -> str:
        """``name`` cut to the name limit (a name is a value too)."""
        limit = self.name_limit
        return name[:limit] if limit is not None and len(name) > limit else name

    def limited(self, record: SpanRecord) -> None:
        """The SDK's span limits on a finished record (it keeps the newest events, as the SDK
        does), then its delivery."""
        limit = self.max_events
        if limit is not None and len(record.events) > limit:  # deque-like: the oldest go
            record.dropped_events = len(record.events) - limit
            record.events = record.events[len(record.events) - limit :] if limit else []
        if self.span_length is not None:
            record.attributes = _bounded(record.attributes, self.span_length)
        length = self.event_length
        if length is not None and record.events:
            record.events = _bounded_events(record.events, length)
        if self.max_attributes is not None and len(record.attributes) > self.max_attributes:
            keep = list(record.attributes.items())[-self.max_attributes :]
            record.dropped_attributes = len(record.attributes) - len(keep)
            record.attributes = dict(keep)
        self._deliver(record)


# A Python class under mypyc: a compiled subclass of an ABC would share its base's ABC registry
# and cache (``isinstance(x, RecordingTracer)`` true of any Tracer the base has seen).
@mypyc_attr(native_class=False)
class RecordingTracer(Tracer):
    """A tracer whose spans become :class:`SpanRecord` objects handed to ``on_end`` when ended.

    ``id_generator`` is read by the mapper as on the SDK's tracer (``RulvarIdGenerator`` for
    deterministic ids). ``limits`` are the SDK's span limits, applied to each finished record;
    ``name_limit`` bounds span names (a name is a value too). ``recorder`` does the work.
    """

    def __init__(
        self,
        on_end: Callable[[SpanRecord], None],
        *,
        id_generator: IdGenerator | None = None,
        limits: SpanLimits | None = None,
        name_limit: int | None = None,
    ) -> None:
        self.id_generator = id_generator if id_generator is not None else RandomIdGenerator()
        limits = limits if limits is not None else SpanLimits(max_events=SpanLimits.UNSET)
        self.recorder = SpanRecorder(on_end, self.id_generator, limits, name_limit)

    def start_span(  # type: ignore[override]  # a span-shaped record: see SpanRecord
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> SpanRecord:
        parent = trace.get_current_span(context).get_span_context()
        ids = self.id_generator
        state = _EMPTY_STATE
        if parent.is_valid:
            trace_id, parent_id, state = parent.trace_id, parent.span_id, parent.trace_state
        else:
            trace_id, parent_id = ids.generate_trace_id(), 0
        attrs = dict(attributes) if attributes else {}
        kept = tuple(link.context for link in links if link.context.is_valid) if links else ()
        return SpanRecord(
            self.recorder.bounded_name(name),
            trace_id,
            self.recorder.span_id(),
            parent_id,
            kind,
            start_time or 0,
            attrs,
            self.recorder.on_end,
            state,
            kept,
            parent.is_valid and parent.is_remote,
        )

    @contextmanager
    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Iterator[SpanRecord]:  # type: ignore[override]
        span = self.start_span(name, *args, **kwargs)
        try:
            yield span
        finally:
            span.end()


# A tuple of types, not ``tuple | list``: that union is a new object each time it is evaluated.
_SEQUENCES: Final = (tuple, list)


def _bounded(attributes: dict[str, AttributeValue], length: int) -> dict[str, AttributeValue]:
    """``attributes`` with every string cut to ``length`` and every list a tuple (the same
    dict when no string is longer and no value is a list)."""
    if _fits(attributes, length):
        return attributes
    return {k: _truncate(v, length) for k, v in attributes.items()}


def _fits(attributes: dict[str, AttributeValue], length: int) -> bool:
    for value in attributes.values():
        if isinstance(value, str):
            if len(value) > length:
                return False
        elif isinstance(value, tuple):
            for item in value:
                if isinstance(item, str) and len(item) > length:
                    return False
        elif isinstance(value, list):
            return False
    return True


def _plain(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    return attributes if type(attributes) is dict else dict(attributes)  # type: ignore[return-value]


def _bounded_events(events: list[RecordEvent], length: int) -> list[RecordEvent]:
    """``events`` with every attribute string cut to ``length`` (the same list when none is longer)."""
    for index, (_, _, attrs) in enumerate(events):
        if not _fits(_plain(attrs), length):
            rest = [(name, ts, _bounded(_plain(a), length)) for name, ts, a in events[index:]]
            return events[:index] + rest
    return events


def _truncate(value: AttributeValue, length: int) -> AttributeValue:
    if isinstance(value, str):
        return value[:length]
    if isinstance(value, _SEQUENCES):
        return tuple(v[:length] if isinstance(v, str) else v for v in value)  # type: ignore[return-value]
    return value
