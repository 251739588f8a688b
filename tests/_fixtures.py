"""Access to the shared reference corpus (read in place, never copied into the repo)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rulvar_otel.core.handle import RunOutcome, outcome_from_json
from rulvar_otel.errors import RunRejectedError

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "reference"
STREAMS = REFERENCE / "streams"
SPANS = REFERENCE / "spans"


def stream_names() -> list[str]:
    return sorted(p.name.removesuffix(".jsonl") for p in STREAMS.glob("*.jsonl"))


@cache
def _events(name: str) -> tuple[dict[str, Any], ...]:
    lines = (STREAMS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return tuple(json.loads(line) for line in lines if line.strip())


def events(name: str) -> list[dict[str, Any]]:
    """A fresh copy of a stream's events (tests may mutate them)."""
    return json.loads(json.dumps(_events(name)))  # type: ignore[no-any-return]


def outcome(name: str) -> RunOutcome | RunRejectedError:
    return outcome_from_json(json.loads((STREAMS / f"{name}.outcome.json").read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Reference:
    name: str
    path: Path
    data: dict[str, Any]

    @property
    def stream(self) -> str:
        return self.data["scenario"] if (STREAMS / f"{self.data['scenario']}.jsonl").exists() else self.name


def reference_files() -> Iterator[Path]:
    yield from sorted(SPANS.glob("*.json"))


def load_reference(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
