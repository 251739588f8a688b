"""The package's error tree.

Every error raised on purpose by ``rulvar_otel`` derives from :class:`RulvarOtelError`, so a host
can catch the whole family in one clause, or one branch precisely::

    RulvarOtelError
    ├── ConfigError(ValueError)         bad configuration: a redaction pattern, an envelope
    │                                   that fails the runtime gate, a CLI option
    ├── EventError(ValueError)          one event that is not a WorkflowEvent
    │   └── StreamLineError             one line of a JSONL stream, with its line number
    ├── SourceError(RuntimeError)       a source that cannot deliver (unreadable file, server
    │   └── RunNotFoundError            refusing, unknown run)
    ├── RunRejectedError(RuntimeError)  a run's result rejected (unsettled, superseded, failed);
    │                                   carries the rejection's name and code
    └── ExportError(RuntimeError)       the telemetry backend refused or was unreachable

``ConfigError`` and ``EventError`` are ``ValueError`` subclasses because both mean "the input is
wrong"; the two runtime errors mean "the world is wrong" and retrying can help.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EventError",
    "ExportError",
    "RulvarOtelError",
    "RunNotFoundError",
    "RunRejectedError",
    "SourceError",
    "StreamLineError",
]


class RulvarOtelError(Exception):
    """Base of every error this package raises on purpose."""

    code: str = "rulvar_otel"


class ConfigError(RulvarOtelError, ValueError):
    """A configuration value (pattern, envelope, option) is invalid; the message names it."""

    code = "config"


class EventError(RulvarOtelError, ValueError):
    """A value is not a valid WorkflowEvent; the message names the field and the defect."""

    code = "event"


class StreamLineError(EventError):
    """One line of a JSONL stream could not be read as an event."""

    code = "stream_line"

    def __init__(self, line_number: int, reason: str, source: str = "<stream>") -> None:
        self.line_number = line_number
        self.reason = reason
        self.source = source
        super().__init__(f"{source}:{line_number}: {reason}")


class SourceError(RulvarOtelError, RuntimeError):
    """A source of events (file, server) cannot deliver."""

    code = "source"


class RunNotFoundError(SourceError):
    """The server does not know the requested run."""

    code = "run_not_found"


class RunRejectedError(RulvarOtelError, RuntimeError):
    """A run's result rejected instead of resolving with an outcome."""

    code = "run_rejected"

    def __init__(self, message: str, *, name: str = "Error", error_code: str | None = None) -> None:
        self.name = name
        self.error_code = error_code
        super().__init__(message)


class ExportError(RulvarOtelError, RuntimeError):
    """Spans or metrics could not be delivered to the configured backend."""

    code = "export"
