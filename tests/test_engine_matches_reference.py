"""The bundled engine against the reference corpus: one scenario per reference engine stream.

Each scenario (``tests._support.ENGINE_SCENARIOS``) rebuilds the reference run (same workflow,
phase, agent, tool names) on the bundled engine; this checks that its stream has the reference's
event types, per-span order and field shapes, and that ``to_otel`` builds the same span tree
(names, nesting, statuses) from both.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import pytest

from rulvar_otel.core.handle import RunOutcome
from tests import _support
from tests._support import ENGINE_SCENARIOS, Run, export, run_scenario, suspension_flow

# Optional fields the bundled engine may add beyond what one reference recording happened to carry
# (all in the catalog): a tool failure's errorCode, and the live quota-denial counters.
ALLOWED_EXTRA: dict[str, set[str]] = {
    "tool:end": {"errorCode"},
    "agent:end": {"error"},
    "spawn:admitted": {"reserveUsd"},
}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


def _agent_sequences(events: Iterable[Mapping[str, Any]]) -> list[tuple[str, tuple[str, ...]]]:
    """Per agent span (in opening order): its identity and the ordered types riding its spanId."""
    order: list[str] = []
    identity: dict[str, str] = {}
    seqs: dict[str, list[str]] = defaultdict(list)
    for event in events:
        if event["type"] == "agent:start":
            order.append(event["spanId"])
            identity[event["spanId"]] = f"{event.get('agentType')}|{event.get('label')}|{event.get('role')}"
        if event["spanId"] in identity:
            seqs[event["spanId"]].append(event["type"])
    return sorted((identity[s], tuple(seqs[s])) for s in order)


def _skeleton(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The order of everything that is not per-agent traffic or a budget tick."""
    agent_spans = {e["spanId"] for e in events if e["type"] == "agent:start"}
    return [
        e["type"]
        for e in events
        if e["type"] != "budget:update"
        and e["spanId"] not in agent_spans
        and e["type"] != "resolution:applied"
    ]


def assert_same_shape(
    ours: list[dict[str, Any]], ref: list[dict[str, Any]], envelope_extra: frozenset[str] = frozenset()
) -> None:
    # Event types: the same set, and the same count of every lifecycle type.
    assert set(Counter(e["type"] for e in ours)) == set(Counter(e["type"] for e in ref))
    lifecycle = lambda es: Counter(e["type"] for e in es if e["type"] != "budget:update")  # noqa: E731
    assert lifecycle(ours) == lifecycle(ref)
    # Order rules: the run/phase/child skeleton and every agent span's own sequence.
    assert _skeleton(ours) == _skeleton(ref)
    assert _agent_sequences(ours) == _agent_sequences(ref)
    # Envelope rules: seq strictly increasing, run:start first, run:end last.
    seqs = [e["seq"] for e in ours]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert ours[0]["type"] == "run:start" and ours[-1]["type"] == "run:end"
    # Field shapes: the same keys per type (catalog-optional extras aside), the same JSON types.
    keys_ours: dict[str, set[str]] = defaultdict(set)
    keys_ref: dict[str, set[str]] = defaultdict(set)
    types_ours: dict[tuple[str, str], set[str]] = defaultdict(set)
    types_ref: dict[tuple[str, str], set[str]] = defaultdict(set)
    for bucket, types, events in ((keys_ours, types_ours, ours), (keys_ref, types_ref, ref)):
        for event in events:
            bucket[event["type"]] |= set(event)
            for key, value in event.items():
                types[(event["type"], key)].add(_json_type(value))
    for kind, ref_keys in keys_ref.items():
        extra = keys_ours[kind] - ref_keys - ALLOWED_EXTRA.get(kind, set())
        assert ref_keys <= keys_ours[kind], f"{kind}: missing {ref_keys - keys_ours[kind]}"
        assert not extra, f"{kind}: unexpected fields {extra}"
    for (kind, key), kinds in types_ref.items():
        assert types_ours[(kind, key)] == kinds, f"{kind}.{key}: {types_ours[(kind, key)]} vs {kinds}"
    # The run:end envelope carries the same keys.
    assert set(ours[-1]["envelope"]) - envelope_extra == set(ref[-1]["envelope"])


def _tree(events: list[dict[str, Any]], outcome: RunOutcome | BaseException | None) -> list[tuple[str, ...]]:
    result = export(events, outcome)
    rows = []
    for span in result.spans:
        path = [span.name]
        parent = result.parent_index(span)
        while parent is not None:
            path.append(result.spans[parent].name)
            parent = result.parent_index(result.spans[parent])
        trace_ids = {s.context.trace_id for s in result.spans}
        assert len(trace_ids) == 1, "one run is one trace"
        rows.append((*reversed(path), str(span.status.status_code.name)))
    return sorted(rows)


def assert_same_tree(ours: list[dict[str, Any]], outcome: RunOutcome, name: str) -> None:
    ref_outcome = _support.outcome(name)
    tree = _tree(ours, outcome)
    assert tree and tree == _tree(_support.events(name), ref_outcome)


# The reference's orchestrator settles its drained arm exhausted *with* a forced-finish value and no
# error; a bundled workflow that cannot finish is exhausted with the typed budget error it raised.
ENVELOPE_EXTRA = {"exposure-drained": frozenset({"error"})}


def check(name: str, events: list[dict[str, Any]], outcome: RunOutcome) -> None:
    ref = _support.events(name)
    assert_same_shape(events, ref, ENVELOPE_EXTRA.get(name, frozenset()))
    assert_same_tree(events, outcome, name)
    ref_outcome = _support.outcome(name)
    assert isinstance(ref_outcome, RunOutcome)
    assert outcome.status == ref_outcome.status
    assert outcome.completion == ref_outcome.completion
    # The money agrees on every surface: run:end, the envelope, the cost report, the agents.
    run_end = events[-1]
    assert isinstance(outcome.cost, dict) and isinstance(outcome.envelope, dict)
    assert run_end["totalUsd"] == outcome.cost["totalUsd"] == outcome.envelope["totalUsd"]
    agents = sum(e["costUsd"] for e in events if e["type"] == "agent:end")
    assert agents == pytest.approx(run_end["totalUsd"], abs=1e-12)
    assert set(outcome.cost) >= {"byModel", "byPhase", "byRole", "byAgentType", "unpriced", "totalUsd"}


@pytest.mark.parametrize(("name", "build"), list(ENGINE_SCENARIOS.items()), ids=list(ENGINE_SCENARIOS))
def test_scenario_matches_reference(name: str, build: Callable[[], Awaitable[Run]]) -> None:
    events, outcome = run_scenario(build)
    check(name, events, outcome)


def test_suspension_then_resume_then_dry_run_matches_reference() -> None:
    live, resumed, dry, resumer = asyncio.run(suspension_flow())
    check("suspension-live", *live)
    assert live[1].pending == [
        {"key": "gate", "scope": "", "entryRef": live[0][-2]["entryRef"], "prompt": "approve the release?"}
    ]
    # The live resume replays the analysis agent and the clock with zero adapter calls.
    assert resumed[1].status == "ok"
    assert [r.label for r in resumer.requests] == ["shipper", "shipper"]
    # The dry run re-emits the journal-backed history exactly like the reference's dry run.
    check("suspension-dryrun", *dry)
    assert dry[0][0]["seq"] == 2 << 32 and dry[0][0]["spanId"] == f"s{2 << 32}"
    replayed = {e["type"] for e in dry[0] if e.get("replayed")}
    assert replayed == {
        "agent:start",
        "agent:phase:start",
        "agent:phase:end",
        "agent:end",
        "tool:start",
        "tool:end",
    }
    assert dry[1].value == resumed[1].value
    assert dry[1].cost == resumed[1].cost
