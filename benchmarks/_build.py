"""Which build of ``rulvar_otel`` the benchmarks measure, chosen before anything imports it.

``compiled`` (the default) is what ``pip install`` makes on a machine with a C compiler: the
checkout's wheel built with mypyc (``RULVAR_OTEL_COMPILE=1``, no build isolation: the dev
environment holds mypy and hatchling), unpacked and byte-compiled into a cache directory named by
a digest of the sources, so an unchanged checkout builds once. ``sources`` is the checkout's pure
Python, as an editable install runs it. The chosen root goes first on this process's ``sys.path``
and, through ``PYTHONPATH``, on every child's; children start in a scratch directory so their
``sys.path[0]`` (the working directory) cannot shadow it. When the compiled build cannot be made,
the run measures the sources and says so on every figure's banner line.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["BUILDS", "Selected", "compiled_site", "select_build"]

BUILDS: Final = ("compiled", "sources")
_ROOT: Final = Path(__file__).resolve().parent.parent
_CACHE: Final = Path(tempfile.gettempdir()) / "rulvar-otel-bench" / "compiled"
_INPUTS: Final = ("hatch_build.py", "pyproject.toml")


class Selected:
    """The build this run measures: its import root, why it is not the one asked for (if so), and
    the working directory the command started in (relative paths on its command line mean that)."""

    def __init__(self, root: Path, origin: Path, note: str = "") -> None:
        self.root = root
        self.origin = origin
        self.note = note


def _digest() -> str:
    digest = hashlib.sha256()
    files = sorted((_ROOT / "rulvar_otel").rglob("*.py")) + [_ROOT / name for name in _INPUTS]
    for path in files:
        digest.update(str(path.relative_to(_ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def compiled_site() -> Path:
    """The unpacked, byte-compiled compiled wheel of this checkout (built once per source digest).

    Raises ``subprocess.CalledProcessError`` when the wheel cannot be built.
    """
    digest = _digest()
    site = _CACHE / digest / "site"
    if (site / "rulvar_otel").is_dir():
        return site
    scratch = Path(tempfile.mkdtemp(prefix="rulvar-otel-bench-wheel-"))
    try:
        env = dict(os.environ, RULVAR_OTEL_COMPILE="1")
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "-w", str(scratch / "dist"), str(_ROOT)],
            check=True, env=env, capture_output=True, timeout=1800,
        )  # fmt: skip
        (wheel,) = (scratch / "dist").glob("rulvar_otel-*.whl")
        unpacked = scratch / "site"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        # pip byte-compiles what it installs; a fresh process would otherwise compile every module.
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(unpacked / "rulvar_otel")],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        if _digest() != digest:
            # An edit during the build: the wheel may hold some of it; never cache it as either.
            raise RuntimeError("the sources changed while the compiled wheel was being built")
        site.parent.mkdir(parents=True, exist_ok=True)
        os.replace(unpacked, site)  # whole or not at all: a half-built site never looks cached
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return site


def select_build(argv: Sequence[str]) -> Selected:
    """Read ``--build`` from ``argv`` and put that build first on every import path of this run."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--build", choices=BUILDS, default="compiled")
    known, _ = parser.parse_known_args(argv)
    if "rulvar_otel" in sys.modules:
        raise RuntimeError("select_build must run before anything imports rulvar_otel")
    selected = Selected(_ROOT, Path.cwd())
    asks_help = any(arg in ("-h", "--help") for arg in argv)
    if known.build == "compiled" and not asks_help:
        try:
            selected = Selected(compiled_site(), Path.cwd())
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            stderr = getattr(exc, "stderr", None) or b""
            reason = (stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1][:300]
            selected.note = f"the compiled wheel did not build ({reason}): measuring the sources"
    sys.path.insert(0, str(selected.root))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(selected.root), str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    # Children run `python -c ...`, whose sys.path[0] is their working directory: not the checkout.
    os.chdir(tempfile.gettempdir())
    return selected
