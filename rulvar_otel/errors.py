"""The package's error tree.

Every error raised on purpose by ``rulvar_otel`` derives from :class:`RulvarOtelError`, so a host
can catch the whole family in one clause, or one branch precisely::

    RulvarOtelError
    ├── ConfigError(ValueError)         bad configuration: a redaction pattern, an envelope
    │   │                               that fails the runtime gate, a CLI option
    │   └── InvalidHeaderError          an export header whose name or value cannot be sent
    ├── EventError(ValueError)          one event that is not a WorkflowEvent
    │   └── StreamLineError             one line of a JSONL stream, with its line number
    ├── OutcomeError(ValueError)        a value that is not a RunOutcome; names the fields
    ├── SourceError(RuntimeError)       a source that cannot deliver (unreadable file, server
    │   ├── RunNotFoundError            refusing, unknown run)
    │   ├── ResponseLimitError          a server's response past its size or time bound
    │   └── JournalError                the engine's journal store cannot be read or written
    ├── RunRejectedError(RuntimeError)  a run's result rejected (unsettled, superseded, failed);
    │                                   carries the rejection's name and code
    ├── ExportError(RuntimeError)       the telemetry backend refused or was unreachable
    └── WorkflowError(RuntimeError)     what a bundled-engine workflow sees from a ``ctx`` call;
        │                               each carries its wire error (code, message, retryable)
        ├── AdapterError                a model provider's typed failure (``retryable`` decides)
        ├── AgentFailedError            an agent settled ``error``
        ├── BudgetExhaustedError        the run's USD ceiling refused: the run settles ``exhausted``
        │   └── ExposureDrainedError    the in-flight exposure cap can never fit the call
        ├── QuotaExhaustedError         the quota limiter denied more than ``max_denials`` times
        ├── SchemaValidationError       structured output stayed invalid
        ├── DeterminismError            a bare clock/random call under ``determinism_mode="error"``
        ├── DeadlineExceededError       a suspension's deadline passed before any answer
        └── ReplayMissError             a dry-run reached an operation the journal does not hold

``ConfigError`` and ``EventError`` are ``ValueError`` subclasses because both mean "the input is
wrong"; the two runtime errors mean "the world is wrong" and retrying can help.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

__all__ = [
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
    "RulvarOtelError",
    "ResponseLimitError",
    "RunNotFoundError",
    "RunRejectedError",
    "SchemaValidationError",
    "SourceError",
    "StreamLineError",
    "WorkflowError",
]


class RulvarOtelError(Exception):
    """Base of every error this package raises on purpose."""

    code: str = "rulvar_otel"


class ConfigError(RulvarOtelError, ValueError):
    """A configuration value (pattern, envelope, option) is invalid; the message names it."""

    code = "config"


class InvalidHeaderError(ConfigError):
    """An export header that no transport can send; the message never quotes its value.

    ``name`` is the part of the header's name that is valid (up to the first refused character).
    """

    code = "invalid_header"

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


class EventError(RulvarOtelError, ValueError):
    """A value is not a valid WorkflowEvent; the message names the field and the defect."""

    code = "event"


class OutcomeError(RulvarOtelError, ValueError):
    """A value is not a RunOutcome; ``fields`` names the wrong fields (never their values)."""

    code = "outcome"

    def __init__(self, message: str, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


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


class ResponseLimitError(SourceError):
    """A server's response passed its size bound (decompressed) or its time bound; nothing more was read."""

    code = "response_limit"


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


class JournalError(SourceError):
    """The bundled engine's journal store refused a read or a write; the message names the file."""

    code = "journal"


class WorkflowError(RulvarOtelError, RuntimeError):
    """Base of the errors a workflow sees from ``ctx`` calls; each carries a wire error."""

    code = "workflow"

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False, data: Any = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.retryable = retryable
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The WireError shape: ``code``, ``message``, ``retryable`` and ``data`` when present."""
        out: dict[str, Any] = {"code": self.code, "message": str(self), "retryable": self.retryable}
        if self.data is not None:
            out["data"] = self.data
        return out

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Self:
        """Rebuild the error a journaled terminal recorded (replay raises what the live run raised)."""
        return cls(
            str(wire.get("message", "the workflow operation failed")),
            code=str(wire.get("code", cls.code)),
            retryable=bool(wire.get("retryable", False)),
            data=wire.get("data"),
        )


class AdapterError(WorkflowError):
    """A typed wire error from a model adapter; ``retryable`` decides whether the engine retries."""

    code = "agent"


class AgentFailedError(WorkflowError):
    """An agent settled with status ``error``; its wire error is the agent's terminal error."""

    code = "agent"


class BudgetExhaustedError(WorkflowError):
    """The run's USD ceiling refused an admission or a call: the run settles ``exhausted``."""

    code = "budget_exhausted"


class ExposureDrainedError(BudgetExhaustedError):
    """The in-flight exposure cap refused a call with nothing in flight to wait for."""

    code = "exposure_drained"


class QuotaExhaustedError(WorkflowError):
    """The quota limiter denied a call more times than ``max_denials`` allows."""

    code = "quota_exhausted"


class SchemaValidationError(WorkflowError):
    """Structured output stayed invalid after every extract attempt."""

    code = "schema_invalid"


class DeterminismError(WorkflowError):
    """A bare clock or randomness call from workflow code under ``determinism_mode="error"``."""

    code = "determinism"


class DeadlineExceededError(WorkflowError):
    """A suspension's deadline passed before anyone resolved it (``await_external``, approvals)."""

    code = "deadline_exceeded"


class ReplayMissError(WorkflowError):
    """A dry-run reached an operation the journal does not hold (it makes no live call)."""

    code = "replay_miss"
