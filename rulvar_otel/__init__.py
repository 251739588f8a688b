"""rulvar_otel: OpenTelemetry traces and metrics for Rulvar runs.

The package's facade: exporting a run (``to_otel``, ``export_events``, ``export_run`` with
``ExportOptions`` and its ``ExportReport``), its metrics, run handles, sources and the error
tree. The rest lives in its own public module: ``rulvar_otel.engine`` (the bundled engine),
``rulvar_otel.masking`` (secret masking and terminal safety), ``rulvar_otel.testing`` (in-memory
spans and metrics for a host's tests), ``rulvar_otel.export`` (the export pipeline's parts),
``rulvar_otel.core`` (the event model and folds).

Errors are imported eagerly; everything else loads on first use, so ``import rulvar_otel``
stays free of OpenTelemetry, network and terminal libraries, and of the event models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rulvar_otel._lazy import lazy_facade
from rulvar_otel._version import __version__
from rulvar_otel.errors import (
    AdapterError,
    AgentFailedError,
    BudgetExhaustedError,
    ConfigError,
    DeadlineExceededError,
    DeterminismError,
    EventError,
    ExportError,
    ExposureDrainedError,
    InvalidHeaderError,
    JournalError,
    OutcomeError,
    QuotaExhaustedError,
    ReplayMissError,
    ResponseLimitError,
    RulvarOtelError,
    RunNotFoundError,
    RunRejectedError,
    SchemaValidationError,
    SourceError,
    StreamLineError,
    WorkflowError,
)

if TYPE_CHECKING:
    from rulvar_otel.core import (
        EventLike,
        RunHandle,
        RunOutcome,
        WorkflowEvent,
        handle_from_events,
        parse_event,
    )
    from rulvar_otel.export import (
        ExportFailure,
        ExportOptions,
        ExportReport,
        FailureKind,
        StreamedRun,
        export_run,
        export_run_async,
    )
    from rulvar_otel.otel import export_events, to_otel
    from rulvar_otel.otel.ids import RulvarIdGenerator
    from rulvar_otel.otel.metrics import MetricsRecorder, record_metrics
    from rulvar_otel.sources import handle_from_jsonl, read_jsonl_events
    from rulvar_otel.sources.sse import follow_server_run


# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY: dict[str, str] = {
    "EventLike": "rulvar_otel.core",
    "RunHandle": "rulvar_otel.core",
    "RunOutcome": "rulvar_otel.core",
    "WorkflowEvent": "rulvar_otel.core",
    "handle_from_events": "rulvar_otel.core",
    "parse_event": "rulvar_otel.core",
    "to_otel": "rulvar_otel.otel",
    "export_events": "rulvar_otel.otel",
    "export_run": "rulvar_otel.export",
    "export_run_async": "rulvar_otel.export",
    "ExportOptions": "rulvar_otel.export",
    "ExportReport": "rulvar_otel.export",
    "ExportFailure": "rulvar_otel.export",
    "FailureKind": "rulvar_otel.export",
    "StreamedRun": "rulvar_otel.export",
    "RulvarIdGenerator": "rulvar_otel.otel.ids",
    "record_metrics": "rulvar_otel.otel.metrics",
    "MetricsRecorder": "rulvar_otel.otel.metrics",
    "handle_from_jsonl": "rulvar_otel.sources",
    "read_jsonl_events": "rulvar_otel.sources",
    "follow_server_run": "rulvar_otel.sources.sse",
}


__all__ = [
    "AdapterError",
    "AgentFailedError",
    "BudgetExhaustedError",
    "ConfigError",
    "DeadlineExceededError",
    "DeterminismError",
    "EventError",
    "EventLike",
    "ExportError",
    "ExportFailure",
    "ExportOptions",
    "ExportReport",
    "InvalidHeaderError",
    "ExposureDrainedError",
    "FailureKind",
    "JournalError",
    "MetricsRecorder",
    "OutcomeError",
    "QuotaExhaustedError",
    "ReplayMissError",
    "RulvarIdGenerator",
    "RulvarOtelError",
    "RunHandle",
    "ResponseLimitError",
    "RunNotFoundError",
    "RunOutcome",
    "RunRejectedError",
    "SchemaValidationError",
    "SourceError",
    "StreamLineError",
    "StreamedRun",
    "WorkflowError",
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
]

__getattr__, __dir__ = lazy_facade(__name__, _LAZY, globals(), __all__)
