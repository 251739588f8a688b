"""The in-repo reference corpus (`tests/fixtures/reference`, see its README): streams, outcomes, trees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from rulvar_otel.core.handle import RunOutcome, outcome_from_json
from rulvar_otel.errors import RunRejectedError

__all__ = [
    "MIN_SPAN_TREES",
    "MIN_STREAMS",
    "REFERENCE",
    "SPANS",
    "STREAMS",
    "MissingFixtureError",
    "events",
    "load_reference",
    "outcome",
    "reference_span_count",
    "reference_files",
    "stream_names",
]

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference"
STREAMS = REFERENCE / "streams"
SPANS = REFERENCE / "spans"


# The corpus holds 43 streams and 47 span trees; fewer means a broken checkout, never an empty suite.
MIN_STREAMS = 43
MIN_SPAN_TREES = 47


class MissingFixtureError(AssertionError):
    """The reference corpus is missing or incomplete in this checkout."""


def _require(paths: list[Path], minimum: int, what: str, where: Path) -> list[Path]:
    if len(paths) < minimum:
        raise MissingFixtureError(
            f"expected at least {minimum} {what} under {where}, found {len(paths)}: "
            "the reference corpus is incomplete"
        )
    return paths


def stream_names(streams: Path = STREAMS) -> list[str]:
    """The names of the streams in ``streams`` (the corpus's by default), sorted."""
    paths = _require(sorted(streams.glob("*.jsonl")), MIN_STREAMS, "streams", streams)
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
    """How the corpus stream ``name`` settled."""
    return outcome_from_json(json.loads((STREAMS / f"{name}.outcome.json").read_text(encoding="utf-8")))


def reference_files() -> Iterator[Path]:
    yield from _require(sorted(SPANS.glob("*.json")), MIN_SPAN_TREES, "span trees", SPANS)


def load_reference(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def reference_span_count(name: str) -> int:
    """The span count the corpus manifest records for stream ``name`` (nested spans)."""
    manifest = json.loads((REFERENCE / "manifest.json").read_text(encoding="utf-8"))
    row = next(r for r in manifest if r["stream"] == f"streams/{name}.jsonl")
    count: int = row["spans"]["nested"]["spanCount"]
    return count
