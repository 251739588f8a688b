"""The benchmark command runs end to end in quick mode and prints every figure (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STREAM = REPO / "tests" / "fixtures" / "reference" / "streams" / "tools.jsonl"


def test_quick_mode_prints_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    command = [sys.executable, "-m", "benchmarks", "--quick", "--stream", str(STREAM), "--rounds", "1"]
    command += ["--scale", "300,600,900", "--json", str(out)]
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=420,  # the compiled figure builds the wheel with mypyc first
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout
    headings = ("== parse+map ==", "== sdk floor ==", "== metrics ==", "== direct path ==", "== http ==")
    headings += ("== compiled ==", "== scale ==")
    for heading in (*headings, "== end to end ==", "== tail ==", "== start-up ==", "== progress =="):
        assert heading in table
    for phrase in (
        "parse+map, no-op tracer",
        "baseline: json.loads",
        "orjson.loads alone",
        "exporter, real SDK, pre-parsed",
        "baseline: floor",
        "traces + metrics in one pass",
        "baseline: traces only",
        "300 events, no-op tracer",
        "900 events, real SDK",
        "900 events, direct path",
        "write the OTLP/JSON file, direct path",
        "baseline: SDK path",
        "real OTLP/gRPC receiver in this process, direct path (every round received all",
        "export over OTLP/HTTP protobuf to a receiver in another process (every round received all",
        "baseline: OTLP/gRPC",
        "mypyc-compiled build (fresh process per round; request bytes identical across builds)",
        "baseline: pure Python",
        "direct path, traces + metrics in one pass",
        "linear fit over 3 points (direct)",
        "peak RSS growth",
        "linear fit",
        "rulvar-otel export --pipeline direct -> OTLP/gRPC",
        "rulvar-otel export --pipeline sdk -> OTLP/gRPC",
        "rulvar-otel export tools.jsonl (45 events) -> OTLP/gRPC, whole process",
        "python -c pass",
        "export tools.jsonl --progress auto, stderr a pipe",
        "export tools.jsonl --progress lines, stderr a pipe",
    ):
        assert phrase in table, phrase
    figures = json.loads(out.read_text())
    sections = {f["section"] for f in figures}
    assert sections == {
        "parse+map",
        "sdk floor",
        "metrics",
        "direct path",
        "http",
        "compiled",
        "scale",
        "end to end",
        "start-up",
        "progress",
        "tail",
    }
    # The live tail through the 20-frame server limit delivered every event (a correctness part).
    (tail,) = [f for f in figures if f["section"] == "tail"]
    assert "through a 20-frame server limit" in tail["name"] and "behind at run end" in tail["value"]
    ratios = [f["ratio"] for f in figures if f["ratio"] is not None]
    assert ratios and all(r > 0 for r in ratios)
    # Delivery is a correctness figure, not a timing: every span and span event must arrive.
    e2e = [f for f in figures if f["section"] == "end to end"]
    assert len(e2e) == 2 and all(f["met"] is True for f in e2e), e2e
    # The direct path's figures check their own output: no note means every span arrived.
    direct = [f for f in figures if f["section"] == "direct path"]
    assert len(direct) == 3 and all(not f["notes"] for f in direct), direct
    # Both transports delivered every span in every round (no note).
    (http,) = [f for f in figures if f["section"] == "http"]
    assert not http["notes"], http
    (floor,) = [f for f in figures if f["section"] == "sdk floor"]
    assert "floor verified" in " ".join(floor["notes"])
