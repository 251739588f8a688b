"""A batch of finished span records in the forms the OTLP exporters consume.

:class:`EncodedBatch` is a ``Sequence[ReadableSpan]``, so any SDK ``SpanExporter`` takes it as it
is (the SDK's span objects are built on first access). The exporters this package builds read
its fast forms instead: :meth:`EncodedBatch.request_bytes` is the serialized
``ExportTraceServiceRequest`` the exporter library's ``encode_spans`` makes, byte for byte
(composed from memoised fragments by :mod:`rulvar_otel.otel._wire`), and
:meth:`EncodedBatch.otlp_json` is the same request as one OTLP/JSON line, without the
protobuf JSON printer. The resource and scope are encoded once, by the library's own encoder.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any, Final, overload

import orjson
from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, Status, TraceFlags, TraceState

from rulvar_otel.otel._records import SpanRecord
from rulvar_otel.otel._wire import FLAGS, KIND_CODES, REMOTE_FLAGS, STATUS_CODES, WireMemo, request_bytes

__all__ = ["BatchHeader", "EncodedBatch"]

_MEMO_LIMIT: Final = 8192  # entries per memo; each is a few hundred bytes


def _json_status(status: Status) -> dict[str, Any]:
    out: dict[str, Any] = {}
    code = STATUS_CODES[status.status_code]
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
        self.resource_head = ResourceSpans(resource=self.resource_pb).SerializeToString()
        self.scope_head = ScopeSpans(scope=self.scope_pb).SerializeToString()
        self.resource_schema = ResourceSpans(schema_url=resource.schema_url).SerializeToString()
        self.scope_schema = ScopeSpans(schema_url=scope.schema_url or "").SerializeToString()
        self.wire_memo = WireMemo()
        # (key, string value) -> the encoded key/value entry; bounded.
        self.json_memo: dict[tuple[str, Any], dict[str, Any]] = {}
        # Status -> its OTLP/JSON object (a few shared statuses, and one per error message).
        self.json_statuses: dict[Status, dict[str, Any]] = {}

    # The JSON forms only an OTLP/JSON file needs (protobuf's JSON printer loads on first use).

    @cached_property
    def resource_json(self) -> dict[str, Any]:
        from google.protobuf import json_format

        resource: dict[str, Any] = json_format.MessageToDict(self.resource_pb, use_integers_for_enums=True)
        return resource

    @cached_property
    def scope_json(self) -> dict[str, Any]:
        from google.protobuf import json_format

        scope: dict[str, Any] = json_format.MessageToDict(self.scope_pb, use_integers_for_enums=True)
        return scope


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
        self._bytes: bytes | None = None

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

    def request_bytes(self) -> bytes:
        """This batch as a serialized ``ExportTraceServiceRequest`` (what ``encode_spans`` would
        serialize, byte for byte); built once."""
        if self._bytes is None:
            header = self.header
            self._bytes = request_bytes(
                self.records,
                header.resource_head,
                header.scope_head,
                header.scope_schema,
                header.resource_schema,
                header.wire_memo,
            )
        return self._bytes

    def request(self) -> ExportTraceServiceRequest:
        """The ``ExportTraceServiceRequest`` of this batch (as ``encode_spans`` builds it)."""
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(self.request_bytes())
        return request

    def otlp_json(self) -> bytes:
        """This batch as one OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, no trailing newline)."""
        header = self.header
        memo = header.json_memo
        statuses = header.json_statuses
        kinds = KIND_CODES
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
                "flags": REMOTE_FLAGS if r.parent_remote else FLAGS,
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
                        "flags": REMOTE_FLAGS if c.is_remote else FLAGS,
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
