"""A batch of finished span records in the forms the OTLP exporters consume.

:class:`EncodedBatch` is a ``Sequence[ReadableSpan]``, so any SDK ``SpanExporter`` takes it as it
is (the SDK's span objects are built on first access). The exporters this package builds read
its fast forms instead: :meth:`EncodedBatch.request` is the same ``ExportTraceServiceRequest``
the exporter library's ``encode_spans`` makes, built from plain dicts by protobuf's C
constructor (attribute key/value entries are memoised: ids, statuses and names repeat in every
span), and :meth:`EncodedBatch.otlp_json` is the same request as one OTLP/JSON line, without the
protobuf JSON printer. The resource and scope are encoded once, by the library's own encoder.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any, Final, overload

import orjson
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from rulvar_otel.otel._records import SpanRecord

__all__ = ["BatchHeader", "EncodedBatch"]

# PB2SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, and with _REMOTE_FLAGS its IS_REMOTE bit:
# a parent is local unless it came from another process (a host's traceparent).
_FLAGS: Final = 0x100
_REMOTE_FLAGS: Final = 0x300
_MEMO_LIMIT: Final = 8192  # entries per form; each is a few hundred bytes


# OTLP's span kind is the API's enum value plus one (OTLP reserves 0 for "unspecified").
_KIND_CODES: Final = {kind: kind.value + 1 for kind in SpanKind}
_STATUS_CODES: Final = {code: code.value for code in StatusCode}


def _json_status(status: Status) -> dict[str, Any]:
    out: dict[str, Any] = {}
    code = _STATUS_CODES[status.status_code]
    if code:
        out["code"] = code
    if status.description:
        out["message"] = status.description
    return out


class BatchHeader:
    """The resource and instrumentation scope every record of an export shares, encoded once."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        self.resource = resource
        self.scope = scope
        self.resource_pb = _encode_resource(resource)
        self.scope_pb = _encode_instrumentation_scope(scope)
        self.resource_json = json_format.MessageToDict(self.resource_pb, use_integers_for_enums=True)
        self.scope_json = json_format.MessageToDict(self.scope_pb, use_integers_for_enums=True)
        # (key, string value) -> the encoded key/value entry, per form; bounded.
        self.pb_memo: dict[tuple[str, Any], dict[str, Any]] = {}
        self.json_memo: dict[tuple[str, Any], dict[str, Any]] = {}
        # Status -> its OTLP/JSON object (a few shared statuses, and one per error message).
        self.json_statuses: dict[Status, dict[str, Any]] = {}


def _pb_value(value: Any) -> dict[str, Any]:
    if value.__class__ is str:
        return {"string_value": value}
    if isinstance(value, bool):
        return {"bool_value": value}
    if isinstance(value, int):
        return {"int_value": value}
    if isinstance(value, float):
        return {"double_value": value}
    if isinstance(value, bytes):
        return {"bytes_value": value}
    if isinstance(value, str):
        return {"string_value": value}
    return {"array_value": {"values": [_pb_value(v) for v in value]}}


def _json_value(value: Any) -> dict[str, Any]:
    if value.__class__ is str:
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 is a string in protobuf's JSON mapping
    if isinstance(value, float):
        if math.isfinite(value):
            return {"doubleValue": value}
        return {"doubleValue": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    if isinstance(value, str):
        return {"stringValue": value}
    values = [_json_value(v) for v in value]
    return {"arrayValue": {"values": values} if values else {}}


# Only string values are memoised: they are what repeats (ids, names, statuses), and a number
# key would conflate 1, 1.0 and True, which encode differently.


def _pb_attributes(attributes: Any, memo: dict[tuple[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in attributes.items():
        value = item[1]
        if value.__class__ is str:
            entry = memo.get(item)
            if entry is None:
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                entry = memo[item] = {"key": item[0], "value": {"string_value": value}}
            out.append(entry)
        else:
            out.append({"key": item[0], "value": _pb_value(value)})
    return out


def _json_attributes(attributes: Any, memo: dict[tuple[str, Any], dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in attributes.items():
        value = item[1]
        if value.__class__ is str:
            entry = memo.get(item)
            if entry is None:
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                entry = memo[item] = {"key": item[0], "value": {"stringValue": value}}
            out.append(entry)
        elif value.__class__ is int:
            out.append({"key": item[0], "value": {"intValue": str(value)}})
        else:
            out.append({"key": item[0], "value": _json_value(value)})
    return out


class EncodedBatch(Sequence[ReadableSpan]):
    """Finished records of one export batch; each form is built once, on first use."""

    def __init__(self, records: Sequence[SpanRecord], header: BatchHeader) -> None:
        self.records = records
        self.header = header
        self._request: ExportTraceServiceRequest | None = None

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> ReadableSpan: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ReadableSpan]: ...

    def __getitem__(self, index: int | slice) -> ReadableSpan | Sequence[ReadableSpan]:
        return self.readable_spans[index]

    def __iter__(self) -> Iterator[ReadableSpan]:
        return iter(self.readable_spans)

    @cached_property
    def readable_spans(self) -> list[ReadableSpan]:
        """The SDK's span objects, for exporters that only know those."""
        header = self.header
        return [_readable(r, header.resource, header.scope) for r in self.records]

    def request(self) -> ExportTraceServiceRequest:
        """The ``ExportTraceServiceRequest`` of this batch (as ``encode_spans`` builds it); built once."""
        if self._request is not None:
            return self._request
        header = self.header
        memo = header.pb_memo
        kinds = _KIND_CODES
        trace_id = -1
        trace_bytes = b""
        spans = []
        for r in self.records:
            if r.trace_id != trace_id:
                trace_id = r.trace_id
                trace_bytes = trace_id.to_bytes(16, "big")
            status = r.status
            span: dict[str, Any] = {
                "trace_id": trace_bytes,
                "span_id": r.span_id.to_bytes(8, "big"),
                "name": r.name,
                "kind": kinds[r.kind],
                "start_time_unix_nano": r.start_ns,
                "end_time_unix_nano": r.end_ns,
                "attributes": _pb_attributes(r.attributes, memo),
                "status": {"code": _STATUS_CODES[status.status_code], "message": status.description},
                "flags": _REMOTE_FLAGS if r.parent_remote else _FLAGS,
            }
            if r.parent_id:
                span["parent_span_id"] = r.parent_id.to_bytes(8, "big")
            if r.trace_state:
                span["trace_state"] = r.trace_state.to_header()
            if r.links:
                span["links"] = [
                    {
                        "trace_id": c.trace_id.to_bytes(16, "big"),
                        "span_id": c.span_id.to_bytes(8, "big"),
                        "flags": _REMOTE_FLAGS if c.is_remote else _FLAGS,
                    }
                    for c in r.links
                ]
            if r.events:
                span["events"] = [
                    {"name": name, "time_unix_nano": ts, "attributes": _pb_attributes(attrs, memo)}
                    for name, ts, attrs in r.events
                ]
            if r.dropped_events:
                span["dropped_events_count"] = r.dropped_events
            if r.dropped_attributes:
                span["dropped_attributes_count"] = r.dropped_attributes
            spans.append(span)
        scope_spans = {"scope": header.scope_pb, "spans": spans, "schema_url": header.scope.schema_url}
        resource_spans: Any = {
            "resource": header.resource_pb,
            "scope_spans": [scope_spans],
            "schema_url": header.resource.schema_url,
        }
        self._request = ExportTraceServiceRequest(resource_spans=[resource_spans])
        return self._request

    def otlp_json(self) -> bytes:
        """This batch as one OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, no trailing newline)."""
        header = self.header
        memo = header.json_memo
        statuses = header.json_statuses
        kinds = _KIND_CODES
        # An export's spans share one trace id (a host parent aside): its hex is made once.
        trace_id = -1
        trace_hex = ""
        spans = []
        for r in self.records:
            status_json = statuses.get(r.status)
            if status_json is None:
                status_json = _json_status(r.status)
                if len(statuses) >= _MEMO_LIMIT:
                    statuses.clear()
                statuses[r.status] = status_json
            if r.trace_id != trace_id:
                trace_id = r.trace_id
                trace_hex = format(trace_id, "032x")
            span: dict[str, Any] = {
                "traceId": trace_hex,
                "spanId": format(r.span_id, "016x"),
                "name": r.name,
                "kind": kinds[r.kind],
                "startTimeUnixNano": str(r.start_ns),
                "endTimeUnixNano": str(r.end_ns),
                "status": status_json,
                "flags": _REMOTE_FLAGS if r.parent_remote else _FLAGS,
            }
            if r.attributes:
                span["attributes"] = _json_attributes(r.attributes, memo)
            if r.parent_id:
                span["parentSpanId"] = format(r.parent_id, "016x")
            if r.trace_state:
                span["traceState"] = r.trace_state.to_header()
            if r.links:
                span["links"] = [
                    {
                        "traceId": format(c.trace_id, "032x"),
                        "spanId": format(c.span_id, "016x"),
                        "flags": _REMOTE_FLAGS if c.is_remote else _FLAGS,
                    }
                    for c in r.links
                ]
            if r.events:
                events = []
                for name, ts, attrs in r.events:
                    event: dict[str, Any] = {"timeUnixNano": str(ts), "name": name}
                    if attrs:
                        event["attributes"] = _json_attributes(attrs, memo)
                    events.append(event)
                span["events"] = events
            if r.dropped_events:
                span["droppedEventsCount"] = r.dropped_events
            if r.dropped_attributes:
                span["droppedAttributesCount"] = r.dropped_attributes
            spans.append(span)
        scope_spans: dict[str, Any] = {"scope": header.scope_json, "spans": spans}
        if header.scope.schema_url:
            scope_spans["schemaUrl"] = header.scope.schema_url
        resource_spans: dict[str, Any] = {"resource": header.resource_json, "scopeSpans": [scope_spans]}
        if header.resource.schema_url:
            resource_spans["schemaUrl"] = header.resource.schema_url
        return orjson.dumps({"resourceSpans": [resource_spans]})


def _context(trace_id: int, span_id: int, remote: bool, state: TraceState) -> SpanContext:
    return SpanContext(trace_id, span_id, remote, TraceFlags(TraceFlags.SAMPLED), state)


def _readable(record: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    parent = None
    if record.parent_id:
        parent = _context(record.trace_id, record.parent_id, record.parent_remote, record.trace_state)
    return ReadableSpan(
        name=record.name,
        context=record.get_span_context(),
        parent=parent,
        links=tuple(Link(c) for c in record.links),
        resource=resource,
        attributes=record.attributes,
        events=tuple(Event(name, attrs, ts) for name, ts, attrs in record.events),
        kind=record.kind,
        status=record.status,
        start_time=record.start_ns,
        end_time=record.end_ns,
        instrumentation_scope=scope,
    )
