"""The bundled core: the event model, run handles, masking and terminal safety, pure folds.

Nothing here imports OpenTelemetry, a network client or a CLI library (a test enforces it).
"""

from rulvar_otel.core.drain import Drained, FanOut, Sink, drain, drain_events
from rulvar_otel.core.envelope import TerminalEnvelope, parse_terminal_envelope
from rulvar_otel.core.events import (
    ENVELOPE_FIELDS,
    KNOWN_EVENT_TYPES,
    EventModel,
    UnknownEvent,
    Usage,
    WireError,
    WorkflowEvent,
    event_to_wire,
    parse_event,
)
from rulvar_otel.core.handle import (
    EventLike,
    RecordedRunHandle,
    RunHandle,
    RunOutcome,
    handle_from_events,
    outcome_from_json,
)
from rulvar_otel.core.masking import (
    DEFAULT_SECRET_PATTERNS,
    MASKED_SECRET,
    SecretMasker,
    compile_secret_masker,
    mask_secrets,
    mask_secrets_deep,
    sanitize_terminal_text,
)

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "Drained",
    "FanOut",
    "Sink",
    "drain",
    "drain_events",
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
]
