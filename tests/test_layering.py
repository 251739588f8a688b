"""Dependencies point one way: core <- engine <- otel <- export | sources <- cli, with no exemptions.

``export`` and ``sources`` are peers: the pipeline takes any run handle, a source makes one, and
neither knows the other (the CLI joins them). ``core`` loads no OpenTelemetry, network or
terminal library, at any depth of its code; the engine imports OpenTelemetry and its network
client only lazily, inside the code that needs them (the OpenAI-compatible adapter's httpx, the
per-request metrics' semantic conventions), so importing it loads none; nothing below the CLI
loads a CLI library. The top-level modules sit where they belong: ``errors`` imports nothing of the package,
``masking`` only ``core``, ``testing`` only ``core`` and ``otel``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rulvar_otel"

# Each layer may import the layers at lower ranks; equal ranks are peers that may not import each other.
RANKS = {"core": 0, "engine": 1, "otel": 2, "export": 3, "sources": 3, "cli": 4}
TOP_LEVEL_MAY_IMPORT = {
    "errors": set(),
    "masking": {"core", "errors"},
    "testing": {"core", "otel", "errors"},
}
NETWORK_AND_OTEL = ("opentelemetry", "httpx", "httpx_sse", "grpc")
CLI_LIBRARIES = ("typer", "rich", "click")


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Every absolute module an import statement in ``path`` names (lazy imports too, unless
    ``top_level_only``: then only the module's own top-level statements)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            out.add(f"<relative import in {path.name}>")
    return out


def _package_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "rulvar_otel" or len(parts) < 2:
        return None
    return parts[1]


def test_every_subpackage_has_a_rank() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(RANKS), f"unranked packages: {packages - set(RANKS)}"
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "py")}
    assert modules <= set(TOP_LEVEL_MAY_IMPORT), f"unplaced modules: {modules - set(TOP_LEVEL_MAY_IMPORT)}"


def test_layers_only_import_downwards() -> None:
    problems: list[str] = []
    for layer, rank in RANKS.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            where = path.relative_to(PACKAGE)
            for module in _imports(path):
                if module.startswith("<relative"):
                    problems.append(f"{where}: {module}")
                    continue
                target = _package_part(module)
                if target in RANKS and target != layer and RANKS[target] >= rank:
                    problems.append(f"{where} imports {module}")
                root = module.split(".")[0]
                if layer == "core" and root in (*NETWORK_AND_OTEL, *CLI_LIBRARIES):
                    problems.append(f"{where} imports {module}")
                if layer != "cli" and root in CLI_LIBRARIES:
                    problems.append(f"{where} imports {module}")
            if layer == "engine":
                for module in _imports(path, top_level_only=True):
                    if module.split(".")[0] in NETWORK_AND_OTEL:
                        problems.append(f"{where} imports {module} at import time")
    assert problems == []


def test_top_level_modules_import_only_what_they_sit_on() -> None:
    problems: list[str] = []
    for name, allowed in TOP_LEVEL_MAY_IMPORT.items():
        path = PACKAGE / f"{name}.py"
        if not path.exists():
            continue
        for module in _imports(path):
            target = _package_part(module)
            if target is not None and target not in allowed:
                problems.append(f"{name}.py imports {module}")
    assert problems == []


def test_the_layering_check_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rulvar_otel.cli import app\n    import httpx\n", encoding="utf-8")
    found = _imports(bad)
    assert {"rulvar_otel.cli", "httpx"} <= found  # lazy imports inside functions count too
    assert _package_part("rulvar_otel.cli") == "cli"


@pytest.mark.parametrize("package", ["rulvar_otel.core", "rulvar_otel.engine"])
def test_importing_core_or_the_engine_loads_no_opentelemetry_network_or_cli_module(package: str) -> None:
    forbidden = (*NETWORK_AND_OTEL, *CLI_LIBRARIES)
    code = (
        f"import sys, {package};"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r});"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_facade_resolves_every_name_and_stays_lazy() -> None:
    code = (
        "import sys, rulvar_otel;"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')];"
        "missing = [n for n in rulvar_otel.__all__ if getattr(rulvar_otel, n, None) is None];"
        "print(','.join(missing))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
