"""The repository stands on its own: the corpus is in it, and nothing in it reaches outside."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests import _support as fx

ROOT = Path(__file__).resolve().parents[1]
_OUTSIDE = "../" + "shared"  # spelled in two parts so this file does not match its own check


def _repo_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_the_corpus_has_every_stream_and_span_tree() -> None:
    assert len(fx.stream_names()) >= fx.MIN_STREAMS
    assert len(list(fx.reference_files())) >= fx.MIN_SPAN_TREES
    for name in fx.stream_names():
        assert (fx.STREAMS / f"{name}.outcome.json").is_file(), name


def test_no_file_in_the_repository_refers_outside_it() -> None:
    offenders = []
    for path in _repo_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if _OUTSIDE in text:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_a_missing_corpus_fails_loudly(tmp_path: Path) -> None:
    import pytest

    with pytest.raises(fx.MissingFixtureError, match="at least 43 streams"):
        fx.stream_names(tmp_path)


def test_a_copy_with_nothing_beside_it_runs_the_conformance_subset(tmp_path: Path) -> None:
    copy = tmp_path / "alone" / "repo"
    copy.parent.mkdir()
    skipped = (".git", ".venv", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache")
    ignore = shutil.ignore_patterns(*skipped)
    shutil.copytree(ROOT, copy, ignore=ignore)
    assert not (copy.parent / "shared").exists()
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            "-k",
            "tools or minimal",
            "tests/test_conformance.py",
            "tests/test_core_model.py",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " 0 passed" not in done.stdout
