"""scripts/build_pipeline.sh: cached binaries are reused, and a missing or old Go fails clearly.

The build itself runs once per machine (every live test and `validate` test goes through it);
these tests pin its contract around that: the cache key follows the manifest, and without a
usable Go the script stops with exit 1 and names the version it needs, never a silent skip.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests._support import BUILD_TIMEOUT_S, ROOT, binaries

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

SCRIPT = ROOT / "scripts" / "build_pipeline.sh"
GO_NEEDED = "Go 1.26.0 or newer is needed"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def _without_go(tmp_path: Path, **extra: str) -> dict[str, str]:
    path = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "go").exists())
    return {**os.environ, "PATH": path, "RULVAR_OTEL_CACHE": str(tmp_path / "cache"), **extra}


def test_a_built_pipeline_is_reused_without_go(tmp_path: Path) -> None:
    built = binaries()
    result = _run(
        _without_go(tmp_path, GO=str(tmp_path / "no-go"), RULVAR_OTEL_CACHE=str(built.otelcol.parents[1]))
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"OTELCOL_BIN={built.otelcol}", f"JAEGER_BIN={built.jaeger}"]


def test_no_go_toolchain_fails_naming_the_version(tmp_path: Path) -> None:
    result = _run(_without_go(tmp_path, GO=str(tmp_path / "no-go")), "otelcol")
    assert result.returncode == 1
    assert GO_NEEDED in result.stderr and "no Go toolchain found" in result.stderr
    assert result.stdout == ""


def test_an_old_go_fails_naming_both_versions(tmp_path: Path) -> None:
    old_go = tmp_path / "go"
    old_go.write_text('#!/bin/sh\n[ "$1 $2" = "env GOVERSION" ] && echo go1.21.4\n', encoding="utf-8")
    old_go.chmod(0o755)
    result = _run(_without_go(tmp_path, GO=str(old_go)), "jaeger")
    assert result.returncode == 1
    assert f"Go 1.21.4 at {old_go} is too old: {GO_NEEDED}" in result.stderr


def test_the_cache_key_follows_the_manifest(tmp_path: Path) -> None:
    built = binaries()
    manifest = (ROOT / "collector_config" / "builder" / "otelcol-rulvar.yaml").read_bytes()
    key = hashlib.sha256(b"v0.161.0\n" + manifest).hexdigest()[:16]
    assert built.otelcol.name == f"otelcol-rulvar-{key}"
    jaeger = ROOT / "collector_config" / "builder" / "jaeger"
    jaeger_key = hashlib.sha256(
        (jaeger / "go.mod").read_bytes() + (jaeger / "go.sum").read_bytes()
    ).hexdigest()
    assert built.jaeger.name == f"jaeger-{jaeger_key[:16]}"


def test_an_unknown_target_is_a_usage_error(tmp_path: Path) -> None:
    result = _run(_without_go(tmp_path), "tempo")
    assert result.returncode == 1 and "unknown target 'tempo'" in result.stderr
