"""The critical-path reducer: where a run's wall clock went after the workers fanned in.

Owns :func:`reduce_critical_path` and its drain sink :func:`critical_path_fold`: the run's wall,
the post-fan-in interval and its decomposition, the synthesize split by purpose, and the candidate
milestones; plus the pieces that reading is made of (the synthesize-span classification, the
interval union). Single-pass, order-driven, tolerant of unknown types, missing fields and truncated
streams; a figure the stream cannot support is ``None`` (absent in JSON), never a guess. Wall
figures are live fidelity: a replayed stream re-stamps emission times, so its intervals are
degenerate. :mod:`rulvar_otel.core.reducers` re-exports every public name.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias

from rulvar_otel.core._fold_output import FoldOutput, reduce_events, ts_ms
from rulvar_otel.core.drain import FoldSink
from rulvar_otel.core.handle import EventLike
from rulvar_otel.core.lifecycle import AgentLifecycle, AgentSpan
from rulvar_otel.core.wire import as_number, as_str

__all__ = [
    "CITATION_JUDGE_LABEL",
    "CLAIM_JUDGE_LABEL",
    "COORDINATION_ROLE",
    "FINAL_COMPOSITION_LABEL",
    "SYNTHESIS_NOTE_LABEL",
    "SYNTHESIZE_ROLE",
    "CriticalPath",
    "PostFanInBreakdown",
    "SynthesizeClass",
    "critical_path_fold",
    "reduce_critical_path",
    "synthesize_span_class",
    "union_length",
]

# The engine's dispatch labels for synthesize-role spans; suffixed variants (``<label>-final``)
# belong to the same class.
FINAL_COMPOSITION_LABEL: Final = "final-composition"
SYNTHESIS_NOTE_LABEL: Final = "synthesis-note"
CLAIM_JUDGE_LABEL: Final = "claim-consistency-judge"
CITATION_JUDGE_LABEL: Final = "citation-entailment-judge"

COORDINATION_ROLE: Final = "orchestrate"
SYNTHESIZE_ROLE: Final = "synthesize"

SynthesizeClass: TypeAlias = Literal["composition", "claim-judge", "citation-judge", "unclassified"]


class PostFanInBreakdown(FoldOutput):
    """Where the post-fan-in window went: clipped buckets, their exact union, the residue."""

    coordination_model_ms: float
    coordination_model_ms_by_phase: dict[str, float]
    coordination_model_only_ms: float
    coordination_tool_ms: float
    coordination_tool_ms_by_name: dict[str, float]
    coordination_tool_calls_by_name: dict[str, int]
    synthesis_ms: float
    final_composition_ms: float
    semantic_judge_ms: float
    citation_judge_ms: float
    unclassified_synthesis_ms: float
    covered_ms: float
    residue_ms: float
    residue_share: float | None


class CriticalPath(FoldOutput):
    segments: int
    run_wall_ms: float | None
    post_fan_in_ms: float | None
    post_fan_in_share: float | None
    synthesis_ms: float
    synthesis_share: float | None
    final_composition_ms: float
    semantic_judge_ms: float
    draft_judge_ms: float
    final_judge_ms: float
    citation_judge_ms: float
    unclassified_synthesis_ms: float
    composition_spans: int
    judge_spans: int
    citation_judge_spans: int
    unclassified_synthesis_spans: int
    first_candidate_ms: float | None
    last_candidate_ms: float | None
    worker_spans: int
    host_rejected_spans: int
    post_fan_in: PostFanInBreakdown | None


def synthesize_span_class(label: str | None) -> SynthesizeClass:
    """Classify a synthesize-role span by its dispatch label.

    Unlabelled spans read as composition (streams from before the engine labelled its own
    composition dispatches); a present label nobody knows is ``unclassified``, so it can never
    silently inflate the composition figure.
    """
    if not label:
        return "composition"

    def named(base: str) -> bool:
        return label == base or label.startswith(base + "-")

    if named(FINAL_COMPOSITION_LABEL) or named(SYNTHESIS_NOTE_LABEL):
        return "composition"
    if named(CLAIM_JUDGE_LABEL):
        return "claim-judge"
    if named(CITATION_JUDGE_LABEL):
        return "citation-judge"
    return "unclassified"


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of possibly overlapping ``(start, end)`` intervals."""
    total = 0.0
    cur_from: float | None = None
    cur_to = 0.0
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if cur_from is None or start > cur_to:
            if cur_from is not None:
                total += cur_to - cur_from
            cur_from, cur_to = start, end
        elif end > cur_to:
            cur_to = end
    if cur_from is not None:
        total += cur_to - cur_from
    return total


def critical_path_fold() -> FoldSink[CriticalPath]:
    """The critical-path reading as a drain sink (its ``result`` once finished)."""
    return FoldSink(_critical_path())


# -- the critical path -------------------------------------------------------------------------


def reduce_critical_path(events: Iterable[EventLike]) -> CriticalPath:
    """Fold a run's events into its critical-path reading (see :func:`critical_path_fold`)."""
    return reduce_events(critical_path_fold(), events)


class _PathFold:
    """The critical-path reading's state while a stream is folded."""

    def __init__(self) -> None:
        self.run_start: float | None = None
        self.run_end: float | None = None
        self.segments = 0
        self.agents: AgentLifecycle[None] = AgentLifecycle()
        self.last_worker_end: float | None = None
        self.worker_spans = 0
        self.host_rejected = 0
        self.synth_ms: dict[SynthesizeClass, float] = {
            "composition": 0.0,
            "claim-judge": 0.0,
            "citation-judge": 0.0,
            "unclassified": 0.0,
        }
        self.synth_spans: dict[SynthesizeClass, int] = dict.fromkeys(self.synth_ms, 0)
        self.draft_judge_ms = 0.0
        self.final_judge_ms = 0.0
        self.candidate_ends: list[float] = []
        self.coord_model: list[tuple[str, float, float]] = []
        self.coord_tools: list[tuple[str, float, float]] = []
        self.synth_intervals: list[tuple[SynthesizeClass, float, float]] = []

    def feed(self, wire: Mapping[str, Any]) -> None:
        kind = wire.get("type")
        at = ts_ms(wire.get("ts"))
        # Agents pair on every event, timed or not, as every other consumer pairs them.
        started: AgentSpan[None] | None = None  # for an agent:end, the start it closes
        if kind == "agent:start":
            self.agents.start(wire)
        elif kind == "agent:end":
            started = self.agents.end(wire)
        if at is None:
            return
        if kind == "run:start":
            self.segments += 1
            if self.run_start is None:
                self.run_start = at
        elif kind == "run:end":
            self.run_end = at
        elif kind in ("agent:phase:end", "tool:end"):
            self._coordination(kind == "agent:phase:end", wire, at)
        elif kind == "agent:end":
            self._agent_end(wire, at, started)

    def _coordination(self, model_call: bool, wire: Mapping[str, Any], at: float) -> None:
        """A coordinator's model call or tool execution, as an interval ending at ``at``."""
        started = self.agents.get(as_str(wire.get("spanId")) or "")
        if started is None or started.role != COORDINATION_ROLE:
            return
        duration = as_number(wire.get("durationMs"))
        span = duration if duration is not None and duration > 0 else 0.0
        if model_call:
            self.coord_model.append((as_str(wire.get("role")) or "unknown", at - span, at))
        else:
            self.coord_tools.append((as_str(wire.get("toolName")) or "unknown", at - span, at))

    def _agent_end(self, wire: Mapping[str, Any], at: float, started: AgentSpan[None] | None) -> None:
        if wire.get("hostRejected") is True:
            self.host_rejected += 1
        start_ns = started.start_ns if started is not None else None
        if started is None or start_ns is None:
            return  # an end whose start this stream never saw cannot be placed in time
        started_at = round(start_ns / 1e6, 3)
        if started.role == SYNTHESIZE_ROLE:
            self._synthesize_end(started.label, started_at, at)
        elif started.role != COORDINATION_ROLE:
            self.worker_spans += 1
            self.last_worker_end = at if self.last_worker_end is None else max(self.last_worker_end, at)

    def _synthesize_end(self, label: str | None, started_at: float, at: float) -> None:
        wall = max(0.0, at - started_at)
        klass = synthesize_span_class(label)
        self.synth_ms[klass] += wall
        self.synth_spans[klass] += 1
        if klass == "claim-judge":
            if label == CLAIM_JUDGE_LABEL:
                self.draft_judge_ms += wall
            else:
                self.final_judge_ms += wall
        elif klass == "composition":
            self.candidate_ends.append(at)
        self.synth_intervals.append((klass, started_at, at))

    def reading(self) -> CriticalPath:
        run_start, run_end, last_worker_end = self.run_start, self.run_end, self.last_worker_end
        synth_ms, synth_spans, candidate_ends = self.synth_ms, self.synth_spans, self.candidate_ends
        synthesis_ms = sum(synth_ms.values())
        run_wall = max(0.0, run_end - run_start) if run_start is not None and run_end is not None else None
        post_fan_in_ms: float | None = None
        breakdown: PostFanInBreakdown | None = None
        if run_end is not None and last_worker_end is not None:
            post_fan_in_ms = max(0.0, run_end - last_worker_end)
            breakdown = _decompose(
                min(last_worker_end, run_end),
                run_end,
                post_fan_in_ms,
                self.coord_model,
                self.coord_tools,
                self.synth_intervals,
            )
        wall_ok = run_wall is not None and run_wall > 0
        return CriticalPath(
            segments=self.segments,
            run_wall_ms=run_wall,
            post_fan_in_ms=post_fan_in_ms,
            post_fan_in_share=post_fan_in_ms / run_wall
            if wall_ok and run_wall is not None and post_fan_in_ms is not None
            else None,
            synthesis_ms=synthesis_ms,
            synthesis_share=synthesis_ms / run_wall if wall_ok and run_wall is not None else None,
            final_composition_ms=synth_ms["composition"],
            semantic_judge_ms=synth_ms["claim-judge"],
            draft_judge_ms=self.draft_judge_ms,
            final_judge_ms=self.final_judge_ms,
            citation_judge_ms=synth_ms["citation-judge"],
            unclassified_synthesis_ms=synth_ms["unclassified"],
            composition_spans=synth_spans["composition"],
            judge_spans=synth_spans["claim-judge"],
            citation_judge_spans=synth_spans["citation-judge"],
            unclassified_synthesis_spans=synth_spans["unclassified"],
            first_candidate_ms=min(candidate_ends) - run_start
            if candidate_ends and run_start is not None
            else None,
            last_candidate_ms=max(candidate_ends) - run_start
            if candidate_ends and run_start is not None
            else None,
            worker_spans=self.worker_spans,
            host_rejected_spans=self.host_rejected,
            post_fan_in=breakdown,
        )


def _critical_path() -> Generator[None, Mapping[str, Any] | None, CriticalPath]:
    """Fold a run's events into its critical-path reading.

    Post-fan-in is the interval from the last settled worker span (primary role neither
    ``orchestrate`` nor ``synthesize``) to ``run:end``; ``post_fan_in`` decomposes it into the
    coordinator's model activations and tool executions and the synthesize spans, each clipped to
    the window, with their exact union and the uncovered residue.
    """
    fold = _PathFold()
    while (wire := (yield)) is not None:
        fold.feed(wire)
    return fold.reading()


def _decompose(
    window_from: float,
    window_to: float,
    post_fan_in_ms: float,
    coord_model: list[tuple[str, float, float]],
    coord_tools: list[tuple[str, float, float]],
    synth_intervals: list[tuple[SynthesizeClass, float, float]],
) -> PostFanInBreakdown:
    def clip(start: float, end: float) -> tuple[float, float] | None:
        # Anything touching the window participates: a zero-length clip still registers its name.
        if end < window_from or start > window_to:
            return None
        return max(start, window_from), min(end, window_to)

    model_clipped: list[tuple[float, float]] = []
    by_phase: dict[str, float] = {}
    for role, start, end in coord_model:
        if (c := clip(start, end)) is not None:
            model_clipped.append(c)
            by_phase[role] = by_phase.get(role, 0.0) + (c[1] - c[0])
    tools_clipped: list[tuple[float, float]] = []
    tool_ms: dict[str, float] = {}
    tool_calls: dict[str, int] = {}
    for name, start, end in coord_tools:
        if (c := clip(start, end)) is not None:
            tools_clipped.append(c)
            tool_ms[name] = tool_ms.get(name, 0.0) + (c[1] - c[0])
            tool_calls[name] = tool_calls.get(name, 0) + 1
    synth_clipped: list[tuple[float, float]] = []
    synth_by_class: dict[SynthesizeClass, float] = {
        "composition": 0.0,
        "claim-judge": 0.0,
        "citation-judge": 0.0,
        "unclassified": 0.0,
    }
    for klass, start, end in synth_intervals:
        if (c := clip(start, end)) is not None:
            synth_clipped.append(c)
            synth_by_class[klass] += c[1] - c[0]
    covered = union_length([*model_clipped, *tools_clipped, *synth_clipped])
    # |model \ tools| as a difference of two unions: never negative, tools nested once.
    model_only = union_length([*model_clipped, *tools_clipped]) - union_length(tools_clipped)
    residue = max(0.0, post_fan_in_ms - covered)
    return PostFanInBreakdown(
        coordination_model_ms=sum(e - s for s, e in model_clipped),
        coordination_model_ms_by_phase=by_phase,
        coordination_model_only_ms=model_only,
        coordination_tool_ms=sum(e - s for s, e in tools_clipped),
        coordination_tool_ms_by_name=tool_ms,
        coordination_tool_calls_by_name=tool_calls,
        synthesis_ms=sum(e - s for s, e in synth_clipped),
        final_composition_ms=synth_by_class["composition"],
        semantic_judge_ms=synth_by_class["claim-judge"],
        citation_judge_ms=synth_by_class["citation-judge"],
        unclassified_synthesis_ms=synth_by_class["unclassified"],
        covered_ms=covered,
        residue_ms=residue,
        residue_share=residue / post_fan_in_ms if post_fan_in_ms > 0 else None,
    )
