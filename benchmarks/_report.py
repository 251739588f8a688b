"""What every benchmark figure shares: the :class:`Figure` row, the table it prints as, the paths.

:func:`rate` formats a time over a stream, :func:`say` reports progress on stderr (the table goes
to stdout), :func:`load_stream` reads a stream once for the figures that start from parsed events.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = ["CACHE", "DEFAULT_STREAM", "REPO", "Figure", "load_stream", "rate", "say", "table"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STREAM = REPO / "tests" / "fixtures" / "reference" / "streams" / "large.jsonl"
CACHE = Path(tempfile.gettempdir()) / "rulvar-otel-bench"


@dataclass
class Figure:
    """One row of the table: a measured figure, its in-run baseline, their ratio and the target."""

    section: str
    name: str
    value: str
    baseline: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "value": self.value,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "target": self.target,
            "met": self.met,
            "notes": self.notes,
        }


def rate(events: int, seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms  {events / seconds / 1e3:6.1f}k ev/s"


def say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def load_stream(stream: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.read_bytes().splitlines() if line.strip()]


def table(figures: Sequence[Figure]) -> str:
    lines: list[str] = []
    section = ""
    for f in figures:
        if f.section != section:
            section = f.section
            lines.append(f"\n== {section} ==")
        verdict = "" if f.met is None else ("  [met]" if f.met else "  [MISSED]")
        ratio = f"  ratio {f.ratio:5.2f}" if f.ratio is not None else ""
        target = f"  target {f.target}" if f.target else ""
        lines.append(f"- {f.name}")
        lines.append(f"    {f.value}" + (f"  | baseline: {f.baseline}" if f.baseline else "") + ratio)
        if target or verdict:
            lines.append(f"   {target}{verdict}")
        lines.extend(f"    note: {note}" for note in f.notes)
    return "\n".join(lines)
