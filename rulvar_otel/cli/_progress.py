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

from rulvar_otel.cli._plain_progress import (
    MAX_LINE_CHARS,
    LinesView,
    MilestoneView,
    ProgressView,
    cut,
    summary_lines,
)
from rulvar_otel.cli._text import PROGRESS_MODES
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker, default_masker
from rulvar_otel.core.progress import (
    AgentRow,
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

__all__ = ["MAX_LINE_CHARS", "PROGRESS_MODES", "ProgressView", "open_progress", "summary_lines"]


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
            self._console.print(Text(cut(line)), highlight=False)

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
        return LinesView(ProgressState(masker, ceiling_usd=ceiling_usd), out, masker)
    if mode == "auto" and not _auto_is_tty(out):
        # Milestones print counts and the summary only: the fold skips what only the tree shows.
        state = ProgressState(masker, ceiling_usd=ceiling_usd, summary_only=True)
        return MilestoneView(state, out, masker, clock=clock)
    return _TtyView(ProgressState(masker, ceiling_usd=ceiling_usd), out, masker, fps=fps, clock=clock)
