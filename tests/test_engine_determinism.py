"""``determinism_mode="error"``: a bare clock or random call in workflow code rejects the run."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import pytest

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import (
    ScriptedAdapter,
    workflow,
)
from rulvar_otel.errors import ConfigError
from tests._support import Run, make_engine, settle


def _error(outcome: RunOutcome) -> dict[str, Any]:
    assert isinstance(outcome.error, dict)
    return outcome.error


@workflow("clocked")
async def clocked(ctx: Any, args: Any) -> Any:
    async with ctx.phase("work"):
        if args.get("swallow"):
            try:
                time.time()
            except Exception as exc:
                ctx.log("info", f"caught {type(exc).__name__}")
        elif args.get("dice"):
            random.random()
        else:
            time.time()
        return await ctx.agent("after the clock")


@workflow("clean-clock")
async def clean_clock(ctx: Any, args: Any) -> Any:
    uuid.uuid1()  # the standard library reads the clock itself: exempt even in error mode
    return {"stamp": ctx.now() > 0, "draw": ctx.random() >= 0}


async def _clocked(args: dict[str, Any], wf: Any = clocked, **options: Any) -> Run:
    return await settle(
        make_engine([ScriptedAdapter("fake")], determinism_mode="error", **options).run(wf, args)
    )


def test_error_mode_rejects_the_run_at_the_bare_call_after_its_warning() -> None:
    async def go() -> tuple[Run, Run, Run, Run, Run]:
        return (
            await _clocked({}),
            await _clocked({"dice": True}),
            await _clocked({"swallow": True}),
            await _clocked({}, clean_clock),
            await _clocked({}, determinism_allow=[__file__]),
        )

    (events, outcome), (dice, dice_out), (swallowed, swallow_out), (_, clean), (allowed, allow_out) = (
        asyncio.run(go())
    )
    kinds = [e["type"] for e in events if e["type"] != "budget:update"]
    assert kinds == ["run:start", "phase:start", "determinism:warning", "run:end"]  # no agent ran
    warning = next(e for e in events if e["type"] == "determinism:warning")
    assert (warning["category"], warning["provenance"]) == ("bare-date-now", "workflow")
    assert warning["file"] == __file__
    error = _error(outcome)
    assert outcome.status == "error" and error["code"] == "determinism"
    assert error["data"] == {"category": "bare-date-now", "file": __file__, "line": warning["line"]}
    assert events[-1]["envelope"]["error"]["code"] == "determinism"
    assert dice_out.status == "error" and _error(dice_out)["data"]["category"] == "bare-math-random"
    assert [e["category"] for e in dice if e["type"] == "determinism:warning"] == ["bare-math-random"]
    # Caught inside the workflow, the bare call still never ran, and the run is still rejected.
    assert [e["msg"] for e in swallowed if e["type"] == "log"] == ["caught DeterminismError"]
    assert swallow_out.status == "error" and _error(swallow_out)["code"] == "determinism"
    assert swallow_out.value is None and any(e["type"] == "agent:end" for e in swallowed)
    # Exempt and allowlisted calls warn (or not) exactly as in warn mode, and never reject.
    assert clean.status == "ok"
    assert allow_out.status == "ok"
    assert [e["provenance"] for e in allowed if e["type"] == "determinism:warning"] == ["allowlisted"]
    with pytest.raises(ConfigError, match="determinism_mode"):
        make_engine([ScriptedAdapter("fake")], determinism_mode="strict")
