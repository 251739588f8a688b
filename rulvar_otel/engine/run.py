"""One execution segment of a run: the main loop, its settlement, and cancellation.

:meth:`RunSegment.start` opens the segment (journal genesis and segment marker), drives the
workflow body under the determinism detector, and settles exactly once: the ``run_settle`` journal
entry, ``run:end`` with the terminal envelope, the closed event bus, the result future. Every way
out settles, a refused journal write included: the stream always ends and the result always resolves
or rejects with a typed error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rulvar_otel.core.events import DeterminismWarning, Log, RunEnd, RunStart
from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.engine import determinism
from rulvar_otel.engine._orchestrate import run_orchestration
from rulvar_otel.engine.agent import dispatch_agent
from rulvar_otel.engine.config import EngineConfig
from rulvar_otel.engine.context import Context, Workflow
from rulvar_otel.engine.cost import (
    CostReport,
    build_envelope,
    fold_cost_report,
    total_usage,
)
from rulvar_otel.engine.journal import JournalEntry, JournalKind
from rulvar_otel.engine.model import usage_dict, wire_error
from rulvar_otel.engine.scope import CURRENT_SCOPE, ReplayedCancellation, RunSuspended, Scope
from rulvar_otel.engine.segment import SegmentState
from rulvar_otel.engine.status import RunStatus, Site, status_for
from rulvar_otel.engine.suspension import ResolutionOutcome
from rulvar_otel.engine.values import COMPLETION_LISTS, completion_facts, describe_failure, jsonable
from rulvar_otel.errors import JournalError, RunRejectedError, WorkflowError

__all__ = ["RunSegment", "RunStatus"]


# Statuses whose outcome carries the workflow's value.
_VALUE_STATUSES = (RunStatus.OK, RunStatus.EXHAUSTED, RunStatus.ERROR)

# run:end body fields for the completion facts a workflow reported.
_COMPLETION_EVENT_FIELDS = {
    "completion": "completion",
    "childStatusCounts": "child_status_counts",
    "degradedReasons": "degraded_reasons",
    "salvagedPartialChildren": "salvaged_partial_children",
    "salvagedTerminalOutputChildren": "salvaged_terminal_output_children",
}


class RunSegment(SegmentState):
    """One call of ``engine.run`` or ``engine.resume``: its workflow, main loop and settlement."""

    def __init__(
        self,
        engine: EngineConfig,
        wf: Workflow,
        args: Any,
        run_id: str,
        entries: list[JournalEntry],
        *,
        segment: int,
        dry_run: bool,
        budget_usd: float | None,
    ) -> None:
        super().__init__(engine, run_id, entries, segment=segment, dry_run=dry_run, budget_usd=budget_usd)
        self.wf = wf
        self.args = args
        self._started = False
        self.task: asyncio.Task[None] | None = None
        self.detector = determinism.DeterminismDetector(
            self._determinism_warning,
            allow=engine.determinism_allow,
            reject=engine.determinism_mode == "error",
        )

    def start(self) -> None:
        """Start the main loop on the running event loop."""
        self.task = asyncio.get_running_loop().create_task(self._main(), name=f"rulvar-run-{self.run_id}")
        self.task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if self.result.done():
            return
        exc = task.exception() if not task.cancelled() else None
        # Whatever went wrong, iterators of the stream must end rather than wait forever.
        self.bus.close()
        self.suspensions.cancel_waiters()
        self.result.set_exception(
            RunRejectedError(f"the run task ended without settling: {exc!r}", name="EngineError")
        )

    def _determinism_warning(
        self, category: str, provenance: str, frame: str, file: str, line: int, column: int | None
    ) -> None:
        current = CURRENT_SCOPE.get()
        own = current is not None and current.run is self
        self.emit(
            DeterminismWarning,
            current.span_id if own and current is not None else self.root_span,
            current.parent_span_id if own and current is not None else None,
            category=category,
            provenance=provenance,
            frame=frame,
            file=file,
            line=line,
            column=column,
        )

    def request_cancel(self, reason: str) -> None:
        if self.result.done() or self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        if self._started and self.task is not None:
            self.task.cancel()

    def resolve(self, key_or_ref: str | int, value: Any, by: str) -> ResolutionOutcome:
        return self.suspensions.resolve(key_or_ref, value, by)

    # --- the loop ------------------------------------------------------------------------------

    def _open_segment(self) -> str | None:
        """Journal the genesis and the segment marker; returns a warning for a read-only archive."""
        if self.dry_run:
            try:
                self.journal.write_marker(self.segment, dry_run=True)
            except JournalError as exc:
                return (
                    f"the journal is read-only ({exc}); this dry-run replays it without reserving "
                    f"segment {self.segment}"
                )
            return None
        if self.segment == 0:
            self.journal.append(
                JournalKind.RUN_START,
                None,
                {"workflow": self.wf.name, "args": jsonable(self.args), "budgetUsd": self.budget.ceiling_usd},
            )
        self.journal.write_marker(self.segment, dry_run=False)
        return None

    async def _main(self) -> None:
        self._started = True
        ctx = Context(self, dispatch_agent, run_orchestration)
        CURRENT_SCOPE.set(Scope(self, "", self.root_span, None, None, self.wf.name))
        opened = True
        warning: str | None = None
        try:
            warning = self._open_segment()
        except JournalError:
            opened = False  # latched in the journal view; settled below without running the body
        self.emit(RunStart, self.root_span, workflow=self.wf.name, resumed=self.segment > 0)
        if warning is not None:
            self.emit(Log, self.root_span, level="warn", msg=warning)
        status = RunStatus.OK
        value: Any = None
        error: dict[str, Any] | None = None
        facts: dict[str, Any] = {}
        detect = self.engine.determinism_mode != "off"
        try:
            if self.cancel_reason is not None:
                raise asyncio.CancelledError
            if opened:
                with self.detector.active():
                    value = await determinism.drive(self.wf.fn(ctx, self.args), detect)
                facts = completion_facts(value)
        except (asyncio.CancelledError, ReplayedCancellation, RunSuspended, Exception) as exc:  # noqa: BLE001 - any failure settles the run
            if isinstance(exc, asyncio.CancelledError) and self.task is not None:
                self.task.uncancel()
            status = status_for(exc, Site.RUN)
            error, facts = self._failure(exc)
        violation = self.detector.violation
        if violation is not None and status != RunStatus.CANCELLED:
            # Rejected even when the workflow caught the error: its result rests on a bare call.
            status, value, error, facts = RunStatus.ERROR, None, violation.to_wire(), {}
        failure = self.journal.failure
        if failure is not None and not self.dry_run:
            # Facts went unrecorded: whatever the body returned, the run cannot stand on it.
            status, value, facts = RunStatus.ERROR, None, {}
            error = wire_error(JournalError.code, f"the journal refused a write: {failure}")
        self._settle(status, value, error, facts)

    def _failure(self, exc: BaseException) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The wire error and completion facts of a body that ``exc`` ended."""
        if isinstance(exc, asyncio.CancelledError):
            return wire_error("cancelled", self.cancel_reason or "the run was cancelled"), {}
        if isinstance(exc, ReplayedCancellation):
            return wire_error("cancelled", "the replayed segment was cancelled"), {}
        if isinstance(exc, RunSuspended):
            return None, {}
        if isinstance(exc, WorkflowError):
            return exc.to_wire(), completion_facts(exc.data)
        code = getattr(exc, "code", None)
        code = code if isinstance(code, str) and code else "error"
        return wire_error(code, describe_failure(exc)), {}

    def _settle(
        self, status: RunStatus, value: Any, error: dict[str, Any] | None, facts: dict[str, Any]
    ) -> None:
        report: CostReport = fold_cost_report(self.records, self.orchestration)
        usage = total_usage(self.records)
        completion = facts.get("completion")
        envelope = build_envelope(
            run_id=self.run_id,
            workflow=self.wf.name,
            status=status.value,
            report=report,
            usage=usage,
            agents_spawned=self.agents_spawned,
            error=error,
            completion=completion,
        )
        refused: JournalError | None = None
        if not self.dry_run:
            try:
                self.journal.append(
                    JournalKind.RUN_SETTLE,
                    None,
                    {"status": status.value, "value": jsonable(value), "error": error, "lift": facts},
                )
            except JournalError as exc:
                refused = self.journal.failure or exc  # the first refusal names the cause
                envelope["settled"] = False
                self.emit(Log, self.root_span, level="warn", msg=f"settlement write failed: {exc}")
        self.emit(
            RunEnd,
            self.root_span,
            status=status.value,
            total_usd=report.total_usd,
            usage_approx=True if report.usage_approx else None,
            settled=None if refused is None else False,
            envelope=envelope,
            **{_COMPLETION_EVENT_FIELDS[k]: v for k, v in facts.items()},
        )
        self.bus.close()
        self.suspensions.cancel_waiters()
        if refused is not None:
            rejection = RunRejectedError(
                f"settlement failed: {refused}; nothing durable records this terminal",
                name="SettlementError",
                error_code=JournalError.code,
            )
            rejection.__cause__ = refused
            self.result.set_exception(rejection)
            return
        outcome = RunOutcome(
            status=status.value,
            value=jsonable(value) if status in _VALUE_STATUSES and value is not None else None,
            error=error,
            usage=usage_dict(usage),
            cost=report.to_json(),
            envelope=envelope,
            completion=completion,
            childStatusCounts=facts.get("childStatusCounts"),
            dropped=[],
            pending=list(self.suspensions.pending),
            **{k: v for k, v in facts.items() if k in COMPLETION_LISTS},
        )
        self.result.set_result(outcome)
