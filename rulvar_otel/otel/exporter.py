"""``to_otel`` and ``export_events``: a run's event stream in, OTel spans (and metrics) out.

What each event becomes is the contract in ``docs/otel-mapping.md``. Both drain the run through
:mod:`rulvar_otel.core.drain` (one place reads the source and settles the outcome), into a
:class:`SpanMapper` and, with a ``meter``, a metrics recorder beside it. Spans go either through
the host's ``tracer`` or, with ``exporter=``, straight to SDK span exporters on the direct path
(:mod:`rulvar_otel.otel.direct`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from opentelemetry.context import Context
from opentelemetry.metrics import Meter
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Tracer

from rulvar_otel.core.drain import Sink, drain, drain_events
from rulvar_otel.core.handle import EventLike, RunHandle, RunOutcome
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.errors import ConfigError
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel._parentage import Parentage, resolve_parent

__all__ = ["create_mapper", "export_events", "to_otel"]

_END_BATCH: Final = 64  # span ends export_events hands to the tracer in one loop (see _deferred)


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
    run_id: str | None = None,
    masker: SecretMasker | None = None,
    conventions: Iterable[str] | None = None,
    parent: str | Context | Parentage = "ambient",
) -> SpanMapper:
    """A :class:`SpanMapper` for incremental feeding (a :class:`~rulvar_otel.core.drain.Sink`).

    ``conventions`` picks the optional attribute sets beside the OpenTelemetry ones: ``None``
    (the default) means ``{"openinference"}``; ``()`` switches them off. ``parent`` is
    ``"ambient"`` (the default: the run's root span is a child of the current span, when there
    is one), ``"link"``, ``"none"`` or a ``Context`` (docs/otel-mapping.md#parentage); it is
    resolved now. Raises :class:`~rulvar_otel.errors.ConfigError` for a bad pattern, an unknown
    convention or parent mode before any span exists. Metrics are a sink of their own
    (``MetricsRecorder``), fed by the same drain.
    """
    chosen = _conventions(conventions)
    parentage = resolve_parent(parent)
    masker = masker if masker is not None else compile_secret_masker(patterns)
    return SpanMapper(tracer, masker, run_id=run_id, conventions=chosen, parentage=parentage)


def _sinks(
    tracer: Tracer,
    masker: SecretMasker,
    meter: Meter | None,
    run_id: str | None,
    conventions: frozenset[str],
    parentage: Parentage,
    end_batch: int = 0,
) -> tuple[SpanMapper, list[Sink]]:
    mapper = SpanMapper(
        tracer, masker, run_id=run_id, conventions=conventions, parentage=parentage, end_batch=end_batch
    )
    sinks: list[Sink] = [mapper]
    if meter is not None:
        from rulvar_otel.otel.metrics import MetricsRecorder

        sinks.append(MetricsRecorder(meter, masker, spans=mapper))
    return mapper, sinks


def export_events(
    events: Iterable[EventLike],
    tracer: Tracer | None = None,
    *,
    exporter: SpanExporter | Sequence[SpanExporter] | None = None,
    outcome: RunOutcome | BaseException | None = None,
    patterns: Sequence[str] | None = None,
    meter: Meter | None = None,
    run_id: str | None = None,
    conventions: Iterable[str] | None = None,
    parent: str | Context = "ambient",
) -> int:
    """Map a recorded stream onto spans (and metrics when ``meter`` is given) in one pass.

    Give exactly one of ``tracer`` (the spans go through the host's provider, samplers and
    processors) and ``exporter`` (the direct path: finished spans go straight to one or more SDK
    ``SpanExporter`` objects, in batches, without a provider; every span is exported before this
    returns). ``outcome`` is how the run settled (an exception for a rejected result); without
    one, the run counts as ok exactly when its ``run:end`` says ``ok`` and is settled.
    ``conventions`` and ``parent`` as for :func:`create_mapper` (``()`` drops
    ``openinference.span.kind``; ``parent`` is resolved in the caller's context, now). Returns
    the number of spans created. Never raises for a strange event; a bad ``patterns``,
    ``conventions`` or ``parent`` raises ``ConfigError`` before any span exists, and an exception
    raised by ``events`` itself is raised again once every span has ended.
    """
    if (tracer is None) == (exporter is None):
        raise TypeError("export_events needs exactly one of tracer= and exporter=")
    chosen = _conventions(conventions)
    parentage = resolve_parent(parent)
    masker = compile_secret_masker(patterns)
    if exporter is not None:
        from rulvar_otel.otel.direct import export_events_direct

        return export_events_direct(
            events,
            exporter,
            outcome=outcome,
            masker=masker,
            run_id=run_id,
            conventions=chosen,
            parentage=parentage,
            meter=meter,
        )
    assert tracer is not None
    # A recorded stream: no one waits for a tool's span before its batch is made (see _deferred).
    # With a meter, a leaf starts when a histogram first reads one of its events (its exemplar).
    mapper, sinks = _sinks(tracer, masker, meter, run_id, chosen, parentage, _END_BATCH)
    drained = drain_events(events, *sinks, outcome=outcome)
    if drained.source_error is not None:
        raise drained.source_error
    return mapper.span_count


async def to_otel(
    run: RunHandle,
    tracer: Tracer | None = None,
    *,
    exporter: SpanExporter | Sequence[SpanExporter] | None = None,
    patterns: Sequence[str] | None = None,
    meter: Meter | None = None,
    conventions: Iterable[str] | None = None,
    parent: str | Context = "ambient",
) -> int:
    """Drain ``run.events`` into spans (and metrics on ``meter``), then settle on ``run.result``.

    Works live (spans start and end as events arrive) and for recorded runs. A rejecting result
    never fails the export: it only refuses green to spans that had to be ended without a closer.
    As for :func:`export_events`, give ``tracer`` (the host's provider) or ``exporter`` (the
    direct path: each span goes out in a batch soon after it ends; all of them before this
    returns); ``conventions`` as for :func:`create_mapper`. ``parent`` as there: in
    ``"ambient"`` and ``"link"`` modes the caller is the context the bundled engine captured when
    ``engine.run(...)`` was called (``run.trace_context``), else the context ``to_otel`` is called
    in. Returns the number of spans created.
    """
    if (tracer is None) == (exporter is None):
        raise TypeError("to_otel needs exactly one of tracer= and exporter=")
    chosen = _conventions(conventions)
    captured = getattr(run, "trace_context", None)
    parentage = resolve_parent(parent, captured if isinstance(captured, Context) else None)
    masker = compile_secret_masker(patterns)
    run_id: str | None
    try:
        run_id = run.run_id or None
    except Exception:  # noqa: BLE001 - a handle that cannot name its run still exports
        run_id = None
    if exporter is not None:
        from rulvar_otel.otel.direct import DirectSpanSink

        direct = DirectSpanSink([exporter] if isinstance(exporter, SpanExporter) else list(exporter))
        try:
            mapper, sinks = _sinks(direct.tracer(), masker, meter, run_id, chosen, parentage)
            await drain(run, *sinks)
        finally:
            # Flushing waits for the exporters (bounded by their timeouts): off the event loop.
            import asyncio  # running in an event loop: loaded already

            await asyncio.to_thread(direct.shutdown)
        return mapper.span_count
    assert tracer is not None
    mapper, sinks = _sinks(tracer, masker, meter, run_id, chosen, parentage)
    await drain(run, *sinks)
    return mapper.span_count
