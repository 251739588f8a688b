"""OpenTelemetry metrics from a run's event stream: the same fold that feeds the spans.

:class:`MetricsRecorder` is fed one wire-form event at a time (``observe``) and told when the run
settled (``finish``); :func:`record_metrics` drives it alone over a :class:`RunHandle`, and
``to_otel(run, tracer, meter=meter)`` drives it in the exporter's single pass. Every definition
comes from :mod:`rulvar_otel.otel.metrics.registry`.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from mypy_extensions import mypyc_attr
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, UpDownCounter
from opentelemetry.metrics import Observation as GaugeObservation
from opentelemetry.trace import NonRecordingSpan, SpanContext

from rulvar_otel.core.drain import drain
from rulvar_otel.core.handle import RunHandle, RunOutcome, as_wire_dict

if TYPE_CHECKING:
    from rulvar_otel.core.events import EventModel
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.core.wire import WireEvent
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
    definition,
)

__all__ = [
    "COLLECT_HOOK_NAME",
    "REGISTRY",
    "MetricDefinition",
    "MetricsRecorder",
    "SpanSource",
    "definition",
    "record_metrics",
]

_log = logging.getLogger(__name__)

# Attribute values are labels; a label longer than this is a payload, not a name.
_MAX_ATTRIBUTE_CHARS: Final = 128

# Distinct attribute tuples remembered per definition (labels are low-cardinality by contract).
_CACHE_LIMIT: Final = 4096

# Events a recorder folds per batch (see _Folder): enough to keep the fold's code hot, few
# enough that a batch's events are still in the CPU caches and none lives on into an older GC
# generation (with the compiled folds, 32 beats 1,024 on the direct path: 1.18 against 1.25).
_BATCH_EVENTS: Final = 32
# Events a recorder beside a recorded export's batched spans lets wait at most: it folds after
# each batch of spans (a few dozen span ends), so this bound only holds a stream without ends.
_SPAN_BATCH_EVENTS: Final = 1024

# The observable gauge whose callback folds queued events and flushes counter sums before each
# collection; it never reports a value.
COLLECT_HOOK_NAME: Final = "rulvar.recorder.flush"
_HOOK_WAIT_S: Final = 1.0


class SpanSource(Protocol):
    """Where an observation's exemplar comes from: the span mapper fed the same events first.

    The direct path's aggregator reads a source's ``event_span_ids()`` instead, when it has one
    (the span mapper does): the two ids, without a SpanContext built per observation.
    """

    def event_span_context(self) -> SpanContext | None:
        """The span the last fed event opened, closed or was attached to."""

    def run_span_context(self) -> SpanContext | None:
        """The run's span (the per-run observations at finish belong to it)."""


class _BatchedSpans(Protocol):
    """A span source whose leaf spans may wait for a batch (the span mapper of ``export_events``):
    an event's span is read once its batch is made, so asking never starts one on its own."""

    def event_span_ref(self) -> object: ...

    def span_context_of(self, ref: Any) -> SpanContext: ...

    def span_made(self, ref: Any) -> bool: ...

    def after_each_batch(self, callback: Callable[[], None]) -> bool: ...


def exemplar_context(span: SpanContext | None) -> Context | None:
    """The context a histogram observation is recorded in, so the SDK's exemplar names ``span``."""
    if span is None or not span.is_valid:
        return None
    return trace.set_span_in_context(NonRecordingSpan(span), Context())


def _span_of(batched: _BatchedSpans, ref: object) -> SpanContext | None:
    try:
        return batched.span_context_of(ref)
    except Exception:  # noqa: BLE001 - a host's tracer failing on a leaf costs its exemplar alone
        _log.debug("metrics: the exemplar's span could not be read", exc_info=True)
        return None


_Instrument = Counter | Histogram | UpDownCounter
_Adder = Counter | UpDownCounter


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


@dataclass(slots=True)
class _Sink:
    """One definition as the recorder drives it: its fold, instrument and attribute cache."""

    entry: MetricDefinition
    fold: Fold
    histogram: Histogram | None  # exactly one of histogram and adder is set
    adder: _Adder | None
    lower: float  # counter values outside [lower, inf) are dropped, as the SDK would drop them
    # raw attribute values (as the fold returned them) -> (counter slot, masked attributes)
    cache: dict[tuple[AttrValue | None, ...], tuple[int, dict[str, AttrValue]]] = field(default_factory=dict)


def _sink(meter: Meter, entry: MetricDefinition) -> _Sink:
    instrument = _create(meter, entry)
    if isinstance(instrument, Histogram):
        return _Sink(entry, entry.fold, instrument, None, 0.0)
    lower = -math.inf if entry.kind is InstrumentKind.UP_DOWN_COUNTER else 0.0
    return _Sink(entry, entry.fold, None, instrument, lower)


# Per event type: the sinks whose folds read it, whether FoldState.advance reads it, and whether
# a histogram among those sinks may take an exemplar (only then is the event's span asked for).
_Plan = tuple[tuple[_Sink, ...], bool, bool]
# The plan of a replayed agent:start/agent:end: no fold counts it, FoldState.advance pairs it.
_PAIRING_ONLY: Final[_Plan] = ((), True, False)


@mypyc_attr(native_class=False)  # weakly referenced by the collect hook
class _Folder:
    """One recorder's fold state and its queue of events not folded yet.

    Events are queued as they are observed and folded in batches (``drain``): the fold and the
    SDK's metrics code then run in a tight loop instead of between the span mapper's calls (on
    the `large` fixture that cuts the metrics overhead by about a quarter: interleaved, the two
    code paths keep evicting each other from the CPU caches). Counter increments are summed per
    (instrument, attribute set), because the SDK's cost is per ``add`` call, not per unit; the
    sums go to the SDK at ``run:end``, at ``finish`` and right before any reader of the meter
    collects (:class:`_CollectHook`), so a collection always sees every event observed so far.
    Histograms get one ``record`` per observation, in stream order, as the API requires.

    ``lock`` serialises folding (the collect hook runs on the reader's thread); the queue is a
    deque, whose appends and pops are atomic, so ``observe`` never takes the lock.
    """

    def __init__(self, meter: Meter, masker: SecretMasker) -> None:
        self.masker = masker
        self.state = FoldState(masker)
        self.lock = threading.Lock()
        # (event, plan, the span its observations belong to: the exemplar's, or a reference to
        # it that `batched` reads)
        self.queue: deque[tuple[WireEvent, _Plan, object]] = deque()
        self.spans: SpanSource | None = None
        self.batched: _BatchedSpans | None = None
        self.feeder = 0  # the thread feeding a batched source: only it may start a waiting leaf
        # counter slot key -> [instrument, masked attributes, running sum]
        self.counters: dict[int, list[Any]] = {}
        self.slots = itertools.count()
        by_type: dict[str, list[_Sink]] = {}
        for entry in REGISTRY:
            sink = _sink(meter, entry)
            for kind in entry.on:
                by_type.setdefault(kind, []).append(sink)
        self.plans: dict[str, _Plan] = {
            kind: (
                tuple(by_type.get(kind, ())),
                kind in ADVANCE_TYPES,
                any(sink.histogram is not None for sink in by_type.get(kind, ())),
            )
            for kind in set(by_type) | ADVANCE_TYPES
        }

    def work(self, *, flush_counters: bool, timeout: float = -1) -> None:
        """Fold every queued event (and hand over the counter sums). Never raises."""
        if not self.lock.acquire(timeout=timeout):
            _log.debug("metrics: recorder busy; this collection sees the previous flush")
            return
        try:
            self._drain(self.batched is not None and threading.get_ident() != self.feeder)
            if flush_counters:
                self._flush_counters()
        except Exception:  # noqa: BLE001 - telemetry never breaks the host
            _log.debug("metrics: fold batch skipped", exc_info=True)
        finally:
            self.lock.release()

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        with self.lock:
            try:
                self._drain()
                self.state.outcome = outcome
                run_span = self.spans.run_span_context() if self.spans is not None else None
                self._run_folds(self.plans[FINISH][0], {}, run_span)
            finally:
                self._flush_counters()

    def _drain(self, foreign: bool = False) -> None:
        """Fold what waits, in order. ``foreign``: another thread than the feeding one (a
        reader's collection) folds up to the first event whose span still waits for its batch."""
        queue, state, run_folds, batched = self.queue, self.state, self._run_folds, self.batched
        while queue:
            waiting = queue[0][2] if foreign and batched is not None else None
            if waiting is not None and batched is not None and not batched.span_made(waiting):
                return  # the feeding thread folds it after the batch (a start here would race)
            event, (sinks, advance, _), span = queue.popleft()
            if sinks:
                if batched is not None and span is not None:
                    span = _span_of(batched, span)
                run_folds(sinks, event, cast("SpanContext | None", span))
            if advance:
                try:
                    state.advance(event)
                except Exception:  # noqa: BLE001 - a malformed event is skipped, not fatal
                    _log.debug("metrics: event skipped", exc_info=True)

    def _run_folds(self, sinks: tuple[_Sink, ...], event: WireEvent, span: SpanContext | None = None) -> None:
        state, counters = self.state, self.counters
        context: Context | None = None  # built once, for the first histogram observation
        for sink in sinks:
            try:
                cache, histogram = sink.cache, sink.histogram
                for value, raw in sink.fold(state, event):
                    resolved = cache.get(raw)
                    if resolved is None:
                        resolved = self._resolve(sink, raw)
                    if histogram is not None:
                        if context is None and span is not None:
                            context = exemplar_context(span)
                        histogram.record(value, resolved[1], context=context)
                    elif sink.lower <= value < math.inf:
                        slot = counters.get(resolved[0])
                        if slot is None:
                            counters[resolved[0]] = [sink.adder, resolved[1], value]
                        else:
                            slot[2] += value
            except Exception:  # noqa: BLE001 - one bad fold never stops the others
                _log.debug("metrics: fold %s skipped", sink.entry.name, exc_info=True)

    def _resolve(self, sink: _Sink, raw: tuple[AttrValue | None, ...]) -> tuple[int, dict[str, AttrValue]]:
        """Mask and bound one distinct attribute tuple, once; later hits come from the cache."""
        keys = sink.entry.attributes
        if len(raw) != len(keys):
            raise ValueError(f"{sink.entry.name}: {len(raw)} attribute values for {len(keys)} keys")
        clean: dict[str, AttrValue] = {}
        for key, value in zip(keys, raw, strict=True):
            if isinstance(value, bool):
                clean[key] = value
            elif isinstance(value, str):
                clean[key] = self.masker.clean(value)[:_MAX_ATTRIBUTE_CHARS]
        # A counter slot per cached tuple: an int hashes in no time, and two raw tuples that mask
        # to the same attributes just make two adds the SDK sums.
        resolved = (next(self.slots), clean)
        if len(sink.cache) >= _CACHE_LIMIT:
            sink.cache.clear()  # a hostile stream cannot grow it without bound
        sink.cache[raw] = resolved
        return resolved

    def _flush_counters(self) -> None:
        counters, self.counters = self.counters, {}
        for adder, attributes, value in counters.values():
            try:
                adder.add(value, attributes)
            except Exception:  # noqa: BLE001 - telemetry never breaks the host
                _log.debug("metrics: counter flush failed", exc_info=True)


@mypyc_attr(native_class=False)  # a callback the SDK holds
class _CollectHook:
    """Brings every live recorder of one meter up to date when a reader collects.

    Registered once per meter as the callback of an observable gauge that never reports a value:
    the SDK runs asynchronous callbacks before it reads the synchronous instruments' storage, so
    what the callback folds and flushes lands in the same collection.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folders: weakref.WeakSet[_Folder] = weakref.WeakSet()

    def attach(self, folder: _Folder) -> None:
        with self._lock:
            self._folders.add(folder)

    def detach(self, folder: _Folder) -> None:
        with self._lock:
            self._folders.discard(folder)

    def __call__(self, options: CallbackOptions) -> Iterable[GaugeObservation]:
        with self._lock:
            folders = list(self._folders)
        for folder in folders:
            # Bounded: a collection never waits long on a recorder busy with a batch.
            folder.work(flush_counters=True, timeout=_HOOK_WAIT_S)
        return ()


_hooks: weakref.WeakKeyDictionary[Meter, _CollectHook] = weakref.WeakKeyDictionary()
_hooks_lock = threading.Lock()


def _collect_hook(meter: Meter) -> _CollectHook | None:
    """The meter's hook, registered on first use; None when it cannot be (then fold eagerly)."""
    try:
        with _hooks_lock:
            hook = _hooks.get(meter)
            if hook is None:
                hook = _CollectHook()
                meter.create_observable_gauge(
                    COLLECT_HOOK_NAME,
                    callbacks=[hook],
                    description="Internal: brings rulvar-otel's batched metrics up to date before "
                    "a collection. Never reports a value.",
                )
                _hooks[meter] = hook
            return hook
    except Exception:  # noqa: BLE001 - e.g. a meter that cannot be weakly referenced
        _log.debug("metrics: no collect hook on this meter; folding every event at once", exc_info=True)
        return None


def _release(hook: _CollectHook | None, folder: _Folder) -> None:
    folder.work(flush_counters=True)
    if hook is not None:
        hook.detach(folder)


@mypyc_attr(native_class=False)  # weakref.finalize watches it
class MetricsRecorder:
    """Records one run's metrics from its events, in stream order.

    ``observe`` takes each event in wire form (camelCase keys, as the JSONL fixtures); ``finish``
    takes the run's outcome (a :class:`RunOutcome`, the exception the result rejected with, or
    ``None`` when nothing is known) and records the per-run metrics. Neither ever raises: a
    malformed event records what it can and is otherwise ignored. Replayed events are skipped.
    ``spans`` (the span mapper fed each event just before) gives every histogram observation its
    span as the exemplar.

    Events are folded in batches: at most a few dozen observed events wait, and all of them
    are folded and handed to the SDK at ``run:end``, at ``finish``, on :meth:`flush` and before
    any reader of the meter collects, so no collection misses an observed event. An observed
    event must not be mutated afterwards (parsed JSON never is).

    Beside ``export_events``, whose leaf spans reach the tracer in batches, the recorder folds
    right after each batch of spans instead, and reads each exemplar's span then, so no leaf
    starts on its own for its exemplar. A collection on another thread during that export then
    folds the events up to the first whose span still waits for its batch; the rest follow it.
    """

    def __init__(
        self, meter: Meter, masker: SecretMasker | None = None, *, spans: SpanSource | None = None
    ) -> None:
        self._folder = _Folder(meter, masker if masker is not None else compile_secret_masker())
        # With the span mapper fed the same events first, each histogram observation is recorded
        # in its span's context: the SDK's exemplar carries that span's trace and span id.
        self._folder.spans = spans
        self._plans: Mapping[Any, _Plan] = self._folder.plans
        self._queue = self._folder.queue
        hook = _collect_hook(meter)
        # Without a hook a reader would miss what waits: fold and flush each event as it comes.
        self._eager = hook is None
        self._batch = 1 if self._eager else _BATCH_EVENTS
        self._span_of: Callable[[], object] | None = spans.event_span_context if spans is not None else None
        if hook is not None:
            hook.attach(self._folder)
            # A recorded export's leaves wait for their batch: fold after each batch is made, and
            # read the spans then, so no exemplar starts a leaf on its own (see otel/_deferred).
            after_each_batch = getattr(spans, "after_each_batch", None)
            fold_batch = partial(self._folder.work, flush_counters=False)
            if after_each_batch is not None and after_each_batch(fold_batch):
                batched = cast("_BatchedSpans", spans)
                self._folder.batched = batched
                self._folder.feeder = threading.get_ident()
                self._span_of = batched.event_span_ref
                self._batch = _SPAN_BATCH_EVENTS
        # Folds what is queued and detaches at finish, or when dropped without a finish.
        self._release = weakref.finalize(self, _release, hook, self._folder)
        self._finished = False

    def feed(self, event: Mapping[str, Any] | EventModel) -> None:
        """Fold one event (now or in the next batch). Never raises.

        The drain's Sink protocol: the recorder is fed like every other consumer of a run.
        """
        try:
            wire = event if type(event) is dict else as_wire_dict(event)
            kind = wire.get("type")
            plan = self._plans.get(kind)  # an unhashable type raises: skipped below
            if plan is None:
                return  # no definition reads it
            if wire.get("replayed") is True:
                # It restates history already counted; only the agent pairing still reads it.
                if kind not in PAIRED_TYPES:
                    return
                plan = _PAIRING_ONLY
            queue = self._queue
            span_of = self._span_of
            # Counters are summed, never given an exemplar: only a histogram's event asks its span.
            queue.append((wire, plan, span_of() if span_of is not None and plan[2] else None))
            if kind == "run:end" or self._eager:
                self._folder.work(flush_counters=True)
            elif len(queue) >= self._batch:
                self._folder.work(flush_counters=False)
        except Exception:  # noqa: BLE001 - telemetry never breaks the host
            _log.debug("metrics: event skipped", exc_info=True)

    def observe(self, event: Mapping[str, Any] | EventModel) -> None:
        """:meth:`feed`, by the name a host calling the recorder itself reads best."""
        self.feed(event)

    def flush(self) -> None:
        """Fold every queued event and hand the counter sums to the SDK now. Never raises.

        Never needed for correct numbers: it happens at ``run:end``, at ``finish`` and before
        every collection by a reader of the meter.
        """
        self._folder.work(flush_counters=True)

    def finish(self, outcome: RunOutcome | BaseException | None = None) -> None:
        """Record the per-run metrics once the outcome is known. Idempotent; never raises."""
        if self._finished:
            return
        self._finished = True
        self._eager = True  # nothing flushes a late event after finish: fold it at once
        try:
            self._folder.finish(outcome)
        except Exception:  # noqa: BLE001 - telemetry never breaks the host
            _log.debug("metrics: finish skipped", exc_info=True)
        try:
            self._release()
        except Exception:  # noqa: BLE001 - telemetry never breaks the host
            _log.debug("metrics: final flush skipped", exc_info=True)


async def record_metrics(run: RunHandle, meter: Meter, *, patterns: Sequence[str] | None = None) -> None:
    """Record a run's metrics alone (without spans), draining its events until it settles.

    ``patterns`` are extra secret-masking regular expressions (RE2 dialect), as for ``to_otel``;
    an invalid one raises :class:`~rulvar_otel.errors.ConfigError` before anything is recorded.
    A rejecting result never fails the recording: it is handed to the folds as the outcome.
    """
    await drain(run, MetricsRecorder(meter, compile_secret_masker(patterns)))
