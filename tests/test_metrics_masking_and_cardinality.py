"""Metric attributes are masked, bounded and truncated, whatever the stream; the recorder never raises."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from rulvar_otel.core.events import KNOWN_EVENT_TYPES
from rulvar_otel.core.masking import MASKED_SECRET, compile_secret_masker
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics import REGISTRY, MetricsRecorder
from rulvar_otel.testing import metric_points
from tests._support import (
    adaptive_outcome,
    adaptive_stream,
    attrs,
    build_stream,
    events,
    feed,
    outcome,
    phase_attributes,
)

approx = pytest.approx

RUN = sc.METRIC_RUNS_SETTLED


# --- masking and cardinality ------------------------------------------------------------------

SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0"


def _all_attribute_values(reader: InMemoryMetricReader) -> list[Any]:
    return [value for series in metric_points(reader).values() for key in series for _, value in key]


@pytest.mark.parametrize(
    ("ref", "model", "provider"),
    [
        ("openai:gpt-4o-mini", "gpt-4o-mini", "openai"),
        ("gemini:gemini-2.5-pro", "gemini-2.5-pro", "gcp.gemini"),
        ("acme:small", "small", "acme"),
        ("bare-model", "bare-model", "unknown"),
        ("acme:", "unknown", "acme"),
    ],
)
def test_model_labels_are_the_spans_model_id_and_provider(
    meter_and_reader: Any, ref: str, model: str, provider: str
) -> None:
    # The same gen_ai.request.model / gen_ai.provider.name values the spans carry, so the
    # dashboards' model variable matches the spanmetrics dimension and span attributes.
    meter, reader = meter_and_reader
    agent = {"agentType": "a", "model": ref, "role": "loop"}
    stream = build_stream(
        "syn-model",
        [
            (0.0, "s0", {"type": "run:start", "workflow": "w"}),
            (0.1, "s1", {"type": "quota:denied", "agentType": "a", "model": ref, "reason": "tokens"}),
            (
                0.2,
                "s1",
                {"type": "agent:phase:end", **agent, "durationMs": 5, "costUsd": 0.5, "outcome": "ok"},
            ),
        ],
    )
    feed(meter, stream)
    data = metric_points(reader)
    assert data[sc.METRIC_SPEND] == {attrs(phase_attributes("w", f"{provider}:{model}", "loop")): 0.5}
    assert set(data[sc.METRIC_QUOTA_DENIALS]) == {
        attrs(
            {
                sc.WORKFLOW: "w",
                sc.GEN_AI_REQUEST_MODEL: model,
                sc.GEN_AI_PROVIDER_NAME: provider,
                sc.QUOTA_DIMENSION: "tokens",
            }
        )
    }


def test_every_string_attribute_is_masked(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    stream = events("orchestrate") + events("tools") + events("quota")
    for event in stream:
        for field in ("model", "toolName", "agentType", "workflow", "decidedBy", "verdict"):
            if isinstance(event.get(field), str):
                event[field] = f"{event[field]}-{SECRET}"
    feed(meter, stream, None, compile_secret_masker([r"worker"]))
    values = [v for v in _all_attribute_values(reader) if isinstance(v, str)]
    assert values and not any(SECRET in v for v in values)
    assert any(MASKED_SECRET in v for v in values)
    assert not any("worker" in v for v in values)  # the host pattern applied too
    # The provider is derived from the masked ref: the adapter id survives, the key does not.
    assert "fake" in values


def test_no_unbounded_value_becomes_an_attribute(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    stream = adaptive_stream("run-id-that-must-not-appear")
    feed(meter, stream, adaptive_outcome())
    values = {str(v) for v in _all_attribute_values(reader)}
    for event in stream:
        for unbounded in ("runId", "spanId", "ts", "toolCallId", "logicalTaskId"):
            if unbounded in event:
                assert str(event[unbounded]) not in values, unbounded
    for series in metric_points(reader).values():
        for key in series:
            assert {k for k, _ in key} <= {a for d in REGISTRY for a in d.attributes}


def test_long_attribute_values_are_truncated(meter_and_reader: Any) -> None:
    meter, reader = meter_and_reader
    stream = events("tools")
    for event in stream:
        if "toolName" in event:
            event["toolName"] = "t" * 5000
    feed(meter, stream, outcome("tools"))
    assert max(len(v) for v in _all_attribute_values(reader) if isinstance(v, str)) <= 128


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_field_names = st.sampled_from(
    [
        "type", "spanId", "ts", "model", "role", "usage", "costUsd", "durationMs", "outcome", "status",
        "agentType", "error", "willRetry", "willWait", "scope", "toolName", "guard", "decidedBy",
        "renderSize", "orchestratorShare", "reclaimedUsd", "logicalTaskId", "workflow", "envelope",
        "totalUsd", "completion", "settled", "replayed", "reason", "verdict", "code", "kind", "op",
    ]
)  # fmt: skip
_event = st.dictionaries(_field_names, _json, max_size=10) | st.fixed_dictionaries(
    {"type": st.sampled_from(sorted(KNOWN_EVENT_TYPES))},
    optional={"spanId": _json, "ts": _json, "usage": _json},
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stream=st.lists(_event | _json, max_size=12),
    result=st.none() | st.just(RuntimeError("rejected")) | st.builds(lambda: adaptive_outcome()),
)
def test_recorder_never_raises(meter_and_reader: Any, stream: list[Any], result: Any) -> None:
    meter, _ = meter_and_reader
    recorder = MetricsRecorder(meter)
    for event in stream:
        recorder.observe(event)
    recorder.finish(result)
    recorder.finish(result)  # idempotent
