"""How a run, a child workflow or an agent settled: :class:`RunStatus` and the one exception table.

:func:`status_for` maps the exception that ended a unit of work to its status, for the three places
work settles (:class:`Site`). The sites differ in one row on purpose, a suspension:

* a run or a child workflow parked on an open suspension settles ``suspended`` (``run:end`` and
  ``child:end`` carry the run vocabulary, and a suspended child is not journaled, so a resume
  re-executes it);
* an agent cut by a suspension settles ``cancelled``: an agent's terminal has no ``suspended``
  status, and a journaled ``cancelled`` agent is exactly the one a resume dispatches again. Both
  rows therefore mean the same thing, "not finished, run again on resume", in each site's words.

A budget exhaustion is ``exhausted`` for a run or a child and ``error`` for the agent it stopped
(``agent:end`` has no ``exhausted``; its error carries the exhaustion's code).
"""

from __future__ import annotations

import asyncio
from enum import StrEnum

from rulvar_otel.engine.scope import ReplayedCancellation, RunSuspended
from rulvar_otel.errors import BudgetExhaustedError

__all__ = ["RunStatus", "Site", "status_for"]


class RunStatus(StrEnum):
    """How a segment settled (``run:end`` ``status``); children and agents use the same words."""

    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    EXHAUSTED = "exhausted"


class Site(StrEnum):
    """Where work settles."""

    RUN = "run"
    CHILD = "child"
    AGENT = "agent"


# exception -> (status of a run or a child workflow, status of an agent); first match wins.
_TABLE: tuple[tuple[type[BaseException], RunStatus, RunStatus], ...] = (
    (asyncio.CancelledError, RunStatus.CANCELLED, RunStatus.CANCELLED),
    (ReplayedCancellation, RunStatus.CANCELLED, RunStatus.CANCELLED),
    (RunSuspended, RunStatus.SUSPENDED, RunStatus.CANCELLED),
    (BudgetExhaustedError, RunStatus.EXHAUSTED, RunStatus.ERROR),
)


def status_for(exc: BaseException, site: Site) -> RunStatus:
    """The status of work at ``site`` that ``exc`` ended; any exception not in the table is ``error``."""
    for kind, workflow_status, agent_status in _TABLE:
        if isinstance(exc, kind):
            return agent_status if site is Site.AGENT else workflow_status
    return RunStatus.ERROR
