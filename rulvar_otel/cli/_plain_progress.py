"""The plain-text progress views (``--progress lines``, and ``auto`` off a terminal) and the summary.

Owns :class:`ProgressView` (the sink every view is: ``feed`` events, ``close`` once), the
append-only line views and :func:`summary_lines`. They run once per event of an export, so they
are compiled with the mapping hot path; the repainted terminal tree (rich) lives in
``_progress``, which picks a view. Every line is cut to :data:`MAX_LINE_CHARS`; every dynamic
string in it comes from :class:`~rulvar_otel.core.progress.ProgressState` already masked, or is
cleaned here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TextIO

from mypy_extensions import mypyc_attr

from rulvar_otel.core.handle import RunOutcome, as_wire_dict
from rulvar_otel.core.masking import SecretMasker, default_masker
from rulvar_otel.core.progress import (
    ProgressLines,
    ProgressState,
    format_duration,
    format_tokens,
    format_usd,
)

__all__ = [
    "MAX_LINE_CHARS",
    "SUMMARY_INTERVAL_S",
    "LinesView",
    "MilestoneView",
    "ProgressView",
    "cut",
    "summary_lines",
]

# One printed line at most this long: a hostile 200 MB label must not reach the terminal whole.
MAX_LINE_CHARS: Final = 1000


def cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


@mypyc_attr(allow_interpreted_subclasses=True)  # the terminal view extends it
class ProgressView:
    """A sink for a run's events. ``feed`` each wire-form event, then ``close`` once."""

    def __init__(self, state: ProgressState) -> None:
        self.state = state
        self._closed = False
        # Nothing is said about a run before its first event: an unknown run or an unreachable
        # server gets its error line alone, never an invented "run ? running".
        self.fed = 0

    def feed(self, event: Mapping[str, Any]) -> None:
        """Fold one event into the view (never raises for a malformed event)."""
        self.fed += 1
        self.state.apply(event)

    def close(self, outcome: RunOutcome | BaseException | None = None) -> None:
        """Stop repainting and print the final summary (idempotent)."""
        self._closed = True

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        """:meth:`close`, as an export observer ends (the view observes an export directly)."""
        self.close(outcome)


class LinesView(ProgressView):
    def __init__(self, state: ProgressState, stream: TextIO, masker: SecretMasker) -> None:
        super().__init__(state)
        self._printer = ProgressLines(masker, budget_interval_s=5.0, state=state)
        self._stream = stream
        self._masker = masker

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._stream.write("".join(cut(line) + "\n" for line in lines))
            self._stream.flush()

    def feed(self, event: Mapping[str, Any]) -> None:
        self.fed += 1
        self._write(self._printer.lines(event))

    def close(self, outcome: RunOutcome | BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if self.fed:
            self._write(summary_lines(self.state, outcome, self._masker))


# --- non-terminal milestones (``auto`` off a terminal) -------------------------------------------

# Events whose ProgressLines line is a milestone; every other event only updates the counts.
_MILESTONE_KINDS: Final = frozenset({"run:start", "run:end", "phase:start"})
SUMMARY_INTERVAL_S: Final = 5.0
# Events between milestones fold in batches of up to this many: the state is settled before every
# line it prints, so what a line says never lags the events before it.
_FOLD_BATCH: Final = 512


class MilestoneView(ProgressView):
    """Milestones for a log: run and phase starts, a counts line per interval, the summary.

    The interval is measured on ``clock`` (wall time by default; a test injects its own), so a
    21,000-event stream exported in two seconds writes a handful of lines, not one per event.
    """

    def __init__(
        self,
        state: ProgressState,
        stream: TextIO,
        masker: SecretMasker,
        *,
        clock: Callable[[], float],
        interval_s: float = SUMMARY_INTERVAL_S,
    ) -> None:
        super().__init__(state)
        self._printer = ProgressLines(masker, budget_interval_s=5.0, state=state)
        self._stream = stream
        self._masker = masker
        self._clock = clock
        self._interval = interval_s
        self._next_line_at = clock() + interval_s  # when a counts line is due
        self._pending: list[Mapping[str, Any]] = []  # events not folded yet (see _FOLD_BATCH)

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._stream.write("".join(cut(line) + "\n" for line in lines))
            self._stream.flush()
            self._next_line_at = self._clock() + self._interval

    def feed(self, event: Mapping[str, Any]) -> None:
        # A dict (the drain hands over dicts): compiled, its reads skip the generic method call.
        wire: dict[str, Any] = event if type(event) is dict else as_wire_dict(event)  # type: ignore[assignment]
        if wire.get("type") in _MILESTONE_KINDS:
            self._settle()
            self._write(self._printer.lines(wire))
        else:
            pending = self._pending
            pending.append(wire)
            if len(pending) >= _FOLD_BATCH:
                self._settle()
        if self._clock() >= self._next_line_at:
            self._write([self.counts_line()])

    def _settle(self) -> None:
        """Fold the events that wait (in one loop: a batch is cheaper than an event at a time)."""
        pending = self._pending
        if pending:
            self.state.apply_all(pending)
            pending.clear()

    def counts_line(self) -> str:
        """``… 1,204 events  310 spans  agents 120 ok, 2 error, 8 running  spent $0.41``."""
        self._settle()
        st = self.state
        parts = [f"… {st.events:,} events", f"{len(st.span_ids or ()):,} spans"]
        counts = st.status_counts()
        if counts:
            parts.append("agents " + ", ".join(f"{n:,} {status}" for status, n in sorted(counts.items())))
        if st.spent_usd is not None or st.total_usd is not None:
            parts.append(f"spent {format_usd(st.total_usd if st.total_usd is not None else st.spent_usd)}")
        return "  ".join(parts)

    def close(self, outcome: RunOutcome | BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        self._settle()
        self._write(summary_lines(self.state, outcome, self._masker))


def _by_role(outcome: RunOutcome) -> dict[str, float] | None:
    cost = outcome.cost
    if not isinstance(cost, Mapping):
        return None
    by_role = cost.get("byRole")
    if not isinstance(by_role, Mapping):
        return None
    out: dict[str, float] = {}
    for role, usd in by_role.items():
        if isinstance(role, str) and isinstance(usd, int | float) and not isinstance(usd, bool) and usd:
            out[role] = float(usd)
    return out


def summary_lines(
    state: ProgressState, outcome: RunOutcome | BaseException | None, masker: SecretMasker | None = None
) -> list[str]:
    """The final summary: status and completion, wall, spend, agents, tokens, per-role dollars."""
    masker = masker or default_masker()

    def clean(value: str) -> str:
        return masker.clean(value)

    head = f"run {state.run_id or '?'}"
    if state.workflow:
        head += f" {state.workflow}"
    if isinstance(outcome, BaseException):
        # A source's error never crossed the event masking boundary: clean it here.
        lines = [f"{head} failed: {clean(type(outcome).__name__)}: {clean(str(outcome))}"]
    else:
        status = clean(outcome.status) if outcome is not None else state.status
        completion = (
            clean(outcome.completion) if outcome is not None and outcome.completion else state.completion
        )
        head += f" {status}"
        if completion:
            head += f"  completion={completion}"
        if state.settled is False:
            head += "  settled=false"
        lines = [head]
    spent = state.total_usd if state.total_usd is not None else state.spent_usd
    figures = [f"wall {format_duration(state.wall_seconds())}"]
    if spent is not None:
        figures.append(
            f"spent {format_usd(spent)}"
            + (f" / {format_usd(state.ceiling_usd)}" if state.ceiling_usd is not None else "")
        )
    inp, out = state.total_tokens()
    figures.append(f"tokens in {format_tokens(inp)} out {format_tokens(out)}")
    lines.append("  " + "  ".join(figures))
    counts = state.status_counts()
    if counts:
        agents = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        tools = f"  tools {state.tool_calls}" + (
            f" ({state.tool_failures} failed or denied)" if state.tool_failures else ""
        )
        lines.append(f"  agents: {agents}{tools}")
    if isinstance(outcome, RunOutcome) and (by_role := _by_role(outcome)):
        lines.append("  by role: " + " · ".join(f"{clean(r)} {format_usd(v)}" for r, v in by_role.items()))
    if state.status == "suspended":
        lines.append("  suspended: resume the run to continue")
    return lines
