"""``rulvar-otel assets``: list and write the observability assets this package ships.

The Grafana dashboards (``dashboards/``) and the pipeline in ``collector_config/`` (collector
configs, Prometheus config with the alert rules and their promtool tests, Alertmanager, Tempo,
Grafana provisioning, the compose file) are top-level sources in the repository; the wheel
carries them as package data under ``rulvar_otel/_assets/``. A source checkout (an editable
install) reads them from the repository itself.

``assets write DIR`` lays them out as in the repository (``DIR/dashboards/...``,
``DIR/collector_config/...``), so the compose file's relative mounts work from
``DIR/collector_config``. A file already there with other content is never overwritten without
``--force``: the command then writes nothing and names the files (exit code 3). Identical files
are left alone.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from typing import Annotated, Final

import typer

from rulvar_otel.cli._text import EXIT_CONFLICT, EXIT_USAGE, echo, plural, say

__all__ = [
    "Asset",
    "AssetGroup",
    "compose_mounts",
    "groups_of",
    "iter_assets",
    "register",
    "select_assets",
    "write_assets",
]

_ROOTS: Final = ("dashboards", "collector_config")


class AssetGroup(StrEnum):
    """What ``--only`` selects. A file can belong to several groups."""

    dashboards = "dashboards"
    alerts = "alerts"
    collector = "collector"
    compose = "compose"


COMPOSE_FILE: Final = "collector_config/compose.yaml"
_ALERTS: Final = ("collector_config/prometheus/alerts", "collector_config/alertmanager/")
# A relative bind mount in the compose file: "- ./prometheus:/etc/prometheus:ro".
_MOUNT = re.compile(r"""^\s*-\s*["']?(\.{1,2}/[^:"'\s]+)\s*:""", re.M)


def compose_mounts(compose_text: str) -> tuple[str, ...]:
    """The repository-relative paths the compose file bind-mounts (files or directories)."""
    base = PurePosixPath(COMPOSE_FILE).parent
    mounts: list[str] = []
    for source in _MOUNT.findall(compose_text):
        parts: list[str] = list(base.parts)
        for part in PurePosixPath(source).parts:
            if part == "..":
                if parts:
                    parts.pop()
            elif part != ".":
                parts.append(part)
        mounts.append("/".join(parts))
    return tuple(mounts)


def groups_of(path: str, mounts: tuple[str, ...] = ()) -> frozenset[AssetGroup]:
    """The groups a repository-relative asset path belongs to.

    ``mounts``: what the compose file mounts (:func:`compose_mounts`); the compose group is the
    compose file and all of those, so ``--only compose`` writes a stack that comes up.
    """
    groups: set[AssetGroup] = set()
    if path.startswith("dashboards/"):
        groups.add(AssetGroup.dashboards)
    if path.startswith(_ALERTS):
        groups.add(AssetGroup.alerts)
    mounted = any(path == m or path.startswith(m + "/") for m in mounts)
    if path == COMPOSE_FILE or mounted:
        groups.add(AssetGroup.compose)
    if path.startswith("collector_config/") and path != COMPOSE_FILE and not path.startswith(_ALERTS):
        # Collector configs, the builder manifest, and anything else added there; the stack's
        # Prometheus, Tempo and Grafana provisioning are the compose group's alone.
        stack_only = mounted and not path.startswith("collector_config/otelcol")
        if not stack_only:
            groups.add(AssetGroup.collector)
    return frozenset(groups)


@dataclass(frozen=True)
class Asset:
    """One shipped file: its repository-relative path, where to read it, and its groups."""

    path: str
    source: Traversable
    groups: frozenset[AssetGroup]

    def read_bytes(self) -> bytes:
        return self.source.read_bytes()


def _asset_root() -> Traversable:
    """The packaged assets, or the repository of a source checkout."""
    packaged = resources.files("rulvar_otel") / "_assets"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2]


def _walk(node: Traversable, prefix: PurePosixPath) -> Iterator[tuple[str, Traversable]]:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name.startswith(".") or child.name == "__pycache__":
            continue
        if child.is_dir():
            yield from _walk(child, prefix / child.name)
        elif child.is_file():
            yield str(prefix / child.name), child


def iter_assets() -> list[Asset]:
    """Every shipped asset, sorted by path."""
    root = _asset_root()
    found: dict[str, Traversable] = {}
    for top in _ROOTS:
        node = root / top
        if node.is_dir():
            found.update(_walk(node, PurePosixPath(top)))
    compose = found.get(COMPOSE_FILE)
    mounts = compose_mounts(compose.read_text(encoding="utf-8")) if compose is not None else ()
    return [Asset(path, found[path], groups_of(path, mounts)) for path in sorted(found)]


def select_assets(assets: Iterable[Asset], only: Iterable[AssetGroup] = ()) -> list[Asset]:
    wanted = set(only)
    if not wanted:
        return list(assets)
    return [a for a in assets if a.groups & wanted]


@dataclass(frozen=True)
class WriteReport:
    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    conflicts: tuple[str, ...]  # files that differ and were left alone (no --force)
    # Paths in the way that are never replaced, even with --force (a file where a directory
    # must be, a directory where a file must be): any of them, and nothing is written.
    blocked: tuple[Path, ...] = ()


def _obstacle(directory: Path, target: Path) -> Path | None:
    """What stands where ``target`` (or a directory on the way to it) must go, if anything."""
    relative = target.relative_to(directory)
    for depth in range(len(relative.parts)):
        ancestor = directory.joinpath(*relative.parts[:depth])
        if (ancestor.exists() or ancestor.is_symlink()) and not ancestor.is_dir():
            return ancestor
    if (target.exists() or target.is_symlink()) and not target.is_file():
        return target
    return None


def write_assets(assets: Iterable[Asset], directory: Path, *, force: bool = False) -> WriteReport:
    """Write ``assets`` under ``directory``; nothing is written on a conflict (without ``force``)
    or when anything is in the way (:attr:`WriteReport.blocked`): every target is checked first."""
    plan: list[tuple[Asset, Path, bytes]] = []
    unchanged: list[str] = []
    conflicts: list[str] = []
    blocked: dict[Path, None] = {}
    for asset in assets:
        target = directory.joinpath(*PurePosixPath(asset.path).parts)
        data = asset.read_bytes()
        obstacle = _obstacle(directory, target)
        if obstacle is not None:
            blocked.setdefault(obstacle)
            continue
        if target.is_file():
            if target.read_bytes() == data:
                unchanged.append(asset.path)
                continue
            if not force:
                conflicts.append(asset.path)
                continue
        plan.append((asset, target, data))
    if blocked or (conflicts and not force):
        return WriteReport((), tuple(unchanged), tuple(conflicts), tuple(blocked))
    written: list[str] = []
    for asset, target, data in plan:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Beside the target, then renamed: a failed write never leaves half a file.
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(temp, 0o644)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        written.append(asset.path)
    return WriteReport(tuple(written), tuple(unchanged), tuple(conflicts))


app = typer.Typer(
    name="assets",
    help="List or write the dashboards, alert rules, collector configs and compose stack this package ships.",
    no_args_is_help=True,
    add_completion=False,
)

OnlyOption = Annotated[
    list[AssetGroup] | None,
    typer.Option(
        "--only",
        metavar="dashboards|alerts|collector|compose",
        help="Only this group: dashboards, alerts, collector or compose (the stack and all it mounts). "
        "Repeatable.",
        case_sensitive=False,
    ),
]


@app.command("list")
def list_command(only: OnlyOption = None) -> None:
    """Print every shipped asset with its size and groups."""
    for asset in select_assets(iter_assets(), only or ()):
        groups = ", ".join(g.value for g in AssetGroup if g in asset.groups)
        echo(f"{asset.path}  {len(asset.read_bytes())} bytes  ({groups})")


@app.command("write")
def write_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write (created if missing).")],
    only: OnlyOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files whose content differs from the shipped one.")
    ] = False,
) -> None:
    """Write the assets under DIR, laid out as in the repository (DIR/dashboards, DIR/collector_config)."""
    assets = select_assets(iter_assets(), only or ())
    if not assets:
        say("error: this installation ships no assets")
        raise typer.Exit(EXIT_USAGE)
    try:
        report = write_assets(assets, directory, force=force)
    except OSError as exc:
        say(f"error: cannot write under {directory}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE) from None
    if report.blocked:
        for obstacle in report.blocked:
            kind = (
                "a directory where a file must go"
                if obstacle.is_dir()
                else "not a directory; files go under it"
            )
            say(f"{obstacle} is in the way: {kind} (never replaced)")
        say(f"error: wrote nothing: {plural(len(report.blocked), 'path')} in the way")
        raise typer.Exit(EXIT_CONFLICT)
    if report.conflicts and not force:
        for path in report.conflicts:
            say(f"{directory / path} differs from the shipped file")
        say(
            f"error: wrote nothing: {plural(len(report.conflicts), 'changed file')} "
            "would be overwritten (pass --force to replace)"
        )
        raise typer.Exit(EXIT_CONFLICT)
    same = f"{plural(len(report.unchanged), 'file')} already identical"
    if not report.written:
        echo(f"nothing to write under {directory}: {same}")
    else:
        echo(
            f"wrote {plural(len(report.written), 'file')} under {directory}"
            + (f" ({same})" if report.unchanged else "")
        )


def register(parent: typer.Typer) -> None:
    """Add ``assets list`` and ``assets write`` to ``parent``."""
    parent.add_typer(app, name="assets")
