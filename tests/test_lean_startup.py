"""Each command imports what it uses: a traces-only export loads no event model, pydantic, metrics
SDK, Prometheus exporter, engine, SSE client, HTTP transport or rich; ``import rulvar_otel`` loads
none of them either."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests._support import STREAMS, HttpTraceReceiver

HEAVY = (
    "rulvar_otel.core.events",
    # A recorded stream's outcome is a plain class, and the CLI parses options without models.
    "pydantic",
    "opentelemetry.sdk.metrics",
    "opentelemetry.exporter.prometheus",
    "prometheus_client",
    "rulvar_otel.engine",
    "rulvar_otel.sources.sse",
    "rulvar_otel.cli._inspect",
    # Only an OTLP/HTTP export needs the bounded HTTP transport and its client.
    "httpcore",
    "rulvar_otel.export._http_transport",
    # rich draws the terminal views only: milestones on a pipe, and --no-tree, never load it.
    "rich",
)


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_a_traces_only_export_imports_no_metrics_engine_or_event_models(tmp_path: Path) -> None:
    out = tmp_path / "x.otlp.jsonl"
    argv = ["rulvar-otel", "export", str(STREAMS / "tools.jsonl"), "--out", str(out), "--no-tree"]
    code = (
        "import sys\nfrom rulvar_otel.cli import main\n"
        f"sys.argv = {argv!r}\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code"
    )
    assert _loaded_after(code) == set()
    assert out.stat().st_size > 0


def test_asking_for_metrics_loads_the_metrics_sdk(tmp_path: Path) -> None:
    argv = ["rulvar-otel", "export", str(STREAMS / "tools.jsonl"), "--out", str(tmp_path / "x"), "--no-tree"]
    argv += ["--prometheus-port", "0"]
    code = (
        "import sys\nfrom rulvar_otel.cli import main\n"
        f"sys.argv = {argv!r}\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code"
    )
    assert {"opentelemetry.sdk.metrics", "prometheus_client"} <= _loaded_after(code)


def test_importing_the_package_loads_no_event_model_nor_pydantic() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, rulvar_otel; print(sorted(m for m in sys.modules if "
            "m.startswith(('pydantic', 'opentelemetry', 'rulvar_otel.core.events'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


_SYNC_EXPORT_NEEDS_NOT = ("asyncio", "google.protobuf.json_format", "pydantic")


def test_an_otlp_http_export_loads_neither_asyncio_nor_protobufs_json_printer() -> None:
    # A synchronous export to an endpoint reads, maps and sends: no event loop, no JSON rendering
    # (over gRPC, the grpc package itself loads asyncio).
    with HttpTraceReceiver() as receiver:
        argv = ["rulvar-otel", "export", str(STREAMS / "tools.jsonl"), "--endpoint", receiver.endpoint]
        argv += ["--protocol", "http/protobuf", "--progress", "auto"]
        probe = (
            "import sys\nfrom rulvar_otel.cli import main\n"
            f"sys.argv = {argv!r}\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
            "finally:\n"
            f"    print('LOADED', *sorted(m for m in {_SYNC_EXPORT_NEEDS_NOT!r} if m in sys.modules))"
        )
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        received = len(receiver.spans())
    loaded = next(line for line in out.stdout.splitlines() if line.startswith("LOADED"))
    assert loaded.split()[1:] == []
    assert received > 0
