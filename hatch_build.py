"""The wheel's optional compiled build: the mapping hot path compiled with mypyc.

A regular (non-editable) wheel build compiles the modules in ``COMPILED`` with mypyc, the same
Python sources, and ships the extension modules beside them (the import system prefers an
extension module over the ``.py`` of the same name), so the wheel becomes platform-specific.
Editable installs stay pure Python, so the development loop runs the sources as they are.

``RULVAR_OTEL_COMPILE``: unset tries to compile and falls back to the pure-Python wheel with one
line on stderr when no C compiler (or ``Python.h``) works, mypyc is missing or the compile fails;
``0`` builds the pure-Python wheel; ``1`` requires the compiled build (any failure fails the build).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The per-event path: the JSONL read, a recorded run's record, the drain's pass, the run router,
# the mapper (event -> span records -> OTLP request) and its helpers, the direct sink's batching,
# the metric folds and aggregates, the progress fold and its plain-text views; the rest of the
# package stays interpreted (little time is spent there).
COMPILED = (
    "rulvar_otel/otel/_mapper.py",
    "rulvar_otel/otel/_mapper_helpers.py",
    "rulvar_otel/otel/_scopes.py",
    "rulvar_otel/core/lifecycle.py",
    "rulvar_otel/otel/_attributes.py",
    "rulvar_otel/otel/_records.py",
    "rulvar_otel/otel/_event_facts.py",
    "rulvar_otel/otel/_span_state.py",
    "rulvar_otel/otel/_deferred.py",
    "rulvar_otel/otel/_opener.py",
    "rulvar_otel/otel/_span_source.py",
    "rulvar_otel/otel/_tool_pairing.py",
    "rulvar_otel/otel/_wire.py",
    "rulvar_otel/otel/_clock.py",
    "rulvar_otel/otel/semconv.py",
    "rulvar_otel/sources/jsonl.py",
    "rulvar_otel/core/progress.py",
    "rulvar_otel/core/_progress_rows.py",
    "rulvar_otel/core/wire.py",
    "rulvar_otel/otel/_runs.py",
    "rulvar_otel/otel/_span_batches.py",
    "rulvar_otel/core/_drain_pass.py",
    "rulvar_otel/core/_run_record.py",
    "rulvar_otel/otel/metrics/_folds.py",
    "rulvar_otel/otel/metrics/_folds_genai.py",
    "rulvar_otel/otel/metrics/__init__.py",
    "rulvar_otel/otel/direct_metrics.py",
    "rulvar_otel/cli/_plain_progress.py",
)

# Exit codes of the build script below that mean "this machine cannot compile" (fall back).
_NO_COMPILER = 3
_NO_MYPYC = 4

# Run in a scratch copy of the package (setuptools must not read the project's pyproject.toml):
# probe the C compiler and Python.h first, so a machine without them falls back in a second
# instead of after mypyc's type check.
_BUILD_SCRIPT = """
import sys, sysconfig
try:
    import setuptools
    from distutils.ccompiler import new_compiler
    from distutils.sysconfig import customize_compiler
    compiler = new_compiler()
    customize_compiler(compiler)
    with open("probe.c", "w") as f:
        f.write("#include <Python.h>\\nint probe(void) { return 0; }\\n")
    compiler.compile(["probe.c"], include_dirs=[sysconfig.get_paths()["include"]])
except Exception as exc:
    print(f"no working C compiler ({type(exc).__name__}: {str(exc).strip()[:200]})", file=sys.stderr)
    sys.exit(%(no_compiler)d)
try:
    from mypyc.build import mypycify
except ImportError as exc:
    print(f"mypyc is not installed ({exc})", file=sys.stderr)
    sys.exit(%(no_mypyc)d)
from setuptools import setup
setup(
    name="rulvar_otel_compiled",
    ext_modules=mypycify(
        ["--config-file", "mypy.ini", *sys.argv[1:]], opt_level="3", group_name="rulvar_otel"
    ),
    script_args=["build_ext", "--inplace"],
)
"""


def _mypy_ini() -> str:
    """The type check mypyc runs before compiling.

    mypyc compiles from the types mypy sees, so the build requirements hold the packages whose
    classes the compiled modules subclass (``Span``, ``Tracer``): a class on an unresolved base
    would compile to a broken extension, which ``disallow_subclassing_any`` turns into a failed
    (so pure-Python) build instead. Other third-party names may be absent (``Any``), and errors
    outside the compiled modules are the project's own mypy run's business, not the build's.
    """
    lines = ["[mypy]", "ignore_missing_imports = True", "[mypy-rulvar_otel.*]", "ignore_errors = True"]
    for path in COMPILED:
        module = path.removesuffix(".py").replace("/", ".")
        lines += [f"[mypy-{module}]", "ignore_errors = False", "disallow_subclassing_any = True"]
    return "\n".join(lines) + "\n"


class CompiledBuildHook(BuildHookInterface):  # type: ignore[misc]
    """Compiles ``COMPILED`` with mypyc into a scratch directory and ships the extensions."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._scratch: Path | None = None
        if self.target_name != "wheel" or version == "editable":
            return
        mode = os.environ.get("RULVAR_OTEL_COMPILE", "").strip()
        if mode == "0":
            self._say("RULVAR_OTEL_COMPILE=0: building the pure-Python wheel")
            return
        built = self._compile(required=mode == "1")
        if not built:
            return
        for artifact, relative in built:
            build_data["force_include"][str(artifact)] = relative
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self._say(f"compiled {len(COMPILED)} modules with mypyc")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _compile(self, *, required: bool) -> list[tuple[Path, str]]:
        root = Path(self.root)
        self._scratch = scratch = Path(tempfile.mkdtemp(prefix="rulvar-otel-mypyc-"))
        skip = shutil.ignore_patterns("__pycache__", "*.so")
        shutil.copytree(root / "rulvar_otel", scratch / "rulvar_otel", ignore=skip)
        (scratch / "mypy.ini").write_text(_mypy_ini())
        (scratch / "build_compiled.py").write_text(
            _BUILD_SCRIPT % {"no_compiler": _NO_COMPILER, "no_mypyc": _NO_MYPYC}
        )
        run = subprocess.run(
            [sys.executable, "build_compiled.py", *COMPILED],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            reason = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
            if run.returncode not in (_NO_COMPILER, _NO_MYPYC):
                reason = f"the mypyc build failed: {reason}"
            if required:
                raise RuntimeError(
                    f"RULVAR_OTEL_COMPILE=1 and {reason}\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
                )
            self._say(f"building the pure-Python wheel: {reason}")
            return []
        suffixes = tuple(_extension_suffixes())
        return [
            (path, path.relative_to(scratch).as_posix())
            for path in sorted(scratch.rglob("*"))
            if path.name.endswith(suffixes) and "build" not in path.relative_to(scratch).parts
        ]

    @staticmethod
    def _say(line: str) -> None:
        print(f"rulvar-otel: {line}", file=sys.stderr)


def _extension_suffixes() -> list[str]:
    from importlib.machinery import EXTENSION_SUFFIXES

    return list(EXTENSION_SUFFIXES)
