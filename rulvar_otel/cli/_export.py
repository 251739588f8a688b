"""``rulvar-otel export STREAM.jsonl|-``: a recorded event stream to OpenTelemetry."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Final

import orjson
import typer
from pydantic import ValidationError

from rulvar_otel.cli._common import (
    EXIT_USAGE,
    ExportOptions,
    export_run,
    terminal_safe,
    with_export_options,
)
from rulvar_otel.core.handle import RunOutcome, handle_from_events, outcome_from_json
from rulvar_otel.errors import ConfigError, RunRejectedError, SourceError, StreamLineError
from rulvar_otel.otel._otlp_json import DEFAULT_OTLP_JSON_PATH
from rulvar_otel.otel._provider import resolve_otlp_target
from rulvar_otel.sources.jsonl import STDIN, JsonlEventSource, handle_from_jsonl

__all__ = ["export_command", "load_outcome", "register"]

# Malformed-line diagnostics printed one by one; the rest are counted in one closing line.
MAX_PRINTED_DIAGNOSTICS: Final = 20


def load_outcome(path: Path) -> RunOutcome | RunRejectedError:
    """Read ``--outcome``: a RunOutcome JSON, or the fixtures' ``{"settled": ..}`` wrapper."""
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
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "<root>" for e in exc.errors())
        raise ConfigError(f"--outcome {path}: not a RunOutcome (check {fields})") from exc


def _refuse_overwriting_the_input(stream: str, options: ExportOptions) -> None:
    # The output file is truncated when the export starts, before the stream is read.
    if stream == STDIN:
        return
    candidate = options.out
    if candidate is None and resolve_otlp_target(options.trace_options()) is None:
        candidate = Path(DEFAULT_OTLP_JSON_PATH)
    if candidate is not None:
        try:
            same = candidate.exists() and os.path.samefile(candidate, stream)
        except OSError:
            same = False
        if same:
            raise ConfigError(f"the output file {candidate} is the input stream; choose another --out")


def _err(text: str) -> None:
    print(f"rulvar-otel: {terminal_safe(text)}", file=sys.stderr, flush=True)


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
        typer.Option("--strict", help="Fail (exit 2) on the first malformed line instead of skipping it."),
    ] = False,
    *,
    options: ExportOptions,
) -> None:
    """Export a recorded Rulvar event stream as one OpenTelemetry trace.

    Exit codes: 0 exported, 1 export failed (endpoint refused or unreachable), 2 usage or input error.
    """
    try:
        settled = load_outcome(outcome) if outcome is not None else None
        _refuse_overwriting_the_input(stream, options)
    except ConfigError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None

    printed = 0

    def diagnose(error: StreamLineError) -> None:
        nonlocal printed
        printed += 1
        if printed <= MAX_PRINTED_DIAGNOSTICS:
            _err(f"skipped {error}")

    try:
        source = JsonlEventSource(stream, strict=strict, on_error=diagnose)
        if strict:
            # Read everything first: with --strict a bad line must stop the export before any span.
            with source:
                handle = handle_from_events(list(source), settled)
        else:
            handle = handle_from_jsonl(source, outcome=settled)
    except (SourceError, StreamLineError) as exc:
        _err(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None

    result = export_run(handle, options)
    if source.error_count > MAX_PRINTED_DIAGNOSTICS:
        _err(f"skipped {source.error_count - MAX_PRINTED_DIAGNOSTICS} more malformed lines")
    if source.error_count:
        _err(f"{source.error_count} malformed line{'s' if source.error_count != 1 else ''} skipped in total")
    raise typer.Exit(result.exit_code)


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command("export")(export_command)
