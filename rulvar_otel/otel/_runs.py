"""Several runs in one stream: one span mapper (and metrics sink) per run id, each settled on its own.

Events are routed by ``runId``, so two runs in one stream become two traces even when they reuse
span ids. At the end each run settles with its own outcome: the handle's for the run it names
(or for the only run), the last ``run:end`` for the others and whenever no outcome was given.
Both export pipelines (SDK spans and the direct path) route through :class:`RunRouter`; only the
tracer and the metrics sink differ. Every run's root span takes the export's parentage (one host
span parents, or is linked from, each run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Tracer

from rulvar_otel.core.drain import Sink
from rulvar_otel.core.handle import RunOutcome, outcome_from_run_end
from rulvar_otel.core.masking import SecretMasker
from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel._parentage import NO_PARENT, Parentage
from rulvar_otel.otel.exporter import create_mapper

if TYPE_CHECKING:  # a protocol: the metrics package loads only when metrics are on
    from rulvar_otel.otel.metrics import SpanSource

__all__ = ["RunRouter"]


class RunRouter:
    """Feeds each event to its run's mapper (and metrics sink); :meth:`finish` settles every run."""

    def __init__(
        self,
        tracer: Tracer,
        masker: SecretMasker,
        *,
        conventions: Iterable[str] | None = None,
        metrics: Callable[[SpanSource], Sink] | None = None,
        parentage: Parentage = NO_PARENT,
    ) -> None:
        self._tracer = tracer
        self._masker = masker
        self._conventions = conventions
        self._parentage = parentage
        self._metrics = metrics
        self._runs: dict[str, tuple[SpanMapper, Sink | None]] = {}
        self._last_run_id = ""

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(self._runs)

    def feed(self, event: Mapping[str, Any]) -> None:
        rid = event.get("runId")
        if not isinstance(rid, str):
            rid = self._last_run_id
        self._last_run_id = rid
        run = self._runs.get(rid)
        if run is None:
            # Each run id gets its own mapper, hence its own trace: interleaved runs never merge.
            mapper = create_mapper(
                self._tracer,
                masker=self._masker,
                run_id=rid,
                conventions=self._conventions,
                parent=self._parentage,
            )
            # The metrics sink reads each event's span from the mapper: its exemplars.
            run = self._runs[rid] = (mapper, self._metrics(mapper) if self._metrics is not None else None)
        run[0].feed(event)
        if run[1] is not None:
            run[1].feed(event)

    def finish(self, outcome: RunOutcome | BaseException | None, primary_run_id: str) -> int:
        """Settle every run (see the module docstring); returns the spans created."""
        spans = 0
        single = len(self._runs) == 1
        for rid, (mapper, metrics) in self._runs.items():
            given = outcome is not None and (single or rid == primary_run_id)
            own = outcome if given else outcome_from_run_end(mapper.last_run_end)
            spans += int(mapper.finish(own))
            if metrics is not None:
                metrics.finish(own)
        return spans
