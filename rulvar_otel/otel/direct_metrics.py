"""Metrics on the direct path: the registry's folds aggregated in place, delivered by the OTel readers.

:class:`MetricsAggregator` is a drain :class:`~rulvar_otel.core.drain.Sink` running the same folds
as :class:`~rulvar_otel.otel.metrics.MetricsRecorder`, over the same events (replayed ones
skipped), with the same attribute masking; but instead of one SDK call per observation it keeps
the aggregates itself: a sum per attribute set for counters, and for histograms the bucket
counts over the registry's boundaries (the SDK's defaults where the registry names none), with
sum, count, min and max, as the SDK's explicit-bucket aggregation keeps them. :meth:`metrics_data`
renders them as the SDK's ``MetricsData`` (cumulative temporality). Each instrument keeps at most
``cardinality_limit`` attribute sets (the SDK's default, 2000); later new sets add up in one
``otel.metric.overflow=true`` series, exactly as the SDK's own limit does.

Delivery stays the exporter libraries': :func:`otlp_reader` is the SDK's
``PeriodicExportingMetricReader`` around any ``MetricExporter`` (OTLP gRPC or HTTP), and
:func:`prometheus_reader` the Prometheus exporter's reader serving ``/metrics``; each collects
from the aggregator instead of from a ``MeterProvider``. A host that passes a ``meter`` keeps the
SDK meter path (``MetricsRecorder``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext

from rulvar_otel.core.handle import RunOutcome, as_wire_dict
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.core.wire import WireEvent
from rulvar_otel.otel import semconv
from rulvar_otel.otel._resource import compose_resource, mask_resource
from rulvar_otel.otel._span_source import EventSpans
from rulvar_otel.otel.metrics import _MAX_ATTRIBUTE_CHARS, SpanSource
from rulvar_otel.otel.metrics._folds import PAIRED_TYPES
from rulvar_otel.otel.metrics.registry import (
    ADVANCE_TYPES,
    FINISH,
    REGISTRY,
    AttrValue,
    Fold,
    FoldState,
    InstrumentKind,
    MetricDefinition,
)

__all__ = [
    "MetricsAggregator",
    "RunMetrics",
    "attach_reader",
    "otlp_reader",
    "prometheus_reader",
    "shutdown_readers",
]

_log = logging.getLogger("rulvar_otel")

# The SDK's explicit-bucket boundaries for a histogram with no advisory boundaries.
_SDK_DEFAULT_BOUNDARIES: Final = (
    0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0,
)  # fmt: skip
# Distinct raw attribute tuples remembered per definition (labels are low-cardinality by contract).
_CACHE_LIMIT: Final = 4096
# Events folded per batch (as the recorder batches them); a collection folds what waits first. Few:
# a batch's events are then still in the CPU caches, and none lives on into an older GC generation.
_BATCH_EVENTS: Final = 32
# Histogram values waiting to be counted into buckets, per definition (bounds the memory).
_PENDING_LIMIT: Final = 4096

_Key = tuple[tuple[str, AttrValue], ...]
# Past the limit, every new attribute set lands in this one series (the SDK's behaviour).
_OVERFLOW_KEY: Final[_Key] = ((semconv.METRIC_OVERFLOW, True),)


# (trace id, span id) of a valid span: all an exemplar keeps of it.
_SpanIds = tuple[int, int]
# When an observation was folded and its event's span: (time ns, trace id, span id).
_Stamp = tuple[int, int, int]
# One exemplar: an observed value and its stamp.
_Exemplar = tuple[float, _Stamp]


@dataclass(slots=True)
class _Buckets:
    counts: list[int]
    total: float = 0.0
    count: int = 0
    low: float = math.inf
    high: float = -math.inf
    # bucket index -> the latest exemplar in it (the SDK's aligned-bucket reservoir keeps the same)
    exemplars: dict[int, _Exemplar] = field(default_factory=dict)


_Raw = tuple[AttrValue | None, ...]


@dataclass(slots=True)
class _Series:
    """One definition's aggregates, keyed by masked attribute set.

    Observations first land unresolved, keyed by the raw attribute tuple the fold returned: a
    counter adds to a sum, a histogram appends its value. :meth:`MetricsAggregator._settle`
    masks each distinct tuple once and moves them into the resolved aggregates, in bulk, when
    enough wait and before every collection, so an observation costs one dict lookup and an add.
    """

    entry: MetricDefinition
    fold: Fold
    histogram: bool
    lower: float
    bounds: tuple[float, ...]
    sums: dict[_Key, float] = field(default_factory=dict)
    buckets: dict[_Key, _Buckets] = field(default_factory=dict)
    cache: dict[_Raw, _Key] = field(default_factory=dict)
    # raw attributes -> [sum] (a cell: adding to it is one lookup, not a get and a set)
    raw_sums: dict[_Raw, list[float]] = field(default_factory=dict)
    # raw attributes -> the values waiting and, beside each, its event's span (None: no span) and
    # when it was folded (one time per batch: the batch is folded at once)
    pending: dict[_Raw, tuple[list[float], list[_SpanIds | None], list[Any]]] = field(default_factory=dict)
    waiting: int = 0


def _series(entry: MetricDefinition) -> _Series:
    if entry.kind is InstrumentKind.HISTOGRAM:
        bounds = tuple(float(b) for b in entry.buckets) if entry.buckets else _SDK_DEFAULT_BOUNDARIES
        return _Series(entry, entry.fold, True, 0.0, bounds)
    lower = -math.inf if entry.kind is InstrumentKind.UP_DOWN_COUNTER else 0.0
    return _Series(entry, entry.fold, False, lower, ())


# Per event type: the series whose folds read it, whether FoldState.advance reads it, and whether
# a histogram among them may take an exemplar (only then is the event's span read).
_Plan = tuple[tuple[_Series, ...], bool, bool]


class MetricsAggregator:
    """Folds one export's events into aggregates (see the module docstring). Never raises."""

    def __init__(
        self,
        masker: SecretMasker | None = None,
        *,
        resource: Resource | None = None,
        scope: InstrumentationScope | None = None,
        cardinality_limit: int = semconv.DEFAULT_METRIC_CARDINALITY_LIMIT,
    ) -> None:
        if cardinality_limit < 1:
            raise ValueError(f"the metric cardinality limit must be at least 1 (got {cardinality_limit})")
        self._limit = cardinality_limit
        self._masker = masker if masker is not None else compile_secret_masker()
        self._lock = threading.Lock()  # a reader collects from its own thread
        if resource is None:
            resource = compose_resource({SERVICE_NAME: semconv.DEFAULT_SERVICE_NAME}, self._masker)
        self.resource = mask_resource(resource, self._masker)
        self.scope = scope if scope is not None else InstrumentationScope(semconv.INSTRUMENTATION_SCOPE)
        self._series = [_series(entry) for entry in REGISTRY]
        by_type: dict[str, list[_Series]] = {}
        for series in self._series:
            for kind in series.entry.on:
                by_type.setdefault(kind, []).append(series)
        self._plans: dict[Any, _Plan] = {
            kind: (
                tuple(by_type.get(kind, ())),
                kind in ADVANCE_TYPES,
                any(series.histogram for series in by_type.get(kind, ())),
            )
            for kind in set(by_type) | ADVANCE_TYPES
        }
        self._start_ns = time.time_ns()
        self._runs: list[RunMetrics] = []
        self._default = self.run()
        self.feed = self._default.feed

    # --- the Sink protocol (one run) --------------------------------------------------------------

    # The default run's own feed, bound in __init__: no extra call per event.
    feed: Callable[[Mapping[str, Any]], None]

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        self._default.finish(outcome)

    def run(self, spans: SpanSource | None = None) -> RunMetrics:
        """A sink for one more run of the same export: its own fold state, the same aggregates.

        Interleaved runs each get one, as each gets its own span mapper; their series add up
        where their attribute sets meet. ``spans`` (that run's span mapper, fed each event just
        before) gives every histogram observation its span as the exemplar.
        """
        run = RunMetrics(self, spans)
        with self._lock:
            self._runs.append(run)
        return run

    # --- folding --------------------------------------------------------------------------------

    def _fold(
        self,
        state: FoldState,
        plan: tuple[_Series, ...],
        event: WireEvent,
        ids: _SpanIds | None = None,
        now: Any = 0,  # an int, kept boxed: appended as is for every histogram value
    ) -> None:
        for series in plan:
            try:
                observations = series.fold(state, event)
                if not observations:
                    continue
                if series.histogram:
                    pending = series.pending
                    for value, raw in observations:
                        waiting = pending.get(raw)
                        if waiting is None:
                            waiting = pending[raw] = ([], [], [])
                        waiting[0].append(value)
                        waiting[1].append(ids)
                        waiting[2].append(now)
                    series.waiting += len(observations)
                    if series.waiting >= _PENDING_LIMIT:
                        self._settle(series)
                else:
                    sums, lower = series.raw_sums, series.lower
                    for value, raw in observations:
                        if lower <= value < math.inf:  # as the SDK: no negative count, no NaN
                            cell = sums.get(raw)
                            if cell is None:
                                sums[raw] = [value]
                            else:
                                cell[0] += value
                    if len(sums) >= _CACHE_LIMIT:
                        self._settle(series)
            except Exception:  # noqa: BLE001 - one bad fold never stops the others
                _log.debug("metrics: fold %s skipped", series.entry.name, exc_info=True)

    def _settle(self, series: _Series) -> None:
        """Resolve what waits in ``series`` into its aggregates (the caller holds the lock)."""
        cache = series.cache
        if series.raw_sums:
            sums = series.sums
            for raw, cell in series.raw_sums.items():
                value = cell[0]
                key = cache.get(raw)
                if key is None:
                    key = self._resolve(series, raw)
                if key not in sums and len(sums) >= self._limit:
                    key = _OVERFLOW_KEY
                sums[key] = sums.get(key, 0) + value
            series.raw_sums = {}
        if series.pending:
            bounds, buckets = series.bounds, series.buckets
            for raw, (values, spans, times) in series.pending.items():
                key = cache.get(raw)
                if key is None:
                    key = self._resolve(series, raw)
                if not any(value >= 0 for value in values):  # the SDK refuses negative, NaN values
                    continue
                found = buckets.get(key)
                if found is None and len(buckets) >= self._limit:
                    found = buckets.get(_OVERFLOW_KEY)
                    key = _OVERFLOW_KEY
                if found is None:
                    found = buckets[key] = _Buckets([0] * (len(bounds) + 1))
                _count_into(found, bounds, values, spans, times)
            series.pending = {}
            series.waiting = 0

    def _resolve(self, series: _Series, raw: tuple[AttrValue | None, ...]) -> _Key:
        keys = series.entry.attributes
        if len(raw) != len(keys):
            raise ValueError(f"{series.entry.name}: {len(raw)} attribute values for {len(keys)} keys")
        clean: list[tuple[str, AttrValue]] = []
        for name, value in zip(keys, raw, strict=True):
            if isinstance(value, bool):
                clean.append((name, value))
            elif isinstance(value, str):
                clean.append((name, self._masker.mask(value)[:_MAX_ATTRIBUTE_CHARS]))
        key = tuple(sorted(clean))
        if len(series.cache) >= _CACHE_LIMIT:
            series.cache.clear()
        series.cache[raw] = key
        return key

    # --- output ---------------------------------------------------------------------------------

    def metrics_data(self) -> MetricsData:
        """Every aggregate so far as the SDK's ``MetricsData`` (cumulative since this aggregator began)."""
        now = time.time_ns()
        start = self._start_ns
        metrics: list[Metric] = []
        with self._lock:
            for run in self._runs:
                run.drain()
            for series in self._series:
                self._settle(series)
                entry = series.entry
                data: Sum | Histogram
                if series.histogram:
                    if not series.buckets:
                        continue
                    points = [
                        HistogramDataPoint(
                            attributes=dict(key),
                            start_time_unix_nano=start,
                            time_unix_nano=now,
                            count=b.count,
                            sum=b.total,
                            bucket_counts=list(b.counts),
                            explicit_bounds=list(series.bounds),
                            min=b.low,
                            max=b.high,
                            exemplars=_exemplars(b),
                        )
                        for key, b in series.buckets.items()
                    ]
                    data = Histogram(points, AggregationTemporality.CUMULATIVE)
                else:
                    if not series.sums:
                        continue
                    number_points = [
                        NumberDataPoint(
                            attributes=dict(key), start_time_unix_nano=start, time_unix_nano=now, value=value
                        )
                        for key, value in series.sums.items()
                    ]
                    data = Sum(
                        number_points,
                        AggregationTemporality.CUMULATIVE,
                        is_monotonic=entry.kind is InstrumentKind.COUNTER,
                    )
                metrics.append(Metric(entry.name, entry.description, entry.unit, data))
        scope_metrics = ScopeMetrics(self.scope, metrics, self.scope.schema_url or "")
        return MetricsData([ResourceMetrics(self.resource, [scope_metrics], self.resource.schema_url)])


def _bucket_index(bounds: tuple[float, ...], value: float) -> int:
    """``bisect.bisect_left(bounds, value)``, compiled: it runs once per histogram value, where a
    call of the library function (its arguments boxed) cost more than the search itself."""
    low, high = 0, len(bounds)
    while low < high:
        middle = (low + high) // 2
        if bounds[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low


def _count_into(
    found: _Buckets,
    bounds: tuple[float, ...],
    values: list[float],
    spans: list[_SpanIds | None],
    times: list[Any],
) -> None:
    """Count ``values`` (negative and NaN ones are refused, as by the SDK) into their buckets; each
    bucket keeps its latest exemplar (the SDK's aligned-bucket reservoir), so the values are read
    from the last and an exemplar is made once per bucket."""
    counts = found.counts
    latest: list[_Exemplar | None] = [None] * len(counts)
    # The point's sum, count, min and max: one compiled pass, summed in observation order as the
    # SDK sums (a float sum depends on its order).
    total, count, low, high = found.total, found.count, found.low, found.high
    for value in values:
        if value >= 0:
            total += value
            count += 1
            if value < low:
                low = value
            if value > high:
                high = value
    for index in range(len(values) - 1, -1, -1):
        value = values[index]
        if value >= 0:
            bucket = _bucket_index(bounds, value)
            counts[bucket] += 1
            if latest[bucket] is None:
                ids = spans[index]
                if ids is not None:
                    latest[bucket] = (value, (times[index], ids[0], ids[1]))
    found.total, found.count, found.low, found.high = total, count, low, high
    exemplars = found.exemplars
    for bucket, item in enumerate(latest):
        if item is not None:
            exemplars[bucket] = item


def _context_ids(context: SpanContext | None) -> _SpanIds | None:
    return (context.trace_id, context.span_id) if context is not None and context.is_valid else None


def _span_ids_reader(spans: SpanSource | None) -> Callable[[], _SpanIds | None] | None:
    """How a run reads the span of each observation: the span mapper gives the two ids without
    building a SpanContext (``event_span_ids``); any other span source through its context."""
    if spans is None:
        return None
    ids: Callable[[], _SpanIds | None] | None = getattr(spans, "event_span_ids", None)
    if ids is not None:
        return ids
    return lambda: _context_ids(spans.event_span_context())


def _exemplars(buckets: _Buckets) -> list[Exemplar]:
    """A data point's exemplars, in bucket order (the SDK's aligned reservoir reports them so)."""
    return [
        Exemplar({}, value, ts, span_id, trace_id)
        for _, (value, (ts, trace_id, span_id)) in sorted(buckets.exemplars.items())
    ]


class RunMetrics:
    """One run's fold state feeding a :class:`MetricsAggregator` (a drain sink). Never raises."""

    def __init__(self, aggregator: MetricsAggregator, spans: SpanSource | None = None) -> None:
        self._aggregator = aggregator
        self._plans = aggregator._plans
        self._state = FoldState(aggregator._masker)
        self._spans = spans
        # The span mapper (compiled, a native class): its ids read by a direct call, not a
        # generic one through a bound method; any other source through _span_ids_reader.
        self._mapper = spans if isinstance(spans, EventSpans) else None
        self._span_ids = _span_ids_reader(spans) if self._mapper is None else None
        # The events waiting for the next batch, with their plans and spans beside them: three
        # flat lists, no tuple per event to allocate (and for the collector to track).
        self._events: list[WireEvent] = []
        self._event_plans: list[_Plan] = []
        self._event_ids: list[_SpanIds | None] = []
        self._finished = False

    def feed(self, event: Mapping[str, Any]) -> None:
        try:
            wire = event if type(event) is dict else as_wire_dict(event)
            plan = self._plans.get(wire.get("type"))
        except Exception:  # noqa: BLE001 - an unhashable type, an uncopyable mapping: nothing reads it
            return
        if plan is None:
            return  # no definition reads it: skipped after one lookup
        # Only an event a histogram folds can offer an exemplar (counters are summed): the others
        # skip the lookup.
        ids: _SpanIds | None = None
        if plan[2]:
            mapper = self._mapper
            if mapper is not None:
                ids = mapper.event_span_ids()
            elif (span_ids := self._span_ids) is not None:
                ids = span_ids()
        events = self._events
        events.append(wire)
        self._event_plans.append(plan)
        self._event_ids.append(ids)
        if len(events) >= _BATCH_EVENTS:
            with self._aggregator._lock:
                self.drain()

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        """Fold what waits and the per-run metrics once the outcome is known. Idempotent."""
        if self._finished:
            return
        self._finished = True
        aggregator = self._aggregator
        with aggregator._lock:
            self.drain()
            self._state.outcome = outcome
            plan = self._plans.get(FINISH)
            if plan is not None:
                run_span = self._spans.run_span_context() if self._spans is not None else None
                aggregator._fold(self._state, plan[0], {}, _context_ids(run_span), time.time_ns())

    def drain(self) -> None:
        """Fold every queued event, in order (the caller holds the aggregator's lock).

        Events are folded in batches, as the recorder does: the folds then run in a tight loop
        instead of between the span mapper's calls, and keep each other's code in the CPU caches.
        """
        # The aggregator's fold called on it, not bound: a compiled method then takes a direct call.
        events, plans, all_ids = self._events, self._event_plans, self._event_ids
        state, aggregator = self._state, self._aggregator
        # The producer may append meanwhile (a reader collecting): fold these. Its ids go last, so
        # every index below their length has all three.
        count = len(all_ids)
        now: Any = time.time_ns()  # when this batch is folded: its exemplars' time (boxed once)
        for index in range(count):
            event = events[index]
            series, advance, _ = plans[index]
            ids = all_ids[index]
            try:
                if event.get("replayed") is True:
                    # It restates history already counted; only the agent pairing still reads it.
                    if event.get("type") in PAIRED_TYPES:
                        state.advance(event)
                    continue
                if series:
                    aggregator._fold(state, series, event, ids, now)
                if advance:
                    state.advance(event)
            except Exception:  # noqa: BLE001 - a malformed event is skipped, not fatal
                _log.debug("metrics: event skipped", exc_info=True)
        del events[:count]
        del plans[:count]
        del all_ids[:count]


def attach_reader(reader: MetricReader, aggregator: MetricsAggregator) -> MetricReader:
    """Make ``reader`` collect from ``aggregator``, through the hook a ``MeterProvider`` would use.

    The reader keeps all of its own behaviour (its schedule, its final push on shutdown, its
    scrape endpoint); only where a collection reads from changes. Tests pin that this holds.
    A reader already registered on a ``MeterProvider`` keeps collecting that provider's own
    instruments too (an engine's per-request ``gen_ai.client.*`` metrics, a host's), after the
    aggregator's metrics.
    """
    provider_collect: Callable[..., MetricsData | None] | None = getattr(reader, "_collect", None)

    def collect(_reader: MetricReader, timeout_millis: float = 10_000) -> MetricsData:
        data = aggregator.metrics_data()
        if provider_collect is None:
            return data
        return _merged(data, provider_collect(_reader, timeout_millis=timeout_millis))

    reader._set_collect_callback(collect)  # type: ignore[arg-type]
    return reader


def _merged(ours: MetricsData, theirs: MetricsData | None) -> MetricsData:
    """``ours`` plus ``theirs``: one entry per resource, one per instrumentation scope within it."""
    if theirs is None or not theirs.resource_metrics:
        return ours
    resources = list(ours.resource_metrics)
    for extra in theirs.resource_metrics:
        index = next((i for i, r in enumerate(resources) if r.resource == extra.resource), None)
        if index is None:
            resources.append(extra)
            continue
        scopes = list(resources[index].scope_metrics)
        for scope in extra.scope_metrics:
            at = next((i for i, s in enumerate(scopes) if s.scope == scope.scope), None)
            if at is None:
                scopes.append(scope)
            else:
                same = scopes[at]
                scopes[at] = ScopeMetrics(same.scope, [*same.metrics, *scope.metrics], same.schema_url)
        base = resources[index]
        resources[index] = ResourceMetrics(base.resource, scopes, base.schema_url)
    return MetricsData(resources)


def otlp_reader(
    aggregator: MetricsAggregator,
    exporter: MetricExporter,
    *,
    export_interval_s: float = 15.0,
    timeout_s: float = 10.0,
) -> MetricReader:
    """The SDK's periodic reader pushing ``aggregator``'s metrics to ``exporter``.

    It pushes every ``export_interval_s`` and once more on ``shutdown`` (bounded by ``timeout_s``).
    """
    reader = PeriodicExportingMetricReader(
        exporter, export_interval_millis=export_interval_s * 1000, export_timeout_millis=timeout_s * 1000
    )
    return attach_reader(reader, aggregator)


def prometheus_reader(aggregator: MetricsAggregator, registry: Any) -> MetricReader:
    """The Prometheus exporter's reader on ``registry`` (a ``CollectorRegistry``), scraping ``aggregator``."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    return attach_reader(PrometheusMetricReader(registry=registry), aggregator)


def shutdown_readers(readers: Sequence[MetricReader], timeout_s: float) -> None:
    """Final push and stop, each bounded; never raises."""
    for reader in readers:
        try:
            reader.shutdown(timeout_millis=timeout_s * 1000)
        except Exception:  # noqa: BLE001 - metrics never hide the trace result
            _log.debug("metrics: reader shutdown failed", exc_info=True)
