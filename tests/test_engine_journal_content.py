"""The journal is the engine's durable record: content kept verbatim, readable by its owner only.

The event stream is masked at the bus; the journal is not (a masked tool result would replay as a
different value than the workflow saw), so the file is created readable by its owner alone.
"""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

from rulvar_otel.engine import (
    JsonlJournalStore,
    Reply,
    ScriptedAdapter,
    ToolCalls,
    create_engine,
    tool,
    workflow,
)
from tests._support import PRICES, TickClock, no_sleep, settle

KEY = "sk-proj-JournalKeepsThisVerbatim0123"


@tool
def fetch_config(name: str) -> str:
    return f"config {name}: api key {KEY}"


@workflow("keeps-content")
async def keeps_content(ctx: Any, args: Any) -> Any:
    async with ctx.phase("one"):
        return await ctx.agent("reader", label="reader", tools=[fetch_config])


def _adapter() -> ScriptedAdapter:
    return ScriptedAdapter(
        "fake", script={"reader": [ToolCalls([("fetch_config", {"name": "prod"})]), Reply(f"found {KEY}")]}
    )


def _engine(store: JsonlJournalStore, adapter: ScriptedAdapter) -> Any:
    return create_engine([adapter], journal=store, pricing=PRICES, clock=TickClock(), sleep=no_sleep)


def test_the_journal_keeps_content_verbatim_the_stream_masks_it_and_replay_is_faithful(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        store = JsonlJournalStore(tmp_path)
        events, outcome = await settle(_engine(store, _adapter()).run(keeps_content, {}, run_id="r1"))
        assert outcome.status == "ok" and KEY in json.dumps(outcome.value)
        assert KEY not in json.dumps(events)  # the stream is masked at the bus
        journal = (tmp_path / "r1.jsonl").read_text()
        assert KEY in journal  # the journal is not: it is what replay hands back
        silent = ScriptedAdapter("fake", fallback=None)
        replayed, again = await settle(_engine(store, silent).resume("r1", keeps_content))
        assert silent.calls == 0 and again.value == outcome.value
        assert KEY not in json.dumps(replayed)

    asyncio.run(scenario())


def test_a_journal_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    async def scenario() -> None:
        await settle(_engine(JsonlJournalStore(tmp_path), _adapter()).run(keeps_content, {}, run_id="r2"))

    asyncio.run(scenario())
    mode = stat.S_IMODE((tmp_path / "r2.jsonl").stat().st_mode)
    assert mode & 0o077 == 0, oct(mode)
