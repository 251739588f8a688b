"""Ending spans no closer ended: at a new segment's start and at the end of the export.

A span without a closer ends where the contract says (docs/otel-mapping.md#ending-spans-without-a-closer):
a leftover of an earlier segment at that segment's last event, anything else still open at the
stream's last event, and a phase at the latest of its descendants' ends and its own span events.
These run once per segment or once per export, never per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._records import STATUS_ERROR, STATUS_OK
from rulvar_otel.otel._span_state import PHASE, RUN, MappedSpan

__all__ = ["end_at_suspension", "end_inferred", "end_unclosed", "mark_segment_leftovers"]


def mark_segment_leftovers(
    still_open: Iterable[MappedSpan], segment: int, end: int, leftovers: list[MappedSpan]
) -> None:
    """Mark the spans of ``segment`` still open (bar phases and the run) to end at ``end``."""
    for rec in still_open:
        if (
            not rec.ended
            and rec.pending_end is None
            and rec.segment == segment
            and rec.kind != PHASE
            and rec.kind != RUN
        ):
            rec.pending_end = end
            leftovers.append(rec)


def end_inferred(rec: MappedSpan, ns: int, ok: bool, end: Callable[[MappedSpan, int], None]) -> None:
    """End ``rec`` at ``ns`` marked as inferred, with the run's outcome as its status."""
    span = rec.span
    if span is None:
        return
    if ok:
        span.set_attribute(sc.END_INFERRED, True)
        span.set_status(STATUS_OK)
    else:
        span.set_attributes({sc.END_INFERRED: True, sc.ERROR_TYPE: sc.ERROR_TYPE_OTHER})
        span.set_status(STATUS_ERROR)
    end(rec, ns)


def end_unclosed(
    *,
    leftovers: list[MappedSpan],
    open_stack: list[MappedSpan],
    stranded: list[MappedSpan],
    phases: list[MappedSpan],
    last: int,
    ok: bool,
    end: Callable[[MappedSpan, int], None],
    unsettled: bool = False,
) -> None:
    """End every span still open at the end of the export; ``last`` is the stream's last time.

    ``unsettled``: the export stopped before the run settled (cancelled), so a run span still
    open carries ``rulvar.run.settled = false`` as an unsettled terminal does.
    """
    if unsettled:
        for rec in (*open_stack, *stranded):
            if rec.kind == RUN and not rec.ended and rec.span is not None:
                rec.span.set_attribute(sc.RUN_SETTLED, False)
    # Leftovers of earlier segments end where their segment ended.
    for rec in leftovers:
        if not rec.ended:
            end_inferred(rec, rec.pending_end if rec.pending_end is not None else last, ok, end)
    # Everything else still open ends at the stream's last event, innermost first.
    for rec in reversed(open_stack):
        if not rec.ended and rec.kind != PHASE:
            end_inferred(rec, last, ok, end)
    for rec in stranded:
        if not rec.ended and rec.kind != PHASE:
            end_inferred(rec, last, ok, end)
    # Phases last, deepest first: each ends at the latest of its descendants' ends and its own
    # span events, or at its own start.
    for rec in reversed(phases):
        if not rec.ended:
            end_inferred(rec, max(rec.desc_end, rec.events_end, rec.start_ns), ok, end)


def _end_waiting(rec: MappedSpan, ns: int, end: Callable[[MappedSpan, int], None]) -> None:
    span = rec.span
    if span is None:
        return
    span.set_attributes({sc.END_INFERRED: True, sc.SUSPENDED: True})  # status stays UNSET
    end(rec, ns)


def end_at_suspension(
    open_spans: Iterable[MappedSpan],
    phases: Iterable[MappedSpan],
    ns: int,
    end: Callable[[MappedSpan, int], None],
) -> None:
    """End every span still open at a suspended ``run:end`` (at ``ns``), UNSET and suspended.

    Decided from the suspended segment alone, so an export that stops at the suspension and one
    that later reads the resumed segment too give each such span one status and one end time.
    Leftovers of earlier segments keep their own end (``pending_end``).
    """
    for rec in reversed(list(open_spans)):
        if not rec.ended and rec.pending_end is None and rec.kind != PHASE:
            _end_waiting(rec, ns, end)
    for rec in reversed(list(phases)):
        if not rec.ended:
            _end_waiting(rec, max(rec.desc_end, rec.events_end, rec.start_ns), end)
