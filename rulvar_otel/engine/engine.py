"""The engine and the handle of one run segment: configuration, ``run``, ``resume``, controls.

One call to :meth:`Engine.run` or :meth:`Engine.resume` is one execution *segment* with its own
event bus; ``seq`` and span ids start at ``segment << 32`` so they stay unique across segments.
The workflow body is re-executed on resume: every ``ctx`` operation has a positional key in its
scope, and an operation whose key the journal already holds is replayed from the journal (zero
adapter calls), re-emitting its lifecycle events with ``replayed: true``.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.engine.bus import EventStream
from rulvar_otel.engine.config import EngineConfig, RetryPolicy
from rulvar_otel.engine.context import Workflow, check_workflow
from rulvar_otel.engine.journal import JournalKind, JournalStore
from rulvar_otel.engine.limits import ConcurrencyGate
from rulvar_otel.engine.model import ModelAdapter
from rulvar_otel.engine.pricing import PricingTable
from rulvar_otel.engine.run import RunSegment
from rulvar_otel.engine.suspension import ResolutionOutcome
from rulvar_otel.errors import ConfigError, SourceError

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from rulvar_otel.engine.provider_metrics import ProviderCallMetrics

__all__ = ["Engine", "EngineConfig", "EngineRunHandle", "RetryPolicy", "create_engine"]

# Runs whose caller's trace context the engine remembers for their resumes (oldest forgotten first).
_TRACE_CONTEXTS_KEPT: Final = 1024


class Engine:
    """Runs workflows live, journals them, resumes and dry-run replays them.

    Its options are checked once into a frozen :class:`EngineConfig` (``engine.config``), which every
    run of the engine shares.
    """

    def __init__(
        self,
        *,
        adapters: Sequence[ModelAdapter],
        journal: JournalStore | None = None,
        pricing: PricingTable | Mapping[str, Any] | None = None,
        redaction: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] | None = None,
        id_factory: Callable[[], str] | None = None,
        **options: Any,
    ) -> None:
        self.config = EngineConfig.build(
            adapters=adapters,
            journal=journal,
            pricing=pricing,
            redaction=redaction,
            clock=clock,
            id_factory=id_factory or mint_run_id,
            **options,
        )
        # run id -> the trace context its first segment was started in: a resume joins that trace.
        self._trace_contexts: dict[str, Context] = {}  # only runs started inside a valid span

    # The settings hosts and tests read most, straight from the configuration.
    @property
    def adapters(self) -> Mapping[str, ModelAdapter]:
        return self.config.adapters

    @property
    def journal(self) -> JournalStore:
        return self.config.journal

    @property
    def pricing(self) -> PricingTable:
        return self.config.pricing

    @property
    def masker(self) -> SecretMasker | None:
        return self.config.masker

    @property
    def concurrency(self) -> ConcurrencyGate | None:
        return self.config.concurrency

    @property
    def provider_metrics(self) -> ProviderCallMetrics | None:
        return self.config.provider_metrics

    def resolve_model(self, model: str | None) -> tuple[str, ModelAdapter, str]:
        """``(adapter:model ref, adapter, model name)`` for a ref, a bare model name or None (default)."""
        return self.config.resolve_model(model)

    def run(
        self,
        wf: Workflow,
        args: Any = None,
        *,
        run_id: str | None = None,
        budget_usd: float | None = None,
    ) -> EngineRunHandle:
        """Start ``wf`` now; returns its handle at once (needs a running event loop)."""
        check_workflow(wf)
        run_id = run_id or self.config.id_factory()
        if self.journal.exists(run_id):
            raise ConfigError(f"run {run_id!r} already has a journal; use engine.resume")
        run = RunSegment(self.config, wf, args, run_id, [], segment=0, dry_run=False, budget_usd=budget_usd)
        run.start()
        return self._with_trace_context(EngineRunHandle(run), first=True)

    def resume(
        self,
        run_id: str,
        wf: Workflow,
        *,
        args: Any = None,
        dry_run: bool = False,
        budget_usd: float | None = None,
    ) -> EngineRunHandle:
        """Continue a journaled run (replaying every journaled fact), or re-emit it with ``dry_run``.

        A dry-run makes no model call and needs no write access: a read-only archived journal
        replays (its segment marker is then simply not written). Raises RunNotFoundError when the
        journal store holds no such run.
        """
        check_workflow(wf)
        entries = self.journal.load(run_id)
        genesis = next((e for e in entries if e.kind == JournalKind.RUN_START), None)
        if genesis is None:
            raise SourceError(f"the journal of run {run_id!r} has no run_start entry")
        if genesis.data.get("workflow") != wf.name:
            raise ConfigError(
                f"run {run_id!r} was journaled by workflow {genesis.data.get('workflow')!r}, not {wf.name!r}"
            )
        if args is None:
            args = genesis.data.get("args")
        if budget_usd is None:
            budget = genesis.data.get("budgetUsd")
            budget_usd = float(budget) if isinstance(budget, int | float) else None
        markers = (int(e.data.get("segment", 0)) for e in entries if e.kind == JournalKind.SEGMENT)
        segment = 1 + max(markers, default=0)
        run = RunSegment(
            self.config, wf, args, run_id, entries, segment=segment, dry_run=dry_run, budget_usd=budget_usd
        )
        run.start()
        return self._with_trace_context(EngineRunHandle(run), first=False)

    def _with_trace_context(self, handle: EngineRunHandle, *, first: bool) -> EngineRunHandle:
        """Capture the caller's OpenTelemetry context on the handle (``to_otel`` parents by it).

        A resume in this engine takes the context its run was first started in, so every segment
        of the run joins the same trace; a run not started here takes the resume caller's.
        """
        if "opentelemetry.trace" not in sys.modules:
            return handle  # a host that never loaded OpenTelemetry has no span to parent by
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        current = otel_context.get_current()
        remembered = self._trace_contexts
        if first:
            if trace.get_current_span(current).get_span_context().is_valid:
                if len(remembered) >= _TRACE_CONTEXTS_KEPT:
                    del remembered[next(iter(remembered))]
                remembered[handle.run_id] = current
        else:
            current = remembered.get(handle.run_id, current)
        handle.trace_context = current
        return handle


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def mint_run_id() -> str:
    """A ULID-shaped id: 48 bits of milliseconds, 80 random bits, Crockford base32."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(uuid.uuid4().bytes[:10], "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def create_engine(
    adapters: Sequence[ModelAdapter],
    *,
    journal: JournalStore | None = None,
    pricing: PricingTable | Mapping[str, Any] | None = None,
    redaction: Mapping[str, Any] | None = None,
    **options: Any,
) -> Engine:
    """Assemble an engine: ``create_engine(adapters=[...], journal=..., pricing=..., redaction=...)``.

    Further options: ``clock``, ``id_factory``, ``default_reserve_usd``, ``max_in_flight_exposure_usd``,
    ``quota``, ``max_denials``, ``permissions``, ``retry``, ``determinism_mode``,
    ``determinism_allow``, ``sleep``, ``max_spawn_units``, ``max_concurrency``, ``count_tokens``,
    ``probe_output_tokens``, ``approval_timeout_s``, ``meter`` (an OpenTelemetry meter: per-request
    ``gen_ai.client.*`` metrics).
    """
    return Engine(adapters=adapters, journal=journal, pricing=pricing, redaction=redaction, **options)


class EngineRunHandle:
    """The handle of one segment: events (gapless, whole stream per iteration), result, controls."""

    def __init__(self, run: RunSegment) -> None:
        self._run = run
        # The OpenTelemetry context engine.run/resume was called in (the run's parent for to_otel);
        # None when the host never loaded OpenTelemetry.
        self.trace_context: Context | None = None

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def segment(self) -> int:
        return self._run.segment

    @property
    def dry_run(self) -> bool:
        return self._run.dry_run

    @property
    def events(self) -> EventStream:
        return EventStream(self._run.bus)

    @property
    def result(self) -> asyncio.Future[RunOutcome]:
        return self._run.result

    def on(self, type: str, callback: Callable[[Any], object]) -> Callable[[], None]:  # noqa: A002
        """Call ``callback`` for every later event of ``type`` (``"*"``: every type); returns ``off``."""
        return self._run.bus.on(type, callback)

    def cancel(self, reason: str | None = None) -> asyncio.Future[RunOutcome]:
        """Request cooperative cancellation; the run settles ``cancelled``. Returns ``result``."""
        self._run.request_cancel(reason or "cancelled by the host")
        return self._run.result

    def resolve_external(
        self, key_or_entry_ref: str | int, value: Any, *, by: str = "external"
    ) -> ResolutionOutcome:
        """Close an open suspension (an approval or an ``await_external``); first close wins."""
        return self._run.resolve(key_or_entry_ref, value, by)
