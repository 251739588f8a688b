"""Span identity handed from the span mapper to an id generator.

The mapper sets :data:`SPAN_IDENTITY` to ``(run_id, span_key)`` right before each
``tracer.start_span``, so an id generator can derive stable ids from it.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["SPAN_IDENTITY"]

SPAN_IDENTITY: ContextVar[tuple[str, str] | None] = ContextVar("rulvar_otel_span_identity", default=None)
