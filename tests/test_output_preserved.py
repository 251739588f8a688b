"""A failed run never destroys earlier output, and only a real export says "exported".

The file destination is written under a temporary name beside the target and renamed over it only
when the export succeeded: bad input (exit 2), a server that cannot be followed, an unknown run
or a destination failure leave an earlier file exactly as it was (content and mtime) and leave
no temporary file behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.export import ExportOptions, FailureKind, export_run
from tests._support import STREAMS, events, run_cli, serve_in_thread, served

pytestmark = pytest.mark.usefixtures("otel_env_cleared")

DEFAULT_FILE = "rulvar-traces.otlp.jsonl"
EARLIER = b'{"resourceSpans": []}\n'


def _earlier_output(path: Path) -> tuple[bytes, int]:
    path.write_bytes(EARLIER)
    # An old mtime: a rewrite with identical bytes would still show.
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    return path.read_bytes(), path.stat().st_mtime_ns


def _untouched(path: Path, before: tuple[bytes, int]) -> None:
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    leftovers = [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    assert leftovers == [], "a temporary file was left behind"


def test_bad_input_on_stdin_exits_2_and_keeps_the_earlier_default_file(tmp_path: Path) -> None:
    target = tmp_path / DEFAULT_FILE
    before = _earlier_output(target)
    code, out, err = run_cli("export", "-", "--progress", "off", stdin=b"not json\n")
    assert code == 2
    assert "the stream held no events" in err
    assert "exported" not in err and out == ""
    _untouched(target, before)


def test_a_stream_that_fails_midway_keeps_the_earlier_file(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    before = _earlier_output(target)
    lines = (STREAMS / "tools.jsonl").read_bytes().splitlines(keepends=True)
    stream = tmp_path / "broken.jsonl"
    # Valid events, then bytes that are not UTF-8 in strict mode: the reader fails midway.
    stream.write_bytes(b"".join(lines[:10]) + b"{broken\n")
    code, _, err = run_cli("export", str(stream), "--strict", "--out", str(target), "--progress", "off")
    assert code == 2 and "exported" not in err
    _untouched(target, before)


def test_a_successful_export_replaces_the_earlier_file(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    before = _earlier_output(target)
    code, _, err = run_cli("export", str(STREAMS / "tools.jsonl"), "--out", str(target), "--progress", "off")
    assert code == 0, err
    assert target.read_bytes() != before[0] and target.stat().st_mtime_ns != before[1]
    assert f"to file {target}" in err
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_tail_of_an_unknown_run_exits_2_and_creates_no_file(tmp_path: Path) -> None:
    target = tmp_path / DEFAULT_FILE
    with serve_in_thread({}) as server:
        code, _, err = run_cli("tail", "--server", server.url, "--run", "missing", "--max-attempts", "2")
    assert code == 2 and "not found" in err
    assert "exported" not in err
    assert list(tmp_path.iterdir()) == []
    assert not target.exists()


def test_tail_of_an_unknown_run_keeps_the_earlier_file(tmp_path: Path) -> None:
    target = tmp_path / DEFAULT_FILE
    before = _earlier_output(target)
    with serve_in_thread({}) as server:
        code, _, err = run_cli("tail", "--server", server.url, "--run", "missing", "--max-attempts", "2")
    assert code == 2 and "exported" not in err
    _untouched(target, before)


def test_tail_that_cannot_connect_keeps_the_earlier_file(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = tmp_path / DEFAULT_FILE
    before = _earlier_output(target)
    code, _, err = run_cli(
        "tail",
        "--server",
        f"http://127.0.0.1:{port}",
        "--run",
        "r",
        "--max-attempts",
        "1",
        "--progress",
        "off",
    )
    assert code == 2, err
    assert "exported" not in err
    _untouched(target, before)


def test_tail_that_succeeds_writes_the_file(tmp_path: Path) -> None:
    run_id, run = served("minimal")
    with serve_in_thread({run_id: run}) as server:
        code, _, err = run_cli(
            "tail", "--server", server.url, "--run", run_id, "--progress", "off", "--no-tree"
        )
    assert code == 0, err
    assert (tmp_path / DEFAULT_FILE).stat().st_size > 0 and "exported" in err


def test_the_library_reports_without_writing_when_the_input_fails(tmp_path: Path) -> None:
    target = tmp_path / "lib.jsonl"
    before = _earlier_output(target)

    def failing():  # type: ignore[no-untyped-def]
        yield from events("tools")[:5]
        raise OSError(5, "Input/output error")

    report = export_run(handle_from_events(failing()), ExportOptions(out=target))
    assert report.failed(FailureKind.INPUT)
    assert "Input/output error" in report.failures[0].message
    assert report.delivery is not None and report.delivery.written == ()
    _untouched(target, before)


def test_a_device_target_is_written_in_place_never_replaced() -> None:
    # /dev/full refuses every write: the export fails (exit 1) and the device node stays a device.
    import stat

    report = export_run(handle_from_events(events("minimal")), ExportOptions(out=Path("/dev/full")))
    assert report.failed(FailureKind.DELIVERY)
    assert stat.S_ISCHR(Path("/dev/full").stat().st_mode)
