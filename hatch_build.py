"""The wheel build's optional mypyc step: the mapping hot path compiled to C extension modules.

A regular (non-editable) wheel compiles ``COMPILED`` with mypyc and ships each extension module
next to its source (the import system prefers the extension); the wheel is then tagged for this
interpreter and platform. Editable installs stay pure Python, so the dev loop never rebuilds.
``RULVAR_OTEL_COMPILE=0`` forces a pure wheel; without mypyc or a working C compiler the build
says so in one line on stderr and ships the pure modules. The same modules either way: there is
no second implementation to keep equal.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The per-event path: mapping, attributes, records, encoding, and the JSONL read loop. Modules
# mypyc cannot compile as they are (class-level method aliases, slotted dataclasses) stay out.
COMPILED = (
    "rulvar_otel/otel/_attributes.py",
    "rulvar_otel/otel/_clock.py",
    "rulvar_otel/otel/_encode.py",
    "rulvar_otel/otel/_end_inference.py",
    "rulvar_otel/otel/_event_facts.py",
    "rulvar_otel/otel/_mapper.py",
    "rulvar_otel/otel/_mapper_helpers.py",
    "rulvar_otel/otel/_parentage.py",
    "rulvar_otel/otel/_records.py",
    "rulvar_otel/otel/_runs.py",
    "rulvar_otel/otel/_scopes.py",
    "rulvar_otel/otel/_span_state.py",
    "rulvar_otel/otel/_tool_pairing.py",
    "rulvar_otel/otel/semconv.py",
    "rulvar_otel/sources/jsonl.py",
)
# mypyc's shared runtime library for the group (one top-level extension module).
GROUP = "rulvar_otel"


def _pure(reason: str) -> None:
    print(f"rulvar-otel: building pure Python modules ({reason})", file=sys.stderr)


class MypycBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        # mypyc type-checks the compiled modules against the libraries they call, so those must
        # be importable in the build environment (as they are in the runtime one).
        if os.environ.get("RULVAR_OTEL_COMPILE") == "0":
            return []
        project = tomllib.loads((Path(self.root) / "pyproject.toml").read_text(encoding="utf-8"))
        return list(project["project"]["dependencies"])

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        if os.environ.get("RULVAR_OTEL_COMPILE") == "0":
            _pure("RULVAR_OTEL_COMPILE=0")
            return
        try:
            from mypyc.build import mypycify
            from setuptools import Distribution  # type: ignore[import-untyped]
        except ImportError as exc:
            _pure(f"mypyc is not installed: {exc}")
            return
        self._work = Path(tempfile.mkdtemp(prefix="rulvar-otel-mypyc-"))
        try:
            built = self._compile(mypycify, Distribution)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure means a pure wheel
            _pure(f"mypyc or the C compiler failed: {type(exc).__name__}: {exc}".splitlines()[0])
            return
        for path in built:
            build_data["force_include"][str(path)] = path.relative_to(self._work / "lib").as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def _compile(self, mypycify: Any, distribution: Any) -> list[Path]:
        work = self._work
        here = os.getcwd()
        os.chdir(self.root)  # mypy names the modules by their paths from the project root
        try:
            # No project mypy config (its plugins need not be installed here); errors only in
            # the compiled modules count, and an untyped library reads as Any.
            options = ["--config-file", os.devnull, "--follow-imports=silent", "--ignore-missing-imports"]
            extensions = mypycify(
                [*options, *COMPILED], target_dir=str(work / "c"), group_name=GROUP, opt_level="3"
            )
            dist = distribution(
                {
                    "name": "rulvar-otel",
                    "ext_modules": extensions,
                    "script_args": [
                        "build_ext",
                        "--build-lib",
                        str(work / "lib"),
                        "--build-temp",
                        str(work / "tmp"),
                    ],
                }
            )
            dist.parse_command_line()
            dist.run_commands()
        finally:
            os.chdir(here)
        built = sorted(p for p in (work / "lib").rglob("*") if p.is_file())
        if not any(p.name.startswith("_mapper.") for p in built):
            raise RuntimeError("mypyc produced no extension for the mapper")
        return built

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
