"""The engine: runs workflows, journals every decided fact, replays them, emits the event stream.

One call to :meth:`Engine.run` or :meth:`Engine.resume` is one execution *segment* with its own
event bus; ``seq`` and span ids start at ``segment << 32`` so they stay unique across segments.
The workflow body is re-executed on resume: every ``ctx`` operation has a positional key in its
scope, and an operation whose key the journal already holds is replayed from the journal (zero
adapter calls), re-emitting its lifecycle events with ``replayed: true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from rulvar_otel.engine import determinism
from rulvar_otel.engine.bus import EventBus, EventStream, format_ts
from rulvar_otel.engine.cost import (
    AgentRecord,
    CostReport,
    Slice,
    build_envelope,
    fold_cost_report,
    total_usage,
)
from rulvar_otel.engine.journal import InMemoryJournalStore, JournalEntry, JournalStore
from rulvar_otel.engine.limits import ConcurrencyGate, ExposureGate, QuotaLimiter
from rulvar_otel.engine.model import (
    AdapterError,
    AgentFailedError,
    BudgetExhaustedError,
    DeadlineExceededError,
    ExposureDrainedError,
    ModelAdapter,
    ModelRequest,
    ModelTurn,
    QuotaExhaustedError,
    ReplayMissError,
    SchemaValidationError,
    TokenCounter,
    ToolCallRequest,
    WorkflowError,
    add_usage,
    usage_dict,
    wire_error,
)
from rulvar_otel.engine.pricing import PricingTable
from rulvar_otel.engine.tools import Decision, Permissions, Tool
from rulvar_otel.core.events import (
    AgentEnd,
    AgentError,
    AgentPhaseEnd,
    AgentPhaseStart,
    AgentQueued,
    AgentSchemaRetry,
    AgentStart,
    AgentStream,
    ApprovalPending,
    BudgetExposureWait,
    BudgetUpdate,
    ChildEnd,
    ChildStart,
    ControlWire,
    DeterminismWarning,
    EventModel,
    ExternalWaiting,
    Log,
    PhaseStart,
    QuotaDenied,
    ResolutionApplied,
    ResolutionSuperseded,
    RunEnd,
    RunStart,
    SpawnAdmitted,
    ToolEnd,
    ToolStart,
    Usage,
)
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.errors import ConfigError, RunRejectedError, SourceError

__all__ = [
    "Context",
    "Engine",
    "EngineRunHandle",
    "ResolutionOutcome",
    "RetryPolicy",
    "Workflow",
    "create_engine",
    "workflow",
]

T = TypeVar("T")
WorkflowFn = Callable[["Context", Any], Awaitable[Any]]
_COMPLETIONS = ("complete", "partial", "rejected")
_LIFT_LISTS = ("degradedReasons", "salvagedPartialChildren", "salvagedTerminalOutputChildren")


class Workflow:
    """A named workflow: an ``async def body(ctx, args)``."""

    def __init__(self, name: str, fn: WorkflowFn) -> None:
        if not name:
            raise ConfigError("a workflow needs a non-empty name")
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"workflow {name!r} must be an 'async def' function")
        self.name = name
        self.fn = fn

    def __repr__(self) -> str:
        return f"Workflow({self.name!r})"


def workflow(name: str) -> Callable[[WorkflowFn], Workflow]:
    """Register an ``async def body(ctx, args)`` as a workflow named ``name``."""

    def wrap(fn: WorkflowFn) -> Workflow:
        return Workflow(name, fn)

    return wrap


@dataclass(frozen=True)
class RetryPolicy:
    """Transport retries of a retryable wire error (``agent:error`` with ``willRetry``)."""

    max_retries: int = 2
    backoff_ms: float = 0.0


class ResolutionOutcome(BaseModel):
    """What ``resolve_external`` did: ``applied`` for the first close, else the reason."""

    model_config = ConfigDict(frozen=True)

    applied: bool
    target_ref: int | None = None
    entry_ref: int | None = None
    reason: str | None = None


_TIMED_OUT: Any = object()  # an approval whose deadline passed before any answer


class _Suspend(BaseException):
    """Unwinds a workflow parked on an open suspension (not an Exception: never swallowed)."""


class _ReplayedCancel(BaseException):
    """A dry-run replayed an agent the original segment cancelled."""


@dataclass
class _Frame:
    run: _Run
    scope: str
    span_id: str
    parent_span_id: str | None
    phase: str | None
    workflow: str
    counters: dict[str, int] = field(default_factory=dict[str, int])

    def key(self, kind: str) -> tuple[str, int]:
        n = self.counters.get(kind, 0)
        self.counters[kind] = n + 1
        return f"{self.scope}|{kind}#{n}", n


_FRAME: ContextVar[_Frame | None] = ContextVar("rulvar_frame", default=None)


@dataclass
class _Wait:
    kind: str
    entry_ref: int
    keys: tuple[str, ...]
    future: asyncio.Future[Any]


def _jsonable(value: Any) -> Any:
    try:
        return to_jsonable_python(value)
    except Exception:  # noqa: BLE001 - a journal value must be JSON; fall back to its text
        return repr(value)


def _lift(source: Any) -> dict[str, Any]:
    """The completion lift: a valid completion literal plus well-formed companions, else nothing."""
    if not isinstance(source, Mapping) or source.get("completion") not in _COMPLETIONS:
        return {}
    lift: dict[str, Any] = {"completion": source["completion"]}
    counts = source.get("childStatusCounts")
    if isinstance(counts, Mapping) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in counts.items()
    ):
        lift["childStatusCounts"] = dict(counts)
    for name in _LIFT_LISTS:
        items = source.get(name)
        if isinstance(items, list) and all(isinstance(i, str) for i in items):
            lift[name] = list(items)
    return lift


def _deadline_iso(deadline_at: datetime | float | None) -> str | None:
    if deadline_at is None:
        return None
    if isinstance(deadline_at, datetime):
        if deadline_at.tzinfo is None:
            raise ConfigError("deadline_at must be timezone-aware (or epoch seconds)")
        return format_ts(deadline_at)
    if isinstance(deadline_at, bool) or not isinstance(deadline_at, int | float):
        raise ConfigError(
            f"deadline_at must be a datetime or epoch seconds, got {type(deadline_at).__name__}"
        )
    return format_ts(datetime.fromtimestamp(float(deadline_at), UTC))


def _parse_deadline(deadline: str) -> datetime:
    return datetime.fromisoformat(deadline)


def _deadline_error(key: str, deadline: Any) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"nobody resolved {key!r} before its deadline {deadline}",
        data={"key": key, "deadlineAt": deadline},
    )


_LIFT_ATTRS = {
    "completion": "completion",
    "childStatusCounts": "child_status_counts",
    "degradedReasons": "degraded_reasons",
    "salvagedPartialChildren": "salvaged_partial_children",
    "salvagedTerminalOutputChildren": "salvaged_terminal_output_children",
}


@dataclass(frozen=True)
class _AgentSpec:
    prompt: str
    agent_type: str
    label: str | None
    tools: tuple[Tool, ...]
    schema: Any
    model_ref: str
    role: str
    max_turns: int
    compact_at_tokens: int | None
    summarize_model: str
    finalize: bool
    finalize_model: str
    extract_model: str
    schema_attempts: int
    reserve_usd: float
    reserve_explicit: bool
    permissions: Permissions
    deny_repeated_calls: bool
    tool_caps: Mapping[str, int]
    system: str | None
    stream: bool
    approval_timeout_s: float | None


class _AgentAbortError(Exception):
    """Ends an agent with status ``error`` carrying ``cause`` (already announced)."""

    def __init__(self, cause: WorkflowError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass
class _Phase:
    role: str
    model: str
    invocation: int
    started: float
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    unpriced: bool = False
    retries: int = 0


class Engine:
    """Runs workflows live, journals them, resumes and dry-run replays them."""

    def __init__(
        self,
        *,
        adapters: Sequence[ModelAdapter],
        journal: JournalStore | None = None,
        pricing: PricingTable | Mapping[str, Any] | None = None,
        redaction: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] | None = None,
        id_factory: Callable[[], str] | None = None,
        default_reserve_usd: float = 0.5,
        max_in_flight_exposure_usd: float | None = None,
        quota: QuotaLimiter | None = None,
        max_denials: int = 8,
        permissions: Permissions | None = None,
        retry: RetryPolicy | None = None,
        determinism_mode: str = "warn",
        determinism_allow: Sequence[str] = (),
        sleep: Callable[[float], Awaitable[None]] | None = None,
        max_spawn_units: int = 500,
        max_concurrency: int | None = None,
        count_tokens: str | Callable[[str], bool] = "off",
        probe_output_tokens: int = 1024,
        approval_timeout_s: float | None = None,
    ) -> None:
        if not adapters:
            raise ConfigError("create_engine needs at least one model adapter")
        self.adapters: dict[str, ModelAdapter] = {}
        for adapter in adapters:
            if adapter.adapter_id in self.adapters:
                raise ConfigError(f"two adapters share the id {adapter.adapter_id!r}")
            self.adapters[adapter.adapter_id] = adapter
        self.default_model = f"{adapters[0].adapter_id}:{adapters[0].default_model}"
        self.journal: JournalStore = journal if journal is not None else InMemoryJournalStore()
        self.pricing = pricing if isinstance(pricing, PricingTable) else PricingTable(pricing)
        redaction = dict(redaction or {})
        unknown = set(redaction) - {"mask_events", "maskEvents", "patterns"}
        if unknown:
            raise ConfigError(f"unknown redaction option(s): {', '.join(sorted(unknown))}")
        mask = redaction.get("mask_events", redaction.get("maskEvents", True))
        if not isinstance(mask, bool):
            raise ConfigError("redaction option 'mask_events' must be a boolean")
        self.masker = compile_secret_masker(redaction.get("patterns")) if mask else None
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.id_factory: Callable[[], str] = id_factory or _mint_run_id
        if default_reserve_usd < 0:
            raise ConfigError("default_reserve_usd must be >= 0")
        self.default_reserve_usd = default_reserve_usd
        self.max_in_flight_exposure_usd = max_in_flight_exposure_usd
        if max_in_flight_exposure_usd is not None and max_in_flight_exposure_usd <= 0:
            raise ConfigError("max_in_flight_exposure_usd must be > 0")
        self.quota = quota
        if max_denials < 0:
            raise ConfigError("max_denials must be >= 0")
        self.max_denials = max_denials
        self.permissions = permissions or Permissions()
        self.retry = retry or RetryPolicy()
        if determinism_mode not in ("warn", "error", "off"):
            raise ConfigError("determinism_mode must be 'warn', 'error' or 'off'")
        self.determinism_mode = determinism_mode
        self.determinism_allow = tuple(determinism_allow)
        self.sleep: Callable[[float], Awaitable[None]] = sleep or asyncio.sleep
        self.max_spawn_units = max_spawn_units
        if not callable(count_tokens) and count_tokens not in ("off", "on"):
            raise ConfigError("count_tokens must be 'off', 'on' or a callable(model_ref) -> bool")
        self.count_tokens = count_tokens
        if probe_output_tokens < 0:
            raise ConfigError("probe_output_tokens must be >= 0")
        self.probe_output_tokens = probe_output_tokens
        if approval_timeout_s is not None and not approval_timeout_s > 0:
            raise ConfigError("approval_timeout_s must be > 0")
        self.approval_timeout_s = approval_timeout_s
        # One gate for the engine: every run it executes shares the same live-dispatch slots.
        self.concurrency = ConcurrencyGate(max_concurrency) if max_concurrency is not None else None

    def resolve_model(self, model: str | None) -> tuple[str, ModelAdapter, str]:
        ref = model or self.default_model
        adapter_id, sep, name = ref.partition(":")
        if not sep:
            adapter_id, name = next(iter(self.adapters)), ref
        adapter = self.adapters.get(adapter_id)
        if adapter is None:
            raise ConfigError(f"model {ref!r} names no configured adapter (have: {', '.join(self.adapters)})")
        return f"{adapter_id}:{name}", adapter, name

    def run(
        self,
        wf: Workflow,
        args: Any = None,
        *,
        run_id: str | None = None,
        budget_usd: float | None = None,
    ) -> EngineRunHandle:
        """Start ``wf`` now; returns its handle at once (needs a running event loop)."""
        _check_workflow(wf)
        run_id = run_id or self.id_factory()
        if self.journal.exists(run_id):
            raise ConfigError(f"run {run_id!r} already has a journal; use engine.resume")
        run = _Run(self, wf, args, run_id, [], segment=0, dry_run=False, budget_usd=budget_usd)
        return run.start()

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

        Raises RunNotFoundError when the journal store holds no such run.
        """
        _check_workflow(wf)
        entries = self.journal.load(run_id)
        genesis = next((e for e in entries if e.kind == "run_start"), None)
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
        segment = 1 + max((int(e.data.get("segment", 0)) for e in entries if e.kind == "segment"), default=0)
        run = _Run(self, wf, args, run_id, entries, segment=segment, dry_run=dry_run, budget_usd=budget_usd)
        return run.start()


def _check_workflow(wf: object) -> None:
    if not isinstance(wf, Workflow):
        raise ConfigError(
            f"expected a Workflow (decorate the body with @workflow(name)), got {type(wf).__name__}"
        )


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _mint_run_id() -> str:
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
    ``probe_output_tokens``, ``approval_timeout_s``.
    """
    return Engine(adapters=adapters, journal=journal, pricing=pricing, redaction=redaction, **options)


class EngineRunHandle:
    """The handle of one segment: events (gapless, whole stream per iteration), result, controls."""

    def __init__(self, run: _Run) -> None:
        self._run = run

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


class _Run:
    """One execution segment of a run."""

    def __init__(
        self,
        engine: Engine,
        wf: Workflow,
        args: Any,
        run_id: str,
        entries: list[JournalEntry],
        *,
        segment: int,
        dry_run: bool,
        budget_usd: float | None,
    ) -> None:
        if budget_usd is not None and (budget_usd < 0 or budget_usd != budget_usd):
            raise ConfigError("budget_usd must be a number >= 0")
        self.engine = engine
        self.wf = wf
        self.args = args
        self.run_id = run_id
        self.segment = segment
        self.dry_run = dry_run
        self.budget_usd = budget_usd
        self.entries = list(entries)
        self._by_key: dict[tuple[str, str], JournalEntry] = {}
        self._resolutions: dict[int, JournalEntry] = {}
        for entry in self.entries:
            self._index(entry)
        self._next_entry = 1 + max((e.seq for e in self.entries), default=-1)
        base = segment << 32
        self._next_span = base
        self.root_span = self.mint_span()
        self.bus = EventBus(
            run_id, base=base, masker=engine.masker, clock=engine.clock, root_span=self.root_span
        )
        self.spent = 0.0
        self.committed = 0.0
        self.records: list[AgentRecord] = []
        self.agents_spawned = 0
        self.waits: dict[int, _Wait] = {}
        self.pending: list[dict[str, Any]] = []
        self.exposure = (
            ExposureGate(engine.max_in_flight_exposure_usd) if engine.max_in_flight_exposure_usd else None
        )
        self.cancel_reason: str | None = None
        self._started = False
        self.task: asyncio.Task[None] | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigError(
                "engine.run and engine.resume need a running event loop (call them from async code)"
            ) from None
        self.result: asyncio.Future[RunOutcome] = loop.create_future()
        self.detector = determinism.DeterminismDetector(
            self._determinism_warning,
            allow=engine.determinism_allow,
            reject=engine.determinism_mode == "error",
        )

    # --- plumbing -------------------------------------------------------------------------

    def start(self) -> EngineRunHandle:
        handle = EngineRunHandle(self)
        self.task = asyncio.get_running_loop().create_task(self._main(), name=f"rulvar-run-{self.run_id}")
        self.task.add_done_callback(self._task_done)
        return handle

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if self.result.done():
            return
        exc = task.exception() if not task.cancelled() else None
        self.result.set_exception(
            RunRejectedError(f"the run task ended without settling: {exc!r}", name="EngineError")
        )

    def mint_span(self) -> str:
        span = f"s{self._next_span}"
        self._next_span += 1
        return span

    def emit(self, cls: type[EventModel], span_id: str, parent: str | None = None, **body: Any) -> EventModel:
        with determinism.suppressed():
            return self.bus.emit(cls, span_id, parent, **body)

    def _index(self, entry: JournalEntry) -> None:
        if entry.kind == "resolution":
            target = entry.data.get("targetRef")
            if isinstance(target, int) and target not in self._resolutions:
                self._resolutions[target] = entry
        elif entry.key is not None:
            self._by_key.setdefault((entry.kind, entry.key), entry)

    def lookup(self, kind: str, key: str) -> JournalEntry | None:
        return self._by_key.get((kind, key))

    def resolution_of(self, entry_ref: int) -> JournalEntry | None:
        return self._resolutions.get(entry_ref)

    def append(self, kind: str, key: str | None, data: Mapping[str, Any]) -> JournalEntry:
        if self.dry_run:
            raise ReplayMissError(f"a dry-run never writes the journal ({kind} {key or ''})")
        entry = JournalEntry(
            seq=self._next_entry, kind=kind, key=key, ts=format_ts(self.engine.clock()), data=dict(data)
        )
        self.engine.journal.append(self.run_id, entry)
        self._next_entry += 1
        self.entries.append(entry)
        # A terminal that replaces an earlier cancelled one must win the index.
        if entry.key is not None and kind == "agent":
            self._by_key[(kind, entry.key)] = entry
        else:
            self._index(entry)
        return entry

    def budget_update(self) -> None:
        remaining = None if self.budget_usd is None else max(0.0, self.budget_usd - self.spent)
        self.emit(
            BudgetUpdate,
            self.root_span,
            spent_usd=self.spent,
            remaining_usd=remaining,
            committed_reserve_usd=max(0.0, self.committed),
        )

    def admit(self, reserve: float) -> None:
        """Commit ``reserve`` against the ceiling, or refuse with BudgetExhaustedError."""
        if self.budget_usd is not None and self.spent + self.committed + reserve > self.budget_usd + 1e-12:
            raise BudgetExhaustedError(
                f"budget ceiling reached: spent {self.spent:.4f} USD plus committed reserves "
                f"{self.committed:.4f} USD plus the proposed reserve {reserve:.4f} USD does not fit "
                f"the ceiling {self.budget_usd:.4f} USD",
                data={
                    "account": "run",
                    "spentUsd": self.spent,
                    "committedReserveUsd": self.committed,
                    "proposedReserveUsd": reserve,
                    "ceilingUsd": self.budget_usd,
                },
            )
        self.committed += reserve
        self.budget_update()

    def release(self, reserve: float) -> None:
        self.committed -= reserve
        if abs(self.committed) < 1e-12:
            self.committed = 0.0
        self.budget_update()

    def deadline_passed(self, deadline: Any) -> bool:
        return isinstance(deadline, str) and self.engine.clock() >= _parse_deadline(deadline)

    def seconds_left(self, deadline: str) -> float:
        return max(0.0, (_parse_deadline(deadline) - self.engine.clock()).total_seconds())

    def close_timed_out(self, entry_ref: int) -> JournalEntry:
        """Close a suspension as timed out: a journaled close like any resolution (first wins)."""
        return self.append("resolution", None, {"targetRef": entry_ref, "timedOut": True, "by": "deadline"})

    def _determinism_warning(
        self, category: str, provenance: str, frame: str, file: str, line: int, column: int | None
    ) -> None:
        current = _FRAME.get()
        span = current.span_id if current is not None and current.run is self else self.root_span
        parent = current.parent_span_id if current is not None and current.run is self else None
        self.emit(
            DeterminismWarning,
            span,
            parent,
            category=category,
            provenance=provenance,
            frame=frame,
            file=file,
            line=line,
            column=column,
        )

    # --- cancellation and resolution ---------------------------------------------------------

    def request_cancel(self, reason: str) -> None:
        if self.result.done() or self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        if self._started and self.task is not None:
            self.task.cancel()

    def resolve(self, key_or_ref: str | int, value: Any, by: str) -> ResolutionOutcome:
        for wait in self.waits.values():
            if wait.entry_ref == key_or_ref or key_or_ref in wait.keys:
                return self._resolve_live(wait, value, by)
        return self._resolve_detached(key_or_ref, value, by)

    def _resolve_live(self, wait: _Wait, value: Any, by: str) -> ResolutionOutcome:
        if wait.future.done():
            winner = self.resolution_of(wait.entry_ref)
            if not self.bus.closed and winner is not None:
                self.emit(
                    ResolutionSuperseded,
                    self.root_span,
                    target_ref=wait.entry_ref,
                    entry_ref=winner.seq,
                    superseded_by=winner.seq,
                    reason="already_resolved",
                )
            reason = "deadline_passed" if winner is not None and winner.data.get("timedOut") else None
            return ResolutionOutcome(
                applied=False, target_ref=wait.entry_ref, reason=reason or "already_resolved"
            )
        entry = self.append(
            "resolution", None, {"targetRef": wait.entry_ref, "value": _jsonable(value), "by": by}
        )
        wait.future.set_result(value)
        if not self.bus.closed:
            self.emit(
                ResolutionApplied, self.root_span, target_ref=wait.entry_ref, entry_ref=entry.seq, by=by
            )
        return ResolutionOutcome(applied=True, target_ref=wait.entry_ref, entry_ref=entry.seq)

    def _resolve_detached(self, key_or_ref: str | int, value: Any, by: str) -> ResolutionOutcome:
        # Nothing waits in this process: close the journaled suspension for a later resume.
        live = not self.result.done() and not self.dry_run
        entries = list(self.entries) if live else self.engine.journal.load(self.run_id)
        resolved: dict[Any, JournalEntry] = {}
        for e in entries:
            if e.kind == "resolution":
                resolved.setdefault(e.data.get("targetRef"), e)
        for entry in entries:
            if entry.kind not in ("external_waiting", "approval_pending"):
                continue
            names = {entry.data.get("key"), entry.data.get("toolCallId")}
            if key_or_ref != entry.seq and key_or_ref not in names:
                continue
            winner = resolved.get(entry.seq)
            if winner is not None:
                reason = "deadline_passed" if winner.data.get("timedOut") else "already_resolved"
                return ResolutionOutcome(applied=False, target_ref=entry.seq, reason=reason)
            # Past its deadline the suspension closes as timed out, and this late answer loses.
            timed_out = self.deadline_passed(entry.data.get("deadlineAt"))
            data: dict[str, Any] = (
                {"targetRef": entry.seq, "timedOut": True, "by": "deadline"}
                if timed_out
                else {"targetRef": entry.seq, "value": _jsonable(value), "by": by}
            )
            if live:
                own = self.append("resolution", None, data)
            else:
                own = JournalEntry(
                    seq=1 + max(e.seq for e in entries),
                    kind="resolution",
                    ts=format_ts(self.engine.clock()),
                    data=data,
                )
                self.engine.journal.append(self.run_id, own)
            if timed_out:
                return ResolutionOutcome(applied=False, target_ref=entry.seq, reason="deadline_passed")
            return ResolutionOutcome(applied=True, target_ref=entry.seq, entry_ref=own.seq)
        raise ConfigError(f"run {self.run_id!r} has no suspension named {key_or_ref!r}")

    # --- the run -----------------------------------------------------------------------------

    async def _main(self) -> None:
        self._started = True
        ctx = Context(self)
        root = _Frame(self, "", self.root_span, None, None, self.wf.name)
        _FRAME.set(root)
        if not self.dry_run:
            if self.segment == 0:
                self.append(
                    "run_start",
                    None,
                    {"workflow": self.wf.name, "args": _jsonable(self.args), "budgetUsd": self.budget_usd},
                )
            self.append("segment", None, {"segment": self.segment, "dryRun": False})
        else:
            # The segment marker keeps seq/span bases unique; it is the only write a dry-run makes.
            self.dry_run = False
            self.append("segment", None, {"segment": self.segment, "dryRun": True})
            self.dry_run = True
        self.emit(RunStart, self.root_span, workflow=self.wf.name, resumed=self.segment > 0)
        status = "ok"
        value: Any = None
        error: dict[str, Any] | None = None
        lift: dict[str, Any] = {}
        detect = self.engine.determinism_mode != "off"
        try:
            if self.cancel_reason is not None:
                raise asyncio.CancelledError
            with self.detector.active():
                value = await determinism.drive(self.wf.fn(ctx, self.args), detect)
            lift = _lift(value)
        except asyncio.CancelledError:
            if self.task is not None:
                self.task.uncancel()
            status = "cancelled"
            error = wire_error("cancelled", self.cancel_reason or "the run was cancelled")
        except _ReplayedCancel:
            status = "cancelled"
            error = wire_error("cancelled", "the replayed segment was cancelled")
        except _Suspend:
            status = "suspended"
        except BudgetExhaustedError as exc:
            status, error, lift = "exhausted", exc.to_wire(), _lift(exc.data)
        except WorkflowError as exc:
            status, error, lift = "error", exc.to_wire(), _lift(exc.data)
        except Exception as exc:  # noqa: BLE001 - any workflow failure settles the run as error
            status, error = (
                "error",
                wire_error(getattr(exc, "code", None) or "error", f"{type(exc).__name__}: {exc}"),
            )
            if not isinstance(error["code"], str):
                error["code"] = "error"
        violation = self.detector.violation
        if violation is not None and status != "cancelled":
            # Rejected even when the workflow caught the error: its result rests on a bare call.
            status, value, error, lift = "error", None, violation.to_wire(), {}
        self._settle(status, value, error, lift)

    def _settle(self, status: str, value: Any, error: dict[str, Any] | None, lift: dict[str, Any]) -> None:
        report: CostReport = fold_cost_report(self.records)
        usage = total_usage(self.records)
        completion = lift.get("completion")
        envelope = build_envelope(
            run_id=self.run_id,
            workflow=self.wf.name,
            status=status,
            report=report,
            usage=usage,
            agents_spawned=self.agents_spawned,
            error=error,
            completion=completion,
        )
        settled = True
        if not self.dry_run:
            try:
                self.append(
                    "run_settle",
                    None,
                    {"status": status, "value": _jsonable(value), "error": error, "lift": lift},
                )
            except SourceError as exc:
                settled = False
                envelope["settled"] = False
                self.emit(Log, self.root_span, level="warn", msg=f"settlement write failed: {exc}")
        body = {_LIFT_ATTRS[k]: v for k, v in lift.items()}
        self.emit(
            RunEnd,
            self.root_span,
            status=status,
            total_usd=report.total_usd,
            usage_approx=True if report.usage_approx else None,
            settled=None if settled else False,
            envelope=envelope,
            **body,
        )
        self.bus.close()
        for wait in self.waits.values():
            if not wait.future.done():
                wait.future.cancel()
        if not settled:
            self.result.set_exception(
                RunRejectedError(
                    "settlement failed: nothing durable records this terminal; resume re-settles",
                    name="SettlementError",
                )
            )
            return
        outcome = RunOutcome(
            status=status,
            value=_jsonable(value) if status in ("ok", "exhausted", "error") and value is not None else None,
            error=error,
            usage=usage_dict(usage),
            cost=report.to_json(),
            envelope=envelope,
            completion=completion,
            childStatusCounts=lift.get("childStatusCounts"),
            dropped=[],
            pending=list(self.pending),
            **{k: v for k, v in lift.items() if k in _LIFT_LISTS},
        )
        self.result.set_result(outcome)


class Context:
    """What a workflow body receives: the journaled primitives of the run."""

    def __init__(self, run: _Run) -> None:
        self._run = run

    def _frame(self) -> _Frame:
        frame = _FRAME.get()
        if frame is None or frame.run is not self._run:
            raise ConfigError("ctx is used outside its own workflow run")
        return frame

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        """A named phase: a span for everything inside, and the ``byPhase`` cost bucket."""
        frame = self._frame()
        run = self._run
        span = run.mint_span()
        run.emit(PhaseStart, span, frame.span_id, phase=name)
        token = _FRAME.set(replace(frame, span_id=span, parent_span_id=frame.span_id, phase=name))
        try:
            yield
        finally:
            _FRAME.reset(token)

    def log(self, level: str, msg: str, data: Any = None) -> None:
        """A workflow log line (``debug``, ``info``, ``warn``, ``error``); ``data`` must be JSON."""
        if level not in ("debug", "info", "warn", "error"):
            raise ConfigError(f"log level must be debug, info, warn or error, got {level!r}")
        frame = self._frame()
        self._run.emit(Log, frame.span_id, frame.parent_span_id, level=level, msg=msg, data=_jsonable(data))

    def now(self) -> float:
        """Wall-clock seconds since the epoch, journaled: a replay returns the recorded value."""
        return float(self._recorded("now", lambda: self._run.engine.clock().timestamp()))

    def random(self) -> float:
        """A float in [0, 1), journaled: a replay returns the recorded value."""
        return float(self._recorded("random", random.SystemRandom().random))

    def _recorded(self, kind: str, make: Callable[[], float]) -> float:
        frame = self._frame()
        key, _ = frame.key(kind)
        entry = self._run.lookup(kind, key)
        if entry is not None:
            return float(entry.data["value"])
        if self._run.dry_run:
            raise ReplayMissError(f"dry-run: no journaled {kind}() value for {key}")
        value = make()
        self._run.append(kind, key, {"value": value})
        return value

    async def parallel(self, items: Iterable[Awaitable[T] | Callable[[], Awaitable[T]]]) -> list[T]:
        """Run branches concurrently, each in its own scope; returns their results in order.

        Every branch runs to its end; then the first failure (in branch order) is raised.
        """
        frame = self._frame()
        run = self._run
        _, ordinal = frame.key("par")
        prefix = f"{frame.scope}/" if frame.scope else ""
        tasks: list[asyncio.Task[T]] = []
        detect = run.engine.determinism_mode != "off"
        for index, item in enumerate(items):
            branch = _Frame(
                run,
                f"{prefix}par:{ordinal}:{index}",
                run.mint_span(),
                frame.span_id,
                frame.phase,
                frame.workflow,
            )
            awaitable = item() if callable(item) else item
            tasks.append(asyncio.get_running_loop().create_task(_branch(branch, awaitable, detect)))
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        for failure in failures:
            if not isinstance(failure, _Suspend):
                raise failure
        if failures:
            raise failures[0]
        return cast(list[T], outcomes)

    async def workflow(self, child: Workflow, args: Any = None) -> Any:
        """Run ``child`` as a child workflow in its own scope (``child:start``/``child:end``)."""
        _check_workflow(child)
        frame = self._frame()
        run = self._run
        key, ordinal = frame.key("child")
        prefix = f"{frame.scope}/" if frame.scope else ""
        scope = f"{prefix}wf:{child.name}:{ordinal}"
        terminal = run.lookup("child", key)
        span = run.mint_span()
        reserve = run.engine.default_reserve_usd
        replayed = terminal is not None
        if not replayed:
            if run.dry_run:
                raise ReplayMissError(f"dry-run: child workflow {child.name!r} ({key}) is not journaled")
            run.admit(reserve)
            run.agents_spawned += 1
            admitted = run.append("child_admit", key, {"workflow": child.name, "scope": scope})
            run.emit(
                SpawnAdmitted,
                span,
                frame.span_id,
                entry_ref=admitted.seq,
                verdict="admit",
                agent_type=child.name,
                logical_task_id=f"{run.run_id}/{scope}",
                spawn_units_after=max(0, run.engine.max_spawn_units - run.agents_spawned),
                reserve_usd=reserve,
            )
        else:
            run.agents_spawned += 1
        run.emit(ChildStart, span, frame.span_id, replayed=replayed, workflow=child.name, scope=scope)
        token = _FRAME.set(_Frame(run, scope, span, frame.span_id, None, child.name))
        status = "error"
        try:
            value = await child.fn(self, args)
            status = "ok"
            return value
        except (asyncio.CancelledError, _ReplayedCancel):
            status = "cancelled"
            raise
        except _Suspend:
            status = "suspended"
            raise
        except BudgetExhaustedError:
            status = "exhausted"
            raise
        finally:
            _FRAME.reset(token)
            if replayed:
                assert terminal is not None
                run.emit(
                    ChildEnd,
                    span,
                    frame.span_id,
                    replayed=True,
                    workflow=child.name,
                    scope=scope,
                    status=str(terminal.data.get("status", status)),
                )
            else:
                if status != "suspended":
                    with contextlib.suppress(SourceError):
                        run.append("child", key, {"workflow": child.name, "scope": scope, "status": status})
                run.emit(ChildEnd, span, frame.span_id, workflow=child.name, scope=scope, status=status)
                run.release(reserve)

    async def await_external(
        self, key: str, prompt: str | None = None, *, deadline_at: datetime | float | None = None
    ) -> Any:
        """Suspend the run until ``handle.resolve_external(key, value)``; returns ``value`` on resume.

        ``deadline_at`` (an aware datetime, or epoch seconds such as ``ctx.now() + 3600``) bounds
        the wait: once it has passed, a resume (or a late resolution) closes the suspension as timed
        out and this call raises DeadlineExceededError. The first close wins, so a resolution that
        arrived before the deadline still applies.
        """
        frame = self._frame()
        run = self._run
        jkey = f"{frame.scope}|ext:{key}"
        waiting = run.lookup("external_waiting", jkey)
        if waiting is not None:
            deadline = waiting.data.get("deadlineAt")
            closing = run.resolution_of(waiting.seq)
            if closing is None and not run.dry_run and run.deadline_passed(deadline):
                closing = run.close_timed_out(waiting.seq)
            if closing is not None:
                if closing.data.get("timedOut"):
                    raise _deadline_error(key, deadline)
                return closing.data.get("value")
            run.emit(
                ExternalWaiting,
                run.root_span,
                replayed=True,
                key=key,
                entry_ref=waiting.seq,
                prompt=prompt,
                deadline_at=deadline,
            )
        else:
            if run.dry_run:
                raise ReplayMissError(f"dry-run: external key {key!r} was never awaited")
            deadline = _deadline_iso(deadline_at)
            data = {"key": key, "prompt": prompt, "scope": frame.scope}
            if deadline is not None:
                data["deadlineAt"] = deadline
            waiting = run.append("external_waiting", jkey, data)
            run.emit(
                ExternalWaiting,
                run.root_span,
                key=key,
                entry_ref=waiting.seq,
                prompt=prompt,
                deadline_at=deadline,
            )
            if run.deadline_passed(deadline):
                run.close_timed_out(waiting.seq)
                raise _deadline_error(key, deadline)
        run.pending.append({"key": key, "scope": frame.scope, "entryRef": waiting.seq, "prompt": prompt})
        raise _Suspend

    async def agent(
        self,
        prompt: str,
        *,
        agent_type: str = "",
        label: str | None = None,
        tools: Sequence[Tool] = (),
        schema: Any = None,
        model: str | None = None,
        role: str = "loop",
        max_turns: int = 16,
        compact_at_tokens: int | None = None,
        summarize_model: str | None = None,
        finalize: bool = False,
        finalize_model: str | None = None,
        extract_model: str | None = None,
        schema_attempts: int = 2,
        reserve_usd: float | None = None,
        permissions: Permissions | None = None,
        deny_repeated_calls: bool = False,
        tool_caps: Mapping[str, int] | None = None,
        system: str | None = None,
        stream: bool = False,
        approval_timeout_s: float | None = None,
    ) -> Any:
        """Dispatch one agent: a tool loop, optional compaction, finalize and schema extract.

        Returns the final text, or the validated ``schema`` value. Raises AgentFailedError (or the
        budget/quota error that ended it) when the agent settles ``error``.
        """
        run = self._run
        model_ref, _, _ = run.engine.resolve_model(model)
        for name in (summarize_model, finalize_model, extract_model):
            if name is not None:
                run.engine.resolve_model(name)
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"agent {label or agent_type!r}: two tools share a name")
        if max_turns < 1 or schema_attempts < 1:
            raise ConfigError("max_turns and schema_attempts must be >= 1")
        if approval_timeout_s is not None and not approval_timeout_s > 0:
            raise ConfigError("approval_timeout_s must be > 0")
        spec = _AgentSpec(
            prompt=prompt,
            agent_type=agent_type,
            label=label,
            tools=tuple(tools),
            schema=schema,
            model_ref=model_ref,
            role=role,
            max_turns=max_turns,
            compact_at_tokens=compact_at_tokens,
            summarize_model=run.engine.resolve_model(summarize_model or model_ref)[0],
            finalize=finalize,
            finalize_model=run.engine.resolve_model(finalize_model or model_ref)[0],
            extract_model=run.engine.resolve_model(extract_model or model_ref)[0],
            schema_attempts=schema_attempts,
            reserve_usd=run.engine.default_reserve_usd if reserve_usd is None else reserve_usd,
            reserve_explicit=reserve_usd is not None,
            permissions=run.engine.permissions.merged(permissions),
            deny_repeated_calls=deny_repeated_calls,
            tool_caps=dict(tool_caps or {}),
            system=system,
            stream=stream,
            approval_timeout_s=(
                run.engine.approval_timeout_s if approval_timeout_s is None else approval_timeout_s
            ),
        )
        return await _AgentRun(run, self._frame(), spec).dispatch()


async def _branch(frame: _Frame, awaitable: Awaitable[T], detect: bool) -> T:
    _FRAME.set(frame)
    if inspect.iscoroutine(awaitable):
        return await determinism.drive(cast(Coroutine[Any, Any, T], awaitable), detect)
    return await awaitable


class _AgentRun:
    """One agent dispatch: exactly one agent:start/agent:end pair, phase pairs inside."""

    def __init__(self, run: _Run, frame: _Frame, spec: _AgentSpec) -> None:
        self.run = run
        self.frame = frame
        self.spec = spec
        self.key, _ = frame.key("agent")
        self.span = ""
        self.invocations = 0
        self.turns = 0
        self.usage = Usage()
        self.cost = 0.0
        self.slices: list[Slice] = []
        self.tool_log: list[dict[str, Any]] = []
        self.wire_requests = 0
        self.retry_count = 0
        self.denials = {"total": 0, "requests": 0, "tokens": 0, "recovered": 0}
        self.signatures: set[str] = set()
        self.calls_by_tool: dict[str, int] = {}
        self.explore = {"toolCallsUsed": 0, "repeatedCalls": 0, "deniedRepeats": 0, "deniedToolCap": 0}
        self.open_phases: list[_Phase] = []
        self.messages: list[dict[str, Any]] = []
        self.reserve = spec.reserve_usd

    # --- events ----------------------------------------------------------------------------

    def _agent_fields(self) -> dict[str, Any]:
        return {"agent_type": self.spec.agent_type, "label": self.spec.label}

    def emit(self, cls: type[EventModel], *, replayed: bool = False, **body: Any) -> None:
        self.run.emit(cls, self.span, self.frame.span_id, replayed=replayed, **self._agent_fields(), **body)

    def emit_tool(self, cls: type[EventModel], *, replayed: bool = False, **body: Any) -> None:
        self.run.emit(cls, self.span, self.frame.span_id, replayed=replayed, **body)

    def _delta(self, text: str) -> None:
        # Live telemetry only: a delta is never journaled, so a replayed turn streams nothing.
        if isinstance(text, str) and text and not self.run.bus.closed:
            self.run.emit(AgentStream, self.span, self.frame.span_id, delta=text)

    # --- dispatch ---------------------------------------------------------------------------

    async def dispatch(self) -> Any:
        run = self.run
        terminal = run.lookup("agent", self.key)
        if terminal is not None and (terminal.data.get("status") != "cancelled" or run.dry_run):
            return self._replay(terminal)
        if run.dry_run:
            raise ReplayMissError(
                f"dry-run: agent {self.spec.label or self.spec.agent_type!r} is not journaled"
            )
        reserve = await self._probe_reserve()
        self.reserve = reserve
        run.admit(reserve)
        run.agents_spawned += 1
        self.span = run.mint_span()
        gate = run.engine.concurrency
        held = False
        cut_in_queue: asyncio.CancelledError | None = None
        if gate is not None:
            held = gate.try_acquire()
            if not held:
                self.emit(AgentQueued)
                try:
                    await gate.wait()
                    held = True
                except asyncio.CancelledError as exc:
                    # Still one start/end pair: the dispatch settles cancelled before any work.
                    cut_in_queue = exc
        self.emit(AgentStart, model=self.spec.model_ref, role=self.spec.role)
        status = "error"
        value: Any = None
        error: dict[str, Any] | None = None
        failure: BaseException | None = None
        approx = False
        try:
            if cut_in_queue is not None:
                raise cut_in_queue
            value = await self._body()
            status = "ok"
        except asyncio.CancelledError as exc:
            status, approx, failure = "cancelled", True, exc
        except _AgentAbortError as exc:
            error, approx, failure = exc.cause.to_wire(), True, exc.cause
        except (WorkflowError, ConfigError) as exc:
            wire = exc.to_wire() if isinstance(exc, WorkflowError) else wire_error("config", str(exc))
            error, approx, failure = wire, True, exc
        except _Suspend as exc:
            status, approx, failure = "cancelled", True, exc
        except Exception as exc:  # noqa: BLE001 - an unexpected failure still settles the agent
            error, approx, failure = wire_error("error", f"{type(exc).__name__}: {exc}"), True, exc
        finally:
            if held and gate is not None:
                gate.release()
        # Usage is approximate only when a wire call was cut; a pre-wire refusal billed nothing.
        approx = approx and cut_in_queue is None and (status == "cancelled" or self.wire_requests > 0)
        for phase in reversed(self.open_phases):
            self._phase_end(phase, "error")
        self.open_phases.clear()
        run.release(reserve)
        data: dict[str, Any] = {
            "agentType": self.spec.agent_type,
            "label": self.spec.label,
            "model": self.spec.model_ref,
            "role": self.spec.role,
            "status": status,
            "value": _jsonable(value),
            "usage": usage_dict(self.usage),
            "costUsd": self.cost,
            "slices": [s.to_json() for s in self.slices],
            "tools": self.tool_log,
            "wireRequests": self.wire_requests,
            "phase": self.frame.phase,
            "scope": self.frame.scope,
        }
        if error is not None:
            data["error"] = error
        if approx:
            data["usageApprox"] = True
        entry_ref: int | None = None
        with contextlib.suppress(SourceError):
            entry_ref = run.append("agent", self.key, data).seq
        run.records.append(
            AgentRecord(
                self.spec.agent_type,
                self.frame.phase,
                self.frame.scope,
                list(self.slices),
                approx,
                self.wire_requests,
                entry_ref if entry_ref is not None else 1 << 62,
            )
        )
        exploration = None
        # The guard counters ride agent:end whenever an exploration limit was configured.
        if (
            self.spec.deny_repeated_calls
            or self.spec.tool_caps
            or any(t.max_calls is not None for t in self.spec.tools)
        ):
            exploration = {
                "toolCallsUsed": self.explore["toolCallsUsed"],
                "distinctSignatures": len(self.signatures),
                "repeatedCalls": self.explore["repeatedCalls"],
                "duplicateResultCalls": 0,
                "deniedRepeats": self.explore["deniedRepeats"],
                "byTool": dict(sorted(self.calls_by_tool.items())),
            }
            if self.explore["deniedToolCap"]:
                exploration["deniedToolCap"] = self.explore["deniedToolCap"]
        self.emit(
            AgentEnd,
            status=status,
            usage=usage_dict(self.usage),
            cost_usd=self.cost,
            cost_basis="per-call",
            entry_ref=entry_ref if entry_ref is not None else -1,
            error=error,
            exploration=exploration,
            retry_count=self.retry_count or None,
            usage_approx=True if approx else None,
            quota_denials=dict(self.denials) if self.denials["total"] else None,
        )
        if failure is not None:
            raise failure
        return value

    def _control_wire(self, **body: Any) -> None:
        # On the spawning scope's span: the agent's own span does not exist before admission.
        self.run.emit(
            ControlWire,
            self.frame.span_id,
            self.frame.parent_span_id,
            control_kind="countTokens",
            model=self.spec.model_ref,
            **body,
        )

    async def _probe_reserve(self) -> float:
        """The admission reserve: flat, or priced from a countTokens probe when the policy allows.

        The probe is control egress (``control:wire``), live only and never journaled: a replay
        admits nothing, so it never probes.
        """
        spec = self.spec
        run = self.run
        policy = run.engine.count_tokens
        _, adapter, model_name = run.engine.resolve_model(spec.model_ref)
        if policy == "off" or spec.reserve_explicit or not isinstance(adapter, TokenCounter):
            return spec.reserve_usd
        allowed = policy(spec.model_ref) if callable(policy) else True
        if not allowed:
            self._control_wire(outcome="denied")
            return spec.reserve_usd
        messages = [{"role": "system", "content": spec.system}] if spec.system else []
        messages.append({"role": "user", "content": spec.prompt})
        request = ModelRequest(
            model=model_name,
            role=spec.role,
            messages=messages,
            tools=[t.spec() for t in spec.tools],
            agent_type=spec.agent_type,
            label=spec.label,
        )
        try:
            with determinism.suppressed():
                counted = int(await adapter.count_tokens(request))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a refused probe admits on the flat reserve instead
            self._control_wire(outcome="failed")
            return spec.reserve_usd
        self._control_wire(outcome="ok", input_tokens=counted)
        priced = run.engine.pricing.usd(
            spec.model_ref,
            Usage(input_tokens=counted, output_tokens=run.engine.probe_output_tokens),
        )
        return spec.reserve_usd if priced is None else priced

    def _replay(self, terminal: JournalEntry) -> Any:
        run = self.run
        data = terminal.data
        self.span = run.mint_span()
        run.agents_spawned += 1
        self.emit(AgentStart, replayed=True, model=str(data.get("model")), role=str(data.get("role", "loop")))
        for call in data.get("tools") or []:
            self.emit_tool(
                ToolStart, replayed=True, tool_name=call["toolName"], tool_call_id=call["toolCallId"]
            )
            self.emit_tool(
                ToolEnd,
                replayed=True,
                tool_name=call["toolName"],
                tool_call_id=call["toolCallId"],
                outcome=call["outcome"],
                duration_ms=0,
                guard=call.get("guard"),
            )
        slices = [Slice.from_json(s) for s in data.get("slices") or []]
        for part in slices:
            common = {"role": part.role, "model": part.model, "invocation": part.invocation}
            self.emit(AgentPhaseStart, replayed=True, **common)
            self.emit(
                AgentPhaseEnd,
                replayed=True,
                **common,
                duration_ms=0,
                usage=usage_dict(part.usage),
                cost_usd=part.cost_usd or 0.0,
                cost_basis="per-call",
                outcome="error" if data.get("status") != "ok" and part is slices[-1] else "ok",
            )
        cost = float(data.get("costUsd") or 0.0)
        run.spent += cost
        approx = bool(data.get("usageApprox"))
        run.records.append(
            AgentRecord(
                str(data.get("agentType") or ""),
                data.get("phase"),
                str(data.get("scope") or ""),
                slices,
                approx,
                int(data.get("wireRequests") or 0),
                terminal.seq,
            )
        )
        status = str(data.get("status"))
        self.emit(
            AgentEnd,
            replayed=True,
            status=status,
            usage=data.get("usage") or {},
            cost_usd=cost,
            cost_basis="per-call",
            entry_ref=terminal.seq,
            error=data.get("error"),
            usage_approx=True if approx else None,
        )
        if status == "ok":
            value = data.get("value")
            if self.spec.schema is not None and value is not None:
                return TypeAdapter(self.spec.schema).validate_python(value)
            return value
        if status == "cancelled":
            raise _ReplayedCancel
        wire = data.get("error") or wire_error("agent", "the journaled agent failed")
        code = wire.get("code")
        if code == ExposureDrainedError.code:
            raise ExposureDrainedError(str(wire.get("message")), data=wire.get("data"))
        if code == BudgetExhaustedError.code:
            raise BudgetExhaustedError(str(wire.get("message")), data=wire.get("data"))
        raise AgentFailedError.from_wire(wire)

    # --- phases --------------------------------------------------------------------------

    def _phase_start(self, role: str, model: str) -> _Phase:
        self.invocations += 1
        phase = _Phase(role, model, self.invocations, time.perf_counter())
        self.open_phases.append(phase)
        self.emit(AgentPhaseStart, role=role, model=model, invocation=phase.invocation)
        return phase

    def _phase_end(self, phase: _Phase, outcome: str) -> None:
        if phase in self.open_phases:
            self.open_phases.remove(phase)
        self.slices.append(
            Slice(
                phase.role, phase.model, phase.invocation, phase.usage, None if phase.unpriced else phase.cost
            )
        )
        self.emit(
            AgentPhaseEnd,
            role=phase.role,
            model=phase.model,
            invocation=phase.invocation,
            duration_ms=round((time.perf_counter() - phase.started) * 1000),
            usage=usage_dict(phase.usage),
            cost_usd=phase.cost,
            cost_basis="per-call",
            outcome=outcome,
            retries=phase.retries or None,
        )

    async def _body(self) -> Any:
        spec = self.spec
        if spec.system:
            self.messages.append({"role": "system", "content": spec.system})
        self.messages.append({"role": "user", "content": spec.prompt})
        loop = self._phase_start(spec.role, spec.model_ref)
        text: str | None = None
        finished = False
        for _ in range(spec.max_turns):
            turn = await self._call(loop, spec.model_ref, tools=True)
            if not turn.tool_calls:
                text = turn.text or ""
                self.messages.append({"role": "assistant", "content": text})
                finished = True
                break
            self.messages.append(
                {
                    "role": "assistant",
                    "content": turn.text,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {
                                "name": c.name,
                                "arguments": orjson.dumps(dict(c.arguments)).decode(),
                            },
                        }
                        for c in turn.tool_calls
                    ],
                }
            )
            for call in turn.tool_calls:
                await self._tool(call)
            if spec.compact_at_tokens is not None and turn.usage.input_tokens >= spec.compact_at_tokens:
                await self._summarize()
        if not finished and not spec.finalize:
            raise _AgentAbortError(
                AgentFailedError(f"no final answer within {spec.max_turns} turns", code="max_turns")
            )
        self._phase_end(loop, "ok")
        if spec.finalize:
            phase = self._phase_start("finalize", spec.finalize_model)
            self.messages.append({"role": "user", "content": "Write the final answer now."})
            turn = await self._call(phase, spec.finalize_model, tools=False)
            text = turn.text or ""
            self.messages.append({"role": "assistant", "content": text})
            self._phase_end(phase, "ok")
        if spec.schema is None:
            return text
        return await self._extract()

    async def _summarize(self) -> None:
        phase = self._phase_start("summarize", self.spec.summarize_model)
        turn = await self._call(phase, self.spec.summarize_model, tools=False)
        self._phase_end(phase, "ok")
        # Compaction: the conversation restarts from the task and the summary.
        head = [m for m in self.messages[:2] if m["role"] in ("system", "user")]
        self.messages = [*head, {"role": "assistant", "content": turn.text or ""}]

    async def _extract(self) -> Any:
        spec = self.spec
        adapter = TypeAdapter(spec.schema)
        schema_json = adapter.json_schema()
        phase = self._phase_start("extract", spec.extract_model)
        self.messages.append({"role": "user", "content": "Return the answer as JSON matching the schema."})
        for attempt in range(1, spec.schema_attempts + 1):
            turn = await self._call(phase, spec.extract_model, tools=False, schema=schema_json)
            try:
                value = adapter.validate_json(turn.text or "")
            except ValidationError as exc:
                if attempt < spec.schema_attempts:
                    self.run.emit(
                        AgentSchemaRetry,
                        self.span,
                        self.frame.span_id,
                        agent_type=spec.agent_type,
                        attempt=attempt,
                        max_attempts=spec.schema_attempts,
                    )
                    self.messages.append(
                        {
                            "role": "user",
                            "content": f"The JSON was invalid ({exc.error_count()} errors). Retry.",
                        }
                    )
                    continue
                raise _AgentAbortError(
                    SchemaValidationError(f"structured output invalid after {attempt} attempt(s)")
                ) from exc
            self._phase_end(phase, "ok")
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    # --- one model turn ----------------------------------------------------------------------

    async def _call(
        self, phase: _Phase, model_ref: str, *, tools: bool, schema: Mapping[str, Any] | None = None
    ) -> ModelTurn:
        run = self.run
        key = f"{self.key}/turn{self.turns}"
        self.turns += 1
        recorded = run.lookup("turn", key)
        if recorded is not None:
            turn = ModelTurn.from_json(recorded.data["turn"])
            cost = recorded.data.get("costUsd")
            self.wire_requests += int(recorded.data.get("wireRequests") or 1)
            self._account(phase, turn.usage, float(cost) if isinstance(cost, int | float) else None)
            return turn
        _, adapter, model_name = run.engine.resolve_model(model_ref)
        request = ModelRequest(
            model=model_name,
            role=phase.role,
            messages=[dict(m) for m in self.messages],
            tools=[t.spec() for t in self.spec.tools] if tools else (),
            response_schema=schema,
            agent_type=self.spec.agent_type,
            label=self.spec.label,
            turn=self.turns - 1,
            on_delta=self._delta if self.spec.stream else None,
        )
        attempts = 0
        wires = 0
        while True:
            if run.budget_usd is not None and run.spent >= run.budget_usd:
                raise _AgentAbortError(
                    BudgetExhaustedError(
                        f"budget ceiling {run.budget_usd:.4f} USD reached (spent {run.spent:.4f} USD)",
                        data={"account": "run", "spentUsd": run.spent, "ceilingUsd": run.budget_usd},
                    )
                )
            await self._quota(model_ref)
            estimate = self.reserve
            await self._exposure(model_ref, estimate)
            wires += 1
            self.wire_requests += 1
            try:
                with determinism.suppressed():
                    turn = await adapter.turn(request)
            except AdapterError as exc:
                attempts += 1
                will_retry = exc.retryable and attempts <= run.engine.retry.max_retries
                self.emit(AgentError, error=exc.to_wire(), will_retry=will_retry)
                if not will_retry:
                    raise _AgentAbortError(exc) from exc
                phase.retries += 1
                self.retry_count += 1
                if run.engine.retry.backoff_ms:
                    await run.engine.sleep(run.engine.retry.backoff_ms * attempts / 1000)
                continue
            except (asyncio.CancelledError, _AgentAbortError):
                raise
            except Exception as exc:
                wrapped = AdapterError(
                    f"adapter {adapter.adapter_id!r} raised {type(exc).__name__}", code="adapter"
                )
                self.emit(AgentError, error=wrapped.to_wire(), will_retry=False)
                raise _AgentAbortError(wrapped) from exc
            finally:
                if run.exposure is not None:
                    run.exposure.release(estimate)
            break
        cost = run.engine.pricing.usd(model_ref, turn.usage)
        run.append(
            "turn",
            key,
            {
                "turn": turn.to_json(),
                "role": phase.role,
                "model": model_ref,
                "costUsd": cost,
                "wireRequests": wires,
            },
        )
        self._account(phase, turn.usage, cost)
        return turn

    def _account(self, phase: _Phase, usage: Usage, cost: float | None) -> None:
        phase.usage = add_usage(phase.usage, usage)
        self.usage = add_usage(self.usage, usage)
        if cost is None:
            phase.unpriced = True
        else:
            phase.cost += cost
            self.cost += cost
            self.run.spent += cost
        self.run.budget_update()

    async def _quota(self, model_ref: str) -> None:
        limiter = self.run.engine.quota
        if limiter is None:
            return
        denied = 0
        while True:
            decision = limiter.acquire(
                model_ref, sum(len(str(m.get("content") or "")) for m in self.messages) // 4
            )
            if decision.allowed:
                if denied:
                    self.denials["recovered"] += 1
                return
            denied += 1
            self.denials["total"] += 1
            reason = decision.reason or ""
            self.denials["requests" if "request" in reason.lower() else "tokens"] += 1
            if denied > self.run.engine.max_denials:
                exc = QuotaExhaustedError(
                    f"quota denied {denied} times for {model_ref}: {reason}",
                    data={"model": model_ref, "denials": denied},
                )
                self.emit(AgentError, error=exc.to_wire(), will_retry=False)
                raise _AgentAbortError(exc)
            self.emit(
                QuotaDenied,
                model=model_ref,
                reason=decision.reason,
                retry_after_ms=decision.retry_after_ms,
                will_retry=True,
            )
            await self.run.engine.sleep((decision.retry_after_ms or 0.0) / 1000)

    async def _exposure(self, model_ref: str, estimate: float) -> None:
        gate = self.run.exposure
        if gate is None:
            return
        while not gate.fits(estimate):
            will_wait = gate.holds > 0
            self.emit(
                BudgetExposureWait,
                model=model_ref,
                scope="child" if self.frame.scope.startswith("wf:") or "/wf:" in self.frame.scope else "root",
                cap_usd=gate.cap_usd,
                spent_usd=self.run.spent,
                in_flight_usd=gate.in_flight_usd,
                estimate_usd=estimate,
                will_wait=will_wait,
            )
            if not will_wait:
                raise _AgentAbortError(
                    ExposureDrainedError(
                        f"in-flight exposure cap {gate.cap_usd} USD cannot fit the estimate {estimate} USD "
                        "and nothing in flight can release",
                        data={
                            "capUsd": gate.cap_usd,
                            "estimateUsd": estimate,
                            "inFlightUsd": gate.in_flight_usd,
                        },
                    )
                )
            await gate.wait_release()
        gate.hold(estimate)

    # --- tools ---------------------------------------------------------------------------------

    async def _tool(self, call: ToolCallRequest) -> None:
        run = self.run
        by_name = {t.name: t for t in self.spec.tools}
        tool_def = by_name.get(call.name)
        tkey = f"{self.key}/tool/{call.id}"
        recorded = run.lookup("tool", tkey)
        if recorded is not None:
            data = recorded.data
            self.emit_tool(ToolStart, replayed=True, tool_name=call.name, tool_call_id=call.id)
            self._count(call, data["outcome"], data.get("guard"))
            self.emit_tool(
                ToolEnd,
                replayed=True,
                tool_name=call.name,
                tool_call_id=call.id,
                outcome=data["outcome"],
                duration_ms=0,
                guard=data.get("guard"),
            )
            self._record_tool(call, data["outcome"], data.get("result"), data.get("guard"), write=False)
            return
        risk = tool_def.risk if tool_def is not None else None
        self.emit_tool(ToolStart, tool_name=call.name, tool_call_id=call.id, risk=risk)
        started = time.perf_counter()
        signature = call.name + orjson.dumps(dict(call.arguments), option=orjson.OPT_SORT_KEYS).decode()
        end: dict[str, Any] = {}
        guard: str | None = None
        result: Any = None
        if self.spec.deny_repeated_calls and signature in self.signatures:
            outcome, guard = "denied", "repeated-signature"
            self.explore["deniedRepeats"] += 1
            result = "denied: this exact call was already made"
        elif self._over_cap(call.name, tool_def):
            outcome, guard = "denied", "per-tool-cap"
            self.explore["deniedToolCap"] += 1
            result = f"denied: the call cap of {call.name} is spent"
        elif tool_def is None:
            outcome = "error"
            end["error_code"] = "unknown_tool"
            result = f"error: no tool named {call.name}"
        else:
            decision = self.spec.permissions.decide(tool_def, call.arguments)
            end.update(self._audit(decision))
            allowed = decision.verdict == "allow"
            answer: Any = None
            if decision.verdict == "ask":
                answer = await self._approval(call)
                allowed = answer is not _TIMED_OUT and bool(answer)
            if answer is _TIMED_OUT:
                outcome = "error"
                end["error_code"] = DeadlineExceededError.code
                result = "error: nobody approved this call before its deadline"
            elif not allowed:
                outcome = "denied"
                result = "denied by the permission chain"
            else:
                outcome, result, code = await self._execute(tool_def, call)
                if code is not None:
                    end["error_code"] = code
        duration = round((time.perf_counter() - started) * 1000)
        self._count(call, outcome, guard, signature=signature)
        self._record_tool(call, outcome, result, guard, write=True, duration=duration, extra=end)
        self.emit_tool(
            ToolEnd,
            tool_name=call.name,
            tool_call_id=call.id,
            outcome=outcome,
            duration_ms=duration,
            guard=guard,
            **end,
        )

    def _over_cap(self, name: str, tool_def: Tool | None) -> bool:
        cap = self.spec.tool_caps.get(name)
        if cap is None and tool_def is not None:
            cap = tool_def.max_calls
        return cap is not None and self.calls_by_tool.get(name, 0) >= cap

    @staticmethod
    def _audit(decision: Decision) -> dict[str, Any]:
        audit: dict[str, Any] = {"verdict": decision.verdict, "decided_by": decision.decided_by}
        if decision.rule is not None:
            audit["rule"] = decision.rule.to_json()
        return audit

    def _count(
        self, call: ToolCallRequest, outcome: str, guard: str | None, signature: str | None = None
    ) -> None:
        if signature is None:
            signature = call.name + orjson.dumps(dict(call.arguments), option=orjson.OPT_SORT_KEYS).decode()
        if guard is not None or outcome == "denied":
            return
        if signature in self.signatures:
            self.explore["repeatedCalls"] += 1
        self.signatures.add(signature)
        self.explore["toolCallsUsed"] += 1
        self.calls_by_tool[call.name] = self.calls_by_tool.get(call.name, 0) + 1

    def _record_tool(
        self,
        call: ToolCallRequest,
        outcome: str,
        result: Any,
        guard: str | None,
        *,
        write: bool,
        duration: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        log: dict[str, Any] = {"toolCallId": call.id, "toolName": call.name, "outcome": outcome}
        if guard is not None:
            log["guard"] = guard
        self.tool_log.append(log)
        content = result if isinstance(result, str) else orjson.dumps(_jsonable(result)).decode()
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        if write:
            data = {**log, "result": _jsonable(result), "durationMs": duration}
            for name, value in (extra or {}).items():
                data[name] = value
            self.run.append("tool", f"{self.key}/tool/{call.id}", data)

    async def _execute(self, tool_def: Tool, call: ToolCallRequest) -> tuple[str, Any, str | None]:
        try:
            with determinism.suppressed():
                return "ok", await tool_def.invoke(call.arguments), None
        except asyncio.CancelledError:
            self.emit_tool(
                ToolEnd,
                tool_name=call.name,
                tool_call_id=call.id,
                outcome="error",
                duration_ms=0,
                verdict="allow",
                decided_by="default",
                error_code="cancelled",
            )
            raise
        except Exception as exc:  # noqa: BLE001 - a tool failure is the call's outcome, never the run's
            code = getattr(exc, "code", None)
            return (
                "error",
                f"error: {type(exc).__name__}",
                code if isinstance(code, str) else type(exc).__name__,
            )

    async def _approval(self, call: ToolCallRequest) -> Any:
        """The approver's answer, or ``_TIMED_OUT`` when the approval deadline passed first."""
        run = self.run
        akey = f"{self.key}/approval/{call.id}"
        pending = run.lookup("approval_pending", akey)
        replayed = pending is not None
        if pending is not None:
            deadline = pending.data.get("deadlineAt")
            closing = run.resolution_of(pending.seq)
            if closing is None and not run.dry_run and run.deadline_passed(deadline):
                closing = run.close_timed_out(pending.seq)
            if closing is not None:
                return _TIMED_OUT if closing.data.get("timedOut") else closing.data.get("value")
        else:
            timeout = self.spec.approval_timeout_s
            deadline = (
                format_ts(run.engine.clock() + timedelta(seconds=timeout)) if timeout is not None else None
            )
            data = {"toolName": call.name, "toolCallId": call.id}
            if deadline is not None:
                data["deadlineAt"] = deadline
            pending = run.append("approval_pending", akey, data)
        # Registered before the event goes out: a listener may answer from inside the emit.
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        run.waits[pending.seq] = _Wait("approval", pending.seq, (call.id, f"approval:{call.id}"), future)
        self.emit_tool(
            ApprovalPending,
            replayed=replayed,
            tool_name=call.name,
            entry_ref=pending.seq,
            deadline_at=deadline,
        )
        watchdog: asyncio.Task[None] | None = None
        if isinstance(deadline, str) and not run.dry_run and not future.done():
            watchdog = asyncio.get_running_loop().create_task(
                self._approval_deadline(pending.seq, deadline, future)
            )
        try:
            return await future
        finally:
            if watchdog is not None:
                watchdog.cancel()
            run.waits.pop(pending.seq, None)

    async def _approval_deadline(self, entry_ref: int, deadline: str, future: asyncio.Future[Any]) -> None:
        await self.run.engine.sleep(self.run.seconds_left(deadline))
        if not future.done():
            self.run.close_timed_out(entry_ref)
            future.set_result(_TIMED_OUT)
