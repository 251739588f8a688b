"""``rulvar-otel``: export Rulvar runs as OpenTelemetry traces and metrics.

Each command lives in its own module and registers itself on the one Typer app.
"""

from __future__ import annotations

import logging

import typer

from rulvar_otel.cli import _demo, _export, _inspect, _tail

__all__ = ["app", "main"]

app = typer.Typer(
    name="rulvar-otel",
    help="Export Rulvar runs (JSONL streams, a Rulvar server, the bundled engine) to OpenTelemetry.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in (_export, _demo, _tail, _inspect):
    _module.register(app)


class _TerminalLogHandler(logging.Handler):
    """Library log records reach the terminal masked, stripped of controls and bounded."""

    def emit(self, record: logging.LogRecord) -> None:
        from rulvar_otel.cli._common import say

        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record must not break a command
            message = str(record.msg)
        say(f"{record.levelname.lower()}: {message}")


def main() -> None:
    """Console-script entry point."""
    # Without a handler, Python's last-resort handler would print library warnings raw.
    logging.basicConfig(level=logging.WARNING, handlers=[_TerminalLogHandler()], force=True)
    app()
