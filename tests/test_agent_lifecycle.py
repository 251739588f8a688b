"""One agent lifecycle: its pairing rules, and every consumer of a stream pairing agents by them.

The span mapper, the progress view, the invocation table, the metric folds and the critical path
each read which ``agent:start`` a given ``agent:end`` closes. Generated streams full of repeated
openers, ends without a start, repeated ends, interleaved agents and replayed events must leave
all of them agreeing with one reading of the stream (:func:`_pairing`, written out here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.drain import drain_events
from rulvar_otel.core.lifecycle import AgentLifecycle
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.core.progress import ProgressState
from rulvar_otel.core.reducers import critical_path_fold, invocation_table_fold, reduce_critical_path
from rulvar_otel.core.wire import ts_ns
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.direct_metrics import MetricsAggregator, attach_reader
from rulvar_otel.otel.metrics import MetricsRecorder
from rulvar_otel.testing import metric_points
from tests._support import ev, export

# --- the tracker's rules --------------------------------------------------------------------------


def test_the_first_opener_wins_and_a_repeat_while_open_changes_nothing() -> None:
    agents: AgentLifecycle[str] = AgentLifecycle()
    first = agents.start(ev("agent:start", 1, "a", "s0", role="loop", model="m1", agentType="t"))
    assert first is not None and first.model == "m1" and first.start_ns is not None
    assert agents.start(ev("agent:start", 5, "a", "s0", role="plan", model="m2", replayed=True)) is None
    assert agents.get("a") is first and len(agents) == 1
    assert (first.model, first.role, first.replayed) == ("m1", "loop", False)


def test_an_end_returns_its_start_once_and_an_unpaired_end_returns_nothing() -> None:
    agents: AgentLifecycle[str] = AgentLifecycle()
    opened = agents.start(ev("agent:start", 1, "a", "s0", role="loop"))
    closed = agents.end(ev("agent:end", 3, "a", "s0", status="ok"))
    assert closed is opened and closed is not None and closed.open is False
    assert agents.end(ev("agent:end", 4, "a", "s0", status="ok")) is None
    assert agents.end(ev("agent:end", 4, "never", "s0", status="ok")) is None
    assert len(agents) == 0 and agents.closed("a") and not agents.closed("never")


def test_a_repeat_of_a_closed_opener_reopens_nothing() -> None:
    agents: AgentLifecycle[str] = AgentLifecycle()
    first = agents.start(ev("agent:start", 1, "a", "s0", role="loop"))
    agents.end(ev("agent:end", 2, "a", "s0", status="ok"))
    assert agents.start(ev("agent:start", 3, "a", "s0", role="loop", replayed=True)) is None
    assert agents.get("a") is None and agents.closed("a") and len(agents) == 0
    assert first is not None and first.open is False


def test_an_end_without_a_start_leaves_the_span_free_to_open_later() -> None:
    agents: AgentLifecycle[str] = AgentLifecycle()
    assert agents.end(ev("agent:end", 1, "a", "s0", status="ok")) is None
    late = agents.start(ev("agent:start", 2, "a", "s0", role="loop"))
    assert late is not None and agents.get("a") is late


def test_the_replayed_flag_is_the_openers_and_the_payload_stays_with_the_span() -> None:
    agents: AgentLifecycle[str] = AgentLifecycle()
    opened = agents.start(ev("agent:start", 1, "a", "s0", replayed=True))
    assert opened is not None and opened.replayed
    opened.payload = "row of a"
    agents.start(ev("agent:start", 2, "a", "s0"))
    closed = agents.end(ev("agent:end", 3, "a", "s0", status="ok"))
    assert closed is not None and closed.replayed and closed.payload == "row of a"


def test_an_agent_event_without_a_span_id_names_the_empty_id() -> None:
    agents: AgentLifecycle[str] = AgentLifecycle()
    anonymous = ev("agent:start", 1, "x", "s0")
    del anonymous["spanId"]
    opened = agents.start(anonymous)
    assert opened is not None and opened.span_id == ""
    assert agents.start(ev("agent:start", 2, "", "s0")) is None
    assert agents.end({"type": "agent:end", "spanId": 7}) is opened


def test_the_critical_path_counts_a_worker_once_even_when_its_end_repeats() -> None:
    stream = [
        ev("run:start", 0, "s0", workflow="w"),
        ev("agent:start", 1, "w1", "s0", role="work"),
        ev("agent:end", 5, "w1", "s0", status="ok"),
        ev("agent:end", 6, "w1", "s0", status="ok"),
        ev("run:end", 10, "s0", status="ok"),
    ]
    path = reduce_critical_path(stream)
    assert path.worker_spans == 1
    assert path.post_fan_in_ms == 5.0


# --- every consumer pairs the same way --------------------------------------------------------------

_IDS = ("a", "b", "c", None)  # None: an agent event without a spanId
_STATUSES = ("ok", "error", "cancelled")
_STEP_MS = 10


@dataclass(frozen=True)
class _Pair:
    opener: dict[str, Any]
    closer: dict[str, Any] | None


def _key(span: str | None) -> str:
    return span if span is not None else ""


def _event(kind: str, index: int, span: str | None, replayed: bool, status: str) -> dict[str, Any]:
    body: dict[str, Any] = {"agentType": f"agent-{_key(span)}"}
    if kind == "agent:start":
        body |= {"role": "loop", "model": "acme:small"}
    else:
        body |= {"status": status, "costUsd": 0.5}
    if replayed:
        body["replayed"] = True
    event = ev(kind, index, span or "", "s0", ts_ms=index * _STEP_MS, **body)
    if span is None:
        del event["spanId"]
    return event


_steps = st.lists(
    st.tuples(
        st.sampled_from(("agent:start", "agent:end")),
        st.sampled_from(_IDS),
        st.booleans(),
        st.sampled_from(_STATUSES),
    ),
    max_size=30,
)


def _stream(steps: list[tuple[str, str | None, bool, str]]) -> list[dict[str, Any]]:
    stream = [ev("run:start", 0, "s0", workflow="w")]
    stream += [
        _event(kind, i, span, replayed, status) for i, (kind, span, replayed, status) in enumerate(steps, 1)
    ]
    # A last event after every agent event: a span without a closer ends at a time no closer has.
    stream.append(ev("log", len(stream), "s0", ts_ms=len(stream) * _STEP_MS, level="info", msg="m"))
    return stream


def _pairing(stream: list[dict[str, Any]]) -> dict[str, _Pair]:
    """The one reading: the first opener per id opens it, an end closes only what is open."""
    pairs: dict[str, _Pair] = {}
    for event in stream:
        if event["type"] not in ("agent:start", "agent:end"):
            continue
        key = _key(event.get("spanId"))
        pair = pairs.get(key)
        if event["type"] == "agent:start" and pair is None:
            pairs[key] = _Pair(event, None)
        elif event["type"] == "agent:end" and pair is not None and pair.closer is None:
            pairs[key] = _Pair(pair.opener, event)
    return pairs


def _ns(event: dict[str, Any]) -> int:
    ns = ts_ns(event["ts"])
    assert ns is not None
    return ns


def _live_durations(pairs: dict[str, _Pair]) -> list[float]:
    """Metrics time a pair only when both of its events are live (replayed times are re-stamps)."""
    return sorted(
        (_ns(p.closer) - _ns(p.opener)) / 1e9
        for p in pairs.values()
        if p.closer is not None and not p.opener.get("replayed") and not p.closer.get("replayed")
    )


def _mapper_agents(stream: list[dict[str, Any]]) -> dict[str, tuple[int, int | None]]:
    """Per agent id: the seq of the opener of its span, and the end time its closer gave it."""
    out: dict[str, tuple[int, int | None]] = {}
    for span in export(stream).ended:
        attrs = span.attributes or {}
        if attrs.get(sc.GEN_AI_OPERATION_NAME) != sc.GEN_AI_OPERATION_INVOKE_AGENT:
            continue
        key = str(attrs[sc.GEN_AI_AGENT_NAME]).removeprefix("agent-")
        assert key not in out, "one span per agent id"
        closed_by_closer = sc.STATUS in attrs
        assert closed_by_closer != (sc.END_INFERRED in attrs)
        out[key] = (int(attrs[sc.ENTRY_SEQ]), span.end_time if closed_by_closer else None)  # type: ignore[arg-type]
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps)
def test_every_consumer_pairs_agent_starts_and_ends_the_same_way(
    steps: list[tuple[str, str | None, bool, str]],
) -> None:
    stream = _stream(steps)
    pairs = _pairing(stream)
    still_open = {key for key, pair in pairs.items() if pair.closer is None}

    # The span mapper: one agent span per opened id, started by its opener, ended by its closer.
    assert _mapper_agents(stream) == {
        key: (pair.opener["seq"], _ns(pair.closer) if pair.closer is not None else None)
        for key, pair in pairs.items()
    }

    progress = ProgressState()
    table, path = invocation_table_fold(), critical_path_fold()
    reader = InMemoryMetricReader()
    recorder = MetricsRecorder(MeterProvider(metric_readers=[reader]).get_meter("t"), compile_secret_masker())
    aggregator = MetricsAggregator(compile_secret_masker())
    direct_reader = attach_reader(InMemoryMetricReader(), aggregator)
    drain_events(stream, progress, table, path, recorder, aggregator)

    # The progress view: the opener's start, the closer's end and status; the rest still running.
    for key, pair in pairs.items():
        row = progress.agents[key]
        assert row.started_at == _ns(pair.opener) / 1e9
        if pair.closer is None:
            assert (row.status, row.ended_at) == ("running", None)
        else:
            assert (row.status, row.ended_at) == (pair.closer["status"], _ns(pair.closer) / 1e9)
    assert progress.status_counts().get("running", 0) == len(still_open)

    # The invocation table: the same open agents, the same start-to-end durations.
    rows = {row.span_id: row for row in table.result.agents}
    assert table.result.open_agents == len(still_open)
    assert {key for key, row in rows.items() if row.open} == still_open
    for key, pair in pairs.items():
        if pair.closer is not None:
            expected_ms = (_ns(pair.closer) - _ns(pair.opener)) / 1e6
            assert rows[key].duration_ms == pytest.approx(expected_ms)

    # The critical path: every closed pair is one worker span.
    assert path.result.worker_spans == len(pairs) - len(still_open)

    # The metric folds, on the SDK meter and on the direct aggregator: a duration per live pair.
    live_ends = sum(1 for e in stream if e["type"] == "agent:end" and not e.get("replayed"))
    for got in (metric_points(reader), metric_points(direct_reader)):
        durations = got.get(sc.METRIC_AGENT_DURATION, {}).values()
        invocations = got.get(sc.METRIC_AGENT_INVOCATIONS, {}).values()
        expected = _live_durations(pairs)
        assert sum(point[0] for point in durations) == len(expected)  # type: ignore[index]
        assert sum(point[1] for point in durations) == pytest.approx(sum(expected))  # type: ignore[index]
        assert sum(invocations) == live_ends  # type: ignore[arg-type]


def test_a_live_end_after_a_replayed_one_times_nothing_anywhere() -> None:
    stream = [
        ev("run:start", 0, "s0", workflow="w"),
        ev("agent:start", 1, "a", "s0", agentType="agent-a", role="loop", model="acme:small"),
        ev("agent:end", 2, "a", "s0", agentType="agent-a", status="ok", replayed=True),
        ev("agent:end", 9, "a", "s0", agentType="agent-a", status="error"),
        ev("log", 10, "s0", level="info", msg="m"),
    ]
    reader = InMemoryMetricReader()
    recorder = MetricsRecorder(MeterProvider(metric_readers=[reader]).get_meter("t"), compile_secret_masker())
    progress = ProgressState()
    drain_events(stream, progress, recorder)
    assert sc.METRIC_AGENT_DURATION not in metric_points(reader)  # the replayed end closed the span
    assert progress.agents["a"].status == "ok"
    assert _mapper_agents(stream) == {"a": (1, _ns(stream[2]))}
