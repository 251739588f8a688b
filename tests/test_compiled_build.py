"""The mypyc-compiled wheel behaves exactly as the pure modules do, and the build falls back cleanly.

Builds the wheel once (compiled: the build hook runs mypyc on the hot path), installs it into a
fresh virtual environment, and runs the equality suites (conformance, direct vs SDK spans,
direct vs SDK metrics) against that install from a copy of the tests outside the source tree, so
only the installed extension modules are importable. Every corpus stream's OTLP request and
OTLP/JSON line, with deterministic ids, is byte-identical between the compiled install and the
pure source. A wheel built where no C compiler works (``CC=false``) is pure, says so, and passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Prints, per corpus stream, the direct path's request (protobuf, deterministic serialisation)
# and OTLP/JSON line as hex, one stream a line: the same code run by both installs.
# The resource is built without Resource.create's per-process service.instance.id.
_DUMP = """
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
import tests.test_direct_equality as equality
from tests._support import stream_names
from tests.test_direct_equality import _UNLIMITED, _direct
equality._RESOURCE = Resource({SERVICE_NAME: "equality"})
for name in stream_names():
    batch = _direct(name, _UNLIMITED)
    request = batch.request().SerializeToString(deterministic=True)
    print(name, request.hex(), batch.otlp_json().hex())
"""


def _build(dist: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **env},
    )


def _install(wheel: Path, venv: Path) -> Path:
    """A fresh venv holding ``wheel``; its dependencies and the test tools come from this
    interpreter's site-packages, after the venv's own (a .pth line, so no editable path rides in)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "zz_outer_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _tree(base: Path) -> Path:
    """The tests, docs and pytest settings, without the package sources."""
    tree = base / "tree"
    tree.mkdir()
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs", tree / "docs")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _run(python: Path, tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *args], cwd=tree, capture_output=True, text=True, timeout=600, check=False
    )


def _version(python: Path, tree: Path) -> str:
    shown = subprocess.run(
        [str(python.parent / "rulvar-otel"), "--version"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def _mapper_file(python: Path, tree: Path) -> str:
    shown = _run(python, tree, "-c", "import rulvar_otel.otel._mapper as m; print(m.__file__)")
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip()


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the compiled install's python, a tests tree outside the sources, the wheel)."""
    base = tmp_path_factory.mktemp("compiled")
    built = _build(base / "dist")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (base / "dist").glob("*.whl")
    return _install(wheel, base / "venv"), _tree(base), wheel


def test_the_compiled_wheel_is_platform_specific_and_ships_the_extensions(
    compiled: tuple[Path, Path, Path],
) -> None:
    python, tree, wheel = compiled
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    assert f"rulvar_otel/otel/_mapper{ext}" in names and "rulvar_otel/otel/_mapper.py" in names
    assert f"rulvar_otel/sources/jsonl{ext}" in names
    mapper = _mapper_file(python, tree)
    assert mapper.endswith(ext) and mapper.startswith(str(python.parents[1])), mapper
    assert _version(python, tree).endswith(" (compiled: mypyc)\n")


def test_the_equality_suites_pass_against_the_compiled_install(compiled: tuple[Path, Path, Path]) -> None:
    python, tree, _ = compiled
    suites = [
        "tests/test_conformance.py",
        "tests/test_direct_equality.py",
        "tests/test_direct_metrics.py::test_the_direct_aggregates_equal_the_sdk_meter_paths_points",
    ]
    result = _run(python, tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *suites)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout


def test_compiled_and_pure_export_byte_identical_otlp_for_every_stream(
    compiled: tuple[Path, Path, Path],
) -> None:
    python, tree, _ = compiled
    on_compiled = _run(python, tree, "-c", _DUMP)
    assert on_compiled.returncode == 0, on_compiled.stderr[-3000:]
    on_pure = subprocess.run(
        [sys.executable, "-c", _DUMP], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert on_pure.returncode == 0, on_pure.stderr[-3000:]
    compiled_lines = on_compiled.stdout.splitlines()
    assert len(compiled_lines) > 5
    for got, want in zip(compiled_lines, on_pure.stdout.splitlines(), strict=True):
        assert got == want, got.split()[0]


def test_a_build_without_a_c_compiler_is_pure_and_says_so(tmp_path: Path) -> None:
    built = _build(tmp_path / "dist", CC="false")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    said = [line for line in built.stderr.splitlines() if line.startswith("rulvar-otel: building pure")]
    assert len(said) == 1 and "C compiler failed" in said[0], built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    python, tree = _install(wheel, tmp_path / "venv"), _tree(tmp_path)
    assert _mapper_file(python, tree).endswith("_mapper.py")
    assert _version(python, tree).endswith(" (pure Python)\n")
    subset = _run(
        python,
        tree,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_direct_equality.py::test_the_direct_path_exports_what_the_sdk_path_exports",
    )
    assert subset.returncode == 0, subset.stdout[-3000:]
