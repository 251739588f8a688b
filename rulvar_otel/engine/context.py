"""What a workflow body receives: ``ctx`` (the journaled primitives of its run), and workflows.

``ctx.agent`` goes through the dispatcher the run hands its ``ctx``, so this module does not know
the agent machinery. Every primitive takes the next positional key of its kind in the current
scope; on a re-executed body a key the journal already holds is replayed from the journal instead of
running again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar, cast

from rulvar_otel.core.events import ChildEnd, ChildStart, ExternalWaiting, Log, PhaseStart, SpawnAdmitted
from rulvar_otel.engine import determinism
from rulvar_otel.engine.journal import JournalKind
from rulvar_otel.engine.options import AgentOptions
from rulvar_otel.engine.scope import CURRENT_SCOPE, RunSuspended, Scope
from rulvar_otel.engine.segment import SegmentState
from rulvar_otel.engine.status import RunStatus, Site, status_for
from rulvar_otel.engine.suspension import SuspensionKind, deadline_error, deadline_from
from rulvar_otel.engine.values import jsonable
from rulvar_otel.errors import ConfigError, JournalError, ReplayMissError

__all__ = [
    "AgentDispatcher",
    "Context",
    "Orchestrator",
    "Workflow",
    "WorkflowFn",
    "check_workflow",
    "workflow",
]

T = TypeVar("T")

_LOG_LEVELS = ("debug", "info", "warn", "error")


# How a run dispatches ``ctx.agent``: (segment, calling scope, prompt, options) -> the agent's value.
AgentDispatcher = Callable[[SegmentState, Scope, str, AgentOptions], Awaitable[Any]]
# Runs one orchestration (run, scope, goal, options) to its result mapping; the run injects it.
Orchestrator = Callable[[SegmentState, Scope, str, Any], Awaitable[dict[str, Any]]]

WorkflowFn = Callable[["Context", Any], Awaitable[Any]]


class Context:
    """What a workflow body receives: the journaled primitives of the run."""

    def __init__(
        self,
        run: SegmentState,
        dispatch_agent: AgentDispatcher,
        orchestrate: Orchestrator | None = None,
    ) -> None:
        self._run = run
        self._dispatch_agent = dispatch_agent
        self._orchestrate = orchestrate

    def _scope(self) -> Scope:
        scope = CURRENT_SCOPE.get()
        if scope is None or scope.run is not self._run:
            raise ConfigError("ctx is used outside its own workflow run")
        return scope

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @asynccontextmanager
    async def phase(self, name: str) -> AsyncIterator[None]:
        """A named phase: a span for everything inside, and the ``byPhase`` cost bucket."""
        scope = self._scope()
        span = self._run.mint_span()
        self._run.emit(PhaseStart, span, scope.span_id, phase=name)
        token = CURRENT_SCOPE.set(replace(scope, span_id=span, parent_span_id=scope.span_id, phase=name))
        try:
            yield
        finally:
            CURRENT_SCOPE.reset(token)

    def log(self, level: str, msg: str, data: Any = None) -> None:
        """A workflow log line (``debug``, ``info``, ``warn``, ``error``); ``data`` must be JSON."""
        if level not in _LOG_LEVELS:
            raise ConfigError(f"log level must be debug, info, warn or error, got {level!r}")
        scope = self._scope()
        self._run.emit(Log, scope.span_id, scope.parent_span_id, level=level, msg=msg, data=jsonable(data))

    def now(self) -> float:
        """Wall-clock seconds since the epoch, journaled: a replay returns the recorded value."""
        return self._recorded(JournalKind.NOW, lambda: self._run.engine.clock().timestamp())

    def random(self) -> float:
        """A float in [0, 1), journaled: a replay returns the recorded value."""
        return self._recorded(JournalKind.RANDOM, random.SystemRandom().random)

    def _recorded(self, kind: JournalKind, make: Callable[[], float]) -> float:
        key, _ = self._scope().next_key(kind.value)
        entry = self._run.journal.lookup(kind, key)
        if entry is not None:
            return float(entry.data["value"])
        if self._run.dry_run:
            raise ReplayMissError(f"dry-run: no journaled {kind.value}() value for {key}")
        value = make()
        self._run.journal.append(kind, key, {"value": value})
        return value

    async def parallel(self, items: Iterable[Awaitable[T] | Callable[[], Awaitable[T]]]) -> list[T]:
        """Run branches concurrently, each in its own scope; returns their results in order.

        Every branch runs to its end; then the first failure (in branch order) is raised.
        """
        scope = self._scope()
        run = self._run
        _, ordinal = scope.next_key("par")
        tasks: list[asyncio.Task[T]] = []
        detect = run.engine.determinism_mode != "off"
        for index, item in enumerate(items):
            branch = Scope(
                run,
                scope.nested_path(f"par:{ordinal}:{index}"),
                run.mint_span(),
                scope.span_id,
                scope.phase,
                scope.workflow,
            )
            awaitable = item() if callable(item) else item
            tasks.append(asyncio.get_running_loop().create_task(_run_branch(branch, awaitable, detect)))
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        for failure in failures:
            if not isinstance(failure, RunSuspended):
                raise failure
        if failures:
            raise failures[0]
        return cast(list[T], outcomes)

    async def workflow(self, child: Workflow, args: Any = None) -> Any:
        """Run ``child`` as a child workflow in its own scope (``child:start``/``child:end``)."""
        check_workflow(child)
        scope = self._scope()
        run = self._run
        key, ordinal = scope.next_key("child")
        path = scope.nested_path(f"wf:{child.name}:{ordinal}")
        terminal = run.journal.lookup(JournalKind.CHILD, key)
        span = run.mint_span()
        reserve = run.engine.default_reserve_usd
        replayed = terminal is not None
        if not replayed:
            if run.dry_run:
                raise ReplayMissError(f"dry-run: child workflow {child.name!r} ({key}) is not journaled")
            run.journal.ensure_writable()
            run.budget.admit(reserve)
            run.agents_spawned += 1
            admitted = run.journal.append(
                JournalKind.CHILD_ADMIT, key, {"workflow": child.name, "scope": path}
            )
            run.emit(
                SpawnAdmitted,
                span,
                scope.span_id,
                entry_ref=admitted.seq,
                verdict="admit",
                agent_type=child.name,
                logical_task_id=f"{run.run_id}/{path}",
                spawn_units_after=max(0, run.engine.max_spawn_units - run.agents_spawned),
                reserve_usd=reserve,
            )
        else:
            run.agents_spawned += 1
        run.emit(ChildStart, span, scope.span_id, replayed=replayed, workflow=child.name, scope=path)
        token = CURRENT_SCOPE.set(Scope(run, path, span, scope.span_id, None, child.name))
        status = RunStatus.ERROR
        try:
            value = await child.fn(self, args)
            status = RunStatus.OK
            return value
        except BaseException as exc:
            status = status_for(exc, Site.CHILD)
            raise
        finally:
            CURRENT_SCOPE.reset(token)
            if terminal is not None:
                recorded = str(terminal.data.get("status", status.value))
                run.emit(
                    ChildEnd,
                    span,
                    scope.span_id,
                    replayed=True,
                    workflow=child.name,
                    scope=path,
                    status=recorded,
                )
            else:
                if status != RunStatus.SUSPENDED:
                    with contextlib.suppress(JournalError):
                        run.journal.append(
                            JournalKind.CHILD,
                            key,
                            {"workflow": child.name, "scope": path, "status": status.value},
                        )
                run.emit(ChildEnd, span, scope.span_id, workflow=child.name, scope=path, status=status.value)
                run.budget.release(reserve)

    async def await_external(
        self, key: str, prompt: str | None = None, *, deadline_at: datetime | float | None = None
    ) -> Any:
        """Suspend the run until ``handle.resolve_external(key, value)``; returns ``value`` on resume.

        ``deadline_at`` (an aware datetime, or epoch seconds such as ``ctx.now() + 3600``) bounds
        the wait: once it has passed, a resume (or a late resolution) closes the suspension as timed
        out and this call raises DeadlineExceededError. The first close wins, so a resolution that
        arrived before the deadline still applies.
        """
        scope = self._scope()
        run = self._run
        suspensions = run.suspensions
        suspension = suspensions.open(
            SuspensionKind.EXTERNAL,
            f"{scope.path}|ext:{key}",
            {"key": key, "prompt": prompt, "scope": scope.path},
            new_deadline=lambda: deadline_from(deadline_at),
            miss=f"dry-run: external key {key!r} was never awaited",
        )
        if suspension.answer is not None:
            if suspension.answer.timed_out:
                raise deadline_error(key, suspension.deadline)
            return suspension.answer.value
        run.emit(
            ExternalWaiting,
            run.root_span,
            replayed=suspension.replayed,
            key=key,
            entry_ref=suspension.entry.seq,
            prompt=prompt,
            deadline_at=suspension.deadline,
        )
        if not suspension.replayed and suspensions.deadline_passed(suspension.deadline):
            suspensions.close_timed_out(suspension.entry.seq)
            raise deadline_error(key, suspension.deadline)
        suspensions.pending.append(
            {"key": key, "scope": scope.path, "entryRef": suspension.entry.seq, "prompt": prompt}
        )
        raise RunSuspended

    async def agent(self, prompt: str, options: AgentOptions | None = None, /, **overrides: Any) -> Any:
        """Dispatch one agent: a tool loop, optional compaction, finalize and schema extract.

        ``options`` is an :class:`AgentOptions`; keyword arguments set or override its fields
        (``ctx.agent("triage", agent_type="triager", tools=[search])``). Returns the final text, or
        the validated ``schema`` value. Raises AgentFailedError (or the budget/quota error that
        ended it) when the agent settles ``error``.
        """
        chosen = (options or AgentOptions()).with_overrides(overrides)
        return await self._dispatch_agent(self._run, self._scope(), prompt, chosen)

    async def orchestrate(self, goal: str, options: Any = None) -> dict[str, Any]:
        """Orchestrate ``goal`` dynamically: the engine owns the plan, the orchestrator proposes.

        ``options`` is an ``OrchestrateOptions``. Returns ``verdict``, ``completion``,
        ``childStatusCounts``, ``summary``, ``forcedFinish`` and the done nodes' ``results``.
        """
        if self._orchestrate is None:
            raise ConfigError("this engine runs no orchestrations")
        return await self._orchestrate(self._run, self._scope(), goal, options)


async def _run_branch(scope: Scope, awaitable: Awaitable[T], detect: bool) -> T:
    CURRENT_SCOPE.set(scope)
    if inspect.iscoroutine(awaitable):
        return await determinism.drive(cast(Coroutine[Any, Any, T], awaitable), detect)
    return await awaitable


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


def check_workflow(wf: object) -> Workflow:
    """``wf`` itself when it is a :class:`Workflow`, else a ConfigError saying how to make one."""
    if not isinstance(wf, Workflow):
        raise ConfigError(
            f"expected a Workflow (decorate the body with @workflow(name)), got {type(wf).__name__}"
        )
    return wf
