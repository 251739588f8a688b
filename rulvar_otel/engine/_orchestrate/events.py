"""The one helper an orchestration emits its adaptive events through (the classes are core's).

Adaptive events other than ``spawn:*`` ride the run's root span and never carry ``replayed``:
a replay re-emits them through the same path as the live run.
"""

from __future__ import annotations

from typing import Any

from rulvar_otel.core.events import EventModel

# The orchestrator's state and children (orchestrator.Orchestration, .Child), typed loosely here:
# naming them would import the module that imports this one.
Orchestration = Any

__all__ = ["emit"]


def emit(orch: Orchestration, cls: type[EventModel], **body: Any) -> None:
    orch.run.emit(cls, orch.run.root_span, **body)
