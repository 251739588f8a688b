"""``--help`` and ``--version``: no type tags, one metavar style, the installed version."""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rulvar_otel.cli import app

ROOT = Path(__file__).resolve().parents[1]
# A metavar is an upper-case name (URL, FILE, KEY=VALUE, RUN_ID, MODULE:ATTR), a file form (STREAM.jsonl|-),
# or the list of choices (grpc|http/protobuf).
_METAVAR = re.compile(r"[A-Z][A-Z0-9_]*([=:][A-Z]+)?|[A-Z]+\.jsonl\|-|[a-z0-9/.-]+(\|[a-z0-9/.-]+)+")
_TYPE_TAG = re.compile(r"<(?:bool|str|int|float|path|text|integer|list\[\w+\])>", re.I)


def _commands() -> list[tuple[list[str], object]]:
    found: list[tuple[list[str], object]] = []

    def walk(command: object, path: list[str]) -> None:
        found.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands()


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_help_has_no_type_tags_and_one_metavar_style(path: list[str], command: object) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert not _TYPE_TAG.search(result.stdout), result.stdout
    assert "{" not in result.stdout.splitlines()[1]  # the usage line: no braces around arguments
    for param in getattr(command, "params", []):
        flag = getattr(param, "is_flag", False)
        if flag or param.name == "help":
            continue
        metavar = param.metavar
        assert metavar is not None and _METAVAR.fullmatch(metavar), (path, param.name, metavar)
        assert metavar in result.stdout


def test_version_is_the_packages() -> None:
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"rulvar-otel {expected} (pure Python)\n"


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("columns", [60, 80, 120])
@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_help_shows_every_option_whole_at_any_width(path: list[str], command: object, columns: int) -> None:
    # CliRunner's stdout is not a terminal: this is the piped rendering, at each width.
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= max(columns, 80)
    tokens = set(re.split(r"[\s,\[\]]+", out))
    for param in getattr(command, "params", []):
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("-"):
                assert name in tokens, (path, name, columns)
        metavar = getattr(param, "metavar", None)
        if metavar is not None:
            assert metavar in tokens, (path, metavar, columns)
        # Values in the option's help (paths, URLs, quoted choices) are never split across lines.
        for word in (getattr(param, "help", None) or "").split():
            if "-" in word.strip(".,;:()") and len(word) > 3:
                assert word in out, (path, word, columns)


@pytest.mark.parametrize("columns", [60, 80, 120])
@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_command_docstrings_are_reflowed_to_the_width(path: list[str], command: object, columns: int) -> None:
    doc = getattr(command, "help", None)
    if not doc:
        return
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    lines = result.stdout.splitlines()
    flat = _flat(result.stdout)
    width = min(columns, 80)
    for paragraph in doc.split("\n\n"):
        assert _flat(paragraph) in flat, (path, paragraph)
        # Re-flowed: a printed line ends a paragraph, or the next word would not have fit on it.
        words = paragraph.split()
        for line, after in itertools.pairwise(lines):
            stripped = line.strip()
            if not stripped or stripped.split()[-1] not in words or not after.strip():
                continue
            if _flat(after) and _flat(after).split()[0] in words and len(line) < width - 30:
                pytest.fail(f"{path}: {line!r} was cut at a source line break ({columns} columns)")
