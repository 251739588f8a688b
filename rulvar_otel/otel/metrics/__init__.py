"""OpenTelemetry metrics from a run's event stream: the same fold that feeds the spans.

:class:`MetricsRecorder` is fed one wire-form event at a time (``observe``) and told when the run
settled (``finish``); :func:`record_metrics` drives it alone over a :class:`RunHandle`, and
``to_otel(run, tracer, meter=meter)`` drives it in the exporter's single pass. Every definition
comes from :mod:`rulvar_otel.otel.metrics.registry`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.metrics import Counter, Histogram, Meter, UpDownCounter

from rulvar_otel.core.events import EventModel, event_to_wire
from rulvar_otel.core.handle import RunHandle, RunOutcome
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.otel.metrics._provider import MetricsPipeline, MetricsSetup, build_meter_provider
from rulvar_otel.otel.metrics.registry import (
    FINISH,
    REGISTRY,
    AttrValue,
    FoldState,
    InstrumentKind,
    MetricDefinition,
    definition,
)

__all__ = [
    "REGISTRY",
    "MetricDefinition",
    "MetricsPipeline",
    "MetricsRecorder",
    "MetricsSetup",
    "build_meter_provider",
    "definition",
    "record_metrics",
]

_log = logging.getLogger(__name__)

# Attribute values are labels; a label longer than this is a payload, not a name.
_MAX_ATTRIBUTE_CHARS: Final = 128

_Instrument = Counter | Histogram | UpDownCounter


def _create(meter: Meter, entry: MetricDefinition) -> _Instrument:
    if entry.kind is InstrumentKind.COUNTER:
        return meter.create_counter(entry.name, unit=entry.unit, description=entry.description)
    if entry.kind is InstrumentKind.UP_DOWN_COUNTER:
        return meter.create_up_down_counter(entry.name, unit=entry.unit, description=entry.description)
    return meter.create_histogram(
        entry.name,
        unit=entry.unit,
        description=entry.description,
        explicit_bucket_boundaries_advisory=list(entry.buckets) if entry.buckets else None,
    )


class MetricsRecorder:
    """Records one run's metrics from its events, in stream order.

    ``observe`` takes each event in wire form (camelCase keys, as the JSONL fixtures); ``finish``
    takes the run's outcome (a :class:`RunOutcome`, the exception the result rejected with, or
    ``None`` when nothing is known) and records the per-run metrics. Neither ever raises: a
    malformed event records what it can and is otherwise ignored. Replayed events are skipped.
    """

    def __init__(self, meter: Meter, masker: SecretMasker | None = None) -> None:
        self._masker = masker if masker is not None else compile_secret_masker()
        self._state = FoldState(self._masker)
        self._by_type: dict[str, list[tuple[MetricDefinition, _Instrument]]] = {}
        for entry in REGISTRY:
            instrument = _create(meter, entry)
            for kind in entry.on:
                self._by_type.setdefault(kind, []).append((entry, instrument))
        self._finished = False

    def observe(self, event: Mapping[str, Any] | EventModel) -> None:
        """Fold one event. Never raises."""
        try:
            wire: Mapping[str, Any] = event_to_wire(event) if isinstance(event, EventModel) else event
            if not isinstance(wire, Mapping) or wire.get("replayed") is True:
                return
            kind = wire.get("type")
            if isinstance(kind, str):
                self._run_folds(kind, wire)
            self._state.advance(wire)
        except Exception:  # noqa: BLE001 - telemetry never breaks the host
            _log.debug("metrics: event skipped", exc_info=True)

    def finish(self, outcome: RunOutcome | BaseException | None = None) -> None:
        """Record the per-run metrics once the outcome is known. Idempotent; never raises."""
        if self._finished:
            return
        self._finished = True
        try:
            self._state.outcome = outcome
            self._run_folds(FINISH, {})
        except Exception:  # noqa: BLE001 - telemetry never breaks the host
            _log.debug("metrics: finish skipped", exc_info=True)

    def _run_folds(self, kind: str, event: Mapping[str, Any]) -> None:
        for entry, instrument in self._by_type.get(kind, ()):
            try:
                for value, attributes in entry.fold(self._state, event):
                    self._record(entry, instrument, value, attributes)
            except Exception:  # noqa: BLE001 - one bad fold never stops the others
                _log.debug("metrics: fold %s skipped", entry.name, exc_info=True)

    def _record(
        self,
        entry: MetricDefinition,
        instrument: _Instrument,
        value: float,
        attributes: Mapping[str, AttrValue],
    ) -> None:
        clean: dict[str, AttrValue] = {}
        for key in entry.attributes:  # only declared keys: the cardinality contract
            raw = attributes.get(key)
            if isinstance(raw, bool):
                clean[key] = raw
            elif isinstance(raw, str):
                clean[key] = self._masker.mask(raw)[:_MAX_ATTRIBUTE_CHARS]
        if isinstance(instrument, Histogram):
            instrument.record(value, clean)
        else:
            instrument.add(value, clean)


async def record_metrics(run: RunHandle, meter: Meter, *, patterns: Sequence[str] | None = None) -> None:
    """Record a run's metrics alone (without spans), draining its events until it settles.

    ``patterns`` are extra secret-masking regular expressions (Python ``re``), as for ``to_otel``;
    an invalid one raises :class:`~rulvar_otel.errors.ConfigError` before anything is recorded.
    A rejecting result never fails the recording: it is handed to the folds as the outcome.
    """
    recorder = MetricsRecorder(meter, compile_secret_masker(patterns))
    async for event in run.events:
        recorder.observe(event)
    outcome: RunOutcome | BaseException | None
    try:
        outcome = await run.result
    except Exception as exc:  # noqa: BLE001 - a rejection is an outcome here, not a failure
        outcome = exc
    recorder.finish(outcome)
