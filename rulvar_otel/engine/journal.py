"""The journal: an append-only list of decided facts per run, the authority replay reads.

Entries are JSON objects ``{seq, kind, key?, ts, data}``. ``seq`` is the journal's own counter
(events reference it as ``entryRef``); it is never the telemetry ``seq``.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rulvar_otel.errors import ConfigError, JournalError, RunNotFoundError

__all__ = ["InMemoryJournalStore", "JournalEntry", "JournalKind", "JournalStore", "JsonlJournalStore"]


class JournalKind(StrEnum):
    """What a journal entry records. Keyed kinds are looked up by the operation's positional key."""

    RUN_START = "run_start"
    SEGMENT = "segment"
    RUN_SETTLE = "run_settle"
    AGENT = "agent"
    TURN = "turn"
    TOOL = "tool"
    CHILD_ADMIT = "child_admit"
    CHILD = "child"
    EXTERNAL_WAITING = "external_waiting"
    APPROVAL_PENDING = "approval_pending"
    RESOLUTION = "resolution"
    NOW = "now"
    RANDOM = "random"
    ORCH = "orch"


class JournalEntry(BaseModel):
    """One decided fact. ``kind`` stays a plain string so a newer engine's kinds still load."""

    model_config = ConfigDict(frozen=True)

    seq: int
    kind: str
    key: str | None = None
    ts: str
    data: dict[str, Any] = Field(default_factory=dict[str, Any])


@runtime_checkable
class JournalStore(Protocol):
    """Where journals live. ``append`` assigns nothing: the engine numbers entries itself."""

    def load(self, run_id: str) -> list[JournalEntry]:
        """Every entry of ``run_id`` in append order; raises RunNotFoundError for an unknown run."""
        ...

    def append(self, run_id: str, entry: JournalEntry) -> None: ...

    def exists(self, run_id: str) -> bool: ...

    def runs(self) -> list[str]: ...


class InMemoryJournalStore:
    """A journal store in a dict: for tests and one-process use."""

    def __init__(self) -> None:
        self._runs: dict[str, list[JournalEntry]] = {}
        self._lock = threading.Lock()

    def load(self, run_id: str) -> list[JournalEntry]:
        with self._lock:
            if run_id not in self._runs:
                raise RunNotFoundError(f"no journal for run {run_id!r}")
            return list(self._runs[run_id])

    def append(self, run_id: str, entry: JournalEntry) -> None:
        with self._lock:
            if entry.kind == JournalKind.RUN_START and run_id in self._runs:
                raise JournalError(f"run {run_id!r} already has a journal: another run started it")
            self._runs.setdefault(run_id, []).append(entry)

    def exists(self, run_id: str) -> bool:
        return run_id in self._runs

    def runs(self) -> list[str]:
        return sorted(self._runs)


_SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class JsonlJournalStore:
    """One ``<run_id>.jsonl`` file per run in ``directory``; each append is one flushed line.

    Entries are kept verbatim (never masked: replay hands them back to the workflow), so a file is
    created readable and writable by its owner only (mode 0600).
    A run's ``run_start`` creates its file exclusively (``O_EXCL``): of two runs started with one
    run id at once, in one process or several, one journals and the other fails with
    :class:`JournalError`. A torn last line (a crash mid-write) is ignored on load: everything
    before it is intact. A journal with a repeated ``seq`` or a second ``run_start`` (two writers
    interleaved) is refused on load, naming the line.
    """

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self._fsync = fsync
        self._lock = threading.Lock()

    def _path(self, run_id: str) -> Path:
        if not _SAFE_RUN_ID.match(run_id) or run_id in (".", ".."):
            raise ConfigError(f"run id {run_id!r} is not usable as a journal file name")
        return self.directory / f"{run_id}.jsonl"

    def load(self, run_id: str) -> list[JournalEntry]:
        path = self._path(run_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise RunNotFoundError(f"no journal for run {run_id!r} in {self.directory}") from None
        except OSError as exc:
            raise JournalError(f"cannot read journal {path}: {exc.strerror}") from exc
        entries: list[JournalEntry] = []
        seen = _OneWriter(path)
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                value: Mapping[str, Any] = orjson.loads(line)
                entry = JournalEntry.model_validate(value)
            except (orjson.JSONDecodeError, ValueError) as exc:
                if number == len(lines) or (number == len(lines) - 1 and not lines[-1].strip()):
                    break  # a torn final write
                raise JournalError(f"{path}:{number}: not a journal entry ({_describe(exc)})") from None
            seen.check(entry, number)
            entries.append(entry)
        return entries

    def append(self, run_id: str, entry: JournalEntry) -> None:
        path = self._path(run_id)
        wire = entry.model_dump()
        if wire["key"] is None:
            del wire["key"]
        line = orjson.dumps(wire) + b"\n"
        with self._lock:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                # The run's first entry creates the file, or fails if another run already did.
                with _open_journal(path, create=entry.kind == JournalKind.RUN_START) as fh:
                    fh.write(line)
                    fh.flush()
                    if self._fsync:
                        os.fsync(fh.fileno())
            except FileExistsError:
                raise JournalError(
                    f"journal {path} already exists: another run with id {run_id!r} started first"
                ) from None
            except OSError as exc:
                raise JournalError(f"cannot append to journal {path}: {exc.strerror}") from exc

    def exists(self, run_id: str) -> bool:
        path = self._path(run_id)
        try:
            return path.exists()
        except OSError as exc:
            raise JournalError(f"cannot look up journal {path}: {exc.strerror}") from exc

    def runs(self) -> list[str]:
        try:
            names = [entry.name for entry in self.directory.iterdir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise JournalError(f"cannot list journals in {self.directory}: {exc.strerror}") from exc
        return sorted(name[: -len(".jsonl")] for name in names if name.endswith(".jsonl") and name[0] != ".")


class _OneWriter:
    """Checks, line by line, that one writer wrote a journal: each seq once, one run_start."""

    __slots__ = ("_path", "_seqs", "_start")

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seqs: dict[int, int] = {}  # seq -> the line that holds it
        self._start: int | None = None

    def check(self, entry: JournalEntry, number: int) -> None:
        first = self._seqs.setdefault(entry.seq, number)
        if first != number:
            raise JournalError(
                f"{self._path}:{number}: seq {entry.seq} repeats line {first}; two runs wrote this journal"
            )
        if entry.kind == JournalKind.RUN_START:
            if self._start is not None:
                raise JournalError(
                    f"{self._path}:{number}: a second run_start (the first is line {self._start}); "
                    "two runs wrote this journal"
                )
            self._start = number


def _open_journal(path: Path, *, create: bool) -> BinaryIO:
    """The journal for appending; ``create`` makes it exclusively, readable by its owner only:
    it holds the run's content verbatim (model turns, tool results), credentials included."""
    if not create:
        return path.open("ab")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    return os.fdopen(fd, "ab")


def _describe(exc: Exception) -> str:
    """What is wrong with a line, never the line itself: a journal holds prompts and tool output."""
    if isinstance(exc, ValidationError):
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'entry'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        return "; ".join(problems[:5])
    if isinstance(exc, orjson.JSONDecodeError):
        return f"invalid JSON at character {exc.pos}"
    return type(exc).__name__
