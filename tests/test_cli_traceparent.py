"""W3C trace context on the command line: TRACEPARENT/TRACESTATE, --traceparent and --parent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support import events, otlp_file_spans, run_cli, write_stream

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    return write_stream(tmp_path / "s.jsonl", events("approval"))


def _spans(path: Path) -> list[tuple[str, str, str]]:
    return [(s.trace_id.hex(), s.parent_span_id.hex(), s.name) for s in otlp_file_spans(path)]


@pytest.mark.parametrize("pipeline", ["direct", "sdk"])
def test_traceparent_in_the_environment_puts_every_span_in_that_trace(
    stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipeline: str
) -> None:
    monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
    monkeypatch.setenv("TRACESTATE", "vendor=opaque")
    out = tmp_path / "f.jsonl"
    code, _, err = run_cli(
        "export", str(stream), "--out", str(out), "--progress", "off", "--pipeline", pipeline
    )
    assert code == 0, err
    spans = _spans(out)
    assert len(spans) >= 5
    assert {trace for trace, _, _ in spans} == {TRACE}
    runs = [(parent, name) for _, parent, name in spans if name.startswith("run ")]
    assert runs == [(SPAN, "run release")]
    assert all(s.trace_state == "vendor=opaque" for s in otlp_file_spans(out))


def test_the_flag_wins_over_the_variable_and_none_ignores_both(
    stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", f"00-{'1' * 32}-{'2' * 16}-01")
    flagged = tmp_path / "flag.jsonl"
    assert run_cli("export", str(stream), "--out", str(flagged), "--traceparent", TRACEPARENT)[0] == 0
    assert {trace for trace, _, _ in _spans(flagged)} == {TRACE}
    ignored = tmp_path / "none.jsonl"
    assert run_cli("export", str(stream), "--out", str(ignored), "--parent", "none")[0] == 0
    assert not {trace for trace, _, _ in _spans(ignored)} & {TRACE, "1" * 32}
    assert [p for _, p, n in _spans(ignored) if n.startswith("run ")] == [""]


def test_link_keeps_the_runs_own_trace_and_adds_a_span_to_the_callers(stream: Path, tmp_path: Path) -> None:
    out = tmp_path / "f.jsonl"
    assert (
        run_cli("export", str(stream), "--out", str(out), "--traceparent", TRACEPARENT, "--parent", "link")[0]
        == 0
    )
    spans = otlp_file_spans(out)
    back = [s for s in spans if s.name.startswith("rulvar run ")]
    run = next(s for s in spans if s.name == "run release")
    assert len(back) == 1 and back[0].trace_id.hex() == TRACE and back[0].parent_span_id.hex() == SPAN
    assert run.trace_id.hex() != TRACE and not run.parent_span_id
    assert [(link.trace_id.hex(), link.span_id.hex()) for link in run.links] == [(TRACE, SPAN)]
    assert [(link.trace_id, link.span_id) for link in back[0].links] == [(run.trace_id, run.span_id)]


@pytest.mark.parametrize(
    "value",
    [
        "00-zz",
        f"00-{'0' * 32}-{SPAN}-01",  # an all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # an all-zero span id
        f"00-{TRACE.upper()}-{SPAN}-01",  # W3C ids are lower case
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"00-{TRACE}-{SPAN}-01-extra",
    ],
)
def test_a_malformed_traceparent_exits_2_naming_it_and_writes_nothing(
    stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TRACEPARENT", value)
    out = tmp_path / "f.jsonl"
    code, _, err = run_cli("export", str(stream), "--out", str(out))
    assert code == 2
    assert "TRACEPARENT" in err and "is not a W3C traceparent" in err
    assert not out.exists()
    code, _, err = run_cli("export", str(stream), "--out", str(out), "--traceparent", value)
    assert code == 2 and "--traceparent" in err and not out.exists()


def test_an_unknown_parent_mode_exits_2(stream: Path, tmp_path: Path) -> None:
    code, _, err = run_cli("export", str(stream), "--out", str(tmp_path / "f.jsonl"), "--parent", "up")
    assert code == 2 and "--parent must be one of ambient, link, none" in err


def test_a_secret_in_a_malformed_traceparent_is_masked(
    stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", "sk-ant-api03-" + "A" * 40)
    code, _, err = run_cli("export", str(stream), "--out", str(tmp_path / "f.jsonl"))
    assert code == 2 and "TRACEPARENT" in err
    assert "A" * 20 not in err


@pytest.mark.parametrize("command", ["demo", "replay", "tail"])
def test_every_exporting_command_takes_the_trace_context_options(command: str) -> None:
    code, out, _ = run_cli(command, "--help")
    assert code == 0
    assert "--traceparent" in out and "--parent" in out


def test_the_demo_runs_inside_the_given_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
    out = tmp_path / "demo.jsonl"
    code, _, err = run_cli("demo", "--out", str(out), "--progress", "off")
    assert code == 0, err
    spans = _spans(out)
    assert spans and {trace for trace, _, _ in spans} == {TRACE}
    assert [p for _, p, n in spans if n.startswith("run ")] == [SPAN]
