"""Per-request ``gen_ai.client.*`` metrics, recorded where the engine itself calls the provider.

Read back through the OpenTelemetry SDK's in-memory metric reader: one duration point per provider
request (retries included, ``error.type`` on the failed ones), one token-usage point per answered
request and token type, convention attributes with masked values, nothing for replayed turns.
"""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.semconv._incubating.metrics.gen_ai_metrics import (
    GEN_AI_CLIENT_OPERATION_DURATION,
    GEN_AI_CLIENT_TOKEN_USAGE,
)

from rulvar_otel.engine import Fail, InMemoryJournalStore, Reply, RetryPolicy, ScriptedAdapter, workflow
from tests._support import make_engine

SECRET = "sk-plantedmodel0123456789"


@workflow("ask")
async def ask(ctx: Any, args: Any) -> Any:
    return await ctx.agent("question", model=args["model"])


def _points(reader: InMemoryMetricReader) -> dict[str, list[HistogramDataPoint]]:
    found: dict[str, list[HistogramDataPoint]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)  # type: ignore[arg-type]
    return found


def _run(model: str, script: list[Any], *, adapter_id: str = "openai", dry_run_after: bool = False) -> Any:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    adapter = ScriptedAdapter(adapter_id, default_model="gpt-x", script=script)

    async def scenario() -> Any:
        engine = make_engine(
            [adapter], meter=meter, retry=RetryPolicy(max_retries=2), journal=InMemoryJournalStore()
        )
        outcome = await engine.run(ask, {"model": model}, run_id="metered").result
        if dry_run_after:
            await engine.resume("metered", ask, dry_run=True).result
        return outcome

    outcome = asyncio.run(scenario())
    return outcome, _points(reader)


def test_every_provider_request_records_its_duration_and_each_answer_its_tokens_by_type() -> None:
    script = [Fail("rate_limited", retryable=True), Reply("fine", usage=(120, 30))]
    outcome, points = _run("openai:gpt-4o-mini", script)
    assert outcome.status == "ok"
    durations = points[GEN_AI_CLIENT_OPERATION_DURATION]
    by_error = {dict(p.attributes).get("error.type"): p for p in durations}
    assert set(by_error) == {"rate_limited", None}
    assert all(p.count == 1 and p.sum >= 0 for p in durations)
    answered = dict(by_error[None].attributes)
    assert answered == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
    }
    tokens = {dict(p.attributes)["gen_ai.token.type"]: p for p in points[GEN_AI_CLIENT_TOKEN_USAGE]}
    assert {t: (p.count, p.sum) for t, p in tokens.items()} == {"input": (1, 120), "output": (1, 30)}
    assert all(dict(p.attributes)["gen_ai.request.model"] == "gpt-4o-mini" for p in tokens.values())


def test_a_request_that_fails_for_good_records_only_its_duration_with_the_error_type() -> None:
    outcome, points = _run("openai:gpt-x", [Fail("bad_request", retryable=False)])
    assert outcome.status == "error"
    (point,) = points[GEN_AI_CLIENT_OPERATION_DURATION]
    assert dict(point.attributes)["error.type"] == "bad_request"
    assert GEN_AI_CLIENT_TOKEN_USAGE not in points


def test_other_adapters_name_themselves_and_every_value_is_masked() -> None:
    _, points = _run(f"acme:{SECRET}", [Reply("ok", usage=(1, 2))], adapter_id="acme")
    for point in [*points[GEN_AI_CLIENT_OPERATION_DURATION], *points[GEN_AI_CLIENT_TOKEN_USAGE]]:
        attributes = dict(point.attributes)
        assert attributes["gen_ai.provider.name"] == "acme"
        assert attributes["gen_ai.request.model"] == "[masked-secret]"
        assert SECRET not in repr(attributes)


def test_replayed_turns_make_no_request_and_record_nothing() -> None:
    _, points = _run("openai:gpt-x", [Reply("ok", usage=(7, 3))], dry_run_after=True)
    assert [p.count for p in points[GEN_AI_CLIENT_OPERATION_DURATION]] == [1]
    assert sorted(p.sum for p in points[GEN_AI_CLIENT_TOKEN_USAGE]) == [3, 7]


def test_an_engine_without_a_meter_imports_no_opentelemetry() -> None:
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from rulvar_otel.engine import Reply, ScriptedAdapter, create_engine, workflow\n"
        "@workflow('w')\n"
        "async def w(ctx, args):\n"
        "    return await ctx.agent('q')\n"
        "async def main():\n"
        "    engine = create_engine([ScriptedAdapter('fake', script=[Reply('a')])])\n"
        "    return await engine.run(w).result\n"
        "assert asyncio.run(main()).status == 'ok'\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
