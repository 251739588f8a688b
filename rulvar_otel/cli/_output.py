"""How an export is shown on a terminal: the span tree, notes, failures, one summary line, the exit code.

Every printed dynamic string goes through ``rulvar_otel.cli._text.terminal_safe`` (masked, stripped
of terminal controls, bounded). A stdout that refuses writes (a full disk, ``/dev/full``) is reported, never a
traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from rulvar_otel.cli._text import (
    EXIT_EXPORT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    plural,
    say,
)
from rulvar_otel.export import ExportReport, FailureKind
from rulvar_otel.masking import SecretMasker, compile_secret_masker

__all__ = ["exit_code", "print_report"]


def exit_code(report: ExportReport) -> int:
    """The command's exit code for ``report``."""
    if report.failed(FailureKind.CONFIG, FailureKind.INPUT):
        return EXIT_USAGE
    if report.interrupted:  # even when the Ctrl-C cost spans: the user stopped it
        return EXIT_INTERRUPTED
    if report.failed(FailureKind.DELIVERY, FailureKind.METRICS):
        return EXIT_EXPORT_FAILED
    return EXIT_OK


def _summary(report: ExportReport) -> str:
    where = " and ".join(report.destinations) or "nowhere"
    spans = plural(report.spans, "span")
    events = plural(report.events, "stream event")
    if len(report.trace_ids) == 1:
        traces = f"in trace {report.trace_ids[0]}"
    elif len(report.run_ids) > 1:
        runs, ids = ", ".join(report.run_ids), ", ".join(report.trace_ids)
        traces = f"in {len(report.trace_ids)} traces, one per run (runs {runs}; traces {ids})"
    else:
        traces = f"in {len(report.trace_ids)} traces"
    prefix = "interrupted; exported what was read: " if report.interrupted else "exported "
    return f"{prefix}{spans} from {events} {traces} to {where}"


class _StdoutGoneError(Exception):
    """stdout refused a write (a full disk, /dev/full, a closed pipe)."""


def _print_tree(
    report: ExportReport,
    masker: SecretMasker,
    stdout: TextIO | None,
    stream_events_by_run: Mapping[str, int] | None,
) -> None:
    from rich.console import Console

    from rulvar_otel.cli._tree import print_span_tree

    out = stdout if stdout is not None else sys.stdout
    if out is None:  # fd 1 closed (`>&-`): Python has no sys.stdout at all
        raise _StdoutGoneError("stdout is closed")
    console = Console(file=out, highlight=False, soft_wrap=True)
    try:
        print_span_tree(
            list(report.kept_spans), console, masker=masker, stream_events_by_run=stream_events_by_run
        )
        out.flush()
    except (OSError, ValueError) as exc:
        raise _StdoutGoneError(getattr(exc, "strerror", None) or str(exc)) from None


def _silence_stdout() -> None:
    # Python flushes stdout again at exit and prints a traceback when that fails too.
    if sys.stdout is None:
        return
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def print_report(
    report: ExportReport,
    *,
    patterns: Sequence[str] = (),
    tree: bool | None = None,
    notes_printed: int = 0,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stream_events_by_run: Mapping[str, int] | None = None,
) -> int:
    """Print ``report`` (tree, notes, failures, summary) and return the exit code.

    ``tree`` prints the span tree on stdout (``None``: only when every destination is a file);
    the first ``notes_printed`` notes were printed live already. ``stream_events_by_run`` (the
    stream events read per run id) labels each run's root row with the count the summary sums.
    """
    masker = compile_secret_masker(patterns or None)
    code = exit_code(report)
    want_tree = tree if tree is not None else _no_endpoint(report)
    if want_tree and report.kept_spans and not report.failed(FailureKind.CONFIG):
        try:
            _print_tree(report, masker, stdout, stream_events_by_run)
            if report.spans > len(report.kept_spans):
                say(f"the tree shows {len(report.kept_spans)} of {report.spans} spans", masker, stream=stderr)
        except _StdoutGoneError as exc:
            if stdout is None:
                _silence_stdout()
            say(f"error: cannot write the span tree to stdout: {exc}", masker, stream=stderr)
            code = max(code, EXIT_EXPORT_FAILED) if code != EXIT_USAGE else code
    for note in report.notes[notes_printed:]:
        say(note, masker, stream=stderr)
    for failure in report.failures:
        label = "error" if failure.kind in (FailureKind.CONFIG, FailureKind.INPUT) else "export failed"
        say(f"{label}: {failure.message}", masker, stream=stderr)
    if report.failed(FailureKind.CONFIG, FailureKind.INPUT, FailureKind.DELIVERY):
        if report.delivery is not None and report.delivery.written:
            where = ", ".join(str(p) for p in report.delivery.written)
            say(f"{where} holds every span that was created", masker, stream=stderr)
        return code
    if report.backpressure_waits:
        waits = plural(report.backpressure_waits, "time")
        say(f"waited {waits} for a slow destination", masker, stream=stderr)
    say(_summary(report), masker, stream=stderr)
    return code


def _no_endpoint(report: ExportReport) -> bool:
    return all(d.startswith("file ") for d in report.destinations)
