"""The JSONL source: wire dicts out, malformed lines as line-numbered diagnostics, --strict."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rulvar_otel.errors import SourceError, StreamLineError
from rulvar_otel.sources import (
    JsonlEventSource,
    check_envelope,
    handle_from_jsonl,
    open_jsonl,
    read_jsonl_events,
)
from rulvar_otel.sources.jsonl import MAX_KEPT_ERRORS
from tests._support import STREAMS, events


def event(seq: int, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "runId": "r1",
        "seq": seq,
        "ts": "2026-01-01T00:00:00.000Z",
        "spanId": "s0",
        "type": "log",
    }
    base.update(extra)
    return base


def lines_of(*items: Any) -> bytes:
    out = []
    for item in items:
        out.append(item if isinstance(item, bytes) else json.dumps(item).encode())
    return b"\n".join(out) + b"\n"


def test_every_fixture_stream_reads_whole_and_as_recorded() -> None:
    for path in sorted(STREAMS.glob("*.jsonl")):
        got, errors = read_jsonl_events(path)
        assert errors == []
        assert got == events(path.stem), path.name
        assert all(type(e) is dict for e in got)


def test_malformed_lines_are_line_numbered_and_skipped() -> None:
    data = lines_of(
        event(0),  # 1
        b"{not json",  # 2
        b"",  # 3: blank, ignored
        [1, 2],  # 4
        {**event(1), "seq": "1"},  # 5
        {"runId": "r1", "seq": 2, "ts": "t", "type": "log"},  # 6: no spanId
        event(3),  # 7
        b"   \t",  # 8: whitespace only, ignored
        event(4, replayed="yes"),  # 9
        {**event(5), "seq": True},  # 10
        event(6, parentSpanId=7),  # 11
        "a string",  # 12
        event(7),  # 13
    )
    seen: list[StreamLineError] = []
    src = JsonlEventSource(io.BytesIO(data), on_error=seen.append, name="run.jsonl")
    got = list(src)
    assert [e["seq"] for e in got] == [0, 3, 7]
    assert [e.line_number for e in src.errors] == [2, 4, 5, 6, 9, 10, 11, 12]
    assert seen == src.errors
    assert src.error_count == 8
    assert src.events_read == 3
    reasons = {e.line_number: e.reason for e in src.errors}
    assert reasons[2].startswith("invalid JSON")
    assert reasons[4] == "expected a JSON object, got array"
    assert reasons[5] == "envelope field 'seq' must be an integer, got string"
    assert reasons[6] == "missing envelope field 'spanId'"
    assert reasons[9] == "envelope field 'replayed' must be a boolean when present, got string"
    assert reasons[10] == "envelope field 'seq' must be an integer, got boolean"
    assert reasons[11] == "envelope field 'parentSpanId' must be a string when present, got number"
    assert reasons[12] == "expected a JSON object, got string"
    assert str(src.errors[0]).startswith("run.jsonl:2: invalid JSON")


def test_diagnostics_never_echo_the_line() -> None:
    secret = "sk-ant-REALLYSECRETKEYVALUE0123456789"
    data = lines_of(
        ("{" + secret).encode(), event(0, ts=secret.__len__()), {"runId": secret, "seq": 1, "ts": 2}
    )
    _, errors = read_jsonl_events(io.BytesIO(data))
    assert len(errors) == 3
    for error in errors:
        assert secret not in str(error)
        assert "sk-" not in str(error)


def test_numeric_ts_is_a_mistyped_envelope() -> None:
    assert check_envelope(event(0, ts=1700000000000)) == (
        "envelope field 'ts' must be a string (ISO-8601 timestamp), got number"
    )
    assert check_envelope(event(0)) is None
    assert check_envelope(event(0, parentSpanId=None, replayed=None)) is None


def test_strict_raises_the_first_malformed_line() -> None:
    data = lines_of(event(0), event(1), b"oops", event(2), b"[]")
    src = JsonlEventSource(io.BytesIO(data), strict=True, name="s.jsonl")
    got: list[dict[str, Any]] = []
    with pytest.raises(StreamLineError) as info:
        got.extend(src)
    assert info.value.line_number == 3
    assert info.value.source == "s.jsonl"
    assert [e["seq"] for e in got] == [0, 1]


def test_text_streams_and_crlf_lines_read_too() -> None:
    text = "\r\n".join(json.dumps(event(i)) for i in range(3)) + "\r\n"
    got, errors = read_jsonl_events(io.StringIO(text))
    assert errors == [] and [e["seq"] for e in got] == [0, 1, 2]


def test_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(lines_of(event(0), b"bad", event(1))))
    monkeypatch.setattr(sys, "stdin", stdin)
    src = open_jsonl("-")
    assert [e["seq"] for e in src] == [0, 1]
    assert src.name == "<stdin>"
    (error,) = src.errors
    assert error.line_number == 2 and error.source == "<stdin>"
    assert error.reason.startswith("invalid JSON")


def test_unreadable_paths_are_source_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        JsonlEventSource(tmp_path / "absent.jsonl")
    with pytest.raises(SourceError, match="directory"):
        JsonlEventSource(tmp_path)


def test_a_source_iterates_once_and_closes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(lines_of(event(0)))
    src = JsonlEventSource(path)
    assert len(list(src)) == 1
    assert src._owned is None  # closed once drained
    with pytest.raises(SourceError, match="only once"):
        iter(src)


def test_kept_diagnostics_are_bounded_but_all_are_counted() -> None:
    data = b"x\n" * (MAX_KEPT_ERRORS + 5)
    calls: list[int] = []
    src = JsonlEventSource(io.BytesIO(data), on_error=lambda e: calls.append(e.line_number))
    assert list(src) == []
    assert len(src.errors) == MAX_KEPT_ERRORS
    assert src.error_count == MAX_KEPT_ERRORS + 5
    assert calls == list(range(1, MAX_KEPT_ERRORS + 6))


async def test_handle_from_jsonl_reads_lazily_and_derives_the_result(tmp_path: Path) -> None:
    handle = handle_from_jsonl(STREAMS / "tools.jsonl")
    assert handle.run_id == events("tools")[0]["runId"]
    seen = [e async for e in handle.events]
    assert seen == events("tools")
    result = await handle.result
    assert result.status == "ok"


_valid = st.builds(
    event,
    st.integers(min_value=0, max_value=2**40),
    msg=st.text(max_size=20),
)
_garbage = st.one_of(
    st.binary(min_size=1, max_size=30).filter(
        lambda b: b.strip() != b"" and b"\n" not in b and b"\r" not in b
    ),
    st.builds(lambda v: json.dumps(v).encode(), st.one_of(st.integers(), st.lists(st.integers()), st.text())),
    st.builds(
        lambda e, k: json.dumps({key: val for key, val in e.items() if key != k}).encode(),
        _valid,
        st.sampled_from(["runId", "seq", "ts", "spanId", "type"]),
    ),
    st.builds(
        lambda e, k, v: json.dumps({**e, k: v}).encode(),
        _valid,
        st.sampled_from(["runId", "seq", "ts", "spanId", "type"]),
        st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=2)),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(st.tuples(st.just(True), _valid), st.tuples(st.just(False), _garbage)), max_size=25)
)
def test_valid_lines_pass_in_order_and_every_other_line_is_reported(
    items: list[tuple[bool, Any]],
) -> None:
    raw: list[bytes] = []
    expected_events: list[dict[str, Any]] = []
    expected_errors: list[int] = []
    for number, (valid, item) in enumerate(items, start=1):
        if valid:
            raw.append(orjson.dumps(item))
            expected_events.append(item)
        else:
            raw.append(item)
            expected_errors.append(number)
    data = b"\n".join(raw) + b"\n"
    got, errors = read_jsonl_events(io.BytesIO(data))
    # A float-typed seq like 3.0 is still a mistyped seq; a garbage line may happen to be a valid
    # event only if it is one, so re-check such lines with the envelope rule itself.
    accidental = [n for n in expected_errors if _is_event(raw[n - 1])]
    assert [e.line_number for e in errors] == [n for n in expected_errors if n not in accidental]
    assert len(got) == len(expected_events) + len(accidental)
    if not accidental:
        assert got == expected_events


def _is_event(line: bytes) -> bool:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and check_envelope(obj) is None


def _bom_stream() -> bytes:
    return b"\xef\xbb\xbf" + lines_of(event(0, type="run:start", workflow="w", resumed=False), event(1))


def test_a_byte_order_mark_on_line_1_is_stripped_in_every_mode(tmp_path: Path) -> None:
    data = _bom_stream()
    path = tmp_path / "bom.jsonl"
    path.write_bytes(data)
    expected = [0, 1]
    for source in (
        path,
        io.BytesIO(data),
        io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"),
        io.StringIO(data.decode("utf-8")),
    ):
        got, problems = read_jsonl_events(source)  # type: ignore[arg-type]
        assert [e["seq"] for e in got] == expected and problems == [], source
        assert got[0]["type"] == "run:start"


def test_a_byte_order_mark_is_only_stripped_on_line_1() -> None:
    data = lines_of(event(0)) + b"\xef\xbb\xbf" + lines_of(event(1))
    got, problems = read_jsonl_events(io.BytesIO(data))
    assert [e["seq"] for e in got] == [0]
    assert [(p.line_number, p.reason) for p in problems] == [
        (2, "invalid JSON (UTF-8 byte order mark (BOM) is not supported)")
    ]


def test_a_text_stream_with_a_bad_utf8_byte_behaves_like_a_path(tmp_path: Path) -> None:
    good = [event(i) for i in range(4)]
    data = lines_of(good[0], good[1]) + b'{"bad": "\xff"}\n' + lines_of(good[2], good[3])
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    from_path, path_problems = read_jsonl_events(path)
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    from_text, text_problems = read_jsonl_events(text)
    assert from_text == from_path == good
    assert [(p.line_number, p.reason) for p in text_problems] == [
        (p.line_number, p.reason) for p in path_problems
    ]
    assert [p.line_number for p in text_problems] == [3]
    assert text.errors == "strict"  # the caller's stream is given back as it came


def test_a_text_stream_with_a_bad_utf8_byte_exports_through_the_api(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from rulvar_otel.otel import export_events

    stream = (STREAMS / "tools.jsonl").read_bytes().splitlines(keepends=True)
    data = b"".join(stream[:3]) + b"\xfe\xff garbage\n" + b"".join(stream[3:])
    events_, problems = read_jsonl_events(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    assert events_ == events("tools") and [p.line_number for p in problems] == [4]
    assert export_events(events_, TracerProvider().get_tracer("t")) > 0


def test_the_cli_exports_a_stream_with_a_byte_order_mark_whole(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rulvar_otel.cli import app

    stream = tmp_path / "bom.jsonl"
    stream.write_bytes(b"\xef\xbb\xbf" + (STREAMS / "minimal.jsonl").read_bytes())
    out = tmp_path / "spans.jsonl"
    result = CliRunner().invoke(
        app, ["export", str(stream), "--out", str(out), "--progress", "off", "--no-tree"]
    )
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.stderr and "line 1" not in result.stderr
    names = [
        span["name"]
        for line in out.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    assert "run review" in names  # line 1, the run:start, was kept
