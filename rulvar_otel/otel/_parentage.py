"""Parentage from the host: where a run's root span starts, and the links that tie it to its caller.

``parent=`` on ``to_otel``, ``export_events`` and ``ExportOptions`` is resolved here, once, when
the export begins (docs/otel-mapping.md#parentage):

- ``"ambient"`` (the default): the run's root span is a child of the caller's span (the current
  context's, or the context the engine captured when ``engine.run`` was called), so the run's
  spans take the caller's trace id; with no valid span there, the run starts a trace of its own.
- ``"link"``: the run keeps its own trace; its root span links to the caller's span, and a
  zero-length ``rulvar run <id>`` span in the caller's trace links back to it.
- ``"none"``: always a trace of its own.
- an OpenTelemetry ``Context``: as ``"ambient"``, with that context instead of the current one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Tracer

from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.ids import SPAN_IDENTITY

__all__ = ["PARENT_MODES", "ParentMode", "Parentage", "resolve_parent", "start_back_link"]

ParentMode = Literal["ambient", "link", "none"]
PARENT_MODES: Final[tuple[str, ...]] = ("ambient", "link", "none")
_log = logging.getLogger("rulvar_otel")
# The span key of the back-link span under RulvarIdGenerator (never a mapper key: no colon form).
_BACK_LINK_KEY: Final = "host-link"


@dataclass(frozen=True, slots=True)
class Parentage:
    """The resolved ``parent=``: the context the root span starts in, and the span it links to."""

    context: Context | None = None  # None: the run's root starts a trace of its own
    link: SpanContext | None = None  # "link" mode: the caller's span

    @property
    def root_context(self) -> Context:
        return self.context if self.context is not None else Context()


NO_PARENT: Final = Parentage()


def resolve_parent(parent: str | Context | Parentage | None, captured: Context | None = None) -> Parentage:
    """Resolve ``parent=`` (see the module docstring); ``captured`` stands in for the current context.

    A :class:`Parentage` (resolved already) is returned as it is.

    Raises :class:`~rulvar_otel.errors.ConfigError` for a mode that is not one of
    :data:`PARENT_MODES` (or a value that is neither a mode nor a ``Context``).
    """
    if parent is None:
        parent = "ambient"
    if isinstance(parent, Parentage):
        return parent
    if isinstance(parent, Context):
        source: Context = parent
        mode = "ambient"
    elif isinstance(parent, str) and parent in PARENT_MODES:
        if parent == "none":
            return NO_PARENT
        source = captured if captured is not None else otel_context.get_current()
        mode = parent
    else:
        shown = parent if isinstance(parent, str) else type(parent).__name__
        raise ConfigError(f"parent must be one of {', '.join(PARENT_MODES)} or a Context (got {shown!r})")
    caller = trace.get_current_span(source).get_span_context()
    if not caller.is_valid:
        return NO_PARENT
    if mode == "link":
        return Parentage(link=caller)
    # Only the span goes along: the host's other context entries are not the run's.
    return Parentage(context=trace.set_span_in_context(NonRecordingSpan(caller), Context()))


def start_back_link(
    tracer: Tracer,
    caller: SpanContext,
    run_span: SpanContext,
    masked_run_id: str | None,
    run_id: str,
    deterministic: bool,
    ns: int,
) -> bool:
    """The zero-length ``rulvar run <id>`` span in the caller's trace, linking to the run's root.

    Returns whether it was made; never raises (a failed back link costs the run none of its spans).
    """
    name = "rulvar run " + (masked_run_id or "")
    attributes = {sc.RUN_ID: masked_run_id} if masked_run_id is not None else {}
    context = trace.set_span_in_context(NonRecordingSpan(caller), Context())
    token = SPAN_IDENTITY.set((run_id, _BACK_LINK_KEY)) if deterministic else None
    try:
        span = tracer.start_span(
            name.rstrip(), context=context, attributes=attributes, links=[Link(run_span)], start_time=ns
        )
        span.end(end_time=ns)
    except Exception:  # noqa: BLE001
        _log.debug("the back link to the caller's trace failed", exc_info=True)
        return False
    finally:
        if token is not None:
            SPAN_IDENTITY.reset(token)
    return True
