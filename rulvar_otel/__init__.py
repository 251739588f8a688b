"""rulvar_otel: OpenTelemetry traces and metrics for Rulvar runs."""

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

__version__ = "0.1.0"

__all__ = [
    "MASKED_SECRET",
    "ConfigError",
    "EventError",
    "EventLike",
    "ExportError",
    "RulvarOtelError",
    "RunHandle",
    "RunNotFoundError",
    "RunOutcome",
    "RunRejectedError",
    "SourceError",
    "StreamLineError",
    "TerminalEnvelope",
    "WorkflowEvent",
    "__version__",
    "compile_secret_masker",
    "handle_from_events",
    "mask_secrets",
    "mask_secrets_deep",
    "parse_event",
    "parse_terminal_envelope",
    "sanitize_terminal_text",
]
