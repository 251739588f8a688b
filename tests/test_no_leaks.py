"""Nothing planted in a stream leaks into the OTLP bytes: not credentials, not content."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.cli._inspect import run_inspect
from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.core.masking import default_masker
from rulvar_otel.export import MetricsSetup, build_meter_provider
from rulvar_otel.otel import to_otel
from tests import _support as fx
from tests._support import HttpTraceReceiver, export

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


# --- every leak class through every output ----------------------------------------------------
# A key planted in every variant a producer can write (plain, glued to a newline, an escape
# sequence, a bidi override, split by a zero-width space, after a written-out "\n", behind U+2028),
# in names, labels, metric dimensions, JSON-valued run facts and object keys; plus host secrets
# for patterns with groups and inline flags. Each output must show none of it.

PLANT = "ghp_" + "Planted7" * 5
HOST_PATTERNS = (r"(prod|staging)-db-[0-9]+", r"(?i)hosttok-\d{4}", r"(?x) corp _ [a-z]{6}  # verbose")
HOST_SECRETS = ("prod-db-42", "HOSTTOK-1234", "corp_abcdef")
VARIANTS = {
    "plain": f"x {PLANT}",
    "newline": f"x\n{PLANT}",
    "escape": f"\x1b[31m{PLANT}\x1b[0m",
    "c1": f"\x9b{PLANT}",
    "bidi": f"\u202e{PLANT}\u202c",
    "zero-width": f"{PLANT[:10]}\u200b{PLANT[10:]}",
    "escaped-text": f"x\\n{PLANT}",
    "escaped-esc": f"\\u001b[31m{PLANT}",
    "line-separator": f"a\u2028{PLANT}",
}
_FRAGMENTS = ("Planted7", "planted7", "PLANTED7", "prod-db-42", "HOSTTOK-1234", "hosttok-1234", "corp_abcdef")


def _hostile_stream(v: str) -> list[dict[str, Any]]:
    host = " ".join(HOST_SECRETS)
    base = {"runId": "run-leaks"}
    rows: list[dict[str, Any]] = [
        {"spanId": "s0", "type": "run:start", "workflow": f"wf {v}"},
        {"spanId": "s1", "parentSpanId": "s0", "type": "phase:start", "phase": f"ph {v} {host}"},
        {
            "spanId": "s2",
            "parentSpanId": "s1",
            "type": "agent:start",
            "agentType": f"agent {v} {host}",
            "model": f"openai:{v}",
            "role": "loop",
            "label": f"label {v} {host}",
        },
        {
            "spanId": "s3",
            "parentSpanId": "s2",
            "type": "tool:start",
            "toolName": f"t {v}",
            "toolCallId": "1",
        },
        {
            "spanId": "s3",
            "parentSpanId": "s2",
            "type": "tool:end",
            "toolName": f"t {v}",
            "toolCallId": "1",
            "outcome": "ok",
            "durationMs": 1,
        },
        {
            "spanId": "s0",
            "type": "budget:update",
            "spentUsd": 0.1,
            "remainingUsd": 1.0,
            "committedReserveUsd": 0,
            "note": v,
            PLANT: 1,
            f"\x1b[2J{PLANT}": "k",
            f"\n{PLANT}": 2,
            host: 3,
            HOST_SECRETS[1]: 5,  # identifier-like, but the host pattern matches it: dropped
        },
        {"spanId": "s0", "type": "custom:thing", "detail": f"{v} {host}", PLANT: "x", f"x\\n{PLANT}": 1},
        {
            "spanId": "s2",
            "parentSpanId": "s1",
            "type": "agent:end",
            "agentType": f"agent {v} {host}",
            "status": "ok",
            "usage": {"inputTokens": 4, "outputTokens": 2},
            "costUsd": 0.01,
        },
        {"spanId": "s1", "parentSpanId": "s0", "type": "phase:end", "phase": f"ph {v} {host}"},
        {
            "spanId": "s0",
            "type": "run:end",
            "status": "ok",
            "totalUsd": 0.01,
            "childStatusCounts": {v: 1, f"\n{PLANT}": 2, f"\x1b[31m{PLANT}": 3, host: 4},
            "degradedReasons": [v, f"\u202e{PLANT}", host],
            "salvagedPartialChildren": [v],
            "salvagedTerminalOutputChildren": [{"id": v}],
            "acceptanceChildren": [{"name": v, PLANT: host}],
        },
    ]
    return [{**base, "seq": i, "ts": f"2026-01-01T00:00:{i:02d}.000Z", **row} for i, row in enumerate(rows)]


def _jsonl(events: list[dict[str, Any]]) -> str:
    """JSONL with every character of each planted key \\u-escaped (the unicode-escaped variant)."""
    escaped = "".join(f"\\u{ord(c):04x}" for c in "Planted7")
    return "".join(json.dumps(e).replace("Planted7", escaped) + "\n" for e in events)


def _assert_clean(where: str, output: str | bytes) -> None:
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    found = [fragment for fragment in _FRAGMENTS if fragment in text]
    assert found == [], f"{where} leaks {found}"
    if isinstance(output, bytes) and not where.startswith("OTLP/JSON"):
        return  # protobuf: ids and lengths are arbitrary bytes; its strings are checked above
    assert "\x1b" not in text and "\u202e" not in text and "\u2028" not in text, f"{where} has controls"


@pytest.fixture(params=sorted(VARIANTS))
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "hostile.jsonl"
    text = _jsonl(_hostile_stream(VARIANTS[request.param]))
    assert "Planted7" not in text  # the file itself carries the key only \u-escaped
    path.write_text(text, encoding="utf-8")
    return path


def _pattern_args() -> list[str]:
    return [arg for pattern in HOST_PATTERNS for arg in ("--pattern", pattern)]


def test_otlp_bytes_from_the_api(hostile: Path) -> None:
    events = [json.loads(line) for line in hostile.read_text().splitlines()]
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    asyncio.run(to_otel(handle_from_events(events, None), tp.get_tracer("t"), patterns=HOST_PATTERNS))
    spans = exporter.get_finished_spans()
    payload = encode_spans(spans).SerializeToString()
    assert b"[masked-secret]" in payload
    _assert_clean("OTLP protobuf", payload)
    keys = {key for span in spans for event in span.events for key in (event.attributes or {})}
    assert "rulvar.event.spent_usd" in keys  # the allow-listed facts still export
    assert not [key for key in keys if key.endswith((".detail", ".note"))]  # unlisted fields do not
    assert all(key.startswith(("rulvar.", "gen_ai.")) or "." in key for key in keys)


def test_cli_file_tree_and_progress(hostile: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.otlp.jsonl"
    args = ["export", str(hostile), "--out", str(out), "--tree", "--progress", "lines", *_pattern_args()]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "[masked-secret]" in result.stdout and "[masked-secret]" in result.stderr
    _assert_clean("OTLP/JSON file", out.read_bytes())
    _assert_clean("span tree", result.stdout)
    _assert_clean("progress and summary", result.stderr)


def test_otlp_http_body(hostile: Path) -> None:
    with HttpTraceReceiver() as receiver:
        args = ["export", str(hostile), "--endpoint", receiver.endpoint, "--protocol", "http/protobuf"]
        result = CliRunner().invoke(
            app, [*args, "--progress", "off", *_pattern_args()], catch_exceptions=False
        )
        assert result.exit_code == 0, result.stderr
        bodies = [request.SerializeToString() for request in receiver.requests]
    assert bodies and any(b"[masked-secret]" in body for body in bodies)
    for body in bodies:
        _assert_clean("OTLP/HTTP body", body)
    _assert_clean("CLI stderr", result.stderr)


@pytest.mark.parametrize("as_json", [False, True])
def test_inspect_text_and_json(hostile: Path, as_json: bool) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = run_inspect(str(hostile), as_json=as_json, patterns=list(HOST_PATTERNS), out=out, err=err)
    assert code == 0, err.getvalue()
    assert "[masked-secret]" in out.getvalue()
    _assert_clean("inspect --json" if as_json else "inspect", out.getvalue() + err.getvalue())


def test_metric_labels_and_prometheus_scrape(hostile: Path) -> None:
    events = [json.loads(line) for line in hostile.read_text().splitlines()]
    pipeline = build_meter_provider(MetricsSetup(prometheus_port=0))
    try:
        reader = InMemoryMetricReader()
        meter = MeterProvider(metric_readers=[reader]).get_meter("leaks")
        for m in (meter, pipeline.meter):
            tp = TracerProvider()
            handle = handle_from_events(events, None)
            asyncio.run(to_otel(handle, tp.get_tracer("t"), patterns=HOST_PATTERNS, meter=m))
        scrape = httpx.get(f"http://127.0.0.1:{pipeline.prometheus_port}/metrics", timeout=5).text
    finally:
        pipeline.shutdown()
    data = reader.get_metrics_data()
    assert data is not None
    labels = [
        str(value)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        for point in metric.data.data_points
        for value in (point.attributes or {}).values()
    ]
    assert any("[masked-secret]" in label for label in labels)
    _assert_clean("metric labels", "\n".join(labels))
    assert "[masked-secret]" in scrape
    _assert_clean("Prometheus /metrics", scrape)


# --- text that reaches the terminal from elsewhere --------------------------------------------


def test_library_log_records_and_endpoint_userinfo_reach_stderr_masked(tmp_path: Path) -> None:
    stream = tmp_path / "s.jsonl"
    stream.write_text(_jsonl(_hostile_stream("plain")), encoding="utf-8")
    with HttpTraceReceiver() as receiver:
        endpoint = receiver.endpoint.replace("://", "://admin:pa55w0rd@")
        env = {
            **os.environ,
            # OpenTelemetry's own logger warns about this entry and quotes it (key and ESC bytes).
            "OTEL_EXPORTER_OTLP_HEADERS": f"\x1b[31m{PLANT}\x1b[0m,x-ok=1",
        }
        code = "import sys; from rulvar_otel.cli import main; sys.argv[0] = 'rulvar-otel'; main()"
        args = [
            "export",
            str(stream),
            "--endpoint",
            endpoint,
            "--protocol",
            "http/protobuf",
            "--progress",
            "off",
        ]
        done = subprocess.run(
            [sys.executable, "-c", code, *args, *_pattern_args()],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert receiver.requests
    assert done.returncode == 0, done.stderr
    # The library did log; during an export its records are collected and printed once, cleaned.
    assert "OpenTelemetry SDK: Header format invalid" in done.stderr, done.stderr
    assert "http://[redacted]@127.0.0.1" in done.stderr  # the endpoint is printed, redacted
    assert "pa55w0rd" not in done.stderr and "admin:" not in done.stderr
    _assert_clean("CLI stderr", done.stderr)


@pytest.mark.parametrize(
    "corrupt",
    [
        {"seq": f"x {PLANT}", "kind": "k", "ts": "t"},  # a field of the wrong type: pydantic quotes it
        {"seq": 1, "kind": {PLANT: 1}, "ts": "t"},
        f'{{"seq": 1, "kind": "{PLANT}" oops}}',  # not JSON
    ],
)
def test_a_corrupt_journal_line_is_reported_without_its_content(tmp_path: Path, corrupt: Any) -> None:
    from rulvar_otel.engine.journal import JsonlJournalStore
    from rulvar_otel.errors import SourceError

    good = json.dumps({"seq": 2, "kind": "k", "ts": "t"})
    line = corrupt if isinstance(corrupt, str) else json.dumps(corrupt)
    (tmp_path / "run1.jsonl").write_text(f"{line}\n{good}\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"run1\.jsonl:1: not a journal entry") as info:
        JsonlJournalStore(tmp_path).load("run1")
    assert "Planted7" not in str(info.value) and info.value.__cause__ is None


_GLUE = st.sampled_from(["", " ", "\n", "\x1b[31m", "\x9b", "\u202e", "\u200b", "\\n", "\\u001b[2J", "."])
_PLANTED_TEXT = st.builds(lambda a, b: f"{a}{PLANT}{b}", _GLUE, _GLUE)
_ANY_TEXT = st.text(max_size=12) | _PLANTED_TEXT


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_ANY_TEXT, _ANY_TEXT | st.integers() | st.lists(_ANY_TEXT, max_size=3), max_size=6),
    st.dictionaries(_ANY_TEXT, st.integers() | _ANY_TEXT, max_size=4),
)
def test_no_key_survives_attribute_extraction(payload: dict[str, Any], counts: dict[str, Any]) -> None:
    from rulvar_otel.otel import _attributes as ax

    mask = default_masker().clean
    event = {"type": "custom:thing", "seq": 1, **payload}
    closing = {"type": "run:end", "childStatusCounts": counts, "degradedReasons": list(counts)}
    for attrs in (ax.event_attributes(event, mask), ax.run_close_attributes(closing, mask)):
        for key, value in attrs.items():
            assert "Planted7" not in key and "planted7" not in key
            assert "Planted7" not in str(value)
