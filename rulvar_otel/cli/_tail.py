"""``rulvar-otel tail --server URL --run ID``: export a run a Rulvar server holds, live.

Spans are exported as the events arrive over SSE; the command reconnects after drops (resuming
after the last delivered seq), follows a suspended run into its resumed segment, and ends after
the run's final ``run:end`` (or the first suspension with ``--until-suspended``). The server's
notes (a replay-window gap, a slow-consumer close, a run that failed before settling, a run that
is not live in this process) are printed on stderr as they arrive.

Exit codes: 0 exported, 1 export failed (the backend refused or was unreachable), 2 bad options,
an unknown run, or a server that could not be followed.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from rulvar_otel.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CommandOptions,
    run_export,
    say,
    with_export_options,
)
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.errors import ConfigError
from rulvar_otel.sources.sse import ReconnectPolicy, SseNote, follow_server_run

__all__ = ["register", "tail_command"]

_NOTE_LABEL = {
    "gap": "server note (events missing from its replay window)",
    "slow-consumer": "server note (slow consumer; reconnecting)",
    "run-failed": "server note (the run failed before settling)",
    "not-live": "server note (the run is not live there; exporting its terminal facts)",
    "bad-frame": "skipped a frame",
    "comment": "server note",
}


@with_export_options
def tail_command(
    server: Annotated[
        str, typer.Option("--server", metavar="URL", help="The Rulvar server, e.g. http://127.0.0.1:8787.")
    ],
    run: Annotated[str, typer.Option("--run", metavar="ID", help="The run id to follow.")],
    until_suspended: Annotated[
        bool,
        typer.Option(
            "--until-suspended",
            help="Stop at the first suspension instead of following the run into its resumed segment.",
        ),
    ] = False,
    max_attempts: Annotated[
        int,
        typer.Option(
            "--max-attempts",
            metavar="N",
            help="Give up after N consecutive connections that deliver nothing.",
        ),
    ] = 8,
    idle_timeout: Annotated[
        float,
        typer.Option(
            "--idle-timeout",
            metavar="SECONDS",
            help="Re-establish a stream that has been silent this long (a quiet run is not an error).",
        ),
    ] = 300.0,
    ceiling_usd: Annotated[
        float | None,
        typer.Option(
            "--ceiling-usd", metavar="USD", help="Budget the progress header measures spend against."
        ),
    ] = None,
    *,
    options: CommandOptions,
) -> None:
    """Follow a run on a Rulvar server over SSE and export it live as one OpenTelemetry trace."""
    options = dataclasses.replace(options, ceiling_usd=ceiling_usd)
    try:
        policy = ReconnectPolicy(max_attempts=max_attempts, read_timeout_s=idle_timeout)
        masker = compile_secret_masker(options.export.patterns or None)

        def on_note(note: SseNote) -> None:
            # The note text is already masked and sanitized by the source.
            say(f"{_NOTE_LABEL[note.kind]}: {note.text}")

        handle = follow_server_run(
            server, run, until_suspended=until_suspended, policy=policy, masker=masker, on_note=on_note
        )
    except ConfigError as exc:
        say(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None

    try:
        code, _ = run_export(handle, options)
    except KeyboardInterrupt:
        say("interrupted twice; the export was abandoned")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    stats = handle.stats
    if stats.reconnects or stats.duplicates_dropped:
        say(
            f"followed run over {stats.connections} connections; {stats.delivered} events, "
            f"{stats.duplicates_dropped} duplicates dropped"
        )
    if stats.suspended_stops:
        say("stopped at the run's suspension (--until-suspended); tail again to follow its resumption")
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``tail`` to ``app``."""
    app.command("tail")(tail_command)
