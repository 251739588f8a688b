"""The optional mypyc build: the compiled wheel exports exactly what the pure-Python sources export.

Builds the compiled wheel once (``RULVAR_OTEL_COMPILE=1``: a failed compile fails the build
instead of falling back) and a wheel where no C compiler works (``CC=false``), installs each into
a fresh virtual environment (the wheel alone; its dependencies come from this interpreter's
site-packages through a ``.pth`` line, so nothing is fetched and the installed package shadows the
checkout), and runs them from a directory outside the repository: the mapper is an extension
module, ``--version`` names the build, every corpus stream gives the same OTLP bytes compiled and
pure, and the equality suites (and the metric folds' reference tests) pass against the compiled package.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

# Run by both interpreters: every stream's direct requests and OTLP/JSON lines and its SDK-path
# request, with the deterministic ids of RulvarIdGenerator (as tests/test_direct_equality.py makes
# them, under a fixed resource).
_EXPORT_EVERY_STREAM = """
import sys
sys.path.append(sys.argv[1])  # the checkout's tests, after the installed package
import rulvar_otel.otel._mapper as mapper
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rulvar_otel.otel import export_events, semconv
from rulvar_otel.otel.direct import export_events_direct
from rulvar_otel.otel.ids import RulvarIdGenerator
from tests._support import events, outcome, stream_names

RESOURCE = Resource({"service.name": "equality"})  # the default one has a random instance id
LIMITS = SpanLimits(max_events=SpanLimits.UNSET)


class Batches(SpanExporter):
    def __init__(self):
        self.batches = []

    def export(self, spans):
        self.batches.append(spans)
        return SpanExportResult.SUCCESS


def sdk_request(name):
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE, span_limits=LIMITS, id_generator=RulvarIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(
        semconv.INSTRUMENTATION_SCOPE, semconv.INSTRUMENTATION_VERSION, schema_url=semconv.SCHEMA_URL
    )
    export_events(events(name), tracer, outcome=outcome(name))
    return encode_spans(memory.get_finished_spans())


print(mapper.__file__)
with open(sys.argv[2], "wb") as out:
    for name in stream_names():
        kept = Batches()
        export_events_direct(
            events(name), kept, outcome=outcome(name), resource=RESOURCE,
            id_generator=RulvarIdGenerator(), limits=LIMITS,
        )
        out.write(name.encode() + b"\\n")
        for batch in kept.batches:
            out.write(batch.request().SerializeToString(deterministic=True).hex().encode() + b"\\n")
            out.write(batch.otlp_json() + b"\\n")
        out.write(sdk_request(name).SerializeToString(deterministic=True).hex().encode() + b"\\n")
print(",".join(m for m in ("librt", "mypy", "mypyc", "mypy_extensions") if m in sys.modules))
"""

_WHICH_BUILD = """
import sys
from importlib.machinery import EXTENSION_SUFFIXES

import rulvar_otel.otel._mapper as mapper


def test_the_installed_compiled_mapper_is_the_one_under_test() -> None:
    assert mapper.__file__.startswith(sys.prefix) and mapper.__file__.endswith(tuple(EXTENSION_SUFFIXES))
"""


def _build_wheel(dist: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _venv_with(wheel: Path, base: Path) -> Path:
    """A fresh venv holding ``wheel``; its dependencies are this interpreter's (a ``.pth`` line)."""
    venv.create(base, with_pip=True)
    bindir = base / "bin"
    purelib = subprocess.run(
        [str(bindir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "_rulvar_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [str(bindir / "pip"), "install", "--disable-pip-version-check", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return bindir


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the compiled venv's bin directory, the compiled wheel)."""
    base = tmp_path_factory.mktemp("compiled")
    built = _build_wheel(base / "dist", RULVAR_OTEL_COMPILE="1")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "rulvar-otel: compiled" in built.stderr
    (wheel,) = (base / "dist").glob("*.whl")
    yield _venv_with(wheel, base / "venv"), wheel


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


def _is_extension(path: str) -> bool:
    return path.endswith(tuple(EXTENSION_SUFFIXES))


def test_the_compiled_wheel_is_platform_specific_and_installs_the_mapper_compiled(
    compiled: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, wheel = compiled
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    where = subprocess.run(
        [str(bindir / "python"), "-c", "import rulvar_otel.otel._mapper as m; print(m.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert _is_extension(where) and where.startswith(str(bindir.parent)), where
    version = run_installed(bindir, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout == f"rulvar-otel {VERSION} (compiled with mypyc)\n"


def test_compiled_and_pure_builds_export_the_same_otlp_bytes_for_every_stream(
    compiled: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, _ = compiled
    script = tmp_path / "export_every_stream.py"
    script.write_text(_EXPORT_EVERY_STREAM)
    outputs: dict[str, bytes] = {}
    for label, python in (("compiled", str(bindir / "python")), ("pure", sys.executable)):
        out = tmp_path / f"{label}.out"
        run = subprocess.run(
            [python, str(script), str(ROOT), str(out)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        mapper_file, runtime_modules = run.stdout.splitlines()
        assert _is_extension(mapper_file) == (label == "compiled"), (label, mapper_file)
        # The compiled modules need nothing of mypy at run time beyond the runtime dependencies.
        assert runtime_modules in ("", "mypy_extensions"), runtime_modules
        outputs[label] = out.read_bytes()
    assert outputs["compiled"].count(b"\n") >= 4 * 40  # every corpus stream, at least four lines each
    assert outputs["compiled"] == outputs["pure"]


def test_the_equality_and_fold_suites_pass_against_the_compiled_package(
    compiled: tuple[Path, Path], tmp_path: Path
) -> None:
    bindir, _ = compiled
    (tmp_path / "test_which_build.py").write_text(_WHICH_BUILD)
    run = subprocess.run(
        [
            str(bindir / "python"),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            # The checkout goes after site-packages, so `rulvar_otel` is the installed one.
            "--import-mode=append",
            # The large stream's trees are compared byte for byte above; here they would double the time.
            "-k",
            "not large",
            str(tmp_path / "test_which_build.py"),
            str(ROOT / "tests" / "test_conformance.py"),
            str(ROOT / "tests" / "test_direct_equality.py"),
            str(ROOT / "tests" / "test_metrics_registry_and_reference_folds.py"),
            str(ROOT / "tests" / "test_direct_metrics.py"),
            str(ROOT / "tests" / "test_metrics_batching.py"),
            str(ROOT / "tests" / "test_metrics_masking_and_cardinality.py"),
            str(ROOT / "tests" / "test_metrics_settling_and_replay.py"),
            str(ROOT / "tests" / "test_model_metrics.py"),
            # The compiled helpers the mapper, the folds and the progress views share.
            str(ROOT / "tests" / "test_agent_lifecycle.py"),
            str(ROOT / "tests" / "test_mapper_pairing_and_scopes.py"),
            str(ROOT / "tests" / "test_progress_milestones.py"),
            str(ROOT / "tests" / "test_progress.py"),
            # The compiled drain pass, run record, span batches, record limits and request bytes.
            str(ROOT / "tests" / "test_drain.py"),
            str(ROOT / "tests" / "test_run_source.py"),
            str(ROOT / "tests" / "test_direct_delivery.py"),
            str(ROOT / "tests" / "test_record_limits.py"),
            str(ROOT / "tests" / "test_wire_bytes.py"),
            # Hostile events through the compiled mapper (typed reads must never raise).
            str(ROOT / "tests" / "test_robustness.py"),
            str(ROOT / "tests" / "test_content_never_exported.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout


def test_a_wheel_built_without_a_working_c_compiler_is_pure_python(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    base = tmp_path_factory.mktemp("no-compiler")
    built = _build_wheel(base / "dist", CC="false", RULVAR_OTEL_COMPILE="")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    fallback = [line for line in built.stderr.splitlines() if line.startswith("rulvar-otel:")]
    assert len(fallback) == 1 and "pure-Python wheel: no working C compiler" in fallback[0], built.stderr
    (wheel,) = (base / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    bindir = _venv_with(wheel, base / "venv")
    version = run_installed(bindir, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout == f"rulvar-otel {VERSION} (pure Python)\n"
