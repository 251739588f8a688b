"""rulvar_otel: OpenTelemetry traces and metrics for Rulvar runs.

The one public facade. The core (event model, masking, handles, folds) is imported eagerly and
loads no OpenTelemetry; the exporter, metrics, sources and engine load on first use, so
``import rulvar_otel.core`` stays free of OpenTelemetry, network and terminal libraries.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rulvar_otel.core import (
    MASKED_SECRET,
    EventLike,
    RunHandle,
    RunOutcome,
    TerminalEnvelope,
    WorkflowEvent,
    compile_secret_masker,
    handle_from_events,
    mask_secrets,
    mask_secrets_deep,
    parse_event,
    parse_terminal_envelope,
    sanitize_terminal_text,
)
from rulvar_otel.errors import (
    ConfigError,
    EventError,
    ExportError,
    RulvarOtelError,
    RunNotFoundError,
    RunRejectedError,
    SourceError,
    StreamLineError,
)

if TYPE_CHECKING:
    from rulvar_otel.core.progress import render_progress
    from rulvar_otel.core.reducers import reduce_critical_path, reduce_invocation_table
    from rulvar_otel.engine import create_engine, tool, workflow
    from rulvar_otel.otel import SpanMapper, create_mapper, export_events, to_otel
    from rulvar_otel.otel.ids import RulvarIdGenerator
    from rulvar_otel.otel.metrics import MetricsRecorder, record_metrics
    from rulvar_otel.sources import handle_from_jsonl, read_jsonl_events
    from rulvar_otel.sources.sse import follow_server_run

__version__ = "0.1.0"

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY: dict[str, str] = {
    "to_otel": "rulvar_otel.otel",
    "export_events": "rulvar_otel.otel",
    "create_mapper": "rulvar_otel.otel",
    "SpanMapper": "rulvar_otel.otel",
    "RulvarIdGenerator": "rulvar_otel.otel.ids",
    "record_metrics": "rulvar_otel.otel.metrics",
    "MetricsRecorder": "rulvar_otel.otel.metrics",
    "handle_from_jsonl": "rulvar_otel.sources",
    "read_jsonl_events": "rulvar_otel.sources",
    "follow_server_run": "rulvar_otel.sources.sse",
    "reduce_invocation_table": "rulvar_otel.core.reducers",
    "reduce_critical_path": "rulvar_otel.core.reducers",
    "render_progress": "rulvar_otel.core.progress",
    "create_engine": "rulvar_otel.engine",
    "workflow": "rulvar_otel.engine",
    "tool": "rulvar_otel.engine",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rulvar_otel' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "MASKED_SECRET",
    "ConfigError",
    "EventError",
    "EventLike",
    "ExportError",
    "MetricsRecorder",
    "RulvarIdGenerator",
    "RulvarOtelError",
    "RunHandle",
    "RunNotFoundError",
    "RunOutcome",
    "RunRejectedError",
    "SourceError",
    "SpanMapper",
    "StreamLineError",
    "TerminalEnvelope",
    "WorkflowEvent",
    "__version__",
    "compile_secret_masker",
    "create_engine",
    "create_mapper",
    "export_events",
    "follow_server_run",
    "handle_from_events",
    "handle_from_jsonl",
    "mask_secrets",
    "mask_secrets_deep",
    "parse_event",
    "parse_terminal_envelope",
    "read_jsonl_events",
    "record_metrics",
    "reduce_critical_path",
    "reduce_invocation_table",
    "render_progress",
    "sanitize_terminal_text",
    "to_otel",
    "tool",
    "workflow",
]
