"""Nothing planted in a stream leaks into the OTLP bytes: not credentials, not content."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.otel import to_otel
from tests import _fixtures as fx
from tests._otel_harness import export

SECRET = "sk-PLANTEDplantedPLANTED0123"
CONTENT = "CONTENTMARK"
# Envelope fields whose values drive the mapping itself; everything else gets a planted secret.
KEEP = {"type", "ts"}


def _plant(value: Any) -> Any:
    if isinstance(value, str):
        return f"{value} {SECRET}"
    if isinstance(value, list):
        return [_plant(v) for v in value]
    if isinstance(value, dict):
        return {_plant(k): _plant(v) for k, v in value.items()}
    return value


def _planted(event: dict[str, Any]) -> dict[str, Any]:
    out = {k: (v if k in KEEP else _plant(v)) for k, v in event.items()}
    # Content-bearing fields, whether or not the event type normally carries them.
    for field in ("prompt", "msg", "message", "delta", "label", "frame", "data"):
        out[field] = f"{CONTENT} {field}"
    out["error"] = {"code": "E", "message": f"{CONTENT} error", "retryable": False, "data": CONTENT}
    if event["type"].startswith("tool:"):
        out["risk"] = CONTENT
        out["rule"] = {"match": CONTENT}
        out["advisory"] = CONTENT
    return out


def _otlp_bytes(events: list[dict[str, Any]]) -> bytes:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    count = asyncio.run(to_otel(handle_from_events(events, None), tp.get_tracer("t")))
    spans = exporter.get_finished_spans()
    assert count == len(spans) > 0
    return encode_spans(spans).SerializeToString()


@pytest.mark.parametrize("name", [n for n in fx.stream_names() if n != "large"])
def test_nothing_planted_reaches_the_wire(name: str) -> None:
    payload = _otlp_bytes([_planted(e) for e in fx.events(name)])
    assert b"PLANTED" not in payload
    assert CONTENT.encode() not in payload
    assert b"[masked-secret]" in payload


def test_large_stream_planted() -> None:
    payload = _otlp_bytes([_planted(e) for e in fx.events("large")[:4000]])
    assert b"PLANTED" not in payload and CONTENT.encode() not in payload


def test_a_key_glued_to_an_escape_sequence_is_still_masked() -> None:
    key = "ghp_" + "k" * 36
    events = [
        {
            "runId": "r",
            "seq": 0,
            "ts": "2026-01-01T00:00:00.000Z",
            "spanId": "s0",
            "type": "run:start",
            "workflow": f"\x1b[2J{key}",
        },
        {
            "runId": "r",
            "seq": 1,
            "ts": "2026-01-01T00:00:00.001Z",
            "spanId": "s1",
            "parentSpanId": "s0",
            "type": "phase:start",
            "phase": f"x\n{key}\x07",
        },
        {
            "runId": "r",
            "seq": 2,
            "ts": "2026-01-01T00:00:00.002Z",
            "spanId": "s0",
            "type": "budget:update",
            "spentUsd": 0,
            "note": f"\x9b{key}",
        },
    ]
    payload = _otlp_bytes(events)
    assert key.encode() not in payload
    # Control bytes are checked on the decoded strings: random span ids may contain 0x07 or 0x1b.
    result = export(events)
    strings = [s.name for s in result.spans]
    for span in result.spans:
        strings += [v for v in (span.attributes or {}).values() if isinstance(v, str)]
        for event in span.events:
            strings += [event.name, *(v for v in (event.attributes or {}).values() if isinstance(v, str))]
    assert len(strings) > 5
    assert not [s for s in strings if "\x1b" in s or "\x07" in s or "\x9b" in s or "\n" in s]
