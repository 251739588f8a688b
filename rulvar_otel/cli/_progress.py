"""The live progress view the CLI commands share (``--progress auto|tty|lines|off``).

On a terminal it is a tree repainted in place at a bounded rate (rich's ``Live``). Elsewhere
(pipes, CI logs) ``auto`` prints milestones a log reader wants: each run and phase starting, a
counts line every few seconds of wall time, and the final summary; ``lines`` prints append-only
plain lines (one per lifecycle fact, budget lines throttled). Output
goes to stderr so stdout stays the command's own. ``NO_COLOR`` is honoured (rich reads it).

Every dynamic string comes out of :class:`~rulvar_otel.core.progress.ProgressState` already
masked and sanitized, and is added to rich ``Text`` objects as plain text (never as markup), so
a label cannot smuggle styles, escapes or newlines onto the screen.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TextIO

from rulvar_otel.cli._text import PROGRESS_MODES
from rulvar_otel.core.handle import RunOutcome, as_wire
from rulvar_otel.core.masking import SecretMasker, default_masker
from rulvar_otel.core.progress import (
    AgentRow,
    ProgressLines,
    ProgressState,
    format_duration,
    format_tokens,
    format_usd,
)
from rulvar_otel.errors import ConfigError

if TYPE_CHECKING:
    # rich is imported where a terminal view is drawn: a pipe, a log or --progress off never loads it.
    from rich.console import Console, RenderableType
    from rich.text import Text

__all__ = ["PROGRESS_MODES", "ProgressView", "open_progress", "summary_lines"]


_SPINNER: Final = "|/-\\"
_GLYPHS: Final = {
    "ok": "✓",
    "error": "✗",
    "cancelled": "⊘",
    "queued": "·",
    "unsettled": "?",
}
_STATUS_STYLE: Final = {"ok": "green", "error": "red", "cancelled": "yellow", "exhausted": "yellow"}
# Rows shown before the tree collapses settled agents into a count (a 1,000-agent run stays legible).
_MAX_ROWS: Final = 40
_BAR_WIDTH: Final = 12
# One printed line at most this long: a hostile 200 MB label must not reach the terminal whole.
MAX_LINE_CHARS: Final = 1000


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


class _ScopeTracker:
    """Where an agent whose parent span never opened belongs: the innermost open scope.

    Rulvar parents parallel branches' agents to branch spans that never appear as events; the
    span mapper groups such agents under the innermost open phase or child workflow, and the
    view does the same, so they sit under their phase instead of at the bottom of the tree.
    """

    def __init__(self) -> None:
        self._open: list[tuple[str, str | None]] = []  # (span id, parent span id), outermost first
        self._known: set[str] = set()
        self.inferred: dict[str, str] = {}

    def feed(self, wire: Mapping[str, Any]) -> None:
        kind = wire.get("type")
        span_id = wire.get("spanId")
        if not isinstance(span_id, str):
            return
        parent = wire.get("parentSpanId")
        parent = parent if isinstance(parent, str) else None
        if kind in ("phase:start", "child:start"):
            # A scope opening under an outer one closes the siblings opened since (phases end
            # when the next one starts; Rulvar sends no phase:end).
            while self._open and self._open[-1][0] != parent:
                self._open.pop()
            self._open.append((span_id, parent))
            self._known.add(span_id)
        elif kind == "child:end":
            ids = [sid for sid, _ in self._open]
            if span_id in ids:
                del self._open[ids.index(span_id) :]
        elif kind == "run:start":
            self._known.add(span_id)
        elif kind == "agent:start":
            self._known.add(span_id)
            if (parent is None or parent not in self._known) and self._open:
                self.inferred[span_id] = self._open[-1][0]


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


class _LinesView(ProgressView):
    def __init__(self, state: ProgressState, stream: TextIO, masker: SecretMasker) -> None:
        super().__init__(state)
        self._printer = ProgressLines(masker, budget_interval_s=5.0, state=state)
        self._stream = stream
        self._masker = masker

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._stream.write("".join(_cut(line) + "\n" for line in lines))
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


class _MilestoneView(ProgressView):
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
            self._stream.write("".join(_cut(line) + "\n" for line in lines))
            self._stream.flush()
            self._next_line_at = self._clock() + self._interval

    def feed(self, event: Mapping[str, Any]) -> None:
        wire = event if type(event) is dict else as_wire(event)
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


# --- end of non-terminal milestones -------------------------------------------------------------


class _TtyView(ProgressView):
    def __init__(
        self,
        state: ProgressState,
        stream: TextIO,
        masker: SecretMasker,
        *,
        fps: float,
        clock: Callable[[], float],
        console: Console | None = None,
    ) -> None:
        from rich.console import Console
        from rich.live import Live

        super().__init__(state)
        self._masker = masker
        self._clock = clock
        self._fed_at = clock()
        self._lock = threading.Lock()
        self._scopes = _ScopeTracker()
        self._console = console or Console(file=stream, force_terminal=True, highlight=False, soft_wrap=False)
        self._live = Live(
            console=self._console,
            get_renderable=self._renderable,
            refresh_per_second=fps,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def feed(self, event: Mapping[str, Any]) -> None:
        with self._lock:
            wire = self.state.apply(event)
            self._scopes.feed(wire)
            self._fed_at = self._clock()
            self.fed += 1
        if self.fed == 1 and not self._closed:
            self._live.start()  # the first frame is painted once there is a run to show

    def close(self, outcome: RunOutcome | BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.fed:
            return
        from rich.text import Text

        self._live.stop()  # paints the final frame once more
        for line in summary_lines(self.state, outcome, self._masker):
            self._console.print(Text(_cut(line)), highlight=False)

    def _renderable(self) -> RenderableType:
        with self._lock:
            now = self._clock()
            return render_tree(self.state, now - self._fed_at, now, inferred_parents=self._scopes.inferred)


def _spinner(now: float) -> str:
    return _SPINNER[int(now * 8) % len(_SPINNER)]


def _glyph(row: AgentRow, now: float) -> str:
    if row.status == "running":
        return "↺" if row.replayed else _spinner(now)
    return _GLYPHS.get(row.status, "•")


def _bar(spent: float, ceiling: float) -> str:
    filled = 0 if ceiling <= 0 else min(_BAR_WIDTH, round(_BAR_WIDTH * spent / ceiling))
    return "#" * filled + "." * (_BAR_WIDTH - filled)


def render_tree(
    state: ProgressState,
    since_last_event: float = 0.0,
    now: float = 0.0,
    *,
    inferred_parents: Mapping[str, str] | None = None,
) -> RenderableType:
    """The tree as rich renderables: the header, phases and agents nested by span, children.

    ``since_last_event`` advances running timers between events on a live stream;
    ``inferred_parents`` places agents whose parent span never opened (see :class:`_ScopeTracker`).
    """
    from rich.console import Group
    from rich.text import Text

    inferred = inferred_parents or {}
    live_extra = max(0.0, since_last_event) if not state.finished else 0.0
    lines: list[Text] = [_header(state, live_extra, now)]
    children_of: dict[str | None, list[tuple[str, str]]] = {}
    for phase in state.phases.values():
        children_of.setdefault(phase.parent_span_id, []).append(("phase", phase.span_id))
    for child in state.children.values():
        children_of.setdefault(child.parent_span_id, []).append(("child", child.span_id))
    agents = list(state.agents.values())
    shown: set[str] = set()
    if len(agents) > _MAX_ROWS:
        running = [a for a in agents if not a.done]
        settled = [a for a in agents if a.done]
        keep = running[:_MAX_ROWS] + settled[-max(0, _MAX_ROWS - len(running)) :]
        shown = {a.span_id for a in keep}
    else:
        shown = {a.span_id for a in agents}
    known = set(state.phases) | set(state.agents) | set(state.children)
    for agent in agents:
        if agent.span_id in shown:
            parent = agent.parent_span_id
            if parent is None or parent not in known:
                parent = inferred.get(agent.span_id, parent)
            children_of.setdefault(parent, []).append(("agent", agent.span_id))
    roots = [(p, items) for p, items in children_of.items() if p is None or p not in known]
    for _parent, items in roots:
        for kind, span_id in items:
            _render_node(state, kind, span_id, children_of, 1, lines, live_extra, now, set())
    for line in lines:
        line.truncate(MAX_LINE_CHARS, overflow="ellipsis")
    hidden = len(agents) - len(shown)
    if hidden:
        noun = "agent" if hidden == 1 else "agents"
        lines.append(Text(f"  … {hidden} settled {noun} not shown", style="dim"))
    return Group(*lines)


def _render_node(
    state: ProgressState,
    kind: str,
    span_id: str,
    children_of: dict[str | None, list[tuple[str, str]]],
    depth: int,
    out: list[Text],
    live_extra: float,
    now: float,
    seen: set[str],
) -> None:
    from rich.text import Text

    if span_id in seen:  # a malformed stream could make a span its own ancestor
        return
    seen.add(span_id)
    indent = "  " * depth
    if kind == "phase":
        out.append(Text(f"{indent}[{state.phases[span_id].name}]", style="bold"))
    elif kind == "child":
        child = state.children[span_id]
        text = Text(f"{indent}child {child.workflow}")
        if child.scope:
            text.append(f" ({child.scope})", style="dim")
        text.append(f"  {child.status}", style=_STATUS_STYLE.get(child.status, ""))
        out.append(text)
    else:
        out.extend(_agent_lines(state, state.agents[span_id], indent, live_extra, now))
    for sub_kind, sub_id in children_of.get(span_id, []):
        _render_node(state, sub_kind, sub_id, children_of, depth + 1, out, live_extra, now, seen)


def _agent_lines(
    state: ProgressState, row: AgentRow, indent: str, live_extra: float, now: float
) -> list[Text]:
    from rich.text import Text

    text = Text(indent)
    text.append(_glyph(row, now), style=_STATUS_STYLE.get(row.status, "cyan"))
    text.append(f"  {row.name}")
    if row.model:
        text.append(f"  {row.model}", style="dim")
    if row.active_role and not row.done:
        text.append(f"  > {row.active_role}")
    elapsed = state.agent_seconds(row)
    if elapsed is not None and not row.done and not row.replayed:
        elapsed += live_extra
    text.append(f"  {format_duration(elapsed)}")
    if row.output_tokens is not None or row.input_tokens is not None:
        text.append(f"  in {format_tokens(row.input_tokens)} out {format_tokens(row.output_tokens)}")
    elif (estimate := row.estimated_output_tokens) is not None:
        text.append(f"  ~{format_tokens(estimate)} out")
    if row.cost_usd is not None:
        text.append(f"  {format_usd(row.cost_usd)}")
    if row.current_tool and not row.done:
        text.append(f"  tool: {row.current_tool}", style="dim")
    waiting = state.waiting.get(row.span_id)
    if waiting and not row.done:
        text.append(f"  waiting: {waiting}", style="yellow")
    if row.retrying:
        text.append("  retrying", style="yellow")
    if row.error_code and row.status != "ok":
        text.append(f"  {row.error_code}", style="red")
    if row.replayed:
        text.append("  replay", style="dim")
    if row.status not in ("running", "queued", "ok"):
        text.append(f"  {row.status}", style=_STATUS_STYLE.get(row.status, ""))
    lines = [text]
    if len(row.role_seconds) > 1 or (row.role_seconds and row.active_role not in (None, *row.role_seconds)):
        roles = " · ".join(f"{role} {format_duration(sec)}" for role, sec in row.role_seconds.items())
        lines.append(Text(f"{indent}     roles: {roles}", style="dim"))
    return lines


def _header(state: ProgressState, live_extra: float, now: float) -> Text:
    from rich.text import Text

    glyph = _spinner(now) if not state.finished else _GLYPHS.get(state.status, "•")
    text = Text()
    text.append(glyph, style=_STATUS_STYLE.get(state.status, "cyan"))
    text.append(f"  {state.workflow or '?'}", style="bold")
    text.append(f"  run {state.run_id or '?'}")
    wall = state.wall_seconds()
    if wall is not None and not state.finished:
        wall += live_extra
    text.append(f"  {format_duration(wall)}")
    spent = state.total_usd if state.finished and state.total_usd is not None else state.spent_usd
    if spent is not None:
        text.append(f"  {format_usd(spent)}")
        if state.ceiling_usd is not None:
            text.append(f" / {format_usd(state.ceiling_usd)}  {_bar(spent, state.ceiling_usd)}")
    if state.status == "suspended":
        text.append("  suspended", style="yellow")
    elif state.finished:
        text.append(f"  {state.status}", style=_STATUS_STYLE.get(state.status, ""))
    return text


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


def _auto_is_tty(stream: TextIO) -> bool:
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def open_progress(
    mode: str,
    *,
    ceiling_usd: float | None = None,
    stream: TextIO | None = None,
    masker: SecretMasker | None = None,
    fps: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressView:
    """Open a progress view writing to ``stream`` (stderr by default).

    ``mode``: ``auto`` (a repainted tree on a terminal; milestones and a counts line every few
    seconds of ``clock`` otherwise, and under ``CI``), ``tty``, ``lines`` (every lifecycle fact)
    or ``off``. ``ceiling_usd`` fixes the budget the header measures
    spend against; without it the ceiling comes from ``budget:update`` (spent + remaining).
    """
    if mode not in PROGRESS_MODES:
        raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)}, got {mode!r}")
    if not (0 < fps <= 60):
        raise ConfigError(f"progress fps must be in (0, 60], got {fps!r}")
    masker = masker or default_masker()
    if mode == "off":
        return ProgressView(ProgressState(masker, ceiling_usd=ceiling_usd))
    out = stream if stream is not None else sys.stderr
    if mode == "lines":
        return _LinesView(ProgressState(masker, ceiling_usd=ceiling_usd), out, masker)
    if mode == "auto" and not _auto_is_tty(out):
        # Milestones print counts and the summary only: the fold skips what only the tree shows.
        state = ProgressState(masker, ceiling_usd=ceiling_usd, summary_only=True)
        return _MilestoneView(state, out, masker, clock=clock)
    return _TtyView(ProgressState(masker, ceiling_usd=ceiling_usd), out, masker, fps=fps, clock=clock)
