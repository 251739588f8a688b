"""The Rulvar / Runs dashboard: run outcomes, spend, tokens and durations per model.

The last row reads the engine's per-request ``gen_ai.client.*`` metrics (registry
``ENGINE_METRICS``): they are written only where the bundled engine calls a provider with a meter
(``rulvar-otel demo`` with metrics, or a host passing ``meter=``), never by an export of a
recorded stream, and they carry no workflow label (the model variable filters them).
"""

from __future__ import annotations

from typing import Final

from dashboard_generator._genai import GENAI_ROW, genai_panels
from dashboard_generator._panels import PanelSpec, RowSpec
from dashboard_generator._queries import MODEL, RANGE, WF, both, label, quantile, total
from rulvar_otel.otel import semconv as sc

__all__ = ["MODEL_REQUESTS_ROW", "model_request_panels", "runs_panels"]

MODEL_REQUESTS_ROW: Final = "Model requests (engine, per provider request)"


def runs_panels() -> list[PanelSpec | RowSpec]:
    return [
        *_run_panels(),
        RowSpec(GENAI_ROW),
        *genai_panels(),
        RowSpec(MODEL_REQUESTS_ROW),
        *model_request_panels(),
    ]


def _run_panels() -> list[PanelSpec]:
    status, completion = label(sc.STATUS), label(sc.RUN_COMPLETION)
    model = label(sc.GEN_AI_REQUEST_MODEL)
    token_type = label(sc.GEN_AI_TOKEN_TYPE)
    error_class, will_retry = label(sc.ERROR_CLASS), label(sc.WILL_RETRY)
    settled_false = both(WF, f'{label(sc.RUN_SETTLED)}="false"')
    wf_model = both(WF, MODEL)
    return [
        PanelSpec(
            "Runs by status x completion",
            "Gate on the pair, never on status alone: ok x partial is an accepted degraded run.",
            (
                (
                    total(sc.METRIC_RUNS_SETTLED, (sc.STATUS, sc.RUN_COMPLETION), WF),
                    f"{{{{{status}}}}} x {{{{{completion}}}}}",
                ),
            ),
        ),
        PanelSpec(
            "Unsettled terminals",
            "Terminals nothing durable records (settled=false), whatever the status says. Reason "
            "superseded: a successor owns settlement, no resume needed; none or other: settlement "
            "failed, resume the run to re-settle it by replay.",
            (
                (
                    total(sc.METRIC_RUNS_SETTLED, (sc.WORKFLOW, sc.RUN_SETTLED_REASON), settled_false, RANGE),
                    "{{rulvar_workflow}} {{rulvar_run_settled_reason}}",
                ),
            ),
            kind="stat",
        ),
        PanelSpec(
            "Spend by model (USD)",
            "Live agent:phase:end costUsd, locally estimated at the caller's price table.",
            ((total(sc.METRIC_SPEND, (sc.GEN_AI_REQUEST_MODEL,), wf_model), f"{{{{{model}}}}}"),),
            unit="currencyUSD",
        ),
        PanelSpec(
            "Run cost p50 / p95 (USD)",
            "Settled totalUsd per run terminal.",
            (
                (quantile(0.5, sc.METRIC_RUN_COST, selector=WF), "p50"),
                (quantile(0.95, sc.METRIC_RUN_COST, selector=WF), "p95"),
            ),
            unit="currencyUSD",
        ),
        PanelSpec(
            "Tokens by type and model",
            "rulvar.invocation.token.usage summed per token type: every invocation's tokens, once.",
            (
                (
                    total(
                        sc.METRIC_INVOCATION_TOKEN_USAGE,
                        (sc.GEN_AI_TOKEN_TYPE, sc.GEN_AI_REQUEST_MODEL),
                        wf_model,
                        suffix="sum",
                    ),
                    f"{{{{{token_type}}}}} {{{{{model}}}}}",
                ),
            ),
        ),
        PanelSpec(
            "Invocation duration p50 / p95 / p99 by model",
            "rulvar.invocation.duration: one agent phase activation, its provider requests and the "
            "tool calls between them (replayed phases excluded).",
            tuple(
                (
                    quantile(q, sc.METRIC_INVOCATION_DURATION, (sc.GEN_AI_REQUEST_MODEL,), wf_model),
                    f"p{int(q * 100)} {{{{{model}}}}}",
                )
                for q in (0.5, 0.95, 0.99)
            ),
            unit="s",
        ),
        PanelSpec(
            "Throttling next to failures",
            "Quota denials are healthy waits. Failures are agent errors that will not retry: real "
            "errors and quota exhaustion (retried errors and the throttling twin are not failures).",
            (
                (
                    total(sc.METRIC_QUOTA_DENIALS, (sc.GEN_AI_REQUEST_MODEL,), wf_model),
                    "throttled (healthy) {{gen_ai_request_model}}",
                ),
                (
                    total(
                        sc.METRIC_AGENT_ERRORS,
                        (sc.ERROR_CLASS,),
                        both(WF, f'{error_class}=~"error|quota_exhausted"', f'{will_retry}="false"'),
                    ),
                    "failures {{rulvar_error_class}}",
                ),
            ),
        ),
        PanelSpec(
            "Run duration p50 / p95",
            "run:start to run:end per segment.",
            (
                (quantile(0.5, sc.METRIC_RUN_DURATION, selector=WF), "p50"),
                (quantile(0.95, sc.METRIC_RUN_DURATION, selector=WF), "p95"),
            ),
            unit="s",
        ),
        PanelSpec(
            "Agent invocations by type and status",
            "Settled agent dispatches (live agent:end).",
            (
                (
                    total(sc.METRIC_AGENT_INVOCATIONS, (sc.AGENT_TYPE, sc.STATUS), wf_model),
                    "{{rulvar_agent_type}} {{rulvar_status}}",
                ),
            ),
        ),
        PanelSpec(
            "Agent duration p95 by agent type",
            "agent:start to agent:end wall time.",
            (
                (
                    quantile(0.95, sc.METRIC_AGENT_DURATION, (sc.AGENT_TYPE,), wf_model),
                    "{{rulvar_agent_type}}",
                ),
            ),
            unit="s",
        ),
    ]


def model_request_panels() -> list[PanelSpec]:
    """The engine's gen_ai.client.* panels: every provider request, retries and failures included."""
    model = label(sc.GEN_AI_REQUEST_MODEL)
    return [
        PanelSpec(
            "Request tokens by model and type",
            "gen_ai.client.token.usage summed per model and token type: each provider request's "
            "tokens, recorded by the engine as it answers (no workflow label: the model variable "
            "filters it).",
            (
                (
                    total(
                        sc.GEN_AI_CLIENT_TOKEN_USAGE,
                        (sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_TOKEN_TYPE),
                        MODEL,
                        suffix="sum",
                    ),
                    f"{{{{{label(sc.GEN_AI_TOKEN_TYPE)}}}}} {{{{{model}}}}}",
                ),
            ),
        ),
        PanelSpec(
            "Model requests by model and error type",
            "gen_ai.client.operation.duration count: provider requests per model; error.type is set "
            "on a failed request (empty: answered).",
            (
                (
                    total(
                        sc.GEN_AI_CLIENT_OPERATION_DURATION,
                        (sc.GEN_AI_REQUEST_MODEL, sc.ERROR_TYPE),
                        MODEL,
                        suffix="count",
                    ),
                    f"{{{{{model}}}}} {{{{{label(sc.ERROR_TYPE)}}}}}",
                ),
            ),
        ),
        PanelSpec(
            "Request duration p50 / p95 by model and operation",
            "gen_ai.client.operation.duration: one provider request, from sending it to its whole "
            "answer, failed ones included (an invocation above also spans the tool calls between "
            "its requests).",
            tuple(
                (
                    quantile(
                        q,
                        sc.GEN_AI_CLIENT_OPERATION_DURATION,
                        (sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_OPERATION_NAME),
                        MODEL,
                    ),
                    f"p{int(q * 100)} {{{{{model}}}}} {{{{{label(sc.GEN_AI_OPERATION_NAME)}}}}}",
                )
                for q in (0.5, 0.95)
            ),
            unit="s",
        ),
    ]
