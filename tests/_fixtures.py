"""Access to the in-repo reference corpus (`tests/fixtures/reference`, see its README)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rulvar_otel.core.handle import RunOutcome, outcome_from_json
from rulvar_otel.errors import RunRejectedError

REFERENCE = Path(__file__).resolve().parent / "fixtures" / "reference"
STREAMS = REFERENCE / "streams"
SPANS = REFERENCE / "spans"


# The corpus holds 43 streams and 47 span trees; fewer means a broken checkout, never an empty suite.
MIN_STREAMS = 43
MIN_SPAN_TREES = 47


class MissingFixtureError(AssertionError):
    """The reference corpus is missing or incomplete in this checkout."""


def _require(paths: list[Path], minimum: int, what: str) -> list[Path]:
    if len(paths) < minimum:
        raise MissingFixtureError(
            f"expected at least {minimum} {what} under {REFERENCE}, found {len(paths)}: "
            "the reference corpus is incomplete"
        )
    return paths


def stream_names() -> list[str]:
    paths = _require(sorted(STREAMS.glob("*.jsonl")), MIN_STREAMS, "streams")
    return [p.name.removesuffix(".jsonl") for p in paths]


@cache
def _events(name: str) -> tuple[dict[str, Any], ...]:
    path = STREAMS / f"{name}.jsonl"
    if not path.is_file():
        raise MissingFixtureError(f"no reference stream {name!r} at {path}")
    lines = path.read_text(encoding="utf-8").splitlines()
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
    yield from _require(sorted(SPANS.glob("*.json")), MIN_SPAN_TREES, "span trees")


def load_reference(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
