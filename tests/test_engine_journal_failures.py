"""A journal the engine cannot write (or read cleanly) never hangs a run and never echoes its content.

Any refused write settles the run with a typed error: the stream ends with ``run:end`` (``settled:
false``), the result rejects with a ``journal`` rejection caused by a :class:`JournalError`, and the
CLI exits 2 within seconds. A dry-run needs no write access, so a read-only archive replays.
Root ignores file modes, so the CLI cases run under ``capsh`` with the DAC capabilities dropped.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rulvar_otel.core.events import event_to_wire
from rulvar_otel.engine import (
    InMemoryJournalStore,
    JournalEntry,
    JournalError,
    JsonlJournalStore,
    Reply,
    ScriptedAdapter,
    workflow,
)
from rulvar_otel.errors import RunRejectedError
from tests._support import make_engine

SECRET_LINE = '{"seq": "sk-planted0123456789abcdef", "kind": "agent", "ts": "x", "data": {}}'


class RefusingStore(InMemoryJournalStore):
    """An in-memory store that refuses every append after the first ``accept`` ones."""

    def __init__(self, accept: int, error: Exception | None = None) -> None:
        super().__init__()
        self.accept = accept
        self.error = error or JournalError("cannot append to journal: No space left on device")
        self.attempts = 0

    def append(self, run_id: str, entry: JournalEntry) -> None:
        self.attempts += 1
        if self.attempts > self.accept:
            raise self.error
        super().append(run_id, entry)


@workflow("two-agents")
async def two_agents(ctx: Any, args: Any) -> Any:
    async with ctx.phase("work"):
        first = await ctx.agent("first", label="first")
        try:
            await ctx.agent("second", label="second")
        except Exception:  # a workflow that swallows the failure must still not stand
            pass
        return {"first": first}


async def _run_with(store: InMemoryJournalStore) -> tuple[list[dict[str, Any]], BaseException | None]:
    engine = make_engine([ScriptedAdapter("fake", script=[Reply("one"), Reply("two")])], journal=store)
    handle = engine.run(two_agents, {}, run_id="refused")
    events = await asyncio.wait_for(_drain(handle), timeout=5)
    try:
        await asyncio.wait_for(handle.result, timeout=5)
    except RunRejectedError as exc:
        return events, exc
    return events, None


async def _drain(handle: Any) -> list[dict[str, Any]]:
    return [event_to_wire(e) async for e in handle.events]


# The run journals 7 entries: run_start, segment, turn + agent twice, run_settle.
@pytest.mark.parametrize("accept", [0, 1, 2, 3, 4, 5])
def test_a_refused_journal_write_at_any_point_settles_the_run_with_a_typed_rejection(accept: int) -> None:
    events, rejection = asyncio.run(_run_with(RefusingStore(accept)))
    assert events[0]["type"] == "run:start" and events[-1]["type"] == "run:end"
    end = events[-1]
    assert end["status"] == "error" and end["settled"] is False
    assert end["envelope"]["error"]["code"] == "journal"
    assert isinstance(rejection, RunRejectedError) and rejection.error_code == "journal"
    assert isinstance(rejection.__cause__, JournalError)
    assert "No space left on device" in str(rejection)
    # Every started agent still ends exactly once.
    starts = [e["spanId"] for e in events if e["type"] == "agent:start"]
    ends = [e["spanId"] for e in events if e["type"] == "agent:end"]
    assert sorted(starts) == sorted(ends)


def test_after_a_refused_write_no_further_provider_request_is_made() -> None:
    # Entry 4 is the first agent's terminal: the agent answered, but nothing recorded it, so the
    # second agent (whose failure the workflow swallows) must not reach the provider at all.
    adapter = ScriptedAdapter("fake", script=[Reply("one"), Reply("two")])

    async def scenario() -> list[dict[str, Any]]:
        engine = make_engine([adapter], journal=RefusingStore(3))
        handle = engine.run(two_agents, {}, run_id="refused")
        with pytest.raises(RunRejectedError):
            await asyncio.wait_for(handle.result, timeout=5)
        return await _drain(handle)

    events = asyncio.run(scenario())
    assert len(adapter.requests) == 1
    assert [e["label"] for e in events if e["type"] == "agent:start"] == ["first"]
    assert events[-1]["envelope"]["error"]["code"] == "journal"


def test_a_refused_settlement_write_rejects_the_result_after_a_complete_stream() -> None:
    events, rejection = asyncio.run(_run_with(RefusingStore(6)))
    end = events[-1]
    assert end["type"] == "run:end" and end["status"] == "ok" and end["settled"] is False
    assert isinstance(rejection, RunRejectedError) and rejection.error_code == "journal"
    assert isinstance(rejection.__cause__, JournalError)


def test_a_host_store_raising_anything_is_the_same_typed_rejection() -> None:
    events, rejection = asyncio.run(_run_with(RefusingStore(3, error=OSError("disk on fire"))))
    assert events[-1]["type"] == "run:end" and events[-1]["envelope"]["error"]["code"] == "journal"
    assert isinstance(rejection, RunRejectedError) and isinstance(rejection.__cause__, JournalError)
    assert "OSError" in str(rejection)


def test_a_dry_run_on_a_store_that_refuses_writes_replays_without_writing() -> None:
    async def scenario() -> tuple[list[dict[str, Any]], Any, int]:
        store = RefusingStore(accept=10_000)
        engine = make_engine([ScriptedAdapter("fake", script=[Reply("one"), Reply("two")])], journal=store)
        live = await engine.run(two_agents, {}, run_id="archived").result
        store.accept = store.attempts  # from now on the store is read-only
        kept = len(store.load("archived"))
        handle = engine.resume("archived", two_agents, dry_run=True)
        events = await asyncio.wait_for(_drain(handle), timeout=5)
        replayed = await handle.result
        assert replayed.value == live.value
        return events, replayed, kept - len(store.load("archived"))

    events, outcome, written = asyncio.run(scenario())
    assert written == 0
    assert outcome.status == "ok"
    warnings = [e["msg"] for e in events if e["type"] == "log" and e["level"] == "warn"]
    assert len(warnings) == 1 and "read-only" in warnings[0]
    assert all(e.get("replayed") for e in events if e["type"] in ("agent:start", "agent:end"))


def test_a_corrupt_journal_line_is_named_by_number_and_its_content_is_never_echoed(tmp_path: Path) -> None:
    good = '{"seq": 0, "kind": "run_start", "ts": "2026-01-01T00:00:00.000Z", "data": {}}'
    for bad in (
        SECRET_LINE,
        '{"seq": 1, "kind": ["sk-planted0123456789abcdef"], "ts": 1}',
        "sk-planted0123456789abcdef",
    ):
        (tmp_path / "r.jsonl").write_text(f"{good}\n{bad}\n{good}\n", encoding="utf-8")
        with pytest.raises(JournalError) as caught:
            JsonlJournalStore(tmp_path).load("r")
        message = str(caught.value)
        assert "r.jsonl:2: not a journal entry" in message
        assert "planted" not in message and "sk-" not in message
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_an_unreadable_journal_directory_is_a_journal_error_not_a_traceback(tmp_path: Path) -> None:
    store = JsonlJournalStore(tmp_path / "file-not-dir" / "journal")
    (tmp_path / "file-not-dir").write_text("not a directory", encoding="utf-8")
    with pytest.raises(JournalError):
        store.append("r", JournalEntry(seq=0, kind="segment", ts="2026-01-01T00:00:00.000Z"))


# --- the CLI, with file modes enforced ------------------------------------------------------------


def _cli(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``rulvar-otel ARGS`` as a user whose file modes are enforced (root without DAC overrides)."""
    return _unprivileged(["-c", "from rulvar_otel.cli import main; main()", *args], timeout)


def _unprivileged(python_args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *python_args]
    if os.geteuid() == 0:
        capsh = shutil.which("capsh")
        assert capsh is not None, "capsh (libcap2-bin) is needed to drop root's DAC capabilities"
        command = [capsh, "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", shlex.join(command)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def _read_only(path: Path) -> None:
    for item in [*path.rglob("*"), path]:
        mode = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
        if item.is_dir():
            mode |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        item.chmod(mode)


def test_demo_on_a_journal_it_cannot_write_exits_2_within_seconds(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    _read_only(journal)
    out = tmp_path / "trace.jsonl"
    result = _cli(
        ["demo", "--journal", str(journal), "--out", str(out), "--progress", "off", "--run-id", "r1"]
    )
    assert result.returncode == 2, result.stderr
    assert "cannot append to journal" in result.stderr and "Permission denied" in result.stderr
    assert "journaled in" not in result.stderr  # no false success line
    assert list(journal.iterdir()) == []


def test_replay_of_a_read_only_archived_journal_works_and_writes_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    live_out, replay_out = tmp_path / "live.jsonl", tmp_path / "replay.jsonl"
    live = _cli(
        ["demo", "--journal", str(journal), "--out", str(live_out), "--progress", "off", "--run-id", "arc"]
    )
    assert live.returncode == 0, live.stderr
    _read_only(journal)
    before = (journal / "arc.jsonl").read_bytes()
    replayed = _cli(
        ["replay", "arc", "--journal", str(journal), "--out", str(replay_out), "--progress", "off"]
    )
    assert replayed.returncode == 0, replayed.stderr
    assert (journal / "arc.jsonl").read_bytes() == before
    assert sorted(os.listdir(journal)) == ["arc.jsonl"]
    assert replay_out.stat().st_size > 0


def test_replay_of_a_corrupt_journal_is_a_usage_error_that_echoes_nothing(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    good = '{"seq": 0, "kind": "run_start", "ts": "2026-01-01T00:00:00.000Z", "data": {"workflow": "x"}}'
    (journal / "bad.jsonl").write_text(f"{good}\n{SECRET_LINE}\n{good}\n", encoding="utf-8")
    result = _cli(["replay", "bad", "--journal", str(journal), "--out", str(tmp_path / "o.jsonl")])
    assert result.returncode == 2
    assert "bad.jsonl:2: not a journal entry" in result.stderr
    assert "planted" not in result.stderr + result.stdout


def test_a_journal_directory_nobody_may_enter_is_a_journal_error_for_every_store_call(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    code = f"""
from rulvar_otel.engine import JournalEntry, JournalError, JsonlJournalStore
store = JsonlJournalStore({str(locked)!r})
entry = JournalEntry(seq=0, kind="segment", ts="2026-01-01T00:00:00.000Z")
for name, call in (("exists", lambda: store.exists("r")), ("load", lambda: store.load("r")),
                   ("append", lambda: store.append("r", entry)), ("runs", store.runs)):
    try:
        call()
    except JournalError as exc:
        print(name, "JournalError", "Permission denied" in str(exc))
"""
    result = _unprivileged(["-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == [
        "exists JournalError True",
        "load JournalError True",
        "append JournalError True",
        "runs JournalError True",
    ]
