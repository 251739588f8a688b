"""``to_otel`` and ``export_events``: a run's event stream in, OTel spans (and metrics) out.

What each event becomes is the contract in ``docs/otel-mapping.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.metrics import Meter
from opentelemetry.trace import Tracer

from rulvar_otel.core.events import EventModel, event_to_wire
from rulvar_otel.core.handle import EventLike, RunHandle, RunOutcome, outcome_from_run_end
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._mapper import EventObserver, SpanMapper

__all__ = ["create_mapper", "export_events", "to_otel"]

_log = logging.getLogger("rulvar_otel")


def _wire(event: EventLike) -> Mapping[str, Any]:
    if isinstance(event, Mapping):
        return event
    if isinstance(event, EventModel):
        return event_to_wire(event)
    return {}


def _conventions(conventions: Iterable[str] | None) -> frozenset[str]:
    """The optional conventions asked for; ``None`` means the default set (OpenInference on)."""
    if conventions is None:
        return sc.DEFAULT_CONVENTIONS
    if isinstance(conventions, str):
        conventions = (conventions,)
    chosen = frozenset(conventions)
    unknown = sorted(chosen - sc.CONVENTIONS)
    if unknown:
        raise ConfigError(
            f"unknown convention(s) {', '.join(map(repr, unknown))}; known: "
            f"{', '.join(sorted(sc.CONVENTIONS))} (pass conventions=() for none)"
        )
    return chosen


def create_mapper(
    tracer: Tracer,
    *,
    patterns: Sequence[str] | None = None,
    meter: Meter | None = None,
    run_id: str | None = None,
    masker: SecretMasker | None = None,
    conventions: Iterable[str] | None = None,
) -> SpanMapper:
    """A :class:`SpanMapper` (plus a metrics recorder on ``meter``) for incremental feeding.

    ``conventions`` picks the optional attribute sets beside the OpenTelemetry ones: ``None``
    (the default) means ``{"openinference"}``; ``()`` switches them off. Raises
    :class:`~rulvar_otel.errors.ConfigError` for a bad pattern or an unknown convention before any
    span exists.
    """
    chosen = _conventions(conventions)
    masker = masker if masker is not None else compile_secret_masker(patterns)
    observers: list[EventObserver] = []
    if meter is not None:
        from rulvar_otel.otel.metrics import MetricsRecorder

        observers.append(MetricsRecorder(meter, masker))
    return SpanMapper(tracer, masker, run_id=run_id, observers=observers, conventions=chosen)


def export_events(
    events: Iterable[EventLike],
    tracer: Tracer,
    *,
    outcome: RunOutcome | BaseException | None = None,
    patterns: Sequence[str] | None = None,
    meter: Meter | None = None,
    run_id: str | None = None,
    conventions: Iterable[str] | None = None,
) -> int:
    """Map a recorded stream onto spans (and metrics when ``meter`` is given) in one pass.

    ``outcome`` is how the run settled (an exception for a rejected result); without one, the
    run counts as ok exactly when its ``run:end`` says ``ok`` and is settled. ``conventions`` as
    for :func:`create_mapper` (``()`` drops ``openinference.span.kind``). Returns the number of
    spans created. Never raises for a strange event; a bad ``patterns`` or ``conventions``
    raises ``ConfigError`` before any span exists.
    """
    mapper = create_mapper(tracer, patterns=patterns, meter=meter, run_id=run_id, conventions=conventions)
    feed = mapper.feed
    for event in events:
        # Parsed JSON is a plain dict: skip the Mapping ABC check on the hot path.
        feed(event if type(event) is dict else _wire(event))
    if outcome is None:
        outcome = outcome_from_run_end(mapper.last_run_end)
    return mapper.finish(outcome)


async def to_otel(
    run: RunHandle,
    tracer: Tracer,
    *,
    patterns: Sequence[str] | None = None,
    meter: Meter | None = None,
    conventions: Iterable[str] | None = None,
) -> int:
    """Drain ``run.events`` into spans (and metrics on ``meter``), then settle on ``run.result``.

    Works live (spans start and end as events arrive) and for recorded runs. A rejecting result
    never fails the export: it only refuses green to spans that had to be ended without a closer.
    ``conventions`` as for :func:`create_mapper`. Returns the number of spans created.
    """
    chosen = _conventions(conventions)
    run_id: str | None
    try:
        run_id = run.run_id or None
    except Exception:  # noqa: BLE001 - a handle that cannot name its run still exports
        run_id = None
    mapper = create_mapper(tracer, patterns=patterns, meter=meter, run_id=run_id, conventions=chosen)
    try:
        async for event in run.events:
            mapper.feed(_wire(event))
    except Exception as exc:  # noqa: BLE001 - a broken source ends the stream, not the host
        _log.warning("the event stream failed: %s", type(exc).__name__)
    outcome: RunOutcome | BaseException
    try:
        outcome = await run.result
    except BaseException as exc:
        if not isinstance(exc, Exception):
            raise
        outcome = exc
    return mapper.finish(outcome)
