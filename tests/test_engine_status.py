"""One exception-to-status table for the three places work settles (run, child workflow, agent)."""

from __future__ import annotations

import asyncio

import pytest

from rulvar_otel.engine.scope import ReplayedCancellation, RunSuspended
from rulvar_otel.engine.status import RunStatus, Site, status_for
from rulvar_otel.errors import BudgetExhaustedError, ConfigError, WorkflowError


@pytest.mark.parametrize(
    ("exc", "workflow_status", "agent_status"),
    [
        (asyncio.CancelledError(), RunStatus.CANCELLED, RunStatus.CANCELLED),
        (ReplayedCancellation(), RunStatus.CANCELLED, RunStatus.CANCELLED),
        # A suspension is "run again on resume": suspended for a workflow, cancelled for an agent.
        (RunSuspended(), RunStatus.SUSPENDED, RunStatus.CANCELLED),
        (BudgetExhaustedError("spent"), RunStatus.EXHAUSTED, RunStatus.ERROR),
        (WorkflowError("failed"), RunStatus.ERROR, RunStatus.ERROR),
        (ConfigError("bad"), RunStatus.ERROR, RunStatus.ERROR),
        (RuntimeError("bug"), RunStatus.ERROR, RunStatus.ERROR),
        (KeyboardInterrupt(), RunStatus.ERROR, RunStatus.ERROR),
    ],
)
def test_each_site_reads_the_same_table(
    exc: BaseException, workflow_status: RunStatus, agent_status: RunStatus
) -> None:
    assert status_for(exc, Site.RUN) is workflow_status
    assert status_for(exc, Site.CHILD) is workflow_status
    assert status_for(exc, Site.AGENT) is agent_status
