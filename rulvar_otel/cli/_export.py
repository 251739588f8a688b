"""``rulvar-otel export STREAM.jsonl|-``: a recorded event stream to OpenTelemetry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import orjson
import typer

from rulvar_otel.cli._common import CommandOptions, run_export, with_export_options
from rulvar_otel.cli._text import EXIT_INTERRUPTED, EXIT_USAGE, say
from rulvar_otel.errors import ConfigError, OutcomeError, RunRejectedError, SourceError, StreamLineError
from rulvar_otel.export import StreamedRun, check_output_is_not_input
from rulvar_otel.sources.jsonl import STDIN, JsonlEventSource

if TYPE_CHECKING:
    from rulvar_otel.core.handle import RunOutcome

__all__ = ["export_command", "load_outcome", "register"]

# Malformed-line diagnostics printed one by one; the rest are counted in one closing line.
MAX_PRINTED_DIAGNOSTICS: Final = 20


def load_outcome(path: Path) -> RunOutcome | RunRejectedError:
    """Read ``--outcome``: a RunOutcome JSON, or the fixtures' ``{"settled": ..}`` wrapper."""
    from rulvar_otel.core.handle import outcome_from_json

    try:
        data: Any = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"--outcome {path}: cannot read it ({exc.strerror or exc})") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--outcome {path}: not valid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--outcome {path}: expected a JSON object")
    try:
        return outcome_from_json(data)
    except OutcomeError as exc:
        raise ConfigError(f"--outcome {path}: not a RunOutcome (check {', '.join(exc.fields)})") from exc


def _check_stdin(stream: str) -> None:
    # With fd 0 closed (`export - <&-`) Python has no sys.stdin at all.
    if stream == STDIN and (sys.stdin is None or getattr(sys.stdin, "buffer", None) is None):
        raise ConfigError("stdin is closed: pass a file, or pipe the stream into '-'")


@with_export_options
def export_command(
    stream: Annotated[str, typer.Argument(metavar="STREAM.jsonl|-", help="Event stream, or - for stdin.")],
    outcome: Annotated[
        Path | None,
        typer.Option(
            "--outcome",
            metavar="FILE",
            help='How the run settled: a RunOutcome JSON, or {"settled": "resolved"|"rejected", '
            '"outcome"|"error": ...}. Default: derived from the last run:end.',
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail (exit 2) on the first malformed line, exporting nothing, instead of skipping it.",
        ),
    ] = False,
    *,
    options: CommandOptions,
) -> None:
    """Export a recorded Rulvar event stream as one OpenTelemetry trace per run.

    The stream is never held in memory: it is read once, or with --strict checked whole before
    the export reads it again (stdin or a pipe is copied to a temporary file for that). Exit
    codes: 0 exported, 1 export failed (endpoint refused or unreachable, stdout not writable), 2
    usage or input error, 130 interrupted (what was read was exported).
    """
    try:
        settled = load_outcome(outcome) if outcome is not None else None
        _check_stdin(stream)
        check_output_is_not_input(options.export, 0 if stream == STDIN else stream)
    except ConfigError as exc:
        say(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None

    printed = 0

    def diagnose(error: StreamLineError) -> None:
        nonlocal printed
        printed += 1
        if printed <= MAX_PRINTED_DIAGNOSTICS:
            say(f"skipped {error}")

    try:
        # With --strict every line is checked before the first span exists (a bad line must stop
        # the export before anything is written); the events are then read again, never held.
        source = JsonlEventSource.checked(stream) if strict else JsonlEventSource(stream, on_error=diagnose)
    except (SourceError, StreamLineError) as exc:
        say(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    except KeyboardInterrupt:
        say("interrupted before anything was exported")
        raise typer.Exit(EXIT_INTERRUPTED) from None

    with source:
        try:
            code, _ = run_export(StreamedRun(source, settled), options)
        except KeyboardInterrupt:
            say("interrupted twice; the export was abandoned and earlier output left as it was")
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if source.error_count > MAX_PRINTED_DIAGNOSTICS:
        say(f"skipped {source.error_count - MAX_PRINTED_DIAGNOSTICS} more malformed lines")
    if source.error_count:
        say(f"{source.error_count} malformed line{'s' if source.error_count != 1 else ''} skipped in total")
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command("export")(export_command)
