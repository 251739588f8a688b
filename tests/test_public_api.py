"""The public surface, pinned: each public module's ``__all__`` is exactly the list below.

A public module is ``rulvar_otel`` itself, each top-level module and each package down to
``rulvar_otel.<package>.<subpackage>`` whose path has no ``_``-prefixed part. Adding, removing
or renaming a public name is a decision, made here; a new public module without a pinned list
fails, and so does a pinned module that no longer exists. Docs import only public modules.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rulvar_otel"

ERRORS = [
    "AdapterError",
    "AgentFailedError",
    "BudgetExhaustedError",
    "ConfigError",
    "DeadlineExceededError",
    "DeterminismError",
    "EventError",
    "ExportError",
    "ExposureDrainedError",
    "InvalidHeaderError",
    "JournalError",
    "OutcomeError",
    "QuotaExhaustedError",
    "ReplayMissError",
    "ResponseLimitError",
    "RulvarOtelError",
    "RunNotFoundError",
    "RunRejectedError",
    "SchemaValidationError",
    "SourceError",
    "StreamLineError",
    "WorkflowError",
]

PINNED: dict[str, list[str]] = {
    "rulvar_otel": [
        *ERRORS,
        "EventLike",
        "ExportFailure",
        "ExportOptions",
        "ExportReport",
        "FailureKind",
        "MetricsRecorder",
        "RulvarIdGenerator",
        "RunHandle",
        "RunOutcome",
        "StreamedRun",
        "WorkflowEvent",
        "__version__",
        "export_events",
        "export_run",
        "export_run_async",
        "follow_server_run",
        "handle_from_events",
        "handle_from_jsonl",
        "parse_event",
        "read_jsonl_events",
        "record_metrics",
        "to_otel",
    ],
    "rulvar_otel.errors": ERRORS,
    "rulvar_otel.testing": [
        "CountingIdGenerator",
        "MetricCapture",
        "MetricPoint",
        "SpanCapture",
        "SpanRecorder",
        "capture_export",
        "metric_points",
    ],
    "rulvar_otel.export": [
        "DEFAULT_EXPORT_TIMEOUT_S",
        "DEFAULT_MAX_QUEUE_SIZE",
        "DEFAULT_OTLP_JSON_PATH",
        "DEFAULT_PROMETHEUS_HOST",
        "DEFAULT_VALUE_LENGTH_LIMIT",
        "PROJECT_ATTRIBUTE",
        "SETTINGS",
        "DeliveryReport",
        "EnvSetting",
        "EventObserver",
        "ExportFailure",
        "ExportOptions",
        "ExportReport",
        "FailureKind",
        "MetricsPipeline",
        "MetricsSetup",
        "OtlpJsonFileExporter",
        "OtlpTarget",
        "PipelineFactory",
        "SettingKind",
        "SpanPipeline",
        "StreamedRun",
        "TargetReport",
        "TraceDelivery",
        "build_meter_provider",
        "build_metrics_delivery",
        "build_trace_delivery",
        "check_output_is_not_input",
        "export_run",
        "export_run_async",
        "iter_otlp_json_file",
        "parse_header",
        "parse_otlp_json_line",
        "resolve_otlp_target",
        "resolve_project",
        "resolve_service_name",
        "sdk_pipeline",
        "spans_to_otlp_json",
    ],
    "rulvar_otel.core": [
        "DEFAULT_SECRET_PATTERNS",
        "Drained",
        "FanOut",
        "Sink",
        "drain",
        "drain_events",
        "drain_run",
        "Interrupts",
        "Listeners",
        "RecordedRun",
        "SyncRunHandle",
        "ENVELOPE_FIELDS",
        "KNOWN_EVENT_TYPES",
        "MASKED_SECRET",
        "EventLike",
        "EventModel",
        "RecordedRunHandle",
        "RunHandle",
        "RunOutcome",
        "SecretMasker",
        "TerminalEnvelope",
        "UnknownEvent",
        "Usage",
        "WireError",
        "WorkflowEvent",
        "compile_secret_masker",
        "event_to_wire",
        "handle_from_events",
        "mask_secrets",
        "mask_secrets_deep",
        "outcome_from_json",
        "parse_event",
        "parse_terminal_envelope",
        "sanitize_terminal_text",
    ],
    "rulvar_otel.otel": [
        "DirectSpanSink",
        "MetricsAggregator",
        "SpanMapper",
        "create_mapper",
        "export_events",
        "grpc_span_exporter",
        "http_span_exporter",
        "to_otel",
    ],
    "rulvar_otel.otel.metrics": [
        "COLLECT_HOOK_NAME",
        "REGISTRY",
        "MetricDefinition",
        "MetricsRecorder",
        "SpanSource",
        "definition",
        "record_metrics",
    ],
    "rulvar_otel.sources": [
        "STDIN",
        "JsonlEventSource",
        "check_envelope",
        "handle_from_jsonl",
        "open_jsonl",
        "read_jsonl_events",
    ],
    "rulvar_otel.cli": ["app", "main"],
    "rulvar_otel.engine": [
        "AdapterError",
        "AgentFailedError",
        "AgentOptions",
        "AgentRecord",
        "BudgetExhaustedError",
        "ConcurrencyGate",
        "Context",
        "CostReport",
        "DeadlineExceededError",
        "Decision",
        "DeterminismError",
        "Engine",
        "EngineConfig",
        "EngineRunHandle",
        "ExposureDrainedError",
        "ExposureGate",
        "Fail",
        "Hang",
        "InMemoryJournalStore",
        "JournalEntry",
        "JournalError",
        "JournalKind",
        "JournalStore",
        "JsonlJournalStore",
        "Limits",
        "ModelAdapter",
        "ModelRequest",
        "ModelTurn",
        "OpenAICompatAdapter",
        "OrchestrateOptions",
        "Permissions",
        "Price",
        "PricingTable",
        "QuotaDecision",
        "QuotaExhaustedError",
        "QuotaLimiter",
        "ReplayMissError",
        "Reply",
        "ResolutionOutcome",
        "RetryPolicy",
        "Rule",
        "RunStatus",
        "SchemaValidationError",
        "ScriptTurn",
        "ScriptedAdapter",
        "ScriptedQuota",
        "Slice",
        "TokenCounter",
        "TokenWindowQuota",
        "Tool",
        "ToolCallRequest",
        "ToolCalls",
        "Workflow",
        "WorkflowError",
        "create_engine",
        "fold_cost_report",
        "orchestrate",
        "orchestration_workflow",
        "tool",
        "workflow",
    ],
    "rulvar_otel.engine.adapters": [],
    "rulvar_otel.masking": [
        "DEFAULT_SECRET_PATTERNS",
        "MASKED_SECRET",
        "MaskingLogFilter",
        "SecretMasker",
        "WORK_PER_BYTE",
        "compile_secret_masker",
        "default_masker",
        "mask_secrets",
        "mask_secrets_deep",
        "masked_logging",
        "output_masker",
        "redact_url",
        "redact_userinfo",
        "sanitize_and_mask",
        "sanitize_terminal_text",
        "set_output_masker",
    ],
}


def public_modules() -> list[str]:
    found = ["rulvar_otel"]
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if any(p.startswith("_") for p in parts[:-1]):
            continue
        if parts[-1] == "__init__" and 1 <= len(parts) - 1 <= 2:
            found.append(".".join(("rulvar_otel", *parts[:-1])))
        elif len(parts) == 1 and not parts[0].startswith("_"):
            found.append(f"rulvar_otel.{parts[0]}")
    return found


def test_every_public_module_is_pinned_and_every_pin_exists() -> None:
    assert sorted(public_modules()) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_all_is_exactly_the_pinned_list_and_every_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    assert sorted(exported) == sorted(PINNED[name])
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []


_PRIVATE_IMPORT = re.compile(r"\b(?:from|import)\s+(rulvar_otel(?:\.\w+)*\._\w+)")


def test_docs_import_only_public_modules() -> None:
    offenders: list[str] = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in _PRIVATE_IMPORT.finditer(doc.read_text(encoding="utf-8")):
            offenders.append(f"{doc.name}: {match.group(1)}")
    assert offenders == []
