"""The OTLP/protobuf bytes of finished span records, composed from fragments protobuf serializes.

Building one ``ExportTraceServiceRequest`` from nested dicts costs a message object per
attribute, and a batch's attributes repeat (the run id, span kinds, statuses, tool names). Here
protobuf serializes each distinct attribute once, as the field it is inside a span (or a span
event), and a span's bytes are its own scalar fields, serialized by protobuf, followed by those
memoised attribute fields, in field-number order. That is the layout protobuf's serializer
writes (concatenated fields of one message are that message), so the request is byte for byte
the one the exporter library's ``encode_spans`` serializes. Only the framing of the nested
messages (a tag and a length) is composed here, with protobuf's own varint encoder; a string,
int or float value's ``AnyValue`` is its one field, framed the same way.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from google.protobuf.internal.encoder import _VarintBytes
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.trace import SpanKind, Status, StatusCode

from rulvar_otel.otel._records import SpanRecord
from rulvar_otel.otel.semconv import UNIQUE_VALUE_KEYS

__all__ = [
    "FLAGS",
    "KIND_CODES",
    "REMOTE_FLAGS",
    "STATUS_CODES",
    "AttributeFields",
    "WireMemo",
    "request_bytes",
]

# PB2SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, and with REMOTE_FLAGS its IS_REMOTE bit:
# a parent is local unless it came from another process (a host's traceparent).
FLAGS: Final = 0x100
REMOTE_FLAGS: Final = 0x300
_MEMO_LIMIT: Final = 8192  # entries per memo; each is a few dozen bytes
# The message classes, untyped: their constructors take plain dicts for nested messages.
PbSpan: Final[Any] = trace_pb2.Span
_PbEvent: Final[Any] = trace_pb2.Span.Event
_AnyValue: Final[Any] = common_pb2.AnyValue
_KeyValue: Final[Any] = common_pb2.KeyValue
_varint: Final[Callable[[int], bytes]] = _VarintBytes

# OTLP's span kind is the API's enum value plus one (OTLP reserves 0 for "unspecified").
KIND_CODES: Final = {kind: kind.value + 1 for kind in SpanKind}
STATUS_CODES: Final = {code: code.value for code in StatusCode}


def _tag(message: Any, field: str, wire_type: int = 2) -> bytes:
    """The key of ``field`` of ``message`` (wire type 2, length-delimited, unless given)."""
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


_EVENT_TAG: Final = _tag(PbSpan, "events")
_SPAN_TAG: Final = _tag(trace_pb2.ScopeSpans, "spans")
_SCOPE_SPANS_TAG: Final = _tag(trace_pb2.ResourceSpans, "scope_spans")
_RESOURCE_SPANS_TAG: Final = _tag(trace_service_pb2.ExportTraceServiceRequest, "resource_spans")
_SPAN_ATTRIBUTE_TAG: Final = _tag(PbSpan, "attributes")
_EVENT_ATTRIBUTE_TAG: Final = _tag(_PbEvent, "attributes")
_VALUE_TAG: Final = _tag(_KeyValue, "value")
_STRING_VALUE_TAG: Final = _tag(_AnyValue, "string_value")
_INT_VALUE_TAG: Final = _tag(_AnyValue, "int_value", 0)  # a varint
_DOUBLE_VALUE_TAG: Final = _tag(_AnyValue, "double_value", 1)  # eight bytes
_pack_double: Final = struct.Struct("<d").pack

# Length prefixes up to this size are memoised (one or two varint bytes; spans and attributes
# are almost always shorter).
_LENGTH_MEMO_LIMIT: Final = 16384
_LENGTHS: Final[dict[int, bytes]] = {}


def _any_value(value: Any) -> dict[str, Any]:
    cls = type(value)
    if cls is str:
        return {"string_value": value}
    if cls is bool:
        return {"bool_value": value}
    if cls is int:
        return {"int_value": value}
    if cls is float:
        return {"double_value": value}
    if isinstance(value, bytes):
        return {"bytes_value": value}
    if isinstance(value, bool):
        return {"bool_value": bool(value)}
    if isinstance(value, int):
        return {"int_value": int(value)}
    if isinstance(value, float):
        return {"double_value": float(value)}
    if isinstance(value, str):
        return {"string_value": str(value)}
    return {"array_value": {"values": [_any_value(v) for v in value]}}


def _value_bytes(value: Any, message: Any) -> bytes:
    """The serialized ``AnyValue`` of an attribute value: a string, an int64 or a double is its
    one field, framed here; anything else protobuf serializes.

    ``message`` is an ``AnyValue`` reused for scalars: setting one member of its ``value`` oneof
    clears the others, so it serializes exactly as a new message would.
    """
    cls = type(value)
    if cls is str:
        text: str = value
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            message.string_value = value  # protobuf refuses it, as it always did
        else:
            # AnyValue's field 1, framed as the KeyValue around it is: tag, length, UTF-8 bytes
            # (a oneof member is written even when empty). Most values are strings.
            return _STRING_VALUE_TAG + _length(len(data)) + data
    elif cls is int:
        number: int = value
        if 0 <= number < _LENGTH_MEMO_LIMIT:
            # Field 3, an int64 varint: a small one is a memoised length prefix (the same varint).
            return _INT_VALUE_TAG + _length(number)
        message.int_value = value  # protobuf serializes the rest (and refuses what int64 cannot hold)
    elif cls is float:
        # Field 4, a double: its eight IEEE 754 bytes, little-endian.
        return _DOUBLE_VALUE_TAG + _pack_double(value)
    elif cls is bool:
        message.bool_value = value
    else:
        fresh: bytes = _AnyValue(**_any_value(value)).SerializeToString()
        return fresh
    out: bytes = message.SerializeToString()
    return out


class AttributeFields:
    """The serialized ``attributes`` fields of spans (or of span events) remembered per key and
    value: strings and ints apart, at most ``_MEMO_LIMIT`` in all (then it starts over)."""

    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        self.strings: dict[str, dict[str, bytes]] = {}
        self.ints: dict[str, dict[int, bytes]] = {}
        self.count = 0


class WireMemo:
    """Serialized fragments an export's batches share: attribute fields, keys, span tails.

    String and integer attributes are kept apart by type (``1``, ``1.0`` and ``True`` are equal
    keys in one dict but encode differently); each memo is bounded (cleared when full).
    """

    def __init__(self) -> None:
        self.span_fields = AttributeFields(_SPAN_ATTRIBUTE_TAG)
        self.event_fields = AttributeFields(_EVENT_ATTRIBUTE_TAG)
        # attribute key -> the serialized ``key`` field of its KeyValue.
        self.keys: dict[str, bytes] = {}
        # (status, flags) -> the span's trailing status and flags fields.
        self.tails: dict[tuple[Status, int], bytes] = {}
        self.lock = threading.Lock()  # keeps one batch's encoding whole (the messages below)
        self.span_message: Any = None
        self.event_message: Any = None
        self.value_message: Any = None
        self.last_value: object = None
        self.last_value_bytes = b""
        self.last_state: object = None
        self.last_kind: object = None
        self.fresh_messages()

    def fresh_messages(self) -> None:
        """New messages to reuse for each span's scalar fields, each span event's and each new
        value (every field is set before each use). They are renewed for every batch: a message
        keeps each value ever set on it until it is dropped, so one for a whole export would grow
        with the stream."""
        self.span_message = PbSpan()
        self.event_message = _PbEvent()
        self.value_message = _AnyValue()
        # The last value serialized on its own, and its bytes: kept per batch, compared by identity.
        self.last_value = None
        self.last_value_bytes = b""
        # What the span message holds now (compared by identity): none yet.
        self.last_state = None
        self.last_kind = None


def _length(size: int) -> bytes:
    """The varint length prefix of a ``size``-byte field (protobuf's encoder, memoised)."""
    prefix = _LENGTHS.get(size)
    if prefix is None:
        prefix = _varint(size)
        if size < _LENGTH_MEMO_LIMIT:
            _LENGTHS[size] = prefix
    return prefix


def _attribute_field(key: str, raw: Any, field_tag: bytes, memo: WireMemo) -> bytes:
    """One ``attributes`` field (a KeyValue) of a span or span event.

    Protobuf serializes the key field and the value message; a KeyValue is those two fields in
    field-number order, framed here by their tag and length.
    """
    keys = memo.keys
    key_field = keys.get(key)
    if key_field is None:
        if len(keys) >= _MEMO_LIMIT:
            keys.clear()
        key_field = keys[key] = _KeyValue(key=key).SerializeToString()
    if raw is memo.last_value:  # the same object under a second key (a tool call's two ids)
        value = memo.last_value_bytes
    else:
        value = _value_bytes(raw, memo.value_message)
        memo.last_value, memo.last_value_bytes = raw, value
    value_length = _length(len(value))
    size = len(key_field) + len(_VALUE_TAG) + len(value_length) + len(value)
    return b"".join((field_tag, _length(size), key_field, _VALUE_TAG, value_length, value))


def _attributes(attributes: Mapping[str, Any], fields: AttributeFields, memo: WireMemo) -> list[bytes]:
    out: list[bytes] = []
    strings = fields.strings
    ints = fields.ints
    for key, value in attributes.items():
        # Strings and ints are remembered apart (1, 1.0 and True are equal dict keys).
        cls = type(value)
        field: bytes | None = None
        if cls is str:
            by_string = strings.get(key)
            if by_string is not None:
                field = by_string.get(value)
        elif cls is int:
            by_int = ints.get(key)
            if by_int is not None:
                field = by_int.get(value)
        if field is None:
            field = _missed(key, value, fields, memo)
        out.append(field)
    return out


def _missed(key: str, value: Any, fields: AttributeFields, memo: WireMemo) -> bytes:
    field = _attribute_field(key, value, fields.tag, memo)
    if key in UNIQUE_VALUE_KEYS:
        return field  # one value per span: kept, it would only push the repeating ones out
    cls = type(value)
    if cls is str or cls is int:
        if fields.count >= _MEMO_LIMIT:
            fields.strings.clear()
            fields.ints.clear()
            fields.count = 0
        fields.count += 1
        if cls is str:
            fields.strings.setdefault(key, {})[value] = field
        else:
            fields.ints.setdefault(key, {})[value] = field
    return field


def _events(record: SpanRecord, memo: WireMemo) -> list[bytes]:
    out: list[bytes] = []
    message = memo.event_message
    for name, ts, attrs in record.events:
        message.time_unix_nano = ts
        message.name = name
        parts = [message.SerializeToString()]
        if attrs:
            parts += _attributes(attrs, memo.event_fields, memo)
        body = b"".join(parts)
        out.append(_EVENT_TAG + _length(len(body)) + body)
    return out


def _status_fields(status: Status) -> dict[str, Any]:
    return {"code": STATUS_CODES[status.status_code], "message": status.description}


def _tail(record: SpanRecord, memo: WireMemo) -> bytes:
    """Fields 12 to 16: dropped events, links, status, flags (memoised when there are no links)."""
    status = record.status
    flags = REMOTE_FLAGS if record.parent_remote else FLAGS
    if record.links or record.dropped_events:
        links = [
            {
                "trace_id": c.trace_id.to_bytes(16, "big"),
                "span_id": c.span_id.to_bytes(8, "big"),
                "flags": REMOTE_FLAGS if c.is_remote else FLAGS,
            }
            for c in record.links
        ]
        fields: bytes = PbSpan(
            dropped_events_count=record.dropped_events,
            links=links,
            status=_status_fields(status),
            flags=flags,
        ).SerializeToString()
        return fields
    key = (status, flags)
    tail = memo.tails.get(key)
    if tail is None:
        if len(memo.tails) >= _MEMO_LIMIT:
            memo.tails.clear()
        tail = memo.tails[key] = PbSpan(status=_status_fields(status), flags=flags).SerializeToString()
    return tail


def _span(record: SpanRecord, memo: WireMemo) -> bytes:
    # Its eight scalar fields: the trace id is set by the batch's loop, a trace state and a kind
    # only when they differ from the last span's (most spans share them), the others every time.
    message = memo.span_message
    message.span_id = record.span_id.to_bytes(8, "big")
    state = record.trace_state
    if state is not memo.last_state:
        message.trace_state = state.to_header() if state else ""
        memo.last_state = state
    message.parent_span_id = record.parent_id.to_bytes(8, "big") if record.parent_id else b""
    message.name = record.name
    kind = record.kind
    if kind is not memo.last_kind:
        message.kind = KIND_CODES[kind]
        memo.last_kind = kind
    message.start_time_unix_nano = record.start_ns
    message.end_time_unix_nano = record.end_ns
    parts = [message.SerializeToString()]
    if record.attributes:
        parts += _attributes(record.attributes, memo.span_fields, memo)
    if record.dropped_attributes:
        parts.append(PbSpan(dropped_attributes_count=record.dropped_attributes).SerializeToString())
    if record.events:
        parts += _events(record, memo)
    parts.append(_tail(record, memo))
    body = b"".join(parts)
    return _SPAN_TAG + _length(len(body)) + body


def request_bytes(
    records: Sequence[SpanRecord],
    resource_head: bytes,
    scope_head: bytes,
    scope_schema: bytes,
    resource_schema: bytes,
    memo: WireMemo,
) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` of ``records`` under one resource and scope.

    ``resource_head``/``scope_head`` are the serialized ``resource`` and ``scope`` fields of
    ``ResourceSpans`` and ``ScopeSpans``, ``*_schema`` their serialized ``schema_url`` fields.
    """
    trace_id = -1
    parts = [scope_head]
    with memo.lock:
        memo.fresh_messages()
        for record in records:
            if record.trace_id != trace_id:
                trace_id = record.trace_id
                memo.span_message.trace_id = trace_id.to_bytes(16, "big")
            parts.append(_span(record, memo))
    parts.append(scope_schema)
    scope_spans = b"".join(parts)
    resource_spans = b"".join(
        (resource_head, _SCOPE_SPANS_TAG, _varint(len(scope_spans)), scope_spans, resource_schema)
    )
    return _RESOURCE_SPANS_TAG + _varint(len(resource_spans)) + resource_spans
