"""``rulvar-otel``: export Rulvar runs as OpenTelemetry traces and metrics.

Each command lives in its own module and registers itself on the one Typer app.
"""

from __future__ import annotations

import os

# gRPC's C core logs straight to file descriptor 2, past every masker (a refused metadata key is
# quoted whole). Headers are checked before gRPC sees them; this keeps the core's own lines off
# the terminal too. It must be set before grpc is first imported.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from typing import Annotated

import typer

from rulvar_otel.cli import _assets, _demo, _export, _help, _inspect, _tail
from rulvar_otel.core.log_masking import masked_logging

__all__ = ["app", "main"]

app = typer.Typer(
    name="rulvar-otel",
    help="Export Rulvar runs (JSONL streams, a Rulvar server, the bundled engine) to OpenTelemetry.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_help.install_help_style()


@app.callback()
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


for _module in (_export, _demo, _tail, _inspect, _assets):
    _module.register(app)


def main() -> None:
    """Console-script entry point. Library log records (OpenTelemetry's included) reach stderr
    only through the masking filter: one sanitized, masked, bounded line each."""
    with masked_logging():
        app()
