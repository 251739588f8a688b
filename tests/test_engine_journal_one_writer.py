"""One journal, one writer: runs started with one run id at once never share a journal, and replay
refuses a journal two writers interleaved, naming the line."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from pathlib import Path

import orjson
import pytest

from rulvar_otel.engine import JsonlJournalStore
from rulvar_otel.engine.demo import build_demo
from rulvar_otel.errors import JournalError, RunRejectedError
from tests._support import rulvar_otel_command, run_cli

pytestmark = pytest.mark.usefixtures("otel_env_cleared")

RUN_ID = "shared-run"
TIMEOUT_S = 120


class RacingStore(JsonlJournalStore):
    """Answers ``exists`` only once every racer has asked: all of them find no journal yet."""

    def __init__(self, directory: Path, barrier: threading.Barrier) -> None:
        super().__init__(directory)
        self._barrier = barrier

    def exists(self, run_id: str) -> bool:
        answer = super().exists(run_id)
        self._barrier.wait(TIMEOUT_S)
        return answer


def _run_demo(store: JsonlJournalStore, outcomes: list[object]) -> None:
    async def main() -> object:
        setup = build_demo(journal=store)
        handle = setup.engine.run(setup.workflow, setup.args, run_id=RUN_ID)
        async for _ in handle.events:
            pass
        try:
            return await handle.result
        except RunRejectedError as exc:
            return exc

    outcomes.append(asyncio.run(main()))


@pytest.mark.parametrize("racers", [2, 3])
def test_runs_racing_past_the_existence_check_leave_one_journal_and_one_winner(
    tmp_path: Path, racers: int
) -> None:
    barrier = threading.Barrier(racers)
    outcomes: list[object] = []
    threads = [
        threading.Thread(target=_run_demo, args=(RacingStore(tmp_path, barrier), outcomes))
        for _ in range(racers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert len(outcomes) == racers
    losers = [o for o in outcomes if isinstance(o, RunRejectedError)]
    assert len(losers) == racers - 1
    for loser in losers:
        assert loser.error_code == JournalError.code
        assert "already exists: another run with id 'shared-run' started first" in str(loser)
    entries = JsonlJournalStore(tmp_path).load(RUN_ID)  # one writer: it loads
    assert [e.kind for e in entries].count("run_start") == 1


def test_concurrent_demo_processes_into_one_journal_leave_one_success(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    children = [
        subprocess.Popen(
            [
                rulvar_otel_command(),
                "demo",
                "--journal",
                str(journal),
                "--run-id",
                RUN_ID,
                "--out",
                str(tmp_path / f"out-{n}.jsonl"),
                "--progress",
                "off",
                "--no-tree",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for n in range(4)
    ]
    results = [
        (child.wait(TIMEOUT_S), child.stderr.read().decode() if child.stderr else "") for child in children
    ]
    for child in children:
        if child.stderr:
            child.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2, 2, 2], results
    for code, err in results:
        if code == 2:
            assert "already has a journal" in err or "already exists" in err, err
    code, _, err = run_cli("replay", RUN_ID, "--journal", str(journal), "--progress", "off", "--no-tree")
    assert code == 0, err


def _journal(tmp_path: Path) -> tuple[Path, list[bytes]]:
    directory = tmp_path / "journal"
    outcomes: list[object] = []
    _run_demo(JsonlJournalStore(directory), outcomes)
    path = directory / f"{RUN_ID}.jsonl"
    return path, path.read_bytes().splitlines()


def _refused(path: Path, expected: str) -> None:
    with pytest.raises(JournalError, match=expected):
        JsonlJournalStore(path.parent).load(RUN_ID)
    code, out, err = run_cli("replay", RUN_ID, "--journal", str(path.parent), "--progress", "off")
    assert code == 2
    assert f"error: {path}:" in err and "two runs wrote this journal" in err
    assert out == ""


@pytest.mark.parametrize("copied", [2, 5, -1])
def test_replay_refuses_a_journal_with_a_repeated_seq_naming_both_lines(tmp_path: Path, copied: int) -> None:
    path, lines = _journal(tmp_path)
    index = copied % len(lines)
    path.write_bytes(b"\n".join([*lines, lines[index]]) + b"\n")
    seq = orjson.loads(lines[index])["seq"]
    _refused(path, rf":{len(lines) + 1}: seq {seq} repeats line {index + 1}; two runs wrote this journal")


def test_replay_refuses_a_journal_with_a_second_run_start(tmp_path: Path) -> None:
    path, lines = _journal(tmp_path)
    second = orjson.loads(lines[0])
    second["seq"] = 10_000
    path.write_bytes(b"\n".join([*lines, orjson.dumps(second)]) + b"\n")
    _refused(path, rf":{len(lines) + 1}: a second run_start \(the first is line 1\)")


def test_two_interleaved_writers_are_refused_wherever_they_cross(tmp_path: Path) -> None:
    path, lines = _journal(tmp_path)
    for cut in range(1, len(lines)):
        # A second writer's whole journal spliced in after line `cut` of the first.
        path.write_bytes(b"\n".join([*lines[:cut], *lines, *lines[cut:]]) + b"\n")
        with pytest.raises(JournalError, match="two runs wrote this journal"):
            JsonlJournalStore(path.parent).load(RUN_ID)


def test_a_journal_written_by_one_run_still_loads_and_replays(tmp_path: Path) -> None:
    path, lines = _journal(tmp_path)
    assert len(JsonlJournalStore(path.parent).load(RUN_ID)) == len(lines)
    code, _, err = run_cli("replay", RUN_ID, "--journal", str(path.parent), "--progress", "off", "--no-tree")
    assert code == 0, err
