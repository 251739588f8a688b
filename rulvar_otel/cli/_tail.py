"""``rulvar-otel tail --server URL --run ID``: export a run a Rulvar server holds, live.

Spans are exported as the events arrive over SSE; the command reconnects after drops (resuming
after the last delivered seq, at once when the connection delivered new events, with a backoff
only after connections that delivered nothing), follows a suspended run into its resumed
segment, and ends after the run's final ``run:end`` (or the first suspension with
``--until-suspended``). The server's notes reach stderr as few lines: a replay-window gap, a run
that failed before settling and a run that is not live there are printed as they arrive;
repeating ones (slow-consumer closes, comment notes, frames that are not events or name another
run) are one line per kind at the end, with their count. A run that is not live and streamed
nothing is exported from its terminal facts alone, and stderr says so.

Exit codes: 0 exported, 1 export failed (the backend refused or was unreachable), 2 bad options,
an unknown run, or a server that could not be followed.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Final

import typer

from rulvar_otel.cli._common import CommandOptions, run_export, with_export_options
from rulvar_otel.cli._text import EXIT_INTERRUPTED, EXIT_USAGE, plural, say
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.errors import ConfigError
from rulvar_otel.sources.sse import NoteKind, ReconnectPolicy, ServerRunHandle, SseNote, follow_server_run

__all__ = ["register", "tail_command"]

# Notes printed the moment they arrive (the first of each kind; repeats are counted).
_LIVE_LABEL: Final = {
    "gap": "server note (events missing from its replay window)",
    "run-failed": "server note (the run failed before settling)",
}
# Notes that repeat (a slow-consumer close per reconnect, a flood of comments or bad frames):
# one line each kind at the end, with the count and the first note's text.
_SUMMARY: Final = {
    "slow-consumer": "the server closed the stream {n} as a slow consumer ({text}); resumed each "
    "time with Last-Event-ID",
    "comment": "the server sent {n} comment note{s} (first: {text})",
    "bad-frame": "skipped {n} frame{s} that were not events (first: {text})",
    "other-run": "skipped {n} frame{s} naming another run",
    "oversize": "dropped {n} connection{s} carrying a frame over the size limit",
    "gap": "{n} replay-window notes in all",
    "run-failed": "{n} failed-before-settling notes in all",
}


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


class _NoteDigest:
    """Turns the server's notes into few stderr lines: a flood of any kind is one line."""

    def __init__(self) -> None:
        self.counts: dict[NoteKind, int] = {}
        self.first: dict[NoteKind, SseNote] = {}

    def __call__(self, note: SseNote) -> None:
        count = self.counts.get(note.kind, 0) + 1
        self.counts[note.kind] = count
        if count > 1:
            return
        self.first[note.kind] = note
        if note.kind == "not-live":
            if note.after_seq is None:
                say(
                    "server note (the run is not live there, so no event will stream): "
                    f"{note.text}; only the terminal facts GET /runs/:id gives are available"
                )
            else:
                say(
                    f"server note (the run is no longer live there after seq {note.after_seq}): "
                    f"{note.text}; the trace ends with the streamed events, the outcome comes "
                    "from GET /runs/:id"
                )
        elif note.kind in _LIVE_LABEL:
            say(f"{_LIVE_LABEL[note.kind]}: {note.text}")

    def summarize(self) -> None:
        for kind, count in self.counts.items():
            template = _SUMMARY.get(kind)
            if template is None or (kind in _LIVE_LABEL and count == 1):
                continue
            n = _times(count) if kind == "slow-consumer" else str(count)
            say(template.format(n=n, s="" if count == 1 else "s", text=self.first[kind].text))


def _terminal_facts_line(handle: ServerRunHandle) -> str:
    source = handle.stats.terminal_facts_time_source
    if source is None:
        return (
            "only terminal facts were available (GET /runs/:id) and none of them dates the run: "
            "no span exported"
        )
    timing = (
        "its start is the creation time the run id encodes and it has no duration"
        if source == "run id"
        else "its times are the ones the server's status gives"
    )
    return (
        "only terminal facts were available (GET /runs/:id): one run span with the run's status "
        f"and envelope, no phases, agents or tools; {timing}"
    )


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

        # Note texts are already masked and sanitized by the source.
        digest = _NoteDigest()
        handle = follow_server_run(
            server, run, until_suspended=until_suspended, policy=policy, masker=masker, on_note=digest
        )
    except ConfigError as exc:
        say(f"error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None

    try:
        code, _ = run_export(handle, options, streamed_events=lambda: handle.stats.delivered)
    except KeyboardInterrupt:
        say("interrupted twice; the export was abandoned")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        digest.summarize()
    stats = handle.stats
    if stats.terminal_facts_only:
        say(_terminal_facts_line(handle))
    if stats.reconnects or stats.duplicates_dropped:
        say(
            f"followed the run over {plural(stats.connections, 'connection')}: "
            f"{plural(stats.delivered, 'event')}, "
            f"{plural(stats.duplicates_dropped, 'duplicate')} dropped"
        )
    if stats.suspended_stops:
        say(
            "stopped at the run's suspension (--until-suspended): spans open there ended at it, "
            "waiting (UNSET); tail again after the resume to follow it (those spans export the same)"
        )
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``tail`` to ``app``."""
    app.command("tail")(tail_command)
