"""Shared test helpers have one import surface: ``tests._support``, never one of its submodules
and never another test module.

Every test file, ``tests/conftest.py`` and the benchmarks are read as source and each import
statement that reaches into ``tests`` is checked; the checkers are first shown to catch the
imports they forbid. The package itself keeps the module rules: a docstring and ``__all__`` per submodule,
none over ~600 lines, and an ``__all__`` on its surface that names only what it binds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tests._support

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
SUPPORT = TESTS / "_support"
SURFACE = "tests._support"
MAX_MODULE_LINES = 600


def _imported_modules(source: str, module: str) -> list[str]:
    """Every ``tests`` module an import in ``source`` names; ``module`` is the file's own dotted name
    (relative imports are resolved against it)."""
    package = module.rsplit(".", 1)[0]
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.append(base)
            # `from tests import _x` imports the module tests._x, `from tests import test_x` tests.test_x.
            out.extend(
                f"{base}.{alias.name}" for alias in node.names if alias.name.startswith(("_", "test_"))
            )
    return [name for name in out if name == "tests" or name.startswith("tests.")]


def private_helper_imports(source: str, module: str) -> list[str]:
    """The imports in ``source`` that reach a private test module other than the surface."""
    return [
        name
        for name in _imported_modules(source, module)
        if any(part.startswith("_") for part in name.split(".")[1:]) and name != SURFACE
    ]


def imports_of_test_modules(source: str, module: str) -> list[str]:
    """The imports in ``source`` that reach a test module (``tests.test_*``): a helper one test
    file shares with another belongs in the surface."""
    return [
        name
        for name in _imported_modules(source, module)
        if any(p.startswith("test_") for p in name.split(".")[1:])
    ]


def _importing_files() -> list[tuple[Path, str]]:
    files = [*sorted(TESTS.glob("*.py")), *sorted((ROOT / "benchmarks").glob("*.py"))]
    return [(path, ".".join(path.relative_to(ROOT).with_suffix("").parts)) for path in files]


def test_the_checker_catches_every_way_round_the_surface() -> None:
    forbidden = {
        "from tests._support._corpus import events": ["tests._support._corpus"],
        "import tests._support._engine": ["tests._support._engine"],
        "from tests import _fixtures": ["tests._fixtures"],
        "from tests._otel_harness import ev": ["tests._otel_harness"],
        "from ._support._harness import ev": ["tests._support._harness"],
        "from . import _pipeline": ["tests._pipeline"],
        "def f():\n    from tests._support._receivers import closed_port": ["tests._support._receivers"],
    }
    for source, expected in forbidden.items():
        assert private_helper_imports(source, "tests.test_example") == expected, source
    allowed = (
        "from tests._support import events",
        "from tests import _support as fx",
        "import tests._support",
        "from rulvar_otel.testing import SpanCapture",
    )
    for source in allowed:
        assert private_helper_imports(source, "tests.test_example") == [], source


def test_the_checker_catches_every_import_of_another_test_module() -> None:
    forbidden = {
        "from tests.test_dashboards import dashboards": ["tests.test_dashboards"],
        "import tests.test_alerts": ["tests.test_alerts"],
        "import tests.test_alerts as alerts": ["tests.test_alerts"],
        "from tests import test_model_metrics": ["tests.test_model_metrics"],
        "from tests import _support, test_alerts": ["tests.test_alerts"],
        "from .test_prometheus_live import _cli": [
            "tests.test_prometheus_live",
            "tests.test_prometheus_live._cli",
        ],
        "from . import test_dashboards": ["tests.test_dashboards"],
        "from .test_alerts import ALERTS": ["tests.test_alerts"],
        "def f():\n    from tests.test_dashboards import runnable": ["tests.test_dashboards"],
        "if True:\n    import tests.test_dashboards": ["tests.test_dashboards"],
    }
    for source, expected in forbidden.items():
        assert imports_of_test_modules(source, "tests.test_example") == expected, source
    allowed = (
        "from tests._support import dashboards",
        "from tests import _support",
        "import tests._support",
        "from tests import conftest",
        "from rulvar_otel.testing import SpanCapture",
        "import pytest",
    )
    for source in allowed:
        assert imports_of_test_modules(source, "tests.test_example") == [], source


def test_no_test_file_conftest_or_benchmark_imports_another_test_module() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path, module in _importing_files()
        for name in imports_of_test_modules(path.read_text(encoding="utf-8"), module)
    ]
    assert offenders == []


def test_no_test_file_conftest_or_benchmark_imports_a_helper_submodule() -> None:
    offenders: list[str] = []
    surface_users = 0
    for path, module in _importing_files():
        source = path.read_text(encoding="utf-8")
        offenders.extend(
            f"{path.relative_to(ROOT)}: {name}" for name in private_helper_imports(source, module)
        )
        surface_users += SURFACE in _imported_modules(source, module)
    assert offenders == []
    # The scan reads real imports: most test files, conftest and the benchmarks use the surface.
    assert surface_users >= 40


def test_the_support_package_is_the_only_private_module_under_tests() -> None:
    private = sorted(p.name for p in TESTS.iterdir() if p.name.startswith("_") and p.name != "__init__.py")
    assert private == ["_support"]


@pytest.mark.parametrize("path", sorted(SUPPORT.glob("*.py")), ids=lambda p: p.name)
def test_every_support_module_says_what_it_owns_and_stays_small(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert ast.get_docstring(tree), f"{path.name} has no docstring"
    assert any(
        isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        for node in tree.body
    ), f"{path.name} has no __all__"
    assert len(source.splitlines()) <= MAX_MODULE_LINES


def test_the_surface_exports_exactly_what_it_binds() -> None:
    exported = set(tests._support.__all__)
    assert len(exported) == len(tests._support.__all__), "a name is listed twice"
    bound = {
        name
        for name, value in vars(tests._support).items()
        if not name.startswith("_") and getattr(value, "__module__", SURFACE).startswith(SURFACE)
    }
    missing = {name for name in exported if not hasattr(tests._support, name)}
    assert missing == set()
    # Every helper function and class the package binds is exported (constants are listed by hand).
    assert {name for name in bound if callable(getattr(tests._support, name))} <= exported
