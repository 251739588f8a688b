"""The package as a user installs it: wheel and sdist build, a fresh venv, every asset written.

Builds the sdist and, from it, the wheel (``python -m build``: the wheel is built out of the
unpacked sdist, so the sdist is proven complete too), installs the wheel into a new virtual
environment (dependencies from the package index, as ``pip install`` does for a user), and runs
the installed ``rulvar-otel``: ``--version``, ``assets list``, ``assets write`` (every file equal
byte for byte to the repository's source), the refusal to overwrite a changed file, ``--force``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rulvar_otel.cli import app
from rulvar_otel.cli._assets import AssetGroup, compose_mounts, groups_of, iter_assets

ROOT = Path(__file__).resolve().parents[1]
ASSET_DIRS = ("dashboards", "collector_config")


def repo_assets() -> dict[str, bytes]:
    """The asset sources in the repository: git's tracked files when this is a checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "--", *ASSET_DIRS], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode == 0 and listed.stdout.strip():
        paths = listed.stdout.split()
    else:  # a tree without git metadata (an unpacked sdist)
        paths = [
            p.relative_to(ROOT).as_posix()
            for d in ASSET_DIRS
            for p in (ROOT / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    assert any(p.startswith("dashboards/") for p in paths) and any(
        p == "collector_config/compose.yaml" for p in paths
    ), paths
    return {p: (ROOT / p).read_bytes() for p in sorted(paths)}


def written(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the fresh venv's bin directory, the dist directory holding the sdist and the wheel)."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        # The pure-Python wheel (the compiled one is tests/test_compiled_build.py's).
        env={**os.environ, "RULVAR_OTEL_COMPILE": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bindir = venv / "bin"
    (wheel,) = dist.glob("*.whl")
    install = subprocess.run(
        [str(bindir / "pip"), "install", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    yield bindir, dist


def run_installed(bindir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # From a directory outside the repository, so nothing but the installed package is importable.
    return subprocess.run(
        [str(bindir / "rulvar-otel"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_sdist_and_the_wheel_carry_the_assets_and_the_license(installed: tuple[Path, Path]) -> None:
    _, dist = installed
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    sources = repo_assets()
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert set(sources) <= names
    assert {"LICENSE", "README.md", "pyproject.toml"} <= names
    assert "tests/fixtures/reference/manifest.json" in names  # the suite runs from the sdist too
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n.removeprefix("rulvar_otel/_assets/") for n in whl.namelist() if "/_assets/" in n}
        assert shipped == set(sources)
        for path, data in sources.items():
            assert whl.read(f"rulvar_otel/_assets/{path}") == data, path
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in whl.namelist())


def test_the_installed_command_reports_its_version(installed: tuple[Path, Path], tmp_path: Path) -> None:
    bindir, _ = installed
    result = run_installed(bindir, "--version", cwd=tmp_path)
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert result.returncode == 0 and result.stdout == f"rulvar-otel {expected} (pure Python)\n", result


def test_the_installed_command_writes_every_asset_byte_for_byte(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, _ = installed
    out = tmp_path / "assets"
    result = run_installed(bindir, "assets", "write", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sources = repo_assets()
    assert written(out) == sources
    assert result.stdout == f"wrote {len(sources)} files under {out}\n"

    listing = run_installed(bindir, "assets", "list", cwd=tmp_path)
    assert [line.split("  ")[0] for line in listing.stdout.splitlines()] == sorted(sources)

    # The written pipeline works where it was written: Prometheus's config and rule files check,
    # and the alert rules pass their promtool unit tests.
    from tests._support import require_tool

    promtool = require_tool("promtool")
    prometheus = out / "collector_config" / "prometheus"
    for args in (["check", "config", "prometheus.yml"], ["test", "rules", "alerts_test.yml"]):
        checked = subprocess.run(
            [promtool, *args], cwd=prometheus, capture_output=True, text=True, timeout=60, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_installed_command_refuses_to_overwrite_a_changed_file(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, _ = installed
    out = tmp_path / "assets"
    assert (
        run_installed(bindir, "assets", "write", str(out), "--only", "alerts", cwd=tmp_path).returncode == 0
    )
    rules = out / "collector_config" / "prometheus" / "alerts.yml"
    rules.write_text("# my local edit\n")
    before = rules.stat().st_mtime_ns

    refused = run_installed(bindir, "assets", "write", str(out), cwd=tmp_path)
    assert refused.returncode == 3  # the asset-conflict code, distinct from a usage error
    assert f"{rules} differs from the shipped file" in refused.stderr
    assert "wrote nothing" in refused.stderr and "--force" in refused.stderr
    assert rules.read_text() == "# my local edit\n" and rules.stat().st_mtime_ns == before
    assert not (out / "dashboards").exists()  # nothing else was written either

    forced = run_installed(bindir, "assets", "write", str(out), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert written(out) == repo_assets()


def test_writing_again_changes_nothing_and_says_so(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["assets", "write", str(tmp_path)]).exit_code == 0
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    again = runner.invoke(app, ["assets", "write", str(tmp_path)])
    assert again.exit_code == 0
    assert again.stdout == f"nothing to write under {tmp_path}: {len(mtimes)} files already identical\n"
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == mtimes


@pytest.mark.parametrize(
    ("group", "must", "must_not"),
    [
        ("dashboards", "dashboards/rulvar-runs.json", "collector_config/compose.yaml"),
        ("alerts", "collector_config/prometheus/alerts_test.yml", "collector_config/otelcol-agent.yaml"),
        ("collector", "collector_config/otelcol-gateway-sampler.yaml", "collector_config/compose.yaml"),
        ("compose", "collector_config/grafana/provisioning/datasources/datasources.yaml", None),
    ],
)
def test_only_selects_a_group(tmp_path: Path, group: str, must: str, must_not: str | None) -> None:
    result = CliRunner().invoke(app, ["assets", "write", str(tmp_path), "--only", group])
    assert result.exit_code == 0, result.output
    files = written(tmp_path)
    assert must in files and (must_not is None or must_not not in files)
    groups = {a.path: a.groups for a in iter_assets()}
    assert set(files) == {p for p, g in groups.items() if AssetGroup(group) in g}


def test_the_compose_group_holds_everything_the_compose_file_mounts() -> None:
    import yaml

    compose_paths = {a.path for a in iter_assets() if AssetGroup.compose in a.groups}
    spec = yaml.safe_load((ROOT / "collector_config" / "compose.yaml").read_text())
    for service in spec["services"].values():
        for volume in service.get("volumes", []):
            source = (ROOT / "collector_config" / volume.split(":")[0]).resolve()
            relative = source.relative_to(ROOT).as_posix()
            assert any(p == relative or p.startswith(relative + "/") for p in compose_paths), relative


def test_every_asset_file_belongs_to_a_group() -> None:
    assets = iter_assets()
    assert [a.path for a in assets] == list(repo_assets())
    assert all(a.groups for a in assets)
    # A file added under collector_config/ (say a builder manifest) ships and is selectable.
    mounts = compose_mounts((ROOT / "collector_config" / "compose.yaml").read_text())
    assert groups_of("collector_config/builder/manifest.yaml", mounts) == {AssetGroup.collector}
    assert "dashboards" in mounts and "collector_config/prometheus" in mounts


def test_compose_mounts_are_read_from_the_compose_file() -> None:
    text = """
services:
  a:
    volumes:
      - ./otelcol-agent.yaml:/etc/otelcol/config.yaml:ro
      - "./jaeger/jaeger.yaml:/etc/jaeger.yaml"
      - ../dashboards:/var/lib/grafana/dashboards:ro
      - named-volume:/data
"""
    assert compose_mounts(text) == (
        "collector_config/otelcol-agent.yaml",
        "collector_config/jaeger/jaeger.yaml",
        "dashboards",
    )
