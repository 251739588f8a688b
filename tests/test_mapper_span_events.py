"""Where the span mapper puts span events (docs/otel-mapping.md#where-a-span-event-lands): operational
facts without content, on the spanId's owner, never inside a closed child workflow or segment,
always within their span's time, including on generated nestings of scopes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import Span

from rulvar_otel.core.masking import MASKED_SECRET
from rulvar_otel.otel import semconv as sc
from tests._support import OK_OUTCOME, agent_end, agent_start, ev, export, run_stream, t

# --- span events ---------------------------------------------------------------------------------


def test_span_events_carry_operational_facts_but_no_content() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0"),
            ev(
                "quota:denied",
                2,
                "a",
                agentType="w",
                label="my label",
                model="openai:gpt-x",
                reason="tokens",
                retryAfterMs=250,
                willRetry=True,
            ),
            ev(
                "budget:exposure-wait",
                3,
                "a",
                agentType="w",
                scope="root",
                capUsd=1,
                estimateUsd=0.5,
                willWait=False,
            ),
            ev(
                "agent:error",
                4,
                "a",
                agentType="w",
                error={"code": "E1", "message": "provider said X", "retryable": False},
                willRetry=False,
            ),
            ev("log", 5, "a", level="warn", msg="log text", data={"k": "v"}),
            ev("agent:stream", 6, "a", delta="token text"),
            ev(
                "some:future-event",
                7,
                "a",
                foo="bar",
                nested={"x": 1},
                nums=[1, 2.5],
                mixed=[1, "a"],
                empty=[],
            ),
            agent_end(8, "a"),
        ),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    events = {e.name: dict(e.attributes or {}) for e in a.events}
    assert list(events) == ["quota:denied", "budget:exposure-wait", "agent:error", "log", "some:future-event"]
    assert events["quota:denied"] == {
        sc.ENTRY_SEQ: 2,
        "rulvar.event.agent_type": "w",
        "rulvar.event.model": "openai:gpt-x",
        "rulvar.event.reason": "tokens",
        "rulvar.event.retry_after_ms": 250,
        "rulvar.event.will_retry": True,
    }
    assert events["budget:exposure-wait"]["rulvar.event.will_wait"] is False
    assert events["agent:error"]["rulvar.event.error_code"] == "E1"
    assert events["agent:error"]["rulvar.event.error_retryable"] is False
    assert events["log"] == {sc.ENTRY_SEQ: 5, "rulvar.event.level": "warn"}
    # An unknown type exports nothing of its own: its field names and values are the producer's.
    assert events["some:future-event"] == {sc.ENTRY_SEQ: 7}
    assert [e.timestamp for e in a.events] == [t(2), t(3), t(4), t(5), t(7)]
    dump = repr([s.to_json() for s in result.spans])
    for content in ("my label", "provider said X", "log text", "token text"):
        assert content not in dump


def test_determinism_warning_exports_code_location() -> None:
    result = export(
        run_stream(
            ev(
                "determinism:warning",
                1,
                "s0",
                category="bare-math-random",
                provenance="workflow",
                frame="at body (/app/wf.py:12:9)",
                file="/app/wf.py",
                line=12,
                column=9,
            )
        ),
        OK_OUTCOME,
    )
    (event,) = result.spans[0].events
    assert dict(event.attributes or {}) == {
        sc.ENTRY_SEQ: 1,
        sc.DETERMINISM_CATEGORY: "bare-math-random",
        sc.DETERMINISM_PROVENANCE: "workflow",
        sc.CODE_FILEPATH: "/app/wf.py",
        sc.CODE_LINENO: 12,
        # docs/otel-mapping.md#conversation-id-and-code-location: the current names beside them.
        sc.CODE_FILE_PATH: "/app/wf.py",
        sc.CODE_LINE_NUMBER: 12,
        "rulvar.event.column": 9,
    }


def test_event_hosts_on_spanid_owner_never_on_invocation_or_tool() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0"),
            ev("agent:phase:start", 2, "a", agentType="w", role="loop", model="m", invocation=1),
            ev("tool:start", 3, "a", toolName="x", toolCallId="c"),
            ev("log", 4, "a", level="info", msg="m"),
            ev("log", 5, "nobody", level="info", msg="m"),
        ),
        OK_OUTCOME,
    )
    assert [e.name for e in result.only("agent w loop").events] == ["log"]
    assert [e.name for e in result.only("tool x").events] == ["log"]  # innermost open span


def test_closers_that_find_nothing_become_span_events() -> None:
    result = export(
        run_stream(
            ev("agent:end", 1, "ghost", status="ok"),
            ev("agent:phase:end", 2, "ghost", invocation=1, outcome="ok"),
            ev("child:end", 3, "ghost", status="ok", workflow="k", scope="x"),
        ),
        OK_OUTCOME,
    )
    assert [e.name for e in result.spans[0].events] == ["agent:end", "agent:phase:end", "child:end"]
    assert len(result.spans) == 1


def test_events_before_anything_is_open_are_dropped_without_error() -> None:
    result = export([ev("log", 0, "s0", level="info", msg="early"), *run_stream()], OK_OUTCOME)
    assert result.spans[0].events == ()


def test_span_names_and_attributes_are_masked_with_host_patterns() -> None:
    result = export(
        run_stream(ev("phase:start", 1, "p", "s0", phase="mail bob@example.com ghp_" + "x" * 30)),
        OK_OUTCOME,
        patterns=[r"[a-z]+@example\.com"],
    )
    assert result.only(f"phase mail {MASKED_SECRET} {MASKED_SECRET}")


def test_clock_stepping_back_never_gives_negative_durations() -> None:
    result = export(
        run_stream(agent_start(5, "a", "s0"), agent_end(6, "a") | {"ts": ev("x", 0, "x", ts_ms=1)["ts"]}),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    assert a.end_time == a.start_time


# --- span events respect closed scopes (docs/otel-mapping.md#where-a-span-event-lands) ------------


def _event_names(span: Span) -> list[str]:
    return [e.name for e in span.events]


def test_no_span_event_lands_inside_a_child_workflow_that_has_closed() -> None:
    result = export(
        run_stream(
            ev("phase:start", 1, "p", "s0", phase="outer"),
            ev("child:start", 2, "c", "p", workflow="kid", scope="wf:kid:0"),
            ev("phase:start", 3, "cp", "c", phase="inside-kid"),
            agent_start(4, "a", "cp"),  # never ends
            ev("child:end", 5, "c", workflow="kid", scope="wf:kid:0", status="ok"),
            ev("log", 6, "cp", level="info", msg="m"),  # keyed to the closed child's phase
            ev("log", 7, "a", level="info", msg="m"),  # keyed to an agent inside it
            ev("budget:update", 8, "nobody", spentUsd=1),  # innermost open: not the stranded agent
        ),
        OK_OUTCOME,
    )
    assert _event_names(result.only("phase inside-kid")) == []
    assert _event_names(result.only("agent w loop")) == []
    assert _event_names(result.only("phase outer")) == ["log", "log", "budget:update"]
    # The stranded agent is still ended, at the last event of the segment.
    stranded = result.only("agent w loop")
    assert stranded.end_time == t(999) and (stranded.attributes or {})[sc.END_INFERRED] is True


def test_no_span_event_lands_in_a_segment_that_has_ended() -> None:
    seg2 = 4_294_967_296
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        agent_start(1, "a", "s0"),  # a leftover of segment one
        ev("run:end", 2, "s0", status="suspended", totalUsd=0),
        ev("log", 3, "a", level="info", msg="after the segment ended"),
        ev("run:start", seg2, "s1", ts_ms=10, workflow="wf", resumed=True),
        ev("log", seg2 + 1, "a", ts_ms=11, level="info", msg="keyed to the old agent"),
        ev("run:end", seg2 + 2, "s1", ts_ms=12, status="ok", totalUsd=0),
    ]
    result = export(events, OK_OUTCOME)
    leftover = result.only("agent w loop")
    assert _event_names(leftover) == []
    assert leftover.end_time == t(2)  # it waited with the run: ended at the suspension
    _, second = result.named("run wf")
    assert _event_names(second) == ["log"]


def test_inferred_phase_end_covers_its_own_span_events() -> None:
    result = export(
        run_stream(
            ev("phase:start", 1, "p", "s0", phase="quiet"),
            ev("log", 5, "p", level="info", msg="m"),
            ev("budget:update", 6, "p", spentUsd=1),
        ),
        OK_OUTCOME,
    )
    phase = result.only("phase quiet")
    assert phase.end_time == t(6)
    assert (phase.attributes or {})[sc.END_INFERRED] is True


def test_span_events_stay_within_their_span_when_the_clock_steps_back() -> None:
    result = export(
        run_stream(
            agent_start(5, "a", "s0"),
            ev("log", 6, "a", ts_ms=2, level="info", msg="stamped before the agent started"),
            ev("log", 7, "a", ts_ms=9, level="info", msg="m"),
            agent_end(8, "a") | {"ts": ev("x", 0, "x", ts_ms=8)["ts"]},  # ends before its last event
        ),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    assert [e.timestamp for e in a.events] == [t(5), t(9)]
    assert a.end_time == t(9)
    for span in result.spans:
        for event in span.events:
            assert span.start_time is not None and span.end_time is not None
            assert span.start_time <= event.timestamp <= span.end_time, span.name


def test_orphan_in_a_later_segment_groups_under_that_segments_open_phase() -> None:
    seg2 = 4_294_967_296
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("run:end", 1, "s0", status="suspended", totalUsd=0),
        ev("run:start", seg2, "s1", ts_ms=10, workflow="wf", resumed=True),
        ev("phase:start", seg2 + 1, "p2", "s1", ts_ms=11, phase="two"),
        agent_start(seg2 + 2, "a", "never-opened", ts_ms=12),
        ev("log", seg2 + 3, "nobody", ts_ms=13, level="info", msg="m"),
    ]
    result = export(events, OK_OUTCOME)
    phase = result.only("phase two")
    assert result.parent_of(result.only("agent w loop")) is phase
    assert _event_names(result.only("agent w loop")) == ["log"]  # the innermost open span


# --- contract-scopes streams: generated nestings of segments, child workflows, phases, agents ----

_SCOPE_OPS = st.lists(
    st.sampled_from(["phase", "child", "child_end", "agent", "orphan", "agent_end", "event", "segment"])
    | st.tuples(st.just("event_on"), st.integers(0, 30)),
    max_size=50,
)


def _scope_stream(ops: list[Any], steps: list[int]) -> list[dict[str, Any]]:
    """A well-formed stream shaped by ``ops``; ``steps`` are the clock's increments (0 allowed)."""
    seq = 0
    clock = 0
    out: list[dict[str, Any]] = []
    scopes: list[str] = []  # the run, open child workflows and phases, innermost last
    children: set[str] = set()
    agents: list[str] = []
    known: list[str] = []
    segment = 0

    def emit(kind: str, span: str, parent: str | None = None, **body: Any) -> None:
        nonlocal seq, clock
        clock += steps[seq % len(steps)]
        out.append(ev(kind, seq, span, parent, ts_ms=clock, **body))
        seq += 1

    def run_start() -> None:
        root = f"run{segment}"
        emit("run:start", root, workflow="wf", resumed=segment > 0)
        scopes.append(root)
        known.append(root)

    run_start()
    for i, op in enumerate(ops):
        name = f"s{i}"
        if op == "phase":
            emit("phase:start", name, scopes[-1], phase=name)
            scopes.append(name)
        elif op == "child":
            emit("child:start", name, scopes[-1], workflow=name, scope=f"wf:{name}:0")
            scopes.append(name)
            children.add(name)
        elif op == "child_end":
            # The innermost child workflow closes; the phases inside it close with it as scopes.
            inner = [k for k in range(1, len(scopes)) if scopes[k] in children]
            if inner:
                emit("child:end", scopes[inner[-1]], status="ok", workflow=scopes[inner[-1]])
                del scopes[inner[-1] :]
        elif op in ("agent", "orphan"):
            emit(
                "agent:start", name, scopes[-1] if op == "agent" else f"never-{i}", agentType="w", role="loop"
            )
            agents.append(name)
        elif op == "agent_end" and agents:
            emit("agent:end", agents.pop(), status="ok")
        elif op == "event":
            emit("budget:update", scopes[-1], spentUsd=1)
        elif isinstance(op, tuple):
            emit("log", known[op[1] % len(known)], level="info", msg="m")
        elif op == "segment":
            emit("run:end", f"run{segment}", status="suspended", totalUsd=0)
            segment += 1
            scopes.clear()
            agents.clear()
            run_start()
        if op in ("phase", "child", "agent", "orphan"):
            known.append(name)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SCOPE_OPS, st.lists(st.integers(0, 3), min_size=1, max_size=5))
def test_generated_scopes_keep_every_event_inside_its_span_and_out_of_closed_scopes(
    ops: list[Any], steps: list[int]
) -> None:
    stream = _scope_stream(ops, steps)
    result = export(stream, OK_OUTCOME)
    assert len(result.ended) == len(result.spans)
    by_seq = {e["seq"]: e for e in stream}
    closer_seq = {e["spanId"]: e["seq"] for e in stream if e["type"] in ("child:end", "run:end")}
    for span in result.spans:
        assert span.start_time is not None and span.end_time is not None
        for event in span.events:
            assert span.start_time <= event.timestamp <= span.end_time, span.name
            seq = (event.attributes or {})[sc.ENTRY_SEQ]
            # No child workflow or segment around the host had closed when the event came.
            node: Span | None = span
            while node is not None:
                opener = by_seq[(node.attributes or {})[sc.ENTRY_SEQ]]
                if opener["type"] in ("child:start", "run:start"):
                    closed_at = closer_seq.get(opener["spanId"])
                    assert closed_at is None or closed_at > seq, (span.name, event.name, seq)
                    if opener["type"] == "run:start":
                        break
                node = result.parent_of(node)
