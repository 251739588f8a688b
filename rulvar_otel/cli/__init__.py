"""``rulvar-otel``: export Rulvar runs as OpenTelemetry traces and metrics.

Each command lives in its own module and registers itself on the Typer app. ``app`` (every
command) is built on first access; :func:`main` builds one holding only the command named on the
command line, so ``rulvar-otel export`` never imports the engine, the inspector or the SSE
client (``--help``, no command or an unknown one get every command).
"""

from __future__ import annotations

import os

# gRPC's C core logs straight to file descriptor 2, past every masker (a refused metadata key is
# quoted whole). Headers are checked before gRPC sees them; this keeps the core's own lines off
# the terminal too. It must be set before grpc is first imported.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import gc
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import Annotated, Final

import typer

from rulvar_otel.cli import _help
from rulvar_otel.core.log_masking import masked_logging

__all__ = ["app", "main"]

# command name -> the module that registers it (in the order `--help` lists them).
_COMMAND_MODULES: Final = {
    "export": "rulvar_otel.cli._export",
    "demo": "rulvar_otel.cli._demo",
    "replay": "rulvar_otel.cli._demo",
    "tail": "rulvar_otel.cli._tail",
    "inspect": "rulvar_otel.cli._inspect",
    "assets": "rulvar_otel.cli._assets",
}

_help.install_help_style()


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_help.version_option_callback,
        ),
    ] = False,
) -> None:
    """Export Rulvar runs (JSONL streams, a Rulvar server, the bundled engine) to OpenTelemetry."""


def _build_app(commands: Sequence[str] | None = None) -> typer.Typer:
    """A Typer app with ``commands`` registered (every command when None)."""
    built = typer.Typer(
        name="rulvar-otel",
        help="Export Rulvar runs (JSONL streams, a Rulvar server, the bundled engine) to OpenTelemetry.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    built.callback()(_root)
    wanted = set(_COMMAND_MODULES if commands is None else commands)
    modules = dict.fromkeys(mod for name, mod in _COMMAND_MODULES.items() if name in wanted)
    for module in modules:
        import_module(module).register(built)
    return built


def _command_on(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names when nothing before it is an option; else None."""
    first = argv[0] if argv else None
    return first if first in _COMMAND_MODULES else None


def __getattr__(name: str) -> typer.Typer:
    if name != "app":
        raise AttributeError(f"module 'rulvar_otel.cli' has no attribute {name!r}")
    full = _build_app()
    globals()["app"] = full
    return full


def main() -> None:
    """Console-script entry point. Library log records (OpenTelemetry's included) reach stderr
    only through the masking filter: one sanitized, masked, bounded line each."""
    command = _command_on(sys.argv[1:])
    try:
        with masked_logging():
            app = _build_app(None if command is None else [command])
            # What the imports made lives until exit: frozen, the run's full collections skip it
            # (large.jsonl: 77 -> 21 ms of generation-2 collection). The export allocates a
            # few containers per event and makes almost no cycles: young collections every
            # 10,000 allocations instead of 700 (callgrind, large: 2% fewer instructions).
            gc.freeze()
            gc.set_threshold(10_000, *gc.get_threshold()[1:])
            app()
    finally:
        # The interpreter's final collection walks every object the imports made (~0.1 s for an
        # export); frozen objects are skipped, and the process is about to end anyway.
        gc.freeze()
