"""The bundled core: the event model, run handles, masking and terminal safety, pure folds.

Nothing here imports OpenTelemetry, a network client or a CLI library (a test enforces it).
Every name loads on first use, so a wire-form path (a recorded stream to OTLP) never pays for
the event models it does not build.
"""

from typing import TYPE_CHECKING

from rulvar_otel._lazy import lazy_facade

if TYPE_CHECKING:
    from rulvar_otel.core.drain import Drained, FanOut, Interrupts, Sink, drain, drain_events, drain_run
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
    from rulvar_otel.core.run_source import Listeners, RecordedRun, SyncRunHandle

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY: dict[str, str] = {
    "Drained": "rulvar_otel.core.drain",
    "FanOut": "rulvar_otel.core.drain",
    "Sink": "rulvar_otel.core.drain",
    "drain": "rulvar_otel.core.drain",
    "drain_events": "rulvar_otel.core.drain",
    "drain_run": "rulvar_otel.core.drain",
    "Interrupts": "rulvar_otel.core.drain",
    "Listeners": "rulvar_otel.core.run_source",
    "RecordedRun": "rulvar_otel.core.run_source",
    "SyncRunHandle": "rulvar_otel.core.run_source",
    "TerminalEnvelope": "rulvar_otel.core.envelope",
    "parse_terminal_envelope": "rulvar_otel.core.envelope",
    "ENVELOPE_FIELDS": "rulvar_otel.core.events",
    "KNOWN_EVENT_TYPES": "rulvar_otel.core.events",
    "EventModel": "rulvar_otel.core.events",
    "UnknownEvent": "rulvar_otel.core.events",
    "Usage": "rulvar_otel.core.events",
    "WireError": "rulvar_otel.core.events",
    "WorkflowEvent": "rulvar_otel.core.events",
    "event_to_wire": "rulvar_otel.core.events",
    "parse_event": "rulvar_otel.core.events",
    "EventLike": "rulvar_otel.core.handle",
    "RecordedRunHandle": "rulvar_otel.core.handle",
    "RunHandle": "rulvar_otel.core.handle",
    "RunOutcome": "rulvar_otel.core.handle",
    "handle_from_events": "rulvar_otel.core.handle",
    "outcome_from_json": "rulvar_otel.core.handle",
    "DEFAULT_SECRET_PATTERNS": "rulvar_otel.core.masking",
    "MASKED_SECRET": "rulvar_otel.core.masking",
    "SecretMasker": "rulvar_otel.core.masking",
    "compile_secret_masker": "rulvar_otel.core.masking",
    "mask_secrets": "rulvar_otel.core.masking",
    "mask_secrets_deep": "rulvar_otel.core.masking",
    "sanitize_terminal_text": "rulvar_otel.core.masking",
}


__all__ = [
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
]

__getattr__, __dir__ = lazy_facade(__name__, _LAZY, globals(), __all__)
