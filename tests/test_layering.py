"""Dependencies point one way: core <- engine <- otel <- sources <- cli.

core imports no OTel, network or CLI module at all; the engine imports them only lazily, inside the
code that needs them (the OpenAI-compatible adapter's httpx, the semantic conventions of the
per-request metrics), so importing either loads none.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rulvar_otel"
LAYERS = ["core", "engine", "otel", "sources", "cli"]
FORBIDDEN_IN_CORE = ("opentelemetry", "httpx", "httpx_sse", "typer", "rich", "grpc", "click")
LAZY_ONLY = {"engine"}


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


@pytest.mark.parametrize("package", ["rulvar_otel.core", "rulvar_otel.engine"])
def test_importing_core_or_the_engine_loads_no_opentelemetry_network_or_cli_module(package: str) -> None:
    code = (
        f"import sys, {package};"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_IN_CORE!r});"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_layers_only_import_downwards() -> None:
    problems: list[str] = []
    for index, layer in enumerate(LAYERS):
        higher = LAYERS[index + 1 :]
        for path in (PACKAGE / layer).rglob("*.py"):
            for module in _imports(path):
                parts = module.split(".")
                if parts[0] == "rulvar_otel" and len(parts) > 1 and parts[1] in higher:
                    problems.append(f"{path.relative_to(PACKAGE)} imports {module}")
            if layer == "core" or layer in LAZY_ONLY:
                for module in _imports(path, top_level_only=layer in LAZY_ONLY):
                    if module.split(".")[0] in FORBIDDEN_IN_CORE:
                        problems.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert problems == []


def test_public_facade_resolves_every_name_and_stays_lazy() -> None:
    code = (
        "import sys, rulvar_otel;"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')];"
        "missing = [n for n in rulvar_otel.__all__ if getattr(rulvar_otel, n, None) is None];"
        "print(','.join(missing))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
