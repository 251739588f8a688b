"""The protobuf wire form of a batch of span records: ``ExportTraceServiceRequest`` bytes, by hand.

Building the request message from nested dicts (or nested messages) costs far more than
serialising it: every attribute, value, event and status is a message object of its own. The
records' fields are few and fixed, so this module writes their protobuf encoding directly (field
tags, varints, fixed-width times) and memoises the encoded key/value entries that repeat (ids,
names, statuses). The bytes parse back into the very message the exporter library's encoder makes;
``_encode.EncodedBatch.request`` does that parse and falls back to the message path on any error.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.trace import SpanKind, Status, StatusCode

from rulvar_otel.otel._records import SpanRecord

__all__ = ["request_bytes"]

_MEMO_LIMIT: Final = 8192
_FLAGS: Final = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE_FLAGS: Final = 0x300  # and the IS_REMOTE bit
_KIND_CODES: Final = {kind: kind.value + 1 for kind in SpanKind}
_STATUS_CODES: Final = {code: code.value for code in StatusCode}
_SMALL: Final = [bytes([n]) for n in range(128)]
_Q: Final = struct.Struct("<Q").pack
_D: Final = struct.Struct("<d").pack
# Span.flags (field 16, fixed32): its tag and the two values it takes.
_SPAN_FLAGS: Final = b"\x85\x01" + struct.pack("<I", _FLAGS)
_SPAN_REMOTE_FLAGS: Final = b"\x85\x01" + struct.pack("<I", _REMOTE_FLAGS)
# Link.flags (field 6, fixed32).
_LINK_FLAGS: Final = b"\x35" + struct.pack("<I", _FLAGS)
_LINK_REMOTE_FLAGS: Final = b"\x35" + struct.pack("<I", _REMOTE_FLAGS)


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: its tag, the body's length, the body."""
    return tag + _varint(len(body)) + body


def _any_value(value: Any) -> bytes:
    """An ``AnyValue`` body (every oneof member written, default values included)."""
    if value.__class__ is str:
        return _field(b"\x0a", value.encode())
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _D(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    items = b"".join(_field(b"\x0a", _any_value(v)) for v in value)
    return _field(b"\x2a", items)


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` as a length-prefixed body (the caller writes the field's tag before it)."""
    body = _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))
    return _varint(len(body)) + body


def _attributes(out: bytearray, tag: bytes, attributes: Mapping[str, Any], memo: dict[Any, bytes]) -> None:
    # Only string values are memoised (1, 1.0 and True are equal dict keys).
    for item in attributes.items():
        value = item[1]
        if value.__class__ is str:
            entry = memo.get(item)
            if entry is None:
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                entry = memo[item] = _key_value(item[0], value)
        else:
            entry = _key_value(item[0], value)
        out += tag
        out += entry


def _status(status: Status) -> bytes:
    body = b""
    if status.description:
        body = _field(b"\x12", status.description.encode())
    code = _STATUS_CODES[status.status_code]
    if code:
        body += b"\x18" + _varint(code)
    return _field(b"\x7a", body)


def _span(r: SpanRecord, trace_field: bytes, memo: dict[Any, bytes], statuses: dict[Status, bytes]) -> bytes:
    out = bytearray(trace_field)
    out += b"\x12\x08"
    out += r.span_id.to_bytes(8, "big")
    if r.trace_state:
        out += _field(b"\x1a", r.trace_state.to_header().encode())
    if r.parent_id:
        out += b"\x22\x08"
        out += r.parent_id.to_bytes(8, "big")
    out += _field(b"\x2a", r.name.encode())
    out += b"\x30"
    out += _varint(_KIND_CODES[r.kind])
    out += b"\x39"
    out += _Q(r.start_ns)
    out += b"\x41"
    out += _Q(r.end_ns)
    _attributes(out, b"\x4a", r.attributes, memo)
    if r.dropped_attributes:
        out += b"\x50" + _varint(r.dropped_attributes)
    for name, ts, attrs in r.events:
        event = bytearray(b"\x09")
        event += _Q(ts)
        event += _field(b"\x12", name.encode())
        _attributes(event, b"\x1a", attrs, memo)
        out += _field(b"\x5a", bytes(event))
    if r.dropped_events:
        out += b"\x60" + _varint(r.dropped_events)
    for c in r.links:
        link = b"\x0a\x10" + c.trace_id.to_bytes(16, "big") + b"\x12\x08" + c.span_id.to_bytes(8, "big")
        out += _field(b"\x6a", link + (_LINK_REMOTE_FLAGS if c.is_remote else _LINK_FLAGS))
    status = statuses.get(r.status)
    if status is None:
        if len(statuses) >= _MEMO_LIMIT:
            statuses.clear()
        status = statuses[r.status] = _status(r.status)
    out += status
    out += _SPAN_REMOTE_FLAGS if r.parent_remote else _SPAN_FLAGS
    return bytes(out)


def request_bytes(
    records: Sequence[SpanRecord],
    resource: bytes,
    resource_schema: str,
    scope: bytes,
    scope_schema: str,
    memo: dict[Any, bytes],
    statuses: dict[Status, bytes],
) -> bytes:
    """The serialised ``ExportTraceServiceRequest`` of ``records`` under one resource and scope.

    ``resource`` and ``scope`` are the serialised ``Resource`` and ``InstrumentationScope``
    messages; ``memo`` and ``statuses`` are the export's memos of encoded entries.
    """
    trace_id = -1
    trace_field = b""
    scope_spans = bytearray(_field(b"\x0a", scope))
    for r in records:
        if r.trace_id != trace_id:
            trace_id = r.trace_id
            trace_field = b"\x0a\x10" + trace_id.to_bytes(16, "big")
        scope_spans += _field(b"\x12", _span(r, trace_field, memo, statuses))
    if scope_schema:
        scope_spans += _field(b"\x1a", scope_schema.encode())
    resource_spans = _field(b"\x0a", resource) + _field(b"\x12", bytes(scope_spans))
    if resource_schema:
        resource_spans += _field(b"\x1a", resource_schema.encode())
    return _field(b"\x0a", resource_spans)
