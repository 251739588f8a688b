"""What the OpenTelemetry SDK logs during an export: captured, counted, and never printed raw.

The SDK and its exporters report through :mod:`logging` ("Queue full, dropping Span.", "Failed
to export traces to ...", a malformed header with its raw text). During an export those records
are kept here instead of reaching stderr: the delivery report quotes the last exporter error,
and the export report lists the rest as notes, cleaned (masked, stripped of control sequences,
userinfo redacted, bounded) and counted rather than repeated.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Final

from rulvar_otel.core.masking import SecretMasker

__all__ = ["MAX_MESSAGE_CHARS", "SdkLogCapture", "clean_text"]

# A message longer than this is cut (a span name or a response body can be megabytes).
MAX_MESSAGE_CHARS: Final = 1000
_MAX_DISTINCT: Final = 50
_LOGGER: Final = "opentelemetry"


def clean_text(text: str, masker: SecretMasker, *, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Sanitized, masked, userinfo redacted (:meth:`SecretMasker.clean`), at most ``limit`` characters."""
    if len(text) > 4 * limit:
        text = text[: 4 * limit]
    cleaned = masker.clean(text)
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1] + "…"
    return cleaned


class SdkLogCapture(logging.Handler):
    """Installed on the ``opentelemetry`` logger for the duration of a ``with`` block."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last_error: str | None = None
        self.last_warning: str | None = None
        self.counts: Counter[str] = Counter()
        self._logger = logging.getLogger(_LOGGER)
        self._saved_propagate = True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log record must not break export
            message = str(record.msg)
        message = message.strip().splitlines()[0] if message.strip() else record.name
        if record.levelno >= logging.ERROR:
            self.last_error = message
        elif "Transient error" in message:
            self.last_warning = message
        if message in self.counts or len(self.counts) < _MAX_DISTINCT:
            self.counts[message] += 1

    def describe(self) -> str | None:
        """The exporters' last error, with the last transient warning beside it."""
        if self.last_error and self.last_warning:
            return f"{self.last_error} (last attempt: {self.last_warning})"
        return self.last_error or self.last_warning

    def notes(self, clean: Callable[[str], str], *, quoted: bool = False) -> list[str]:
        """One cleaned line per distinct message, with its count.

        Retry chatter is left out; with ``quoted`` so is the last error (a failure quotes it).
        """
        out: list[str] = []
        for message, count in self.counts.items():
            if "Transient error" in message or (quoted and message == self.last_error):
                continue
            suffix = f" ({count} times)" if count > 1 else ""
            out.append(f"OpenTelemetry SDK: {clean(message)}{suffix}")
        return out

    def __enter__(self) -> SdkLogCapture:
        self._saved_propagate = self._logger.propagate
        self._logger.addHandler(self)
        self._logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate = self._saved_propagate
