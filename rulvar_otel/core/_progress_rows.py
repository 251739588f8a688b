"""The rows a progress view shows, and how a figure reads in a terminal.

Owns :class:`AgentRow` (one agent dispatch: status, timing, usage, its current role and tool),
:class:`PhaseRow` and :class:`ChildRow`, and the formatters every progress view shares
(:func:`format_duration`, :func:`format_tokens`, :func:`format_usd`). The fold that fills the rows
is :class:`~rulvar_otel.core.progress.ProgressState`; names here arrive already masked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "AgentRow",
    "ChildRow",
    "PhaseRow",
    "format_duration",
    "format_tokens",
    "format_usd",
]

# Rough bytes-per-token of streamed text: the estimate is marked "~" and replaced by exact usage.
_CHARS_PER_TOKEN: Final = 4


def format_duration(seconds: float | None) -> str:
    """``850ms``, ``31s``, ``1m 04s``, ``2h 03m``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {(whole % 3600) // 60:02d}m"


def format_tokens(count: float | None) -> str:
    """``950``, ``2.1k``, ``18k``, ``1.2M``."""
    if count is None:
        return "-"
    if count < 1000:
        return str(int(count))
    if count < 10_000:
        return f"{count / 1000:.1f}k"
    if count < 1_000_000:
        return f"{count / 1000:.0f}k"
    return f"{count / 1_000_000:.1f}M"


def format_usd(value: float | None) -> str:
    """``$0.086``; four decimals under a cent so small runs do not read as free."""
    if value is None:
        return "-"
    if value != 0 and abs(value) < 0.01:
        # Up to six decimals, trailing zeros trimmed to four: $0.0002, $0.000004.
        text = f"{value:.6f}".rstrip("0")
        return "$" + (text + "0" * max(0, 4 - len(text.split(".")[1])))
    return f"${value:.3f}"


@dataclass
class PhaseRow:
    """A ``ctx.phase`` block."""

    span_id: str
    name: str
    parent_span_id: str | None
    started_at: float | None


@dataclass
class ChildRow:
    """A child workflow."""

    span_id: str
    workflow: str
    scope: str | None
    parent_span_id: str | None
    status: str = "running"
    started_at: float | None = None
    ended_at: float | None = None


@dataclass
class AgentRow:
    """One agent dispatch as the view shows it. Names are already masked and sanitized."""

    span_id: str
    parent_span_id: str | None
    name: str
    model: str | None = None
    role: str | None = None
    status: str = "running"
    started_at: float | None = None
    ended_at: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    stream_chars: int = 0
    active_role: str | None = None
    current_tool: str | None = None
    role_seconds: dict[str, float] = field(default_factory=dict)
    open_phases: dict[int, str] = field(default_factory=dict)
    replayed: bool = False
    retrying: bool = False
    error_code: str | None = None

    @property
    def done(self) -> bool:
        return self.status not in ("running", "queued")

    @property
    def estimated_output_tokens(self) -> int | None:
        """A rough token estimate from streamed characters while no exact count exists."""
        if self.output_tokens is not None or self.stream_chars == 0:
            return None
        return max(1, self.stream_chars // _CHARS_PER_TOKEN)
