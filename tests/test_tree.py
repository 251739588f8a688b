"""The finished span tree on the terminal: whole rows when piped, counts that say what they count."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.cli._tree import MAX_LABEL_CHARS, print_span_tree
from rulvar_otel.otel import export_events
from tests._support import STREAMS, events, stream_names

LONG = "a-very-long-workflow-name-" + "that-goes-on-" * 12 + "end"


def _spans(evs: list[dict[str, object]]) -> list[object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    export_events(evs, provider.get_tracer("t"))
    return list(exporter.get_finished_spans())


def _long_stream() -> list[dict[str, object]]:
    evs = events("orchestrate")
    for event in evs:
        if event["type"] == "run:start":
            event["workflow"] = LONG
    return evs


def test_a_piped_tree_prints_every_row_whole() -> None:
    out = io.StringIO()
    print_span_tree(_spans(_long_stream()), Console(file=out, highlight=False))  # type: ignore[arg-type]
    root = out.getvalue().splitlines()[0]
    assert len(LONG) > 150 and f"run {LONG}  11ms  ok" in root
    assert root.endswith("[22 span events]")


def test_the_cli_tree_through_a_pipe_is_not_cut_at_80_columns(tmp_path: Path) -> None:
    stream = tmp_path / "long.jsonl"
    stream.write_text("".join(json.dumps(e) + "\n" for e in _long_stream()))
    result = CliRunner().invoke(
        app, ["export", str(stream), "--out", str(tmp_path / "o.jsonl"), "--tree", "--progress", "off"]
    )
    assert result.exit_code == 0, result.output
    assert any(line.startswith(f"✓ run {LONG}  ") for line in result.stdout.splitlines())


def test_span_event_counts_are_named_and_pluralized() -> None:
    out = io.StringIO()
    evs = events("minimal")
    print_span_tree(_spans(evs), Console(file=out, highlight=False))  # type: ignore[arg-type]
    text = out.getvalue()
    assert "events]" not in text.replace("span events]", "")
    counts = [line.rsplit("[", 1)[1] for line in text.splitlines() if line.endswith("]")]
    assert counts and all(c in ("1 span event]",) or c.endswith(" span events]") for c in counts)


def test_a_huge_name_is_cut_to_one_row() -> None:
    evs = events("minimal")
    evs[0]["workflow"] = "x" * 100_000
    out = io.StringIO()
    print_span_tree(_spans(evs), Console(file=out, highlight=False))  # type: ignore[arg-type]
    root = out.getvalue().splitlines()[0]
    assert "x" * (MAX_LABEL_CHARS - 10) in root and len(root) < MAX_LABEL_CHARS + 100


# --- a run's row and the summary count the same stream events ------------------------------------

_STREAM_EVENTS = re.compile(r"\[(\d+) stream events?[,\]]")
_SUMMARY = re.compile(r"exported \d+ spans? from (\d+) stream events? in ")


def _export_tree(stream: Path, tmp_path: Path) -> tuple[list[int], int]:
    """(the stream-event count of every row that has one, the summary's) of ``export --tree``."""
    result = CliRunner().invoke(
        app, ["export", str(stream), "--out", str(tmp_path / "o.jsonl"), "--tree", "--progress", "off"]
    )
    assert result.exit_code == 0, result.stderr
    rows = [int(m.group(1)) for line in result.stdout.splitlines() if (m := _STREAM_EVENTS.search(line))]
    (summary,) = [int(m.group(1)) for line in result.stderr.splitlines() if (m := _SUMMARY.search(line))]
    return rows, summary


@pytest.mark.parametrize("name", stream_names())
def test_the_run_row_and_the_summary_count_the_same_stream_events(name: str, tmp_path: Path) -> None:
    rows, summary = _export_tree(STREAMS / f"{name}.jsonl", tmp_path)
    assert rows == [summary] == [len(events(name))]


def test_each_run_row_counts_its_own_run_and_the_summary_adds_them_up(tmp_path: Path) -> None:
    stream = tmp_path / "two.jsonl"
    stream.write_bytes((STREAMS / "minimal.jsonl").read_bytes() + (STREAMS / "tools.jsonl").read_bytes())
    rows, summary = _export_tree(stream, tmp_path)
    assert sorted(rows) == sorted([len(events("minimal")), len(events("tools"))])
    assert summary == sum(rows)


def test_span_event_counts_on_a_run_row_are_the_run_spans_own(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["export", str(STREAMS / "nested.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--progress", "off"],
    )
    own = next(s for s in _spans(events("nested")) if s.parent is None).events  # type: ignore[attr-defined]
    root = result.stdout.splitlines()[0]
    assert root.endswith(f"[{len(events('nested'))} stream events, {len(own)} span events]")
