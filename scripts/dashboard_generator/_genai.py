"""The "Agents, tools and workflows (GenAI conventions)" row of the Rulvar / Runs dashboard.

It reads the GenAI conventions' agent-level metrics, which the registry folds from the stream
like the ``rulvar.*`` ones: a backend that knows only the conventions finds the same facts here.
"""

from __future__ import annotations

from typing import Final

from dashboard_generator._panels import PanelSpec
from dashboard_generator._queries import MODEL, WF, both, label, quantile
from rulvar_otel.otel import semconv as sc

__all__ = ["GENAI_ROW", "genai_panels"]

GENAI_ROW: Final = "Agents, tools and workflows (GenAI conventions)"


def genai_panels() -> list[PanelSpec]:
    agent, tool = label(sc.GEN_AI_AGENT_NAME), label(sc.GEN_AI_TOOL_NAME)
    workflow = label(sc.GEN_AI_WORKFLOW_NAME)
    wf_model = both(WF, MODEL)
    return [
        PanelSpec(
            "Agent invocation duration p50 / p95 by agent",
            "gen_ai.invoke_agent.duration: agent:start to agent:end, by gen_ai.agent.name.",
            tuple(
                (
                    quantile(q, sc.GEN_AI_INVOKE_AGENT_DURATION, (sc.GEN_AI_AGENT_NAME,), wf_model),
                    f"p{int(q * 100)} {{{{{agent}}}}}",
                )
                for q in (0.5, 0.95)
            ),
            unit="s",
        ),
        PanelSpec(
            "Tool execution duration p95 by tool",
            "gen_ai.execute_tool.duration: each tool call's durationMs, by gen_ai.tool.name.",
            (
                (
                    quantile(0.95, sc.GEN_AI_EXECUTE_TOOL_DURATION, (sc.GEN_AI_TOOL_NAME,), WF),
                    f"{{{{{tool}}}}}",
                ),
            ),
            unit="s",
        ),
        PanelSpec(
            "Workflow duration p50 / p95",
            "gen_ai.invoke_workflow.duration: run:start to run:end per segment, by gen_ai.workflow.name.",
            tuple(
                (
                    quantile(q, sc.GEN_AI_INVOKE_WORKFLOW_DURATION, (sc.GEN_AI_WORKFLOW_NAME,), WF),
                    f"p{int(q * 100)} {{{{{workflow}}}}}",
                )
                for q in (0.5, 0.95)
            ),
            unit="s",
        ),
        PanelSpec(
            "Inference and tool calls per agent invocation (p95)",
            "gen_ai.invoke_agent.inference_calls and .tool_calls: a step up is the shape of a loop "
            "that stopped converging.",
            (
                (
                    quantile(0.95, sc.GEN_AI_INVOKE_AGENT_INFERENCE_CALLS, (sc.GEN_AI_AGENT_NAME,), wf_model),
                    f"inference {{{{{agent}}}}}",
                ),
                (
                    quantile(0.95, sc.GEN_AI_INVOKE_AGENT_TOOL_CALLS, (sc.GEN_AI_AGENT_NAME,), wf_model),
                    f"tools {{{{{agent}}}}}",
                ),
            ),
        ),
    ]
