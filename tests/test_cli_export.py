"""``rulvar-otel export``: the embedded default, --out, diagnostics, exit codes, the span tree."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace import TracerProvider
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.cli._common import EXIT_OK, EXIT_USAGE, options_from_cli, run_export
from rulvar_otel.cli._tree import format_duration_ns, render_span_tree
from rulvar_otel.core.handle import handle_from_events
from rulvar_otel.errors import ConfigError
from rulvar_otel.export import (
    ExportOptions,
    FailureKind,
    OtlpJsonFileExporter,
    export_run,
    iter_otlp_json_file,
    parse_otlp_json_line,
    spans_to_otlp_json,
)
from tests._support import (
    REFERENCE,
    STREAMS,
    GrpcTraceReceiver,
    events,
    otlp_file_spans,
    reference_span_count,
    run_cli,
    write_stream,
)

DEFAULT_FILE = "rulvar-traces.otlp.jsonl"
SECRET = "sk-ant-PLANTEDSECRETVALUE0123456789abcdef"


pytestmark = pytest.mark.usefixtures("otel_env_cleared")


# --- the embedded default and --out --------------------------------------------------------


def test_embedded_default_writes_otlp_json_lines_and_prints_the_tree(tmp_path: Path) -> None:
    code, out, err = run_cli("export", str(STREAMS / "tools.jsonl"), "--progress", "off")
    assert code == EXIT_OK, err
    path = tmp_path / DEFAULT_FILE
    spans = otlp_file_spans(path)
    reference = json.loads((REFERENCE / "spans" / "tools.nested.json").read_text(encoding="utf-8"))
    assert Counter(s.name for s in spans) == Counter(s["name"] for s in reference["spans"])
    assert len({s.trace_id for s in spans}) == 1
    # The terminal tree: names, durations, status, cost.
    lines = out.splitlines()
    assert lines[0].startswith("✓ run tooling  106ms  ok  $0.00042")
    assert any("✗ tool fetch" in line and "error" in line for line in lines)
    assert any("agent researcher loop" in line and "$0.00018" in line for line in lines)
    assert sum("tool search" in line for line in lines) == 5
    assert f"exported 17 spans from {len(events('tools'))} stream events in trace" in err
    assert f"to file {DEFAULT_FILE}" in err


def test_out_lines_are_otlp_json_with_hex_ids(tmp_path: Path) -> None:
    out_file = tmp_path / "nested" / "t.jsonl"
    out_file.parent.mkdir()
    code, out, err = run_cli(
        "export", str(STREAMS / "nested.jsonl"), "--out", str(out_file), "--no-tree", "--progress", "off"
    )
    assert code == EXIT_OK, err
    assert out == ""  # --no-tree
    assert not (tmp_path / DEFAULT_FILE).exists()
    raw_lines = [line for line in out_file.read_text(encoding="utf-8").splitlines() if line]
    assert raw_lines
    total = 0
    for line in raw_lines:
        obj = json.loads(line)
        for rs in obj["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                assert ss["scope"]["name"] == "rulvar_otel"
                for span in ss["spans"]:
                    total += 1
                    assert len(span["traceId"]) == 32 and int(span["traceId"], 16) >= 0
                    assert len(span["spanId"]) == 16 and int(span["spanId"], 16) >= 0
                    if "parentSpanId" in span:
                        assert len(span["parentSpanId"]) == 16
                    assert isinstance(span["startTimeUnixNano"], str)  # int64 as a JSON string
                    assert isinstance(span["kind"], int)  # enums as integers
        # And json_format reads it back into the protobuf message (ids restored to bytes).
        request = parse_otlp_json_line(line)
        assert isinstance(request, ExportTraceServiceRequest)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    assert len(span.trace_id) == 16 and len(span.span_id) == 8
    assert total == len(otlp_file_spans(out_file))
    ids = {s.span_id for s in otlp_file_spans(out_file)}
    assert all(not s.parent_span_id or s.parent_span_id in ids for s in otlp_file_spans(out_file))


def test_otlp_json_round_trip_is_exact() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent", attributes={"a": 1, "b": "x", "c": [1.5, 2.5]}) as parent:
        parent.add_event("e", {"k": True})
        with tracer.start_as_current_span("child"):
            pass
    spans = list(memory.get_finished_spans())
    assert len(spans) == 2
    assert parse_otlp_json_line(spans_to_otlp_json(spans)) == encode_spans(spans)


def test_file_exporter_writes_to_a_text_stream() -> None:
    buffer = io.StringIO()
    exporter = OtlpJsonFileExporter(buffer)
    provider = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("t").start_span("one").end()
    provider.shutdown()
    (line,) = buffer.getvalue().splitlines()
    assert parse_otlp_json_line(line).resource_spans[0].scope_spans[0].spans[0].name == "one"
    assert not buffer.closed


def test_stdin_dash_is_read(tmp_path: Path) -> None:
    data = (STREAMS / "minimal.jsonl").read_bytes()
    code, _, err = run_cli("export", "-", "--progress", "off", "--no-tree", stdin=data)
    assert code == EXIT_OK, err
    assert len(otlp_file_spans(tmp_path / DEFAULT_FILE)) == reference_span_count("minimal")
    assert "exported" in err


# --- outcomes ------------------------------------------------------------------------------


def _run_span(path: Path) -> Span:
    (run,) = [s for s in otlp_file_spans(path) if s.name.startswith("run ")]
    return run


def test_outcome_wrapper_and_plain_outcome_files(tmp_path: Path) -> None:
    code, _, err = run_cli(
        "export",
        str(STREAMS / "unsettled.jsonl"),
        "--outcome",
        str(STREAMS / "unsettled.outcome.json"),
        "--progress",
        "off",
    )
    # A rejected result is a fact of the run, not a failed export.
    assert code == EXIT_OK, err
    assert _run_span(tmp_path / DEFAULT_FILE).status.code == Status.STATUS_CODE_ERROR

    plain = tmp_path / "plain.json"
    wrapper = json.loads((STREAMS / "tools.outcome.json").read_text(encoding="utf-8"))
    plain.write_text(json.dumps(wrapper["outcome"]), encoding="utf-8")
    code, _, err = run_cli(
        "export", str(STREAMS / "tools.jsonl"), "--outcome", str(plain), "--progress", "off", "--no-tree"
    )
    assert code == EXIT_OK, err
    assert _run_span(tmp_path / DEFAULT_FILE).status.code == Status.STATUS_CODE_OK


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{nope", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"status": 5}', "not a RunOutcome (check status)"),
    ],
)
def test_bad_outcome_file_is_a_usage_error(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    code, _, err = run_cli("export", str(STREAMS / "tools.jsonl"), "--outcome", str(bad))
    assert code == EXIT_USAGE
    assert message in err
    assert not (tmp_path / DEFAULT_FILE).exists()


# --- malformed input and exit codes ----------------------------------------------------------


def _damaged_tools(tmp_path: Path) -> Path:
    lines = (STREAMS / "tools.jsonl").read_text(encoding="utf-8").splitlines()
    damaged = [*lines[:3], "{broken", *lines[3:10], "[]", *lines[10:], '{"type": "log"}']
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(damaged) + "\n", encoding="utf-8")
    return path


def test_malformed_lines_are_reported_by_number_and_the_rest_exports(tmp_path: Path) -> None:
    path = _damaged_tools(tmp_path)
    code, _, err = run_cli("export", str(path), "--progress", "off", "--no-tree")
    assert code == EXIT_OK, err
    assert f"skipped {path}:4: invalid JSON" in err
    assert f"skipped {path}:12: expected a JSON object, got array" in err
    total_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert f"skipped {path}:{total_lines}: missing envelope field 'runId'" in err
    assert "3 malformed lines skipped in total" in err
    assert len(otlp_file_spans(tmp_path / DEFAULT_FILE)) == 17


def test_strict_makes_the_first_malformed_line_fatal(tmp_path: Path) -> None:
    path = _damaged_tools(tmp_path)
    code, out, err = run_cli("export", str(path), "--strict", "--progress", "off")
    assert code == EXIT_USAGE
    assert f"{path}:4: invalid JSON" in err
    assert ":12:" not in err  # the first one stops the export
    assert out == ""
    assert not (tmp_path / DEFAULT_FILE).exists()  # no span was created


def test_many_malformed_lines_print_a_bounded_number_of_diagnostics(tmp_path: Path) -> None:
    lines = (STREAMS / "minimal.jsonl").read_text(encoding="utf-8").splitlines()
    path = write_stream(tmp_path / "noisy.jsonl", [*lines, *(["garbage"] * 50)])
    code, _, err = run_cli("export", str(path), "--progress", "off", "--no-tree")
    assert code == EXIT_OK
    assert err.count("skipped ") == 20 + 2  # 20 diagnostics, "skipped 30 more", "... in total"
    assert "skipped 30 more malformed lines" in err
    assert "50 malformed lines skipped in total" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--protocol", "http/json"], "--protocol must be grpc or http/protobuf"),
        (["--prometheus-linger", "-1"], "--prometheus-linger must be a non-negative number"),
        (["--header", "novalue"], "KEY=VALUE"),
        (["--pattern", "("], "patterns[0] is not a valid pattern"),
        (["--pattern", ""], "patterns[0] is empty"),
        (["--endpoint", "localhost:4317"], "--endpoint must be an http:// or https:// URL"),
        (["--progress", "sometimes"], "--progress must be one of"),
        (["--export-timeout", "0"], "--export-timeout must be a positive number"),
        (["--out", "/nonexistent-dir/x.jsonl"], "cannot write /nonexistent-dir/x.jsonl"),
    ],
)
def test_usage_errors_exit_2_before_any_export(args: list[str], message: str, tmp_path: Path) -> None:
    code, out, err = run_cli("export", str(STREAMS / "tools.jsonl"), *args)
    assert code == EXIT_USAGE, err
    assert message in err
    assert out == ""
    assert not (tmp_path / DEFAULT_FILE).exists()


def test_input_errors_exit_2(tmp_path: Path) -> None:
    code, _, err = run_cli("export", str(tmp_path / "absent.jsonl"))
    assert code == EXIT_USAGE and "no such file" in err
    empty = write_stream(tmp_path / "empty.jsonl", [])
    code, _, err = run_cli("export", str(empty), "--progress", "off")
    assert code == EXIT_USAGE and "the stream held no events" in err
    code, _, err = run_cli("export")
    assert code == 2  # click's own usage error: missing argument


def test_a_failed_destination_is_a_delivery_failure_in_the_report() -> None:
    report = export_run(handle_from_events(events("minimal")), ExportOptions(out=Path("/dev/full")))
    assert report.failed(FailureKind.DELIVERY) and not report.ok
    assert report.delivery is not None and not report.delivery.ok
    (failure,) = report.failures
    assert failure.message.startswith("4 of 4 spans were not delivered to file /dev/full")


def test_export_run_reports_spans_events_and_one_trace_as_data(tmp_path: Path) -> None:
    report = export_run(
        handle_from_events(events("nested")), ExportOptions(out=tmp_path / "n.jsonl"), keep_spans=True
    )
    assert report.ok and report.failures == ()
    assert report.spans == len(otlp_file_spans(tmp_path / "n.jsonl")) == len(report.kept_spans)
    assert report.events == len(events("nested"))
    assert len(report.trace_ids) == 1 and report.run_ids == (events("nested")[0]["runId"],)
    assert report.delivery is not None and report.delivery.ok
    assert report.destinations == (f"file {tmp_path / 'n.jsonl'}",)
    assert report.outcome is not None and not report.interrupted


def test_options_from_cli_validate_and_name_the_flag() -> None:
    options = options_from_cli(header=["A=1", "b = two"], pattern=["acct-[0-9]+"]).export
    assert dict(options.headers) == {"a": "1", "b": "two"}
    assert options.patterns == ("acct-[0-9]+",)
    with pytest.raises(ConfigError, match="--prometheus-port must be a TCP port"):
        options_from_cli(prometheus_port=70000)
    with pytest.raises(ConfigError, match=r"^Prometheus port must be a TCP port"):
        ExportOptions(prometheus_port=70000)


# --- terminal safety and masking in the printed output ----------------------------------------


def test_tree_and_messages_are_masked_and_sanitized(tmp_path: Path) -> None:
    stream = events("minimal")
    # A key glued to an escape sequence has no word boundary until the sequence is stripped.
    glued = "ghp_GLUEDTOKENVALUE0123456789abcdefXYZ"
    hostile = f"evil\x1b]0;title\x07\x1b[2J{glued}\nsecond line\x9b31m"
    for event in stream:
        if event["type"] == "run:start":
            event["workflow"] = hostile
        if event["type"] == "phase:start":
            event["phase"] = f"acct-12345 {SECRET} phase"
    path = write_stream(tmp_path / "hostile.jsonl", stream)
    code, out, err = run_cli(
        "export", str(path), "--pattern", r"acct-\d+", "--progress", "off", "--out", str(tmp_path / "h.jsonl")
    )
    assert code == EXIT_OK, err
    for text in (out, err):
        assert SECRET not in text and glued not in text
        assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
        assert "acct-12345" not in text
    assert "[masked-secret]" in out  # rich must not eat the marker as markup
    run_line = out.splitlines()[0]
    assert run_line.startswith("✓ run evil") and "second line" in run_line
    # The exported file is masked too (span names pass the masker).
    exported = (tmp_path / "h.jsonl").read_text(encoding="utf-8")
    assert SECRET not in exported and "acct-12345" not in exported


def test_tree_collapses_wide_fan_outs(tmp_path: Path) -> None:
    code, out, err = run_cli("export", str(STREAMS / "large.jsonl"), "--progress", "off")
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert len(lines) <= 410
    assert lines[0].startswith("✓ run ")
    assert any("more spans" in line for line in lines)
    assert "exported 8021 spans" in err


def test_format_duration() -> None:
    assert format_duration_ns(None) == "?"
    assert format_duration_ns(850_000) == "850µs"
    assert format_duration_ns(12_000_000) == "12ms"
    assert format_duration_ns(3_400_000_000) == "3.40s"
    assert format_duration_ns(125_000_000_000) == "2m05s"
    assert format_duration_ns(3_720_000_000_000) == "1h02m"


def test_render_span_tree_limits_rows() -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from rich.console import Console

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root"):
        for index in range(60):
            tracer.start_span(f"child {index}").end()
    trees = render_span_tree(memory.get_finished_spans(), max_children=10)
    console = Console(file=io.StringIO(), width=100)
    for tree in trees:
        console.print(tree)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "child 9" in text and "child 10 " not in text
    assert "… 50 more spans" in text


def test_deterministic_ids_give_the_same_trace_twice(tmp_path: Path) -> None:
    ids = []
    for index in range(2):
        out = tmp_path / f"d{index}.jsonl"
        code, _, err = run_cli(
            "export", str(STREAMS / "tools.jsonl"), "--deterministic-ids", "--no-tree", "--out", str(out)
        )
        assert code == EXIT_OK, err
        ids.append(sorted((s.trace_id, s.span_id, s.parent_span_id) for s in otlp_file_spans(out)))
    assert ids[0] == ids[1]
    assert len(ids[0]) == 17


def test_the_input_stream_is_never_the_output_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    original = (STREAMS / "minimal.jsonl").read_bytes()
    path.write_bytes(original)
    code, _, err = run_cli("export", str(path), "--out", str(path))
    assert code == EXIT_USAGE and "is the input stream" in err
    default = tmp_path / DEFAULT_FILE
    default.write_bytes(original)
    code, _, err = run_cli("export", DEFAULT_FILE)
    assert code == EXIT_USAGE and "is the input stream" in err
    assert path.read_bytes() == original and default.read_bytes() == original


def test_progress_lines_go_to_stderr_and_auto_appends_milestones_off_a_terminal() -> None:
    code, out, err = run_cli("export", str(STREAMS / "tools.jsonl"), "--progress", "lines", "--no-tree")
    assert code == EXIT_OK, err
    assert out == ""
    assert "tool fetch error" in err
    # CliRunner's stderr is not a terminal: auto appends milestones, never repaints nor lists events.
    code, _, auto_err = run_cli("export", str(STREAMS / "tools.jsonl"), "--no-tree")
    assert code == EXIT_OK
    assert "phase research" in auto_err and "\x1b[" not in auto_err
    assert "tool fetch error" not in auto_err
    code, _, off_err = run_cli("export", str(STREAMS / "tools.jsonl"), "--no-tree", "--progress", "off")
    assert code == EXIT_OK
    assert "tool fetch error" not in off_err
    assert off_err.startswith("rulvar-otel: exported 17 spans")


# --- resource attributes: service name and the Phoenix project ----------------------------------


def _resource(path: Path) -> dict[str, str]:
    request = next(iter_otlp_json_file(path))
    return {a.key: a.value.string_value for a in request.resource_spans[0].resource.attributes}


@pytest.mark.parametrize(
    ("args", "service", "project"),
    [
        ([], "rulvar", None),
        (["--service-name", "checkout"], "checkout", "checkout"),
        (["--project", "agents-prod"], "rulvar", "agents-prod"),
        (["--service-name", "checkout", "--project", "agents-prod"], "checkout", "agents-prod"),
        (["--service-name", "checkout", "--no-openinference"], "checkout", None),
        (["--project", "agents-prod", "--no-openinference"], "rulvar", "agents-prod"),
    ],
)
def test_service_name_and_project_set_the_resource(
    tmp_path: Path, args: list[str], service: str, project: str | None
) -> None:
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli("export", str(STREAMS / "minimal.jsonl"), "--out", str(out), "--no-tree", *args)
    assert code == EXIT_OK, err
    resource = _resource(out)
    assert resource["service.name"] == service
    assert resource.get("openinference.project.name") == project


def test_otel_service_name_also_names_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    out = tmp_path / "e.jsonl"
    code, _, err = run_cli("export", str(STREAMS / "minimal.jsonl"), "--out", str(out), "--no-tree")
    assert code == EXIT_OK, err
    assert _resource(out)["openinference.project.name"] == "from-env"


def test_help_lists_every_export_option() -> None:
    result = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "220"})
    code, out = result.exit_code, result.stdout
    assert code == 0
    for flag in (
        "--prometheus-host",
        "--prometheus-linger",
        "--project",
        "--no-openinference",
        "--metrics-endpoint",
        "--deterministic-ids",
    ):
        assert flag in out


# --- docs/cli.md stays true -------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_docs_list_every_environment_variable_the_export_reads() -> None:
    from rulvar_otel.export import SETTINGS

    text = DOCS.read_text(encoding="utf-8")
    assert [s.name for s in SETTINGS if f"`{s.name}`" not in text] == []


def test_the_python_example_in_docs_runs_as_written(tmp_path: Path) -> None:
    import re
    import runpy

    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## The same export from Python") :]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[:1]
    (tmp_path / "run.jsonl").write_bytes((STREAMS / "tools.jsonl").read_bytes())
    script = tmp_path / "example.py"
    # The example names a collector on localhost:4317; the closed port stands in for an absent one.
    script.write_text(block.replace("http://localhost:4317", "http://127.0.0.1:9"), encoding="utf-8")
    namespace = runpy.run_path(str(script))
    report = namespace["report"]
    assert report.events == len(events("tools")) and report.spans == 17
    assert [f.kind for f in report.failures] == [FailureKind.DELIVERY]


def test_no_openinference_drops_the_openinference_span_kind(tmp_path: Path) -> None:
    kinds = {}
    for flag in ("--openinference", "--no-openinference"):
        out = tmp_path / f"{flag}.jsonl"
        code, _, err = run_cli("export", str(STREAMS / "tools.jsonl"), "--out", str(out), "--no-tree", flag)
        assert code == EXIT_OK, err
        spans = otlp_file_spans(out)
        kinds[flag] = {
            a.value.string_value for s in spans for a in s.attributes if a.key == "openinference.span.kind"
        }
        assert {a.key for s in spans for a in s.attributes if a.key.startswith("gen_ai.")}  # GenAI stays
    assert {"CHAIN", "AGENT", "LLM", "TOOL"} <= kinds["--openinference"]
    assert kinds["--no-openinference"] == set()


@pytest.mark.parametrize(("tree", "kept"), [(None, False), (True, True), (False, False)])
def test_spans_are_kept_for_the_tree_only_when_it_will_be_printed(
    otel_env_cleared: Path, tree: bool | None, kept: bool
) -> None:
    # With an endpoint the tree is off by default, so the export keeps no span for it.
    with GrpcTraceReceiver() as receiver:
        command = options_from_cli(endpoint=receiver.endpoint, protocol="grpc", progress="off", tree=tree)
        stdout = io.StringIO()
        code, report = run_export(
            handle_from_events(events("nested")), command, stdout=stdout, stderr=io.StringIO()
        )
        received = len(receiver.spans())
    assert code == EXIT_OK and report.spans == received > 0
    assert len(report.kept_spans) == (report.spans if kept else 0)
    assert bool(stdout.getvalue()) is kept
