"""How the span mapper pairs closers with openers and finds each span's parent (docs/otel-mapping.md).

Hand-built streams, including shapes no fixture has: tool pairing by id and FIFO, duplicate and
replayed openers, never-opened and ended parents, child workflows, segments, leftovers and phases.
"""

from __future__ import annotations

from opentelemetry.trace import StatusCode

from rulvar_otel.errors import RunRejectedError
from rulvar_otel.otel import semconv as sc
from tests._support import OK_OUTCOME, agent_end, agent_start, ev, export, run_stream, t

# --- tool pairing ------------------------------------------------------------------------------


def test_tool_ids_pair_exactly_whatever_order_they_end_in() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0"),
            ev("tool:start", 2, "a", toolName="search", toolCallId="c1"),
            ev("tool:start", 3, "a", toolName="search", toolCallId="c2"),
            ev("tool:end", 4, "a", toolName="search", toolCallId="c2", outcome="ok", durationMs=1),
            ev(
                "tool:end",
                9,
                "a",
                toolName="search",
                toolCallId="c1",
                outcome="error",
                durationMs=7,
                errorCode="E_IO",
            ),
            agent_end(10, "a"),
        ),
        OK_OUTCOME,
    )
    tools = {s.attributes[sc.TOOL_CALL_ID]: s for s in result.named("tool search")}  # type: ignore[index]
    assert tools["c1"].end_time == t(9) and tools["c1"].status.status_code is StatusCode.ERROR
    assert tools["c1"].attributes[sc.ERROR_TYPE] == "E_IO"  # type: ignore[index]
    assert tools["c2"].end_time == t(4) and tools["c2"].status.status_code is StatusCode.OK
    assert sc.ERROR_TYPE not in (tools["c2"].attributes or {})
    for span in tools.values():
        assert result.parent_of(span) is result.only("agent w loop")
        assert span.attributes[sc.GEN_AI_OPERATION_NAME] == "execute_tool"  # type: ignore[index]
        assert span.attributes[sc.GEN_AI_TOOL_NAME] == "search"  # type: ignore[index]


def test_tools_without_ids_pair_fifo_per_agent_and_name() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0"),
            ev("tool:start", 2, "a", toolName="x"),
            ev("tool:start", 3, "a", toolName="y"),
            ev("tool:start", 4, "a", toolName="x"),
            ev("tool:end", 5, "a", toolName="x", outcome="ok", durationMs=3),
            ev("tool:end", 6, "a", toolName="y", outcome="denied", durationMs=0, guard="per-tool-cap"),
            ev("tool:end", 7, "a", toolName="x", toolCallId="late-id", outcome="ok", durationMs=3),
            agent_end(8, "a"),
        ),
        OK_OUTCOME,
    )
    xs = sorted(result.named("tool x"), key=lambda s: s.start_time or 0)
    assert [x.end_time for x in xs] == [t(5), t(7)]  # the id-bearing end fell back to the FIFO
    y = result.only("tool y")
    assert y.attributes[sc.TOOL_GUARD] == "per-tool-cap"  # type: ignore[index]
    assert y.attributes[sc.STATUS] == "denied"  # type: ignore[index]


def test_orphan_tool_end_is_an_event_on_its_agent_and_never_closes_it() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0"),
            ev("tool:end", 2, "a", toolName="ghost", outcome="ok", durationMs=1),
            agent_end(3, "a"),
        ),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    assert [e.name for e in a.events] == ["tool:end"]
    assert a.events[0].timestamp == t(2)
    assert a.end_time == t(3)


def test_replayed_tool_start_on_an_open_call_id_opens_nothing() -> None:
    result = export(
        run_stream(
            agent_start(1, "a", "s0"),
            ev("tool:start", 2, "a", toolName="x", toolCallId="c1"),
            ev("tool:start", 3, "a", toolName="x", toolCallId="c1", replayed=True),
            ev("tool:end", 4, "a", toolName="x", toolCallId="c1", outcome="ok", durationMs=2),
            agent_end(5, "a"),
        ),
        OK_OUTCOME,
    )
    tool = result.only("tool x")
    assert tool.attributes[sc.REPLAYED] is True  # type: ignore[index]
    assert tool.end_time == t(4)


# --- duplicate and replayed openers --------------------------------------------------------------


def test_duplicate_agent_start_never_opens_a_second_span() -> None:
    result = export(
        run_stream(agent_start(1, "a", "s0"), agent_start(2, "a", "s0"), agent_end(3, "a")), OK_OUTCOME
    )
    assert len(result.named("agent w loop")) == 1
    assert sc.REPLAYED not in (result.only("agent w loop").attributes or {})


def test_replayed_opener_of_an_open_span_marks_it() -> None:
    result = export(
        run_stream(agent_start(1, "a", "s0"), agent_start(2, "a", "s0", replayed=True), agent_end(3, "a")),
        OK_OUTCOME,
    )
    assert result.only("agent w loop").attributes[sc.REPLAYED] is True  # type: ignore[index]


def test_replayed_opener_of_an_ended_span_becomes_a_replayed_span_event() -> None:
    result = export(
        run_stream(
            ev("phase:start", 1, "p", "s0", phase="work"),
            agent_start(2, "a", "p"),
            agent_end(3, "a"),
            agent_start(4, "a", "p", replayed=True),
        ),
        OK_OUTCOME,
    )
    assert len(result.named("agent w loop")) == 1
    phase = result.only("phase work")  # the innermost open span at seq 4
    (event,) = phase.events
    assert event.name == "agent:start"
    assert event.attributes[sc.REPLAYED] is True  # type: ignore[index]
    assert event.timestamp == t(4)


# --- parents and scopes --------------------------------------------------------------------------


def test_never_opened_parent_groups_under_innermost_open_scope_in_one_trace() -> None:
    result = export(
        run_stream(
            ev("phase:start", 1, "p", "s0", phase="fan"),
            agent_start(2, "a", "par-branch-0"),
            agent_end(3, "a"),
        ),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    assert result.parent_of(a) is result.only("phase fan")
    assert a.attributes[sc.PARENT_INFERRED] is True  # type: ignore[index]
    assert a.attributes[sc.PARENT_SPAN_ID] == "par-branch-0"  # type: ignore[index]
    assert len({s.context.trace_id for s in result.spans}) == 1


def test_parent_found_among_ended_spans() -> None:
    result = export(
        run_stream(
            ev("child:start", 1, "c", "s0", workflow="kid", scope="wf:kid:0"),
            ev("child:end", 2, "c", workflow="kid", scope="wf:kid:0", status="ok"),
            agent_start(3, "a", "c"),
            agent_end(4, "a"),
        ),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    assert result.parent_of(a) is result.only("workflow kid")
    assert sc.PARENT_INFERRED not in (a.attributes or {})


def test_orphan_after_its_scope_closed_goes_to_the_next_open_scope() -> None:
    result = export(
        run_stream(
            ev("phase:start", 1, "p", "s0", phase="outer"),
            ev("child:start", 2, "c", "p", workflow="kid", scope="wf:kid:0"),
            ev("phase:start", 3, "cp", "c", phase="inside-kid"),
            ev("child:end", 4, "c", workflow="kid", scope="wf:kid:0", status="ok"),
            agent_start(5, "a", "never-opened"),
            agent_end(6, "a"),
        ),
        OK_OUTCOME,
    )
    # The child closed, and with it the phase inside it: the orphan lands in "outer".
    assert result.parent_of(result.only("agent w loop")) is result.only("phase outer")


def test_nested_child_workflows_close_inner_first() -> None:
    result = export(
        run_stream(
            ev("child:start", 1, "c1", "s0", workflow="outer", scope="wf:outer:0"),
            ev("child:start", 2, "c2", "c1", workflow="inner", scope="wf:inner:0"),
            agent_start(3, "a", "ghost"),
            agent_end(4, "a"),
            ev("child:end", 5, "c2", workflow="inner", scope="wf:inner:0", status="error"),
            agent_start(6, "b", "ghost", agent_type="v"),
            agent_end(7, "b"),
            ev("child:end", 8, "c1", workflow="outer", scope="wf:outer:0", status="ok"),
            agent_start(9, "c", "ghost", agent_type="u"),
            agent_end(10, "c"),
        ),
        OK_OUTCOME,
    )
    inner, outer = result.only("workflow inner"), result.only("workflow outer")
    assert result.parent_of(inner) is outer
    assert inner.status.status_code is StatusCode.ERROR and inner.end_time == t(5)
    assert inner.attributes[sc.SCOPE] == "wf:inner:0"  # type: ignore[index]
    assert result.parent_of(result.only("agent w loop")) is inner
    assert result.parent_of(result.only("agent v loop")) is outer
    assert result.parent_of(result.only("agent u loop")) is result.spans[0]


def test_parentless_span_goes_to_innermost_scope_without_parent_span_id() -> None:
    result = export(
        run_stream(ev("phase:start", 1, "p", "s0", phase="x"), agent_start(2, "a", None), agent_end(3, "a")),
        OK_OUTCOME,
    )
    a = result.only("agent w loop")
    assert result.parent_of(a) is result.only("phase x")
    assert sc.PARENT_SPAN_ID not in (a.attributes or {})


# --- segments, leftovers, phases -----------------------------------------------------------------


def test_several_segments_of_one_run_in_one_file() -> None:
    seg2 = 4_294_967_296
    events = [
        ev("run:start", 0, "s0", workflow="wf", resumed=False),
        ev("phase:start", 1, "p", "s0", phase="one"),
        agent_start(2, "a", "p"),  # never ends: a leftover of segment 1
        ev("run:end", 3, "s0", status="suspended", totalUsd=0),
        ev("log", 4, "s0", level="info", msg="tail of segment one"),
        ev("run:start", seg2, "s1", ts_ms=50, workflow="wf", resumed=True),
        agent_start(seg2 + 1, "b", "s1", ts_ms=51, agent_type="v"),
        agent_end(seg2 + 2, "b") | {"ts": ev("x", 0, "x", ts_ms=52)["ts"]},
        ev("run:end", seg2 + 3, "s1", ts_ms=53, status="ok", totalUsd=0),
    ]
    result = export(events, OK_OUTCOME)
    first, second = result.named("run wf")
    assert result.parent_of(second) is first
    assert len({s.context.trace_id for s in result.spans}) == 1
    # A suspension is waiting, not failing: the suspended run span is UNSET, not red.
    assert first.status.status_code is StatusCode.UNSET
    assert first.attributes[sc.STATUS] == "suspended"  # type: ignore[index]
    assert sc.ERROR_TYPE not in (first.attributes or {})
    leftover = result.only("agent w loop")
    # Open at the suspension: ended there, UNSET and marked, whatever the resumed segment says
    # (a tail that stopped at the suspension exports the same status and end).
    assert leftover.end_time == t(3)
    assert leftover.attributes[sc.END_INFERRED] is True  # type: ignore[index]
    assert leftover.attributes[sc.SUSPENDED] is True  # type: ignore[index]
    assert leftover.status.status_code is StatusCode.UNSET
    phase = result.only("phase one")
    assert phase.end_time == t(3) and phase.status.status_code is StatusCode.UNSET
    assert result.parent_of(result.only("agent v loop")) is second


def test_truncated_stream_ends_leftovers_at_last_event_and_refuses_green_on_rejection() -> None:
    events = run_stream(
        ev("phase:start", 1, "p", "s0", phase="x"),
        agent_start(2, "a", "p"),
        ev("log", 7, "a", level="info", msg="m"),
        end=False,
    )
    result = export(events, RunRejectedError("boom"))
    assert result.returned == 3
    for span in result.spans:
        assert span.end_time == t(7)
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes[sc.END_INFERRED] is True  # type: ignore[index]


def test_phase_without_descendants_ends_at_its_own_start() -> None:
    result = export(run_stream(ev("phase:start", 5, "p", "s0", phase="empty")), OK_OUTCOME)
    phase = result.only("phase empty")
    assert phase.end_time == phase.start_time == t(5)


def test_a_stranded_span_opened_before_any_run_is_still_ended_after_later_segments() -> None:
    seg2 = 4_294_967_296
    stream = [
        ev("child:start", 0, "c", "s0", workflow="k", scope="s"),  # the stream starts mid-run
        agent_start(1, "a", "p"),
        ev("child:end", 2, "c", status="ok"),
        ev("tool:end", 3, "a", toolName="t", outcome="ok"),  # finds no host inside the closed child
        ev("run:start", 4, "s0", workflow="w"),
        ev("run:start", seg2, "s9", ts_ms=5, workflow="w", resumed=True),
    ]
    result = export(stream, OK_OUTCOME)
    assert len(result.ended) == len(result.spans) == 4
    stranded = result.only("agent w loop")
    assert stranded.end_time == t(5) and (stranded.attributes or {})[sc.END_INFERRED] is True
