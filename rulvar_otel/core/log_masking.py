"""Library log records on the terminal: sanitized, masked and bounded like everything else.

OpenTelemetry, gRPC and httpx log through :mod:`logging`; their text can quote a malformed header
(key and escape bytes included), an endpoint with credentials or a server's answer. A process that
prints them (the CLI) installs :func:`masked_logging`: one handler on the root logger whose filter
rewrites each record to one line, cleaned by the process's output masker, and also guards the
root's existing handlers. :func:`set_output_masker` makes a command's own masker (host patterns
included) the one every printed line uses; :func:`output_masker` reads it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, TextIO

from rulvar_otel.core.masking import SecretMasker, default_masker

__all__ = [
    "LOG_MESSAGE_LIMIT",
    "LOG_REPEAT_LIMIT",
    "MaskingLogFilter",
    "masked_logging",
    "output_masker",
    "set_output_masker",
]

# A record longer than this is cut (a 200 MB value must not become 200 MB of stderr).
LOG_MESSAGE_LIMIT: Final = 2000
# The same line is shown this many times; later copies are counted and summarised at the end.
LOG_REPEAT_LIMIT: Final = 1
_DISTINCT_LIMIT: Final = 1024

_output_masker: SecretMasker | None = None


def output_masker() -> SecretMasker:
    """The masker for text this process prints: the last one set, else the default set."""
    return _output_masker if _output_masker is not None else default_masker()


def set_output_masker(masker: SecretMasker | None) -> None:
    """Make ``masker`` (``None``: the default set) the one printed lines and log records use."""
    global _output_masker
    _output_masker = masker


class MaskingLogFilter(logging.Filter):
    """Rewrites a record's message (arguments, exception and stack text folded in) to one
    cleaned, bounded line, and never raises. A line repeated more than ``repeats`` times is
    counted instead of shown (:meth:`suppressed` lists the counts).

    Without a ``masker`` it uses :func:`output_masker` at each record.
    """

    def __init__(
        self,
        masker: SecretMasker | None = None,
        limit: int = LOG_MESSAGE_LIMIT,
        repeats: int = LOG_REPEAT_LIMIT,
    ) -> None:
        super().__init__()
        self.masker = masker
        self.limit = limit
        self.repeats = repeats
        self._seen: dict[str, int] = {}

    def suppressed(self) -> dict[str, int]:
        """Lines held back as repeats, with how many copies were not shown."""
        return {line: count - self.repeats for line, count in self._seen.items() if count > self.repeats}

    def filter(self, record: logging.LogRecord) -> bool:
        # One record passes every handler the filter guards: decide (and count) it once.
        decided = getattr(record, "_rulvar_otel_shown", None)
        if isinstance(decided, bool):
            return decided
        shown = self._rewrite(record)
        record._rulvar_otel_shown = shown
        return shown

    def _rewrite(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record whose arguments do not format
            message = f"{record.msg!s} (unformattable arguments)"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message = f"{message} ({type(exc).__name__}: {exc})"
        elif record.exc_text:
            message = f"{message} ({record.exc_text})"
        clean = (self.masker or output_masker()).clean(message)
        if len(clean) > self.limit:
            clean = clean[: self.limit] + f"... ({len(clean) - self.limit} more characters)"
        record.msg = clean
        record.args = None
        # Tracebacks and stacks carry values too: their text is folded (cleaned) into the message.
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        key = f"{record.name}: {clean}"
        count = self._seen.get(key, 0) + 1
        if count == 1 and len(self._seen) >= _DISTINCT_LIMIT:
            return True  # too many distinct lines to track: show it
        self._seen[key] = count
        return count <= self.repeats


class _StreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes to ``sys.stderr`` as it is at each record when no stream is
    given (a test harness swaps it)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream)
        self._fixed = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = self._fixed if self._fixed is not None else sys.stderr
        super().emit(record)


@contextmanager
def masked_logging(
    masker: SecretMasker | None = None, stream: TextIO | None = None, level: int = logging.WARNING
) -> Iterator[MaskingLogFilter]:
    """Route every log record that reaches the root logger through one masking filter.

    Adds a handler writing ``rulvar-otel: <logger>: <message>`` lines to ``stream`` (stderr by
    default) at ``level`` and up, and puts the filter on the root's existing handlers too; all of
    it is undone on exit. ``masker`` defaults to :func:`output_masker`, read at each record.
    """
    log_filter = MaskingLogFilter(masker)
    handler = _StreamHandler(stream)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("rulvar-otel: %(name)s: %(message)s"))
    handler.addFilter(log_filter)
    root = logging.getLogger()
    existing = list(root.handlers)
    for other in existing:
        other.addFilter(log_filter)
    root.addHandler(handler)
    try:
        yield log_filter
    finally:
        for line, count in log_filter.suppressed().items():
            handler.stream = stream if stream is not None else sys.stderr
            try:
                handler.stream.write(f"rulvar-otel: {line} (repeated {count} more times)\n")
                handler.flush()
            except (OSError, ValueError):
                pass
        root.removeHandler(handler)
        for other in existing:
            other.removeFilter(log_filter)
