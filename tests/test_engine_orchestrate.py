"""The bundled engine orchestrates: admission verdicts, plan-op outcomes, escalation decisions,
guards, the cost report's orchestrator block, and a zero-call dry-run replay."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rulvar_otel.engine import Hang, Limits, OrchestrateOptions, Reply, ToolCalls
from rulvar_otel.engine._orchestrate.plan import Plan, PlanNode
from rulvar_otel.engine.demo import build_demo
from rulvar_otel.otel import semconv as sc
from rulvar_otel.testing import metric_points
from tests._support import TickClock, adaptive, export, feed, of_type, orchestrated, replayed, settle

N1, N2 = "orch#0.n1", "orch#0.n2"
WAIT = {"timeout_s": 0.3}  # a hanging child never lands: the wake is bounded


def _turn(*calls: tuple[str, dict[str, object]]) -> list[object]:
    """One wake turn: the tool calls, then the text that ends the turn."""
    return [ToolCalls(list(calls)), Reply("turn over")]


def _escalating(kind: str = "scope_bigger") -> list[object]:
    return [
        ToolCalls([("escalate", {"kind": kind, "reason": "needs more"})], usage=(100, 10)),
        Reply("filed"),
    ]


def _escalation_run(decision_ops: list[dict[str, object]], *extra: tuple[str, dict[str, object]]):  # type: ignore[no-untyped-def]
    script = {
        "orchestrator": [
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "triage db"}), ("await_all", {})),
            *_turn(("plan_revise", {"ops": decision_ops}), *extra, ("await_all", {})),
            *_turn(("finish", {"summary": "done"})),
        ],
        "db": _escalating(),
        "db-part": [Reply("part done")],
    }
    return orchestrated(script)


def test_admitted_spawns_ledger_and_finish_emit_events_and_the_orchestrator_cost_block() -> None:
    script = {
        "orchestrator": [
            *_turn(
                ("ledger_append", {"op": "brief_set", "text": "triage api and db"}),
                ("spawn_agent", {"agent_type": "api", "prompt": "triage api"}),
                ("spawn_agent", {"agent_type": "db", "prompt": "triage db"}),
                ("await_all", {}),
            ),
            *_turn(
                ("ledger_append", {"op": "fact_add", "text": "api is fine"}), ("finish", {"summary": "ok"})
            ),
        ],
        "api": [Reply("api fine", usage=(200, 20))],
        "db": [Reply("db fine", usage=(200, 20))],
    }
    run = orchestrated(script)
    assert run.outcome.status == "ok"
    admitted = of_type(run.events, "spawn:admitted")
    assert [a["verdict"] for a in admitted] == ["admit", "admit"]
    assert [a["spawnUnitsAfter"] for a in admitted] == [499, 498]
    assert all(a["logicalTaskId"] and a["reserveUsd"] == 0.5 for a in admitted)
    assert [e["op"] for e in of_type(run.events, "ledger:op")] == ["brief_set", "fact_add"]
    woke = of_type(run.events, "orchestrator:woke")
    assert len(woke) == 1 and woke[0]["completed"] == 2 and woke[0]["renderSize"] > 0
    (acceptance,) = of_type(run.events, "orchestrator:acceptance")
    assert acceptance["verdict"] == "accepted" and acceptance["completion"] == "complete"
    assert acceptance["childStatusCounts"] == {"done": 2}
    # One agent span per wake turn, role orchestrate; children under their spawn spans.
    starts = of_type(run.events, "agent:start")
    turns = [s for s in starts if s["role"] == "orchestrate"]
    assert len(turns) == 2
    children = [s for s in starts if s["role"] == "loop"]
    assert {c["parentSpanId"] for c in children}.isdisjoint({t["spanId"] for t in turns})
    cost = run.outcome.cost
    block = cost["orchestrator"]
    turn_cost = sum(
        e["costUsd"] for e in of_type(run.events, "agent:end") if e["agentType"] == "orchestrator"
    )
    assert block["spentUsd"] == pytest.approx(turn_cost) and block["wakes"] == 1
    assert block["share"] == pytest.approx(turn_cost / max(cost["totalUsd"], 0.01))
    assert block["forcedFinish"] is False and cost["abandoned"]["usd"] == 0
    assert run.outcome.value["completion"] == "complete"
    assert run.events[-1]["envelope"]["totalUsd"] == cost["totalUsd"]


def test_a_cancelled_escalated_branch_re_added_is_reclaimed_by_reference() -> None:
    cancel = [{"op": "cancel", "node": N1}]
    script = {
        "orchestrator": [
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "triage db"}), ("await_all", {})),
            *_turn(("plan_revise", {"ops": cancel}), ("await_all", {})),
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "triage db"}), ("finish", {})),
        ],
        "db": _escalating(),
    }
    run = orchestrated(script)
    (raised,) = of_type(run.events, "escalation:raised")
    assert raised["kind"] == "scope_bigger" and raised["costToDateUsd"] > 0
    (decided,) = of_type(run.events, "escalation:decided")
    assert decided["decision"] == "cancel" and decided["countsAgainstLimit"] is True
    assert [c["nodeId"] for c in of_type(run.events, "node:cancelled")] == [N1]
    revised = of_type(run.events, "plan:revised")[0]
    assert (revised["applied"], revised["dropped"]) == (1, 0)  # transformed into a resolution
    verdicts = [a["verdict"] for a in of_type(run.events, "spawn:admitted")]
    assert verdicts == ["admit", "reuse_full"]
    (linked,) = of_type(run.events, "node:linked")
    donor_cost = raised["costToDateUsd"]
    assert (
        linked["reclaimedUsd"] == pytest.approx(donor_cost)
        and linked["logicalTaskId"] == raised["logicalTaskId"]
    )
    cost = run.outcome.cost
    assert cost["abandoned"]["usd"] == pytest.approx(donor_cost)
    assert cost["grossUsd"] == pytest.approx(cost["totalUsd"] + donor_cost)
    assert run.outcome.value["results"][N2] == "filed"


def test_a_running_child_cancelled_after_paid_work_is_abandoned_and_its_re_add_is_a_graft() -> None:
    script = {
        "orchestrator": [
            *_turn(
                ("spawn_agent", {"agent_type": "cache", "prompt": "triage cache"}), ("wait_for_events", WAIT)
            ),
            *_turn(("plan_revise", {"ops": [{"op": "cancel", "node": N1}]}), ("wait_for_events", WAIT)),
            *_turn(("spawn_agent", {"agent_type": "cache", "prompt": "triage cache"}), ("await_all", {})),
            *_turn(("finish", {})),
        ],
        "cache": [ToolCalls([("escalate", {"kind": "bogus"})], usage=(300, 30)), Hang(), Reply("cache ok")],
    }
    run = orchestrated(script)
    assert [a["verdict"] for a in of_type(run.events, "spawn:admitted")] == ["admit", "admit_graft"]
    assert of_type(run.events, "node:linked") == []
    cancelled = [e for e in of_type(run.events, "agent:end") if e["status"] == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["costUsd"] > 0
    assert run.outcome.cost["abandoned"]["usd"] == pytest.approx(cancelled[0]["costUsd"])


@pytest.mark.parametrize(
    ("options", "spawns", "code"),
    [
        (OrchestrateOptions(strict_profiles=True), [("ghost", "x")], "unknown_agent_type"),
        (
            OrchestrateOptions(limits=Limits(max_total_spawns=1)),
            [("api", "a"), ("db", "b")],
            "max_total_spawns",
        ),
    ],
)
def test_admission_rejections_are_spawn_rejected_with_their_code(
    options: OrchestrateOptions, spawns: list[tuple[str, str]], code: str
) -> None:
    calls = [("spawn_agent", {"agent_type": t, "prompt": p}) for t, p in spawns]
    script = {"orchestrator": [*_turn(*calls, ("await_all", {})), *_turn(("finish", {}))]}
    run = orchestrated(script, options)
    (rejected,) = of_type(run.events, "spawn:rejected")
    assert rejected["code"] == code and isinstance(rejected["entryRef"], int)
    assert run.outcome.status == "ok"


def test_budget_reserve_that_does_not_fit_is_rejected() -> None:
    script = {
        "orchestrator": [
            *_turn(("spawn_agent", {"agent_type": "api", "prompt": "a"}), ("await_all", {})),
            *_turn(("finish", {})),
        ]
    }
    run = orchestrated(script, budget_usd=0.6)  # the turn's own reserve leaves no room for a child
    assert [r["code"] for r in of_type(run.events, "spawn:rejected")] == ["budget_reserve"]


def test_the_third_re_add_of_one_key_trips_the_oscillation_guard() -> None:
    options = OrchestrateOptions(limits=Limits(max_oscillations_per_key=1, reuse=False))
    # Each round cancels the spawned node so the next spawn is a re-add.
    rounds: list[object] = []
    for index in range(3):
        node = f"orch#0.n{index + 1}"
        rounds += _turn(("spawn_agent", {"agent_type": "api", "prompt": "same"}), ("wait_for_events", WAIT))
        rounds += _turn(("plan_revise", {"ops": [{"op": "cancel", "node": node}]}), ("await_all", {}))
    script = {"orchestrator": [*rounds, *_turn(("finish", {}))], "api": [Hang(), Hang()]}
    run = orchestrated(script, options)
    (guard,) = of_type(run.events, "guard:oscillation")
    assert guard["oscillationCount"] == 2 and guard["limit"] == 1
    assert [r["code"] for r in of_type(run.events, "spawn:rejected")] == ["oscillation"]


def test_plan_ops_are_applied_transformed_or_dropped_with_a_reason_never_a_crash() -> None:
    ops = [
        {"op": "add", "agent_type": "api", "prompt": "after db", "deps": [N1]},  # applied, waits on n1
        {"op": "cancel", "node": "no-such-node"},  # dropped unknown_node
        {"op": "rewire", "node": N1, "deps": []},  # dropped node_started (n1 is done)
        {"op": "explode"},  # dropped malformed_op
        "not even a mapping",  # dropped malformed_op
        {"op": "cancel", "node": N1},  # dropped node_already_done
    ]
    script = {
        "orchestrator": [
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "triage db"}), ("await_all", {})),
            *_turn(("plan_revise", {"ops": ops}), ("await_all", {})),
            *_turn(("plan_revise", {"ops": "garbage"}), ("finish", {})),
        ],
        "db": [Reply("db fine")],
        "api": [Reply("api fine")],
    }
    run = orchestrated(script)
    assert run.outcome.status == "ok"
    first, second = of_type(run.events, "plan:revised")
    assert (first["applied"], first["dropped"]) == (1, 5)
    assert (second["applied"], second["dropped"]) == (0, 1)
    debits = of_type(run.events, "termination:debit")
    assert [d["remaining"] for d in debits] == [31, 30] and all(
        d["counter"] == "revisionUnits" for d in debits
    )
    results = [e for e in run.store.load(run.run_id) if e.kind == "orch" and e.data["op"] == "revision"]
    reasons = [o.get("reason") for o in results[0].data["outcomes"]]
    assert reasons == [
        None,
        "unknown_node",
        "node_started",
        "malformed_op",
        "malformed_op",
        "node_already_done",
    ]
    # The added node ran once its dependency was done: a second admission.
    assert len(of_type(run.events, "spawn:admitted")) == 2


def test_a_dependency_cycle_is_dropped_whole_and_a_waived_dead_dependency_unblocks() -> None:
    ops_cycle = [
        {"op": "add", "agent_type": "api", "prompt": "a", "deps": [N1]},
        {"op": "rewire", "node": N2, "deps": [N2]},
    ]
    script = {
        "orchestrator": [
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "db"}), ("await_all", {})),
            *_turn(("plan_revise", {"ops": ops_cycle}), ("await_all", {})),
            *_turn(("finish", {})),
        ],
        "db": [Reply("db ok")],
        "api": [Reply("api ok")],
    }
    run = orchestrated(script)
    revision = next(e for e in run.store.load(run.run_id) if e.kind == "orch" and e.data["op"] == "revision")
    # n2 does not exist yet at the head the op is rebased against: unknown_node (never a crash).
    assert [o.get("reason") for o in revision.data["outcomes"]] == [None, "unknown_node"]


@pytest.mark.parametrize("decision", ["retry", "decompose", "accept", "cancel"])
def test_each_escalation_decision_lands_with_its_effect(decision: str) -> None:
    op: dict[str, object] = {"op": "resolve", "node": N1, "decision": decision}
    if decision == "decompose":
        op["tasks"] = [{"agent_type": "db-part", "prompt": "part one"}]
    run = _escalation_run([op])
    (decided,) = of_type(run.events, "escalation:decided")
    assert decided["decision"] == decision and decided["by"] == "orchestrator"
    (raised,) = of_type(run.events, "escalation:raised")
    applied = [r for r in of_type(run.events, "resolution:applied") if r["by"] == "orchestrator"]
    assert applied and applied[0]["targetRef"] == raised["entryRef"]
    counts = run.outcome.value["childStatusCounts"]
    admitted = of_type(run.events, "spawn:admitted")
    if decision == "retry":
        assert len(admitted) == 2 and admitted[1]["logicalTaskId"] == admitted[0]["logicalTaskId"]
    elif decision == "decompose":
        assert counts.get("skipped") == 1 and [a["agentType"] for a in admitted] == ["db", "db-part"]
    elif decision == "accept":
        assert counts == {"done": 1}
    else:
        assert counts == {"cancelled": 1} and run.outcome.cost["abandoned"]["usd"] > 0


def test_a_second_resolution_of_one_escalation_is_superseded() -> None:
    first = {"op": "resolve", "node": N1, "decision": "accept"}
    run = _escalation_run([first], ("plan_revise", {"ops": [first]}))
    (superseded,) = of_type(run.events, "resolution:superseded")
    assert superseded["reason"] == "already_resolved"
    assert superseded["supersededBy"] == of_type(run.events, "escalation:decided")[0]["entryRef"]


def test_a_failed_mechanical_gate_emits_verify_failed_and_the_node_fails() -> None:
    script = {
        "orchestrator": [
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "db"}), ("await_all", {})),
            *_turn(("finish", {})),
        ],
        "db": [Reply("no evidence")],
    }
    run = orchestrated(script, OrchestrateOptions(verify={"db": lambda value: "evidence:" in str(value)}))
    (failed,) = of_type(run.events, "verify:failed")
    assert failed["gate"] == "mechanical"
    (stall,) = of_type(run.events, "stall:detected")
    assert stall["stallStreak"] == 1 and stall["logicalTaskId"] == failed["logicalTaskId"]
    assert run.outcome.value["childStatusCounts"] == {"failed": 1}
    assert run.outcome.value["verdict"] == "rejected"


@pytest.mark.parametrize(("fallback", "status"), [("finish-with-partial", "ok"), ("fail-run", "error")])
def test_a_streak_of_fully_dropped_revisions_ends_the_run_without_a_human(fallback: str, status: str) -> None:
    bad = ("plan_revise", {"ops": [{"op": "cancel", "node": "ghost"}]})
    script = {"orchestrator": [*_turn(bad, bad), *_turn(("finish", {}))]}
    run = orchestrated(script, OrchestrateOptions(dropped_revision_limit=2, fallback=fallback))
    (denied,) = of_type(run.events, "termination:denied")
    assert denied["counter"] == "droppedRevisions" and denied["code"] == "streak_limit"
    assert run.outcome.status == status
    if status == "error":
        assert run.outcome.error is not None and run.outcome.error["code"] == "fail_run"
    else:
        assert run.outcome.value["forcedFinish"] is True and run.outcome.cost["orchestrator"]["forcedFinish"]


def test_the_orchestrator_cap_freezes_the_plan_and_forces_the_finish() -> None:
    script = {
        "orchestrator": [
            ToolCalls([("spawn_agent", {"agent_type": "db", "prompt": "db"})], usage=(90_000, 1000)),
            Reply("more"),
        ],
        "db": [Reply("db ok")],
    }
    run = orchestrated(script, OrchestrateOptions(cap_usd=0.05))
    (at_cap,) = [b for b in of_type(run.events, "orchestrator:budget") if b["atCap"]]
    assert at_cap["capUsd"] == 0.05 and at_cap["spentUsd"] >= 0.05
    assert run.outcome.value["forcedFinish"] is True
    assert run.outcome.cost["orchestrator"]["forcedFinish"] is True


def _full_script() -> dict[str, list[object]]:
    return {
        "orchestrator": [
            *_turn(
                ("ledger_append", {"op": "brief_set", "text": "triage"}),
                ("spawn_agent", {"agent_type": "api", "prompt": "api"}),
                ("spawn_agent", {"agent_type": "db", "prompt": "db"}),
                ("spawn_agent", {"agent_type": "ghost", "prompt": "x"}),
                ("await_all", {}),
            ),
            *_turn(
                ("plan_revise", {"ops": [{"op": "cancel", "node": N2}, {"op": "cancel", "node": "x"}]}),
                ("await_all", {}),
            ),
            *_turn(("spawn_agent", {"agent_type": "db", "prompt": "db"}), ("finish", {})),
        ],
        "api": [Reply("api ok")],
        "db": _escalating(),
    }


def test_dry_run_replay_re_emits_the_adaptive_events_with_zero_model_calls() -> None:
    options = OrchestrateOptions(profiles={}, strict_profiles=False, limits=Limits(max_total_spawns=4))
    run = orchestrated(_full_script(), options)
    events, outcome, calls = replayed(run)
    assert calls == 0
    live, again = adaptive(run.events), adaptive(events)
    strip = ("seq", "ts", "replayed", "spanId")
    assert [{k: v for k, v in e.items() if k not in strip} for e in again] == [
        {k: v for k, v in e.items() if k not in strip} for e in live
    ]
    for event in again:
        assert event.get("replayed") is (True if event["type"].startswith("spawn:") else None), event["type"]
    assert outcome.cost == run.outcome.cost and outcome.value == run.outcome.value


def test_the_orchestration_stream_is_one_trace_with_children_under_their_spawns() -> None:
    run = orchestrated(_full_script())
    result = export(run.events, run.outcome)
    assert len({s.context.trace_id for s in result.spans}) == 1
    by_name = {s.name: s for s in result.spans}
    run_span = next(s for s in result.spans if s.name.startswith("run "))
    children = [s for s in result.spans if s.name.startswith("agent api") or s.name.startswith("agent db")]
    assert children and all(result.parent_index(s) is not None for s in children)
    assert all(s.attributes.get("rulvar.parent.inferred") for s in children)
    assert "agent orchestrator orchestrate" in by_name
    for span in result.spans:
        for event in span.events:
            assert span.start_time <= event.timestamp <= (span.end_time or event.timestamp)
    assert run_span.attributes["rulvar.run.total_usd"] == run.outcome.cost["totalUsd"]


def test_the_metric_fold_of_an_orchestration_gives_the_documented_metrics(meter_and_reader) -> None:  # type: ignore[no-untyped-def]
    meter, reader = meter_and_reader
    run = orchestrated(_full_script())
    feed(meter, run.events, run.outcome)
    points = metric_points(reader)
    documented = (
        sc.METRIC_LEDGER_OPS_PER_SPAWN,
        sc.METRIC_WAKE_RENDER_SIZE,
        sc.METRIC_ESCALATIONS,
        sc.METRIC_ORCHESTRATOR_SHARE,
        sc.METRIC_ABANDONED_COST,
        sc.METRIC_RECLAIMED_COST,
    )
    for name in documented:
        values = [p if isinstance(p, float | int) else p[1] for p in points.get(name, {}).values()]
        assert values and any(v != 0 for v in values), name
    # The whole abandoned branch was reclaimed by reference: nothing is lost net.
    assert list(points[sc.METRIC_NET_LOST_COST].values()) == [0.0]


def test_the_demo_writes_every_orchestration_event_and_its_fold_feeds_the_documented_metrics(  # type: ignore[no-untyped-def]
    meter_and_reader,
) -> None:
    meter, reader = meter_and_reader

    async def go():  # type: ignore[no-untyped-def]
        setup = build_demo(clock=TickClock(), quota_retry_after_ms=0)
        return await settle(setup.engine.run(setup.workflow, setup.args, run_id="demo-orch"))

    events, outcome = asyncio.run(go())
    kinds = {e["type"] for e in events}
    required = {
        "orchestrator:woke", "spawn:admitted", "spawn:rejected", "plan:revised", "ledger:op",
        "escalation:raised", "escalation:decided", "node:cancelled", "node:linked", "orchestrator:budget",
    }  # fmt: skip
    assert required <= kinds
    assert outcome.cost["orchestrator"]["share"] > 0 and outcome.cost["abandoned"]["usd"] > 0
    assert of_type(events, "plan:revised")[0]["dropped"] == 1
    feed(meter, events, outcome)
    points = metric_points(reader)
    for name in (
        sc.METRIC_LEDGER_OPS_PER_SPAWN,
        sc.METRIC_WAKE_RENDER_SIZE,
        sc.METRIC_ESCALATIONS,
        sc.METRIC_ORCHESTRATOR_SHARE,
        sc.METRIC_ABANDONED_COST,
        sc.METRIC_RECLAIMED_COST,
        sc.METRIC_NET_LOST_COST,
    ):
        values = [p if isinstance(p, float | int) else p[1] for p in points.get(name, {}).values()]
        assert values and any(v > 0 for v in values), name


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_OP = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "amend", "park", "unpark", "cancel", "rewire", "waive", "resolve", "x"])},
    optional={
        "node": st.sampled_from(["a", "b", "zz"]) | _JSON,
        "deps": st.lists(st.sampled_from(["a", "b", "zz"]), max_size=3) | _JSON,
        "dep": st.sampled_from(["a", "b"]),
        "prompt": st.text(max_size=5) | _JSON,
        "agent_type": st.sampled_from(["w", ""]),
        "decision": st.sampled_from(["retry", "accept", "nope"]),
    },
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(_OP | _JSON, max_size=6) | _JSON)
def test_rebase_decides_every_op_and_never_mutates_or_raises(ops: object) -> None:
    plan = Plan()
    plan.add(PlanNode("a", "ta", "w", "p"))
    plan.add(PlanNode("b", "tb", "w", "q", ["a"]))
    before = plan.hash
    outcomes = plan.rebase(ops, frozen=False, escalations={"a": False})
    assert plan.hash == before
    count = len(ops) if isinstance(ops, list) else 1
    assert len(outcomes) == max(count, 0) or (count == 0 and outcomes == [])
    for outcome in outcomes:
        assert outcome.outcome in ("applied", "transformed", "dropped")
        assert (outcome.reason is not None) == (outcome.outcome != "applied")
