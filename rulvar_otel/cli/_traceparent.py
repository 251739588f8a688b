"""W3C trace context on the command line: ``TRACEPARENT``/``TRACESTATE`` and ``--traceparent``.

A shell pipeline or CI job that already has a trace hands it over the way the OpenTelemetry
environment-variable carrier does (``TRACEPARENT``, ``TRACESTATE``), or with ``--traceparent``
(which wins over the variable). ``--parent`` picks what the run does with it: ``ambient`` (the
default: the run's spans join that trace under that span), ``link`` (its own trace, linked both
ways) or ``none`` (ignore it). A malformed value is refused, naming where it came from; it is
never silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from opentelemetry.context import Context
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from rulvar_otel.errors import ConfigError
from rulvar_otel.otel._parentage import PARENT_MODES, Parentage, resolve_parent

__all__ = ["TRACEPARENT_VARIABLE", "TRACESTATE_VARIABLE", "parentage_from_cli"]

TRACEPARENT_VARIABLE: Final = "TRACEPARENT"
TRACESTATE_VARIABLE: Final = "TRACESTATE"
# version 00: 2 hex version, 32 hex trace id, 16 hex span id, 2 hex flags (lower case, W3C).
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_SHOWN_CHARS: Final = 64
_WANT: Final = "want 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, ids not all zero"


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "...")


def _extract(traceparent: str, tracestate: str | None, source: str) -> Context:
    text = traceparent.strip()
    carrier = {"traceparent": text}
    if tracestate:
        carrier["tracestate"] = tracestate.strip()
    context = TraceContextTextMapPropagator().extract(carrier)
    if not _TRACEPARENT.fullmatch(text) or not get_current_span(context).get_span_context().is_valid:
        raise ConfigError(f"{source} {_shown(traceparent)} is not a W3C traceparent ({_WANT})")
    return context


def parentage_from_cli(parent: str, traceparent: str | None, environ: Mapping[str, str]) -> str | Parentage:
    """The ``ExportOptions.parent`` of a command: a mode, or the trace context it was handed."""
    if parent not in PARENT_MODES:
        raise ConfigError(f"--parent must be one of {', '.join(PARENT_MODES)} (got {parent!r})")
    if traceparent is not None:
        value, source = traceparent, "--traceparent"
    else:
        value, source = environ.get(TRACEPARENT_VARIABLE, ""), TRACEPARENT_VARIABLE
        if not value.strip():
            return parent  # unset (or set empty, as CI runners do): nothing handed over
    context = _extract(value, environ.get(TRACESTATE_VARIABLE), source)
    if parent == "none":
        return parent
    return resolve_parent(parent, context)
