"""The CLI against hostile I/O: closed stdin, a full stdout, Ctrl-C, busy ports, failing metrics.

Each case ends with a clear one-line message and its documented exit code, never a traceback.
These run the real console entry point in a subprocess where the case needs real file
descriptors or signals.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from tests._support import (
    STREAMS,
    GrpcAnswer,
    GrpcTraceReceiver,
    HostileGrpcReceiver,
    closed_port,
    default_sigint,
    otlp_file_spans,
)

pytestmark = [pytest.mark.usefixtures("otel_env_cleared"), pytest.mark.timeout(120)]

ENTRY = [sys.executable, "-c", "from rulvar_otel.cli import main; main()"]
SECRET = "sk-ant-PLANTEDSECRETVALUE0123456789abcdef"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def _spans(path: Path) -> int:
    return len(otlp_file_spans(path))


def test_closed_stdin_is_a_usage_error_without_a_traceback(tmp_path: Path) -> None:
    command = " ".join(f"'{part}'" for part in ENTRY) + " export - <&-"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert "stdin is closed" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_stdout_on_dev_full_fails_with_exit_1_and_a_message(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*ENTRY, "export", str(STREAMS / "tools.jsonl"), "--progress", "off"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=tmp_path,
        )
    assert done.returncode == 1, done.stderr
    assert "cannot write the span tree to stdout" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert _spans(tmp_path / "rulvar-traces.otlp.jsonl") == 17  # the export itself completed


def _start_blocked_export(tmp_path: Path, lines: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*ENTRY, "export", "-", "--progress", "lines", "--no-tree", "--out", str(tmp_path / "partial.jsonl")],
        stdin=subprocess.PIPE,
        preexec_fn=default_sigint,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    assert process.stdin is not None and process.stderr is not None
    stream = (STREAMS / "tools.jsonl").read_text(encoding="utf-8").splitlines()
    process.stdin.write("\n".join(stream[:lines]) + "\n")
    process.stdin.flush()  # and keep it open: the next read blocks
    return process


def _wait_for_line(process: subprocess.Popen[str], needle: str, timeout: float = 30) -> list[str]:
    assert process.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never appeared: {seen}")


def _communicate_or_dump(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """The process's remaining stderr; past ``timeout``, its threads' stacks (faulthandler) instead."""
    try:
        return process.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to stderr
        raise AssertionError(
            f"still running {timeout:g} s after Ctrl-C:\n{process.communicate()[1]}"
        ) from None


def test_one_ctrl_c_during_a_blocked_stdin_read_exports_what_was_read(tmp_path: Path) -> None:
    process = _start_blocked_export(tmp_path, lines=20)
    try:
        _wait_for_line(process, "tool search")  # the progress view saw events: they were read
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted; exported what was read" in err and "from 20 stream events" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert _spans(tmp_path / "partial.jsonl") > 0


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_a_prometheus_port_in_use_is_a_usage_error(busy_port: int, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["export", str(STREAMS / "tools.jsonl"), "--progress", "off", "--prometheus-port", str(busy_port)],
    )
    assert result.exit_code == 2
    assert f"cannot serve Prometheus metrics on 127.0.0.1:{busy_port}" in result.stderr
    assert "exported" not in result.stderr
    assert not (tmp_path / "rulvar-traces.otlp.jsonl").exists()


def test_prometheus_port_0_prints_the_port_it_bound_and_lingers_for_a_scrape(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            *ENTRY,
            "export",
            str(STREAMS / "tools.jsonl"),
            "--progress",
            "off",
            "--no-tree",
            "--prometheus-port",
            "0",
            "--prometheus-linger",
            "20",
        ],
        preexec_fn=default_sigint,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    try:
        seen = _wait_for_line(process, "keeping http://127.0.0.1:")
        serving = next(line for line in seen if "serving Prometheus metrics on" in line)
        url = serving.split("serving Prometheus metrics on ", 1)[1].strip()
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        assert port > 0
        body = httpx.get(url, timeout=5).text
        assert "rulvar_tool_calls_total" in body  # the run's final values, after the export
        process.send_signal(signal.SIGINT)  # Ctrl-C ends the linger early
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err  # the Ctrl-C is an interruption of the export
    assert "Traceback" not in err


def test_prometheus_host_is_the_address_the_endpoint_binds() -> None:
    result = CliRunner().invoke(
        app,
        [
            "export",
            str(STREAMS / "minimal.jsonl"),
            "--progress",
            "off",
            "--prometheus-port",
            "0",
            "--prometheus-host",
            "0.0.0.0",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("serving Prometheus metrics on http://0.0.0.0:") == 1


class _Status503(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def unavailable_http() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Status503)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def hanging_endpoint() -> Iterator[str]:
    with socket.socket() as sock:  # accepts connections (the backlog) and never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("case", ["refused", "unavailable", "hanging"])
def test_a_failing_metrics_endpoint_is_reported_and_exits_1(
    case: str, unavailable_http: str, hanging_endpoint: str, tmp_path: Path
) -> None:
    endpoint = {
        "refused": f"http://127.0.0.1:{closed_port()}",
        "unavailable": unavailable_http,
        "hanging": hanging_endpoint,
    }[case]
    started = time.monotonic()
    result = CliRunner().invoke(
        app,
        [
            "export",
            str(STREAMS / "tools.jsonl"),
            "--progress",
            "off",
            "--no-tree",
            "--metrics-endpoint",
            endpoint,
            "--protocol",
            "http/protobuf",
            "--export-timeout",
            "1",
        ],
    )
    assert result.exit_code == 1, result.stderr
    assert "export failed:" in result.stderr and "metric exports failed to reach" in result.stderr
    assert endpoint in result.stderr
    assert "exported 17 spans" in result.stderr  # the traces themselves were delivered
    assert time.monotonic() - started < 60


def test_sdk_log_lines_never_reach_stderr_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    # A malformed header entry: the SDK logs it verbatim (escape bytes and a key included).
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"good=1,\x1b[31m{SECRET}")
    with GrpcTraceReceiver() as receiver:
        result = CliRunner().invoke(
            app,
            [
                "export",
                str(STREAMS / "minimal.jsonl"),
                "--endpoint",
                receiver.endpoint,
                "--protocol",
                "grpc",
                "--progress",
                "off",
            ],
        )
        assert result.exit_code == 0, result.stderr
        assert receiver.headers and all(h.get("good") == "1" for h in receiver.headers)
    assert "\x1b" not in result.stderr and SECRET not in result.stderr
    assert result.stderr.count("OpenTelemetry SDK: Header format invalid") == 1  # cleaned, once


def test_userinfo_in_an_endpoint_never_reaches_the_terminal() -> None:
    port = closed_port()
    result = CliRunner().invoke(
        app,
        [
            "export",
            str(STREAMS / "minimal.jsonl"),
            "--endpoint",
            f"http://alice:hunter2@127.0.0.1:{port}",
            "--protocol",
            "http/protobuf",
            "--export-timeout",
            "1",
            "--progress",
            "off",
        ],
    )
    assert result.exit_code == 1
    assert "hunter2" not in result.stderr and "alice" not in result.stderr
    assert f"[redacted]@127.0.0.1:{port}" in result.stderr


def test_one_ctrl_c_during_a_live_tail_exports_what_arrived(tmp_path: Path) -> None:
    import asyncio

    from tests._support import ServedRun, events, serve_in_thread

    live = events("suspension-live")
    # A suspended run whose resumption never comes: tail waits for it until interrupted.
    run = ServedRun(live, {"runId": live[0]["runId"], "status": "suspended"}, resume=asyncio.Event())
    with serve_in_thread({live[0]["runId"]: run}) as server:
        process = subprocess.Popen(
            [
                *ENTRY,
                "tail",
                "--server",
                server.url,
                "--run",
                live[0]["runId"],
                "--progress",
                "lines",
                "--no-tree",
                "--out",
                str(tmp_path / "tail.jsonl"),
            ],
            preexec_fn=default_sigint,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=_env(),
            cwd=tmp_path,
        )
        try:
            _wait_for_line(process, "suspended")
            time.sleep(0.5)
            process.send_signal(signal.SIGINT)
            err = _communicate_or_dump(process)
        finally:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted; exported what was read" in err
    assert "Traceback" not in err
    assert _spans(tmp_path / "tail.jsonl") > 0


def test_closed_stdout_with_a_tree_fails_with_exit_1_and_a_message(tmp_path: Path) -> None:
    command = (
        " ".join(f"'{part}'" for part in ENTRY) + f" export '{STREAMS / 'minimal.jsonl'}' --progress off >&-"
    )
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "cannot write the span tree to stdout: stdout is closed" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_a_second_ctrl_c_during_the_flush_removes_the_temporary_file_and_keeps_earlier_output(
    tmp_path: Path,
) -> None:
    """The first Ctrl-C ends the read and starts the flush (to a receiver that never answers);
    the second abandons it: the earlier file stays exactly as it was, and no temporary file
    remains beside it."""
    target = tmp_path / "partial.jsonl"
    target.write_bytes(b'{"resourceSpans": []}\n')
    os.utime(target, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = (target.read_bytes(), target.stat().st_mtime_ns)
    with HostileGrpcReceiver(GrpcAnswer.STALL) as receiver:
        process = subprocess.Popen(
            [
                *ENTRY,
                "export",
                "-",
                "--progress",
                "lines",
                "--no-tree",
                "--out",
                str(target),
                "--endpoint",
                receiver.endpoint,
                "--protocol",
                "grpc",
                "--export-timeout",
                "60",
            ],
            stdin=subprocess.PIPE,
            preexec_fn=default_sigint,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=_env(),
            cwd=tmp_path,
        )
        assert process.stdin is not None
        stream = (STREAMS / "tools.jsonl").read_text(encoding="utf-8").splitlines()
        process.stdin.write("\n".join(stream[:20]) + "\n")
        process.stdin.flush()
        try:
            _wait_for_line(process, "tool search")
            process.send_signal(signal.SIGINT)  # ends the read; the flush reaches the receiver
            deadline = time.monotonic() + 30
            while receiver.requests == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert receiver.requests >= 1
            process.send_signal(signal.SIGINT)  # abandons the flush
            _, err = process.communicate(timeout=30)
        finally:
            process.kill()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert (target.read_bytes(), target.stat().st_mtime_ns) == before
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".partial.jsonl."))
    assert leftovers == [], "a temporary file was left behind"
