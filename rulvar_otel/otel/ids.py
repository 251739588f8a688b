"""Deterministic trace and span ids, so re-exporting a run is idempotent.

The span mapper sets :data:`SPAN_IDENTITY` to ``(run_id, span_key)`` right before each
``tracer.start_span``. :class:`RulvarIdGenerator`, installed on the host's ``TracerProvider``,
derives the trace id from the run id and each span id from the run id and the span key, so
exporting the same run twice (a retry after a collector outage, a tail reconnect, a backfill)
produces the same ids and backends deduplicate. Spans started outside the mapper (the variable
unset) get random ids as usual.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from typing import Final

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import INVALID_SPAN_ID, INVALID_TRACE_ID

__all__ = ["SPAN_IDENTITY", "RulvarIdGenerator", "derive_span_id", "derive_trace_id"]

SPAN_IDENTITY: ContextVar[tuple[str, str] | None] = ContextVar("rulvar_otel_span_identity", default=None)

# Domain separation: a trace id and a span id never come from the same hash input.
_TRACE_DOMAIN: Final = b"rulvar-otel/trace-id/v1\x00"
_SPAN_DOMAIN: Final = b"rulvar-otel/span-id/v1\x00"


def _digest_int(domain: bytes, *parts: str, size: int) -> int:
    h = hashlib.sha256(domain)
    for part in parts:
        encoded = part.encode("utf-8")
        # Length-prefixed, so ("ab", "c") and ("a", "bc") never collide.
        h.update(len(encoded).to_bytes(8, "big"))
        h.update(encoded)
    value = int.from_bytes(h.digest()[:size], "big")
    # All-zero ids are invalid in W3C trace context; the odds are 2**-64 at worst, the fix is free.
    return value or 1


def derive_trace_id(run_id: str) -> int:
    """The 128-bit trace id of a run."""
    trace_id = _digest_int(_TRACE_DOMAIN, run_id, size=16)
    return trace_id if trace_id != INVALID_TRACE_ID else 1


def derive_span_id(run_id: str, span_key: str) -> int:
    """The 64-bit span id of one span of a run (``span_key`` as the mapper names it)."""
    span_id = _digest_int(_SPAN_DOMAIN, run_id, span_key, size=8)
    return span_id if span_id != INVALID_SPAN_ID else 1


class RulvarIdGenerator(IdGenerator):
    """An ``IdGenerator`` deriving ids from :data:`SPAN_IDENTITY`; random ids when it is unset.

    Opt in on the host's provider: ``TracerProvider(id_generator=RulvarIdGenerator())``
    (the CLI: ``--deterministic-ids``).
    """

    def __init__(self, fallback: IdGenerator | None = None) -> None:
        self._fallback = fallback or RandomIdGenerator()

    def generate_span_id(self) -> int:
        identity = SPAN_IDENTITY.get()
        if identity is None:
            return self._fallback.generate_span_id()
        return derive_span_id(*identity)

    def generate_trace_id(self) -> int:
        identity = SPAN_IDENTITY.get()
        if identity is None:
            return self._fallback.generate_trace_id()
        return derive_trace_id(identity[0])
