"""The README and the docs hold code that runs (docs that cannot rot).

- The README's Python example runs exactly as printed, in an empty directory, and prints exactly
  the output the README shows under it.
- Every ```python block in README.md and docs/*.md runs as written and imports only public
  modules (no ``_private`` module). A block runs after the same document's earlier blocks (a
  reader follows a page top to bottom), in a fresh interpreter, in a directory holding the two
  files the docs speak of: a recorded run, ``run.jsonl``, and its OTLP file export,
  ``rulvar-traces.otlp.jsonl``.
- Every option of every command is named in the README synopsis or in docs/cli.md.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.S | re.M)
_PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]*\._\w*)", re.M)


def _blocks(path: Path, language: str) -> list[str]:
    return [m.group(2) for m in _FENCE.finditer(path.read_text(encoding="utf-8")) if m.group(1) == language]


def _python_blocks() -> list[tuple[str, int, str]]:
    """(document, index, the code to run: the document's blocks up to and including this one)."""
    found = []
    for path in DOCS:
        blocks = _blocks(path, "python")
        for index in range(len(blocks)):
            found.append((path.relative_to(ROOT).as_posix(), index, "\n".join(blocks[: index + 1])))
    assert any(name == "README.md" for name, _, _ in found)
    return found


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded run and its OTLP file export, made by the CLI as a user would."""
    from typer.testing import CliRunner

    from rulvar_otel.cli import app

    base = tmp_path_factory.mktemp("user-files")
    stream = ROOT / "tests" / "fixtures" / "reference" / "streams" / "tools.jsonl"
    (base / "run.jsonl").write_bytes(stream.read_bytes())
    out = base / "rulvar-traces.otlp.jsonl"
    result = CliRunner().invoke(
        app, ["export", str(base / "run.jsonl"), "--out", str(out), "--progress", "off", "--no-tree"]
    )
    assert result.exit_code == 0, result.output
    return base


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_readme_python_example_runs_as_printed_and_prints_what_it_shows(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"^```python\n(.*?)^```\n+[^`]*?^```text\n(.*?)^```", readme, re.S | re.M)
    assert example is not None, "the README's python example and the text block showing its output"
    code, shown = example.group(1), example.group(2)
    result = _run(code, tmp_path)  # an empty directory: the example needs nothing beside it
    assert result.returncode == 0, result.stderr
    assert result.stdout == shown
    assert "span run hello" in result.stdout  # spans are visible, not only counted


@pytest.mark.parametrize(
    ("doc", "index", "code"), _python_blocks(), ids=lambda v: v if isinstance(v, str) and len(v) < 40 else ""
)
def test_every_python_block_in_the_docs_runs_as_written(
    doc: str, index: int, code: str, tmp_path: Path, user_files: Path
) -> None:
    private = _PRIVATE_IMPORT.findall(code)
    assert not private, f"{doc} block {index} imports private modules: {private}"
    for name in ("run.jsonl", "rulvar-traces.otlp.jsonl"):
        (tmp_path / name).write_bytes((user_files / name).read_bytes())
    result = _run(code, tmp_path)
    assert result.returncode == 0, f"{doc} block {index} failed:\n{result.stderr[-2000:]}"


def _command_options() -> dict[str, set[str]]:
    import typer

    from rulvar_otel.cli import app

    root = typer.main.get_command(app)
    found: dict[str, set[str]] = {"rulvar-otel": set()}

    def walk(command: object, name: str) -> None:
        options = found.setdefault(name, set())
        for param in getattr(command, "params", []):
            for opt in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())):
                if opt.startswith("--") and opt != "--help":
                    options.add(opt)
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{name} {sub_name}")

    walk(root, "rulvar-otel")
    return found


def test_every_option_is_named_in_the_readme_synopsis_or_docs_cli() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cli_doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    synopsis = readme[readme.index("## The command line") :]
    assert "docs/cli.md" in synopsis
    options = _command_options()
    assert {"rulvar-otel export", "rulvar-otel tail", "rulvar-otel assets write"} <= set(options)
    missing = sorted(
        f"{command} {opt}"
        for command, opts in options.items()
        for opt in opts
        if not re.search(re.escape(opt) + r"(?![\w-])", synopsis)
        and not re.search(re.escape(opt) + r"(?![\w-])", cli_doc)
    )
    assert not missing, f"options documented nowhere: {missing}"


def test_readme_names_both_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").count("scripts/test.sh") == 1


def test_the_license_is_the_one_the_metadata_names() -> None:
    import tomllib

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")


def test_the_install_commands_name_this_project_and_no_placeholder() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = readme[readme.index("## Use it from Python") : readme.index("```python")]
    commands = [line for block in _blocks(ROOT / "README.md", "bash") for line in block.splitlines()]
    assert not [line for line in commands if re.search(r"<[^>]*>", line.split("#")[0])]
    assert f"'{project['name']} @ file:///path/to/rulvar-otel'" in install
    wheel = f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"
    assert f"dist/{wheel}" in install
