"""The Rulvar / Spans dashboard: the collector's spanmetrics series derived from the exported spans."""

from __future__ import annotations

from typing import Any

from dashboard_generator._panels import PanelSpec, datasource_variable, query_variable
from dashboard_generator._queries import RATE, both, counted, label, span_series
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics.registry import SPAN_METRICS_NAMESPACE

__all__ = ["spans_panels", "spans_variables"]


def spans_variables() -> list[Any]:
    calls = span_series(f"{SPAN_METRICS_NAMESPACE}.calls")
    return [datasource_variable(), query_variable("service", "Service", calls, "service_name")]


def spans_panels() -> list[PanelSpec]:
    calls = span_series(f"{SPAN_METRICS_NAMESPACE}.calls")
    bucket = span_series(f"{SPAN_METRICS_NAMESPACE}.duration", "bucket")
    service = 'service_name=~"$service"'
    agents = both(service, f'{label(sc.AGENT_TYPE)}!=""')
    tools = both(service, f'{label(sc.TOOL_NAME)}!=""')

    def calls_by(by: str, selector: str) -> str:
        return f"sum by ({by}) ({counted(f'{calls}{{{selector}}}', RATE)})"

    def latency(q: float, by: str, selector: str) -> str:
        return f"histogram_quantile({q}, sum by (le, {by}) ({counted(f'{bucket}{{{selector}}}', RATE)}))"

    return [
        PanelSpec(
            "Span calls by kind and name",
            "The collector's spanmetrics: spans ended per span kind and name (run, phase, agent, "
            "invocation, tool).",
            ((calls_by("span_kind, span_name", service), "{{span_kind}} {{span_name}}"),),
        ),
        PanelSpec(
            "Span errors by name",
            "Spans whose status is ERROR.",
            ((calls_by("span_name", both(service, 'status_code="STATUS_CODE_ERROR"')), "{{span_name}}"),),
        ),
        PanelSpec(
            "Span latency p50 / p95 by kind and name",
            "Span duration from the spanmetrics histogram.",
            (
                (latency(0.5, "span_kind, span_name", service), "p50 {{span_kind}} {{span_name}}"),
                (latency(0.95, "span_kind, span_name", service), "p95 {{span_kind}} {{span_name}}"),
            ),
            unit="ms",
        ),
        PanelSpec(
            "Agent spans by agent type and model",
            "Agent and invocation spans, counted by the spanmetrics dimensions.",
            (
                (
                    calls_by("rulvar_agent_type, gen_ai_request_model", agents),
                    "{{rulvar_agent_type}} {{gen_ai_request_model}}",
                ),
            ),
        ),
        PanelSpec(
            "Tool spans p95 by tool",
            "Tool span duration per tool.",
            ((latency(0.95, "rulvar_tool_name", tools), "{{rulvar_tool_name}}"),),
            unit="ms",
        ),
    ]
