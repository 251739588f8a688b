"""``assets write DIR`` checks every target before writing anything: whatever is in the way is named,
and nothing is written, with or without ``--force``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support import run_cli


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory or a link)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in sorted(root.rglob("*"))
    }


def _in_the_way(kind: str, root: Path) -> tuple[Path, Path]:
    """(DIR, the path in the way) for one kind of obstacle."""
    out = root / "assets"
    if kind == "DIR is a file":
        out.write_text("not a directory\n")
        return out, out
    out.mkdir()
    if kind == "a top-level directory is a file":
        (out / "dashboards").write_text("a file\n")
        return out, out / "dashboards"
    if kind == "a nested directory is a file":
        (out / "collector_config" / "prometheus").mkdir(parents=True)
        (out / "collector_config" / "prometheus" / "alerts.yml").mkdir()
        return out, out / "collector_config" / "prometheus" / "alerts.yml"
    if kind == "a link to a file stands for a directory":
        (root / "elsewhere").write_text("x\n")
        (out / "collector_config").symlink_to(root / "elsewhere")
        return out, out / "collector_config"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "DIR is a file",
        "a top-level directory is a file",
        "a nested directory is a file",
        "a link to a file stands for a directory",
    ],
)
@pytest.mark.parametrize("force", [False, True])
def test_anything_in_the_way_is_named_and_nothing_is_written(tmp_path: Path, kind: str, force: bool) -> None:
    directory, obstacle = _in_the_way(kind, tmp_path)
    before = _tree(tmp_path)
    code, out, err = run_cli("assets", "write", str(directory), *(["--force"] if force else []))
    assert code == 3  # the asset-conflict exit code (docs/cli.md)
    assert f"{obstacle} is in the way" in err
    assert "wrote nothing: 1 path in the way" in err
    assert "wrote " not in out
    assert _tree(tmp_path) == before


def test_every_obstacle_is_named_at_once(tmp_path: Path) -> None:
    directory = tmp_path / "assets"
    directory.mkdir()
    (directory / "dashboards").write_text("a file\n")
    (directory / "collector_config").write_text("a file\n")
    code, _, err = run_cli("assets", "write", str(directory))
    assert code == 3
    assert f"{directory / 'dashboards'} is in the way" in err
    assert f"{directory / 'collector_config'} is in the way" in err
    assert "wrote nothing: 2 paths in the way" in err
    assert sorted(p.name for p in directory.iterdir()) == ["collector_config", "dashboards"]


def test_with_nothing_in_the_way_every_asset_is_written(tmp_path: Path) -> None:
    directory = tmp_path / "assets"
    code, out, err = run_cli("assets", "write", str(directory))
    assert code == 0, err
    assert (directory / "dashboards" / "rulvar-runs.json").is_file()
    assert out.startswith("wrote ")
