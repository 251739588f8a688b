"""``export --strict``: every line checked before any span, and the stream never held in memory.

A file is checked, then read again; stdin or a pipe is copied to a temporary file while it is
checked. Memory is measured with tracemalloc (allocation counts, not time), on generated streams
many times larger than what the reader may hold.
"""

from __future__ import annotations

import io
import json
import os
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rulvar_otel.cli._common import EXIT_OK, EXIT_USAGE
from rulvar_otel.errors import StreamLineError
from rulvar_otel.sources import JsonlEventSource
from rulvar_otel.sources import jsonl as jsonl_module
from tests._support import STREAMS, otlp_file_spans, run_cli

pytestmark = pytest.mark.usefixtures("otel_env_cleared")

# Payload that makes one generated line about 300 bytes (a decoded line costs several times that).
_FILLER = "x" * 200


def _line(seq: int) -> bytes:
    event = {
        "runId": "big",
        "seq": seq,
        "ts": "2026-01-01T00:00:00.000Z",
        "spanId": "s0",
        "type": "log",
        "message": _FILLER,
    }
    return json.dumps(event).encode() + b"\n"


def _big_stream(path: Path, lines: int, *, bad_at: int | None = None) -> int:
    """Write ``lines`` well-formed event lines (line ``bad_at`` malformed); the file's size."""
    with path.open("wb") as out:
        for number in range(1, lines + 1):
            out.write(b"{oops\n" if number == bad_at else _line(number))
    return path.stat().st_size


def _peak_bytes_while(action: Any) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class _Pipe(io.RawIOBase):
    """An unseekable byte stream generated on the fly (what a pipe looks like to the reader)."""

    def __init__(self, lines: int, bad_at: int | None = None) -> None:
        super().__init__()
        self._lines: Iterator[bytes] = (b"{oops\n" if n == bad_at else _line(n) for n in range(1, lines + 1))
        self._pending = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        while len(self._pending) < len(buffer):
            line = next(self._lines, None)
            if line is None:
                break
            self._pending += line
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


# --- the command --------------------------------------------------------------------------------


def test_a_late_malformed_line_exports_nothing_and_leaves_the_earlier_file(tmp_path: Path) -> None:
    lines = 20_000
    stream = tmp_path / "big.jsonl"
    _big_stream(stream, lines, bad_at=lines - 1)
    out = tmp_path / "traces.jsonl"
    out.write_bytes(b"earlier export\n")
    os.utime(out, (1_000_000_000, 1_000_000_000))

    code, stdout, err = run_cli("export", str(stream), "--strict", "--out", str(out), "--progress", "off")

    assert code == EXIT_USAGE
    assert f"error: {stream}:{lines - 1}: invalid JSON" in err
    assert "exported" not in err and stdout == ""
    assert out.read_bytes() == b"earlier export\n"
    assert out.stat().st_mtime == 1_000_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.jsonl", "traces.jsonl"]  # no temporary file


def test_a_malformed_line_on_stdin_exports_nothing(tmp_path: Path) -> None:
    good = (STREAMS / "tools.jsonl").read_bytes()
    bad_line = good.count(b"\n") + 1
    out = tmp_path / "traces.jsonl"
    out.write_bytes(b"earlier export\n")
    code, _, err = run_cli(
        "export", "-", "--strict", "--out", str(out), "--progress", "off", stdin=good + b"[1]\n" + good
    )
    assert code == EXIT_USAGE
    assert f"error: <stdin>:{bad_line}: expected a JSON object, got array" in err
    assert out.read_bytes() == b"earlier export\n"


@pytest.mark.parametrize("via", ["file", "stdin", "named pipe"])
def test_strict_and_loose_export_the_same_spans(tmp_path: Path, via: str) -> None:
    stream = STREAMS / "tools.jsonl"
    loose = tmp_path / "loose.jsonl"
    code, _, err = run_cli("export", str(stream), "--out", str(loose), "--progress", "off", "--no-tree")
    assert code == EXIT_OK, err

    strict = tmp_path / "strict.jsonl"
    args = ["--strict", "--out", str(strict), "--progress", "off", "--no-tree"]
    if via == "file":
        code, _, err = run_cli("export", str(stream), *args)
    elif via == "stdin":
        code, _, err = run_cli("export", "-", *args, stdin=stream.read_bytes())
    else:
        fifo = tmp_path / "stream.fifo"
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: fifo.write_bytes(stream.read_bytes()))
        writer.start()
        try:
            code, _, err = run_cli("export", str(fifo), *args)
        finally:
            writer.join()
    assert code == EXIT_OK, err
    assert "exported 17 spans" in err

    def shape(path: Path) -> list[tuple[str, str]]:
        return sorted((s.name, s.status.message) for s in otlp_file_spans(path))

    assert shape(strict) == shape(loose)
    assert len(otlp_file_spans(strict)) == 17


# --- the checked source, and what it holds ------------------------------------------------------


def test_checking_a_file_holds_no_events(tmp_path: Path) -> None:
    lines = 30_000
    stream = tmp_path / "big.jsonl"
    size = _big_stream(stream, lines)
    seen = 0

    def check_and_replay() -> None:
        nonlocal seen
        with JsonlEventSource.checked(stream) as source:
            for event in source:
                seen += 1
                assert event["seq"] == seen

    peak = _peak_bytes_while(check_and_replay)
    assert seen == lines
    # Holding the events would take several times the file's size; the reader holds a buffer.
    assert peak < size / 10, (peak, size)


def test_checking_a_file_that_fails_late_holds_no_events(tmp_path: Path) -> None:
    lines = 30_000
    stream = tmp_path / "big.jsonl"
    size = _big_stream(stream, lines, bad_at=lines)
    errors: list[StreamLineError] = []

    def check() -> None:
        try:
            JsonlEventSource.checked(stream)
        except StreamLineError as exc:
            errors.append(exc)

    peak = _peak_bytes_while(check)
    assert [(e.line_number, e.source) for e in errors] == [(lines, str(stream))]
    assert peak < size / 10, (peak, size)


def test_a_pipe_is_spooled_to_disk_beyond_the_memory_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_module, "SPOOL_MEMORY_BYTES", 256 * 1024)
    lines = 30_000
    size = lines * len(_line(lines))
    seen = 0

    def check_and_replay() -> None:
        nonlocal seen
        source = JsonlEventSource.checked(io.BufferedReader(_Pipe(lines)), name="pipe")
        with source:
            for event in source:
                seen += 1
                assert event["seq"] == seen

    peak = _peak_bytes_while(check_and_replay)
    assert seen == lines
    # At most the in-memory part of the spool (and its copy when it spills) plus read buffers.
    assert peak < size / 4, (peak, size)


def test_a_pipe_with_a_late_malformed_line_fails_before_any_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_module, "SPOOL_MEMORY_BYTES", 64 * 1024)
    with pytest.raises(StreamLineError) as info:
        JsonlEventSource.checked(io.BufferedReader(_Pipe(5_000, bad_at=4_999)), name="pipe")
    assert (info.value.line_number, info.value.source) == (4_999, "pipe")


def test_lines_appended_after_the_check_are_not_exported(tmp_path: Path) -> None:
    stream = tmp_path / "growing.jsonl"
    _big_stream(stream, 3)
    source = JsonlEventSource.checked(stream)
    with stream.open("ab") as more:
        more.write(b"not checked\n" + _line(4))
    with source:
        assert [e["seq"] for e in source] == [1, 2, 3]


def test_a_checked_source_closes_the_file_it_reads(tmp_path: Path) -> None:
    stream = tmp_path / "s.jsonl"
    _big_stream(stream, 2)
    source = JsonlEventSource.checked(stream)
    replay = source._owned
    assert replay is not None and not replay.closed
    assert len(list(source)) == 2
    assert replay.closed and source._owned is None
