"""Metric streams and folds shared by the metrics and live Prometheus tests.

Hand-built streams, :func:`feed` (a recorder over a stream), :func:`fold_reference` (the points
of a corpus stream) and the attribute keys the folds are compared by.

The reference corpus has no escalation, reclaim, rejected spawn or quota exhaustion; the adaptive
stream below carries them so every registry metric has data. No test functions live here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, MetricsData

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import MetricsRecorder
from rulvar_otel.testing import metric_points
from tests._support._corpus import events, outcome

__all__ = [
    "T0",
    "adaptive_outcome",
    "adaptive_stream",
    "attrs",
    "build_stream",
    "count_and_sum",
    "feed",
    "fold_reference",
    "phase_attributes",
    "run_settled_key",
    "unsettled_quota_stream",
]

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _ts(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_stream(run_id: str, bodies: Iterable[tuple[float, str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Events from (seconds after T0, spanId, body) triples, with the envelope filled in."""
    out: list[dict[str, Any]] = []
    for seq, (at, span, body) in enumerate(bodies):
        out.append({"runId": run_id, "seq": seq, "ts": _ts(at), "spanId": span, **body})
    return out


_USAGE0 = {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def _usage(i: int, o: int) -> dict[str, int]:
    return {**_USAGE0, "inputTokens": i, "outputTokens": o}


def adaptive_stream(run_id: str = "syn-adaptive-1") -> list[dict[str, Any]]:
    """An orchestrated run with every adaptive fact the reference corpus lacks.

    Hand-computed facts: 4 ledger ops / 2 admitted spawns = 2.0; escalations: researcher
    scope_bigger 1, unknown blocked_with_evidence 1; reclaimed 0.25 USD; wake render size 3000;
    last orchestrator:budget share 0.2; envelope gross 0.512 - net 0.012 = abandoned 0.5; quota
    denials: acme:small requests 2, tokens 1; agent errors: researcher quota_exhausted 1, writer
    quota_throttle 1, writer error (will retry) 1, writer error (no retry, after progress) 1.
    """
    orch = {"agentType": "", "model": "acme:big", "role": "orchestrate"}
    research = {"agentType": "researcher", "model": "acme:small", "role": "loop"}
    write = {"agentType": "writer", "model": "acme:small", "role": "loop"}
    limiter_twin = {
        "code": "quota",
        "message": "window",
        "retryable": True,
        "data": {"source": "quota-limiter"},
    }
    plain = {"code": "agent", "message": "overloaded", "retryable": True}
    # The engine's error when the limiter denied a call more often than its denial budget allows.
    exhausted = {
        "code": "quota_exhausted",
        "message": "quota denied 3 times",
        "retryable": False,
        "data": {"model": "acme:small", "denials": 3},
    }
    return build_stream(
        run_id,
        [
            (0.0, "s0", {"type": "run:start", "workflow": "planner", "resumed": False}),
            (0.1, "s1", {"type": "agent:start", **orch}),
            (0.1, "s1", {"type": "agent:phase:start", **orch, "invocation": 1}),
            (0.2, "s0", {"type": "spawn:admitted", "entryRef": 1, "verdict": "admit",
                         "agentType": "researcher", "logicalTaskId": "t1"}),
            (0.2, "s0", {"type": "spawn:admitted", "entryRef": 2, "verdict": "reuse_full",
                         "agentType": "writer", "logicalTaskId": "t2"}),
            (0.2, "s0", {"type": "spawn:rejected", "entryRef": 3, "code": "budget_exhausted",
                         "agentType": "researcher"}),
            (0.3, "s0", {"type": "ledger:op", "entryRef": 4, "op": "brief_set"}),
            (0.3, "s0", {"type": "ledger:op", "entryRef": 5, "op": "fact_add"}),
            (0.3, "s0", {"type": "ledger:op", "entryRef": 6, "op": "fact_add"}),
            (0.3, "s0", {"type": "ledger:op", "entryRef": 7, "op": "fact_add"}),
            (0.4, "s0", {"type": "escalation:raised", "entryRef": 8, "kind": "scope_bigger",
                         "logicalTaskId": "t1", "costToDateUsd": 0.01}),
            (0.4, "s0", {"type": "escalation:raised", "entryRef": 9, "kind": "blocked_with_evidence",
                         "logicalTaskId": "t9", "costToDateUsd": 0.01}),
            (0.5, "s0", {"type": "node:linked", "nodeId": "n1", "logicalTaskId": "t2", "donorRef": 2,
                         "reclaimedUsd": 0.25}),
            (0.6, "s0", {"type": "orchestrator:woke", "digestSeq": 1, "planHash": "h", "coversToOrdinal": 1,
                         "renderSize": 3000}),
            (0.6, "s0", {"type": "orchestrator:budget", "atCap": False, "orchestratorShare": 0.2}),
            (1.0, "s2", {"type": "agent:start", **research}),
            (1.0, "s2", {"type": "agent:phase:start", **research, "invocation": 1}),
            (1.1, "s2", {"type": "quota:denied", "agentType": "researcher", "model": "acme:small",
                         "reason": "requestsPerMinute 60 exhausted", "retryAfterMs": 5, "willRetry": True}),
            (1.2, "s2", {"type": "quota:denied", "agentType": "researcher", "model": "acme:small",
                         "reason": "requestsPerMinute 60 exhausted", "retryAfterMs": 5, "willRetry": True}),
            (1.3, "s2", {"type": "agent:error", "agentType": "researcher", "error": exhausted,
                         "willRetry": False}),
            (2.5, "s2", {"type": "agent:phase:end", **research, "invocation": 1, "durationMs": 1500,
                         "usage": _usage(0, 0), "costUsd": 0, "outcome": "error"}),
            (2.5, "s2", {"type": "agent:end", "agentType": "researcher", "status": "error",
                         "usage": _usage(0, 0), "costUsd": 0, "entryRef": 10}),
            (3.0, "s3", {"type": "agent:start", **write}),
            (3.0, "s3", {"type": "agent:phase:start", **write, "invocation": 1}),
            (3.1, "s3", {"type": "quota:denied", "agentType": "writer", "model": "acme:small",
                         "reason": "tokensPerMinute 1000 exhausted", "willRetry": True}),
            (3.1, "s3", {"type": "agent:error", "agentType": "writer", "error": limiter_twin,
                         "willRetry": True}),
            (3.2, "s3", {"type": "agent:error", "agentType": "writer", "error": plain, "willRetry": True}),
            (5.5, "s3", {"type": "agent:phase:end", **write, "invocation": 1, "durationMs": 2500,
                         "usage": _usage(100, 50), "costUsd": 0.002, "outcome": "ok"}),
            (5.6, "s3", {"type": "agent:error", "agentType": "writer", "error": dict(plain, retryable=False),
                         "willRetry": False}),
            (6.0, "s3", {"type": "agent:end", "agentType": "writer", "status": "ok",
                         "usage": _usage(100, 50), "costUsd": 0.002, "entryRef": 11}),
            (6.5, "s1", {"type": "budget:exposure-wait", "agentType": "", "model": "acme:big",
                         "scope": "child", "willWait": True}),
            (6.6, "s0", {"type": "determinism:warning", "category": "bare-date-now", "provenance": "workflow",
                         "frame": "at body (/srv/wf.js:1:1)"}),
            (6.6, "s0", {"type": "determinism:warning", "category": "bare-math-random",
                         "provenance": "allowlisted", "frame": "at lib (/srv/lib.js:1:1)"}),
            (6.7, "s1", {"type": "tool:start", "toolName": "spawn_agent", "toolCallId": "c1"}),
            (6.9, "s1", {"type": "tool:end", "toolName": "spawn_agent", "toolCallId": "c1", "outcome": "ok",
                         "durationMs": 200, "verdict": "allow", "decidedBy": "default"}),
            (9.0, "s1", {"type": "agent:phase:end", **orch, "invocation": 1, "durationMs": 8900,
                         "usage": _usage(300, 120), "costUsd": 0.01, "outcome": "ok"}),
            (9.0, "s1", {"type": "agent:end", "agentType": "", "status": "ok", "usage": _usage(300, 120),
                         "costUsd": 0.01, "entryRef": 12}),
            (10.0, "s0", {"type": "run:end", "status": "ok", "totalUsd": 0.012, "completion": "partial",
                          "envelope": {"runId": run_id, "workflow": "planner", "status": "ok",
                                       "settled": True,
                                       "totalUsd": 0.012, "grossUsd": 0.512, "costBasis": "locally-estimated",
                                       "costByModel": {}, "usage": _usage(400, 170), "usageApprox": False,
                                       "agentsSpawned": 3, "completion": "partial"}}),
        ],
    )  # fmt: skip


def adaptive_outcome() -> RunOutcome:
    """The settled outcome of :func:`adaptive_stream`: the CostReport says share 0.3."""
    return RunOutcome(
        status="ok",
        completion="partial",
        cost={
            "totalUsd": 0.012,
            "grossUsd": 0.512,
            "abandoned": {"usd": 0.5, "unpriced": []},
            "orchestrator": {"spentUsd": 0.01, "share": 0.3, "wakes": 1, "forcedFinish": False},
        },
    )


def unsettled_quota_stream(run_id: str = "syn-unsettled-1") -> list[dict[str, Any]]:
    """A run that only throttled (two healthy quota waits) and whose terminal did not settle."""
    agent = {"agentType": "solo", "model": "acme:small", "role": "loop"}
    return build_stream(
        run_id,
        [
            (0.0, "s0", {"type": "run:start", "workflow": "solo", "resumed": False}),
            (0.1, "s1", {"type": "agent:start", **agent}),
            (0.2, "s1", {"type": "quota:denied", "agentType": "solo", "model": "acme:small",
                         "reason": "tokensPerMinute 10 exhausted", "willRetry": True}),
            (0.3, "s1", {"type": "agent:end", "agentType": "solo", "status": "ok", "usage": _USAGE0,
                         "costUsd": 0, "entryRef": 1}),
            (1.0, "s0", {"type": "run:end", "status": "ok", "totalUsd": 0, "settled": False}),
        ],
    )  # fmt: skip


def feed(
    meter: Any,
    events: Iterable[Mapping[str, Any]],
    outcome: RunOutcome | BaseException | None = None,
    masker: SecretMasker | None = None,
) -> None:
    """Observe ``events`` with a :class:`MetricsRecorder` on ``meter`` and settle it with ``outcome``."""
    recorder = MetricsRecorder(meter, masker)
    for event in events:
        recorder.observe(event)
    recorder.finish(outcome)


def attrs(mapping: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
    """The key :func:`rulvar_otel.testing.metric_points` files a data point under."""
    return frozenset(mapping.items())


def fold_reference(
    meter_and_reader: tuple[Any, InMemoryMetricReader], name: str, with_outcome: bool = True
) -> dict[str, Any]:
    """The metric points of the corpus stream ``name`` fed to a recorder (and settled with its
    outcome unless ``with_outcome`` is false)."""
    meter, reader = meter_and_reader
    result: Any = outcome(name) if with_outcome else None
    feed(meter, events(name), result)
    return metric_points(reader)


def run_settled_key(
    workflow: str, status: str, completion: str = "none", settled: bool = True, reason: str = "none"
) -> frozenset[tuple[str, Any]]:
    """The attribute set of one ``rulvar.runs.settled`` series."""
    return attrs(
        {
            sc.WORKFLOW: workflow,
            sc.STATUS: status,
            sc.RUN_COMPLETION: completion,
            sc.RUN_SETTLED: settled,
            sc.RUN_SETTLED_REASON: reason,
        }
    )


def phase_attributes(workflow: str, model: str, role: str, **extra: Any) -> dict[str, Any]:
    """The attributes of an agent-phase series for ``model`` (``provider:model``)."""
    return {
        sc.WORKFLOW: workflow,
        sc.GEN_AI_REQUEST_MODEL: model.partition(":")[2],
        sc.GEN_AI_PROVIDER_NAME: model.partition(":")[0],
        sc.AGENT_ROLE: role,
        **extra,
    }


def count_and_sum(point: Any) -> tuple[int, float]:
    """A histogram point's (count, sum)."""
    count, total, _ = point
    return count, total


def histogram_points(data: MetricsData | None, name: str) -> list[HistogramDataPoint]:
    """The histogram data points of metric ``name`` in ``data`` (none when nothing was collected)."""
    if data is None:
        return []
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
        if isinstance(point, HistogramDataPoint)
    ]
