"""``--out`` to something other than a regular file is written in place or refused, never renamed over.

A regular file is replaced atomically (tests/test_output_preserved.py); a link to one keeps the
link. A descriptor link (``/dev/stdout`` is one), a device, or a FIFO with a reader is written in
place; a FIFO nobody reads, a directory, or the very stream being read is refused with exit 2.
Every path here lives in a temporary directory: the real ``/dev/stdout`` is never a target.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from rulvar_otel.errors import ConfigError
from rulvar_otel.export import OtlpJsonFileExporter
from tests._support import STREAMS, otlp_file_spans, rulvar_otel_command, run_cli

pytestmark = pytest.mark.usefixtures("otel_env_cleared")

STREAM = str(STREAMS / "minimal.jsonl")
SPANS = 4  # in the minimal stream
EARLIER = b'{"resourceSpans": []}\n'
TIMEOUT_S = 30


def _cli(
    *args: str, stdin: bytes | None = None, stdout: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The installed command in a child process (its own descriptors 0 and 1), bounded in time."""
    with open(stdout, "wb") if stdout is not None else open(os.devnull, "wb") as out:
        return subprocess.run(
            [rulvar_otel_command(), *args, "--progress", "off"],
            input=stdin if stdin is not None else b"",
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT_S,
            check=False,
        )


def _no_temporaries(directory: Path) -> None:
    assert [p.name for p in directory.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("hops", [1, 3])
def test_a_link_to_the_childs_stdout_is_written_through_and_stays_a_link(tmp_path: Path, hops: int) -> None:
    # The child's stdout is a file of ours: the link reaches it the way /dev/stdout would.
    captured = tmp_path / "captured.jsonl"
    target = Path("/proc/self/fd/1")
    for hop in range(hops):
        link = tmp_path / f"stdout-{hop}"
        link.symlink_to(target)
        target = link
    result = _cli("export", STREAM, "--out", str(target), stdout=captured)
    assert result.returncode == 0, result.stderr
    assert target.is_symlink() and os.readlink(tmp_path / "stdout-0") == "/proc/self/fd/1"
    assert len(otlp_file_spans(captured)) == SPANS
    _no_temporaries(tmp_path)


def test_a_link_to_a_file_given_as_stdout_with_earlier_content_keeps_it(tmp_path: Path) -> None:
    # `>> file` style: what the file held stays, the spans come after it.
    captured = tmp_path / "captured.jsonl"
    captured.write_bytes(EARLIER)
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    with open(captured, "ab") as out:
        result = subprocess.run(
            [rulvar_otel_command(), "export", STREAM, "--out", str(link), "--progress", "off"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT_S,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert captured.read_bytes().startswith(EARLIER)
    assert len(otlp_file_spans(captured)) == SPANS


@pytest.mark.parametrize("via", ["/proc/self/fd/0", "/dev/stdin"])
def test_out_naming_the_piped_stdin_being_read_is_refused_not_hung(tmp_path: Path, via: str) -> None:
    link = tmp_path / "stdin"
    link.symlink_to(via)
    result = _cli("export", "-", "--out", str(link), stdin=Path(STREAM).read_bytes())
    assert result.returncode == 2
    assert f"the output file {link} is the input stream" in result.stderr.decode()
    assert link.is_symlink()


def test_a_demo_writing_into_its_own_piped_stdin_is_refused_not_hung(tmp_path: Path) -> None:
    link = tmp_path / "stdin"
    link.symlink_to("/proc/self/fd/0")
    result = _cli("demo", "--out", str(link), stdin=b"")
    assert result.returncode == 2
    assert f"cannot write {link}: it is this process's own standard input" in result.stderr.decode()


def test_a_fifo_nobody_reads_is_refused_at_once_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "spans.fifo"
    os.mkfifo(fifo)
    result = _cli("export", STREAM, "--out", str(fifo))  # bounded: the old code blocked forever here
    assert result.returncode == 2
    assert f"cannot write {fifo}: no process is reading it" in result.stderr.decode()
    assert b"exported" not in result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _no_temporaries(tmp_path)


def test_a_fifo_with_a_reader_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "spans.fifo"
    os.mkfifo(fifo)
    received = tmp_path / "received.jsonl"

    def read() -> None:
        with open(fifo, "rb") as pipe:  # opens once a writer does; reads to the last writer's close
            received.write_bytes(pipe.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # A blocking open for writing returns once the reader has the FIFO open: only then does the
    # export's own (non-blocking) open find a reader.
    held = os.open(fifo, os.O_WRONLY)
    code, _, err = run_cli("export", STREAM, "--out", str(fifo), "--progress", "off")
    os.close(held)
    reader.join(TIMEOUT_S)
    assert code == 0, err
    assert len(otlp_file_spans(received)) == SPANS
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _no_temporaries(tmp_path)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_link_to_a_character_device_is_written_through_and_both_stay(tmp_path: Path, device: str) -> None:
    link = tmp_path / "sink"
    link.symlink_to(device)
    code, _, err = run_cli("export", STREAM, "--out", str(link), "--progress", "off")
    assert code == 0, err
    assert f"exported {SPANS} spans" in err
    assert link.is_symlink() and os.readlink(link) == device
    assert stat.S_ISCHR(os.stat(device).st_mode)
    _no_temporaries(tmp_path)


def test_a_link_to_a_regular_file_replaces_the_file_and_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "data" / "spans.jsonl"
    real.parent.mkdir()
    real.write_bytes(EARLIER)
    link = tmp_path / "spans-link.jsonl"
    link.symlink_to(real)
    code, _, err = run_cli("export", STREAM, "--out", str(link), "--progress", "off")
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real
    assert len(otlp_file_spans(real)) == SPANS
    _no_temporaries(real.parent)
    _no_temporaries(tmp_path)


def test_a_failed_export_through_a_link_keeps_the_linked_files_earlier_content(tmp_path: Path) -> None:
    real = tmp_path / "spans.jsonl"
    real.write_bytes(EARLIER)
    link = tmp_path / "spans-link.jsonl"
    link.symlink_to(real)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(Path(STREAM).read_bytes() + b"{broken\n")
    code, _, _ = run_cli("export", str(bad), "--strict", "--out", str(link), "--progress", "off")
    assert code == 2
    assert real.read_bytes() == EARLIER and link.is_symlink()
    _no_temporaries(tmp_path)


def test_a_directory_target_is_refused_naming_it(tmp_path: Path) -> None:
    directory = tmp_path / "out"
    directory.mkdir()
    code, _, err = run_cli("export", STREAM, "--out", str(directory), "--progress", "off")
    assert code == 2
    assert f"cannot write {directory}: Is a directory" in err
    assert directory.is_dir() and list(directory.iterdir()) == []


def test_the_library_exporter_refuses_a_fifo_nobody_reads_with_a_config_error(tmp_path: Path) -> None:
    fifo = tmp_path / "spans.fifo"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def build() -> None:
        for atomic in (True, False):
            try:
                OtlpJsonFileExporter(fifo, atomic=atomic)
            except ConfigError as exc:
                errors.append(exc)

    # On a thread: an open that blocks (waiting for a reader) fails the test instead of hanging it.
    builder = threading.Thread(target=build, daemon=True)
    builder.start()
    builder.join(TIMEOUT_S)
    assert not builder.is_alive(), "building the exporter blocked on the FIFO"
    assert len(errors) == 2 and all("no process is reading it" in str(e) for e in errors)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_out_to_stdout_prints_no_tree_there_and_an_explicit_tree_is_refused(tmp_path: Path) -> None:
    captured = tmp_path / "captured.jsonl"
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    result = _cli("export", STREAM, "--out", str(link), stdout=captured)
    assert result.returncode == 0, result.stderr
    assert all(line.startswith(b'{"resourceSpans"') for line in captured.read_bytes().splitlines())
    result = _cli("export", STREAM, "--out", str(link), "--tree", stdout=captured)
    assert result.returncode == 2
    assert (
        f"--tree prints on stdout, which --out {link} already writes the spans to" in result.stderr.decode()
    )
