"""Dependencies point one way: core <- engine <- otel <- export | sources <- cli, with no exemptions.

``export`` and ``sources`` are peers: the pipeline takes any run handle, a source makes one, and
neither knows the other (the CLI joins them). ``core`` loads no OpenTelemetry, network or
terminal library, at any depth of its code; the engine imports OpenTelemetry and its network
client only lazily, inside the code that needs them (the OpenAI-compatible adapter's httpx, the
per-request metrics' semantic conventions), so importing it loads none; nothing below the CLI
loads a CLI library. The top-level modules sit where they belong: ``errors``, ``_version``,
``_lazy`` and ``_build`` import nothing of the package, ``masking`` only ``core``, ``testing`` only
``core`` and ``otel``.

No module imports another that (through any chain) imports it back, counting imports inside
functions and under ``TYPE_CHECKING``; no module of the package goes through the public facade
(``from rulvar_otel import ...``); no module is over 600 lines; no doc names a private module.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rulvar_otel"

# Each layer may import the layers at lower ranks; equal ranks are peers that may not import each other.
RANKS = {"core": 0, "engine": 1, "otel": 2, "export": 3, "sources": 3, "cli": 4}
TOP_LEVEL_MAY_IMPORT = {
    "_version": set(),
    "_build": set(),
    "_lazy": set(),
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


MAX_MODULE_LINES = 600
ROOT = PACKAGE.parent


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at any depth of its code (functions and
    ``TYPE_CHECKING`` blocks included); ``from a import b`` names ``a.b`` when that is a module."""
    modules = {_module_name(p, package.parent): p for p in package.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update(known(f"{node.module}.{alias.name}") for alias in node.names)
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_through_any_chain() -> None:
    assert _cycles(_import_graph(PACKAGE)) == []


def test_the_cycle_check_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    package = tmp_path / "rulvar_otel"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("")
    (package / "engine" / "a.py").write_text("def f():\n    from rulvar_otel.engine import b\n")
    (package / "engine" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rulvar_otel.engine.a import f\n"
    )
    (package / "engine" / "c.py").write_text("import rulvar_otel.engine.a\n")
    graph = _import_graph(package)
    assert graph["rulvar_otel.engine.a"] == {"rulvar_otel.engine.b"}
    assert _cycles(graph) == [["rulvar_otel.engine.a", "rulvar_otel.engine.b"]]


def test_no_module_of_the_package_imports_the_public_facade() -> None:
    problems: list[str] = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            facade = (
                isinstance(node, ast.ImportFrom) and node.module == "rulvar_otel" and node.level == 0
            ) or (isinstance(node, ast.Import) and any(alias.name == "rulvar_otel" for alias in node.names))
            if facade:
                problems.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}")
    assert problems == []


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


# A private module of the package, named as a dotted path or a file path: rulvar_otel.cli._progress,
# otel/_mapper.py, core._critical_path.
_PRIVATE_MODULE = re.compile(
    r"(?<![\w/.])(?:rulvar_otel[./])?(?:core|engine|otel|export|sources|cli)(?:[./]\w+)*[./]_[a-z]\w*"
)


def test_no_doc_names_a_private_module() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = [
        f"{doc.name}:{number}: {match.group(0)}"
        for doc in docs
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
        for match in _PRIVATE_MODULE.finditer(line)
    ]
    assert problems == []


def test_the_doc_check_catches_private_names() -> None:
    for text in ("rulvar_otel.cli._progress.open_progress", "see otel/_mapper.py", "core._critical_path"):
        assert _PRIVATE_MODULE.search(text), text
    for text in ("rulvar_otel.core.progress", "tests/_support/_receivers.py", "benchmarks/_floor.py"):
        assert not _PRIVATE_MODULE.search(text), text
