"""The README's Python example runs as written (docs that cannot rot)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", readme, re.S)
    assert block is not None
    code = block.group(1)
    # The recorded-stream lines read a file the example does not ship: give it one.
    stream = ROOT / "tests" / "fixtures" / "reference" / "streams" / "tools.jsonl"
    (tmp_path / "run.jsonl").write_bytes(stream.read_bytes())
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "ok", "hello!"]


def test_readme_names_both_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").count("scripts/test.sh") == 1
