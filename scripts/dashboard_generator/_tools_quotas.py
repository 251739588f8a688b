"""The Rulvar / Tools and quotas dashboard: tool calls and denials, quota throttling, errors, determinism."""

from __future__ import annotations

from dashboard_generator._panels import PanelSpec
from dashboard_generator._queries import MODEL, WF, both, label, quantile, total
from rulvar_otel.otel import semconv as sc

__all__ = ["tools_panels"]


def tools_panels() -> list[PanelSpec]:
    error_class = label(sc.ERROR_CLASS)
    wf_model = both(WF, MODEL)
    return [
        PanelSpec(
            "Tool calls by tool and outcome",
            "Settled tool calls (live tool:end).",
            (
                (
                    total(sc.METRIC_TOOL_CALLS, (sc.TOOL_NAME, sc.STATUS), WF),
                    "{{rulvar_tool_name}} {{rulvar_status}}",
                ),
            ),
        ),
        PanelSpec(
            "Tool denials by guard and deciding rule",
            "Which layer denied: an exploration guard, or the permission chain's deciding rule.",
            (
                (
                    total(
                        sc.METRIC_TOOL_CALLS,
                        (sc.TOOL_GUARD, sc.TOOL_DECIDED_BY),
                        both(WF, f'{label(sc.STATUS)}="denied"'),
                    ),
                    "guard {{rulvar_tool_guard}} / decided by {{rulvar_tool_decided_by}}",
                ),
            ),
        ),
        PanelSpec(
            "Tool duration p50 / p95 by tool",
            "tool:end durationMs.",
            (
                (quantile(0.5, sc.METRIC_TOOL_DURATION, (sc.TOOL_NAME,), WF), "p50 {{rulvar_tool_name}}"),
                (quantile(0.95, sc.METRIC_TOOL_DURATION, (sc.TOOL_NAME,), WF), "p95 {{rulvar_tool_name}}"),
            ),
            unit="s",
        ),
        PanelSpec(
            "Quota denials by model and dimension (healthy throttling)",
            "quota:denied: a pre-wire wait that will retry, never a failure.",
            (
                (
                    total(sc.METRIC_QUOTA_DENIALS, (sc.GEN_AI_REQUEST_MODEL, sc.QUOTA_DIMENSION), wf_model),
                    "{{gen_ai_request_model}} {{rulvar_quota_dimension}}",
                ),
            ),
        ),
        PanelSpec(
            "Quota exhaustion (terminal denials)",
            "The engine's exhaustion error: the per-target quota denial budget is spent.",
            (
                (
                    total(
                        sc.METRIC_AGENT_ERRORS, (sc.AGENT_TYPE,), both(WF, f'{error_class}="quota_exhausted"')
                    ),
                    "{{rulvar_agent_type}}",
                ),
            ),
        ),
        PanelSpec(
            "Exposure waits by scope and will_wait",
            "budget:exposure-wait: will_wait=false is the drained arm, a genuine terminal.",
            (
                (
                    total(sc.METRIC_EXPOSURE_WAITS, (sc.EXPOSURE_SCOPE, sc.WILL_WAIT), wf_model),
                    "{{rulvar_exposure_scope}} will_wait={{rulvar_will_wait}}",
                ),
            ),
        ),
        PanelSpec(
            "Agent errors that are not throttling",
            "agent:error of class error, by agent type and error code (retried ones included).",
            (
                (
                    total(
                        sc.METRIC_AGENT_ERRORS,
                        (sc.AGENT_TYPE, sc.ERROR_TYPE),
                        both(WF, f'{error_class}="error"'),
                    ),
                    "{{rulvar_agent_type}} {{error_type}}",
                ),
            ),
        ),
        PanelSpec(
            "Determinism warnings",
            "Bare clock/random calls; provenance workflow is the one to fix.",
            (
                (
                    total(
                        sc.METRIC_DETERMINISM_WARNINGS,
                        (sc.DETERMINISM_CATEGORY, sc.DETERMINISM_PROVENANCE),
                        WF,
                    ),
                    "{{rulvar_determinism_category}} {{rulvar_determinism_provenance}}",
                ),
            ),
        ),
    ]
