"""``rulvar-otel inspect STREAM.jsonl [--json]``: the reducers' tables for a recorded run.

Prints the invocation table (one row per agent span, one indented row per phase activation),
the per-role split with its cost basis, and the critical path with its post-fan-in
decomposition (rows whose figures are all zero hidden, its terms explained under it).
``--json`` prints the same readings as one JSON object on stdout, floats rounded to 12
significant digits.

Only allow-listed facts are printed, in both forms: ids, names, counts, figures, and enum fields
only when they hold one of their values. An agent's ``label`` is free text and never printed; a
usage or tool-budget member nobody lists is dropped. Every string taken from the stream is
sanitized, then masked (the masker's ``clean``); every table cell once composed and every rendered
line again; the JSON form's strings (keys included) before encoding, which is also ASCII-escaped,
and its lines again after.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, TextIO

import typer
from rich import box
from rich.console import Console, RenderableType
from rich.segment import Segment, SegmentLines
from rich.table import Table
from rich.text import Text

from rulvar_otel.cli._common import PatternOption
from rulvar_otel.cli._text import EXIT_OK, EXIT_USAGE, plural, say, terminal_safe
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.core.progress import format_tokens, format_usd
from rulvar_otel.core.reducers import (
    AgentInvocationRow,
    CriticalPath,
    InvocationPhaseRow,
    InvocationTable,
    PostFanInBreakdown,
    reduce_critical_path,
    reduce_invocation_table,
)
from rulvar_otel.core.wire import as_int, as_number
from rulvar_otel.errors import RulvarOtelError
from rulvar_otel.sources.jsonl import read_jsonl_events

__all__ = ["inspect_events", "register", "render_inspect"]


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1000:
        return f"{value:g} ms"
    return f"{value / 1000:.2f} s"


# What the critical-path figures mean, printed under the table.
CRITICAL_PATH_TERMS: Final = (
    ("run wall", "first to last event of the run"),
    ("post-fan-in", "from the last worker settling to the run's end"),
    ("synthesis", "time in synthesize calls: final composition, claim and citation judges"),
    ("candidate", "a finish candidate's end, measured from the run's start"),
    ("coordination", "the coordinator's own model calls and tool calls after fan-in"),
    ("model only", "coordinator model time no tool call overlaps"),
    ("covered, residue", "their union with synthesis, and the post-fan-in time none of them covers"),
    ("-", "a figure the stream cannot support (never guessed)"),
)


def _round_floats(value: Any) -> Any:
    """Floats to 12 significant digits: binary noise (0.00030000000000000003) never reaches the user."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _round_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round_floats(v) for v in value]
    return value


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def inspect_events(events: Iterable[Any]) -> tuple[InvocationTable, CriticalPath]:
    """Both reducers over one materialized stream."""
    materialized = list(events)
    return reduce_invocation_table(materialized), reduce_critical_path(materialized)


# What inspect may print of a row's open-ended members (everything else is dropped).
_USAGE_KEYS: Final = (
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "reasoningTokens",
    "cacheWrite5mTokens",
    "cacheWrite1hTokens",
)
_PHASE_OUTCOMES: Final = frozenset({"ok", "error"})
_BUDGET_COUNTS: Final = frozenset({"used", "cap", "extensionsGranted"})
_BUDGET_NUMBERS: Final = frozenset({"unitsUsed", "unitsMax"})
_BUDGET_FLAGS: Final = frozenset({"finalizationReserveUsed", "finalizationWindowEntered"})
_BUDGET_LIMITERS: Final = frozenset({"maxToolCalls", "toolUnits"})
_USAGE_KEY_SET: Final = frozenset(_USAGE_KEYS)
# The members of each JSON object inspect prints as they come; the open-ended ones are projected.
_AGENT_KEYS: Final = frozenset(
    {
        "spanId",
        "parentSpanId",
        "agentType",
        "role",
        "model",
        "status",
        "durationMs",
        "costUsd",
        "costBasis",
        "usageApprox",
        "retryCount",
        "hostRejected",
        "replayed",
        "open",
    }
)
_PHASE_KEYS: Final = frozenset(
    {"invocation", "role", "model", "durationMs", "costUsd", "costBasis", "retries", "replayed", "open"}
)
_BUCKET_KEYS: Final = frozenset({"costUsd", "costBasis", "phases"})
_TABLE_KEYS: Final = frozenset({"totalCostUsd", "openAgents", "openPhases"})
Projection = Callable[[Any], Any]


def _phase_outcome(outcome: object) -> str | None:
    """An enum field: a value outside its enum is no fact, and may be content."""
    return outcome if isinstance(outcome, str) and outcome in _PHASE_OUTCOMES else None


def _usage_json(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    return {k: n for k, v in usage.items() if k in _USAGE_KEY_SET and (n := as_int(v)) is not None}


def _tool_budget_json(budget: Any) -> dict[str, Any] | None:
    if not isinstance(budget, dict):
        return None
    out: dict[str, Any] = {}
    for key, value in budget.items():
        if key in _BUDGET_COUNTS and (count := as_int(value)) is not None:
            out[key] = count
        elif key in _BUDGET_NUMBERS and (number := as_number(value)) is not None:
            out[key] = number
        elif key in _BUDGET_FLAGS and isinstance(value, bool):
            out[key] = value
        elif key == "noticesFired" and isinstance(value, list):
            out[key] = [n for item in value if (n := as_int(item)) is not None]
        elif key == "limiter" and value in _BUDGET_LIMITERS:
            out[key] = value
    return out


def _project(doc: dict[str, Any], plain: frozenset[str], projected: dict[str, Projection]) -> dict[str, Any]:
    """The listed members of ``doc``, in its order: ``plain`` ones as they are, ``projected``
    ones through their projection (dropped when it gives ``None``), every other one dropped."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key in plain:
            out[key] = value
        elif key in projected and (shown := projected[key](value)) is not None:
            out[key] = shown
    return out


def _phase_json(doc: Any) -> dict[str, Any]:
    return _project(doc, _PHASE_KEYS, {"usage": _usage_json, "outcome": _phase_outcome})


def _agent_json(doc: Any) -> dict[str, Any]:
    """An agent row's JSON, allow-listed: no label, no unlisted usage or tool-budget member."""
    return _project(
        doc,
        _AGENT_KEYS,
        {
            "usage": _usage_json,
            "toolBudget": _tool_budget_json,
            "phases": lambda phases: [_phase_json(p) for p in phases],
        },
    )


def _table_json(table: InvocationTable) -> dict[str, Any]:
    def bucket(doc: Any) -> dict[str, Any]:
        return _project(doc, _BUCKET_KEYS, {"usage": _usage_json})

    return _project(
        table.to_json_dict(),
        _TABLE_KEYS,
        {
            "agents": lambda agents: [_agent_json(a) for a in agents],
            "byRole": lambda roles: {role: bucket(b) for role, b in roles.items()},
        },
    )


Cleaner = Callable[[object], str]
# (label, value, the figures behind it) of one critical-path row.
CriticalRow = tuple[str, str, tuple[float | int | None, ...]]

_AGENT_HEADERS: Final = (
    "span",
    "agent",
    "role",
    "model",
    "status",
    "wall",
    "in",
    "out",
    "USD",
    "basis",
    "retries",
)


def render_inspect(
    table: InvocationTable,
    path: CriticalPath,
    out: TextIO,
    *,
    masker: SecretMasker | None = None,
    width: int | None = None,
) -> None:
    """Print the three readings as plain tables (no colour unless ``out`` is a terminal)."""
    chosen = masker or compile_secret_masker()

    def clean(value: object) -> str:
        if value is None:
            return "-"
        return terminal_safe(value if isinstance(value, str) else str(value), chosen)

    console = Console(file=out, highlight=False, width=width or (None if out.isatty() else 160))
    shown = _Printer(console, chosen)
    shown.print(_agents_table(table, clean))
    shown.print(
        Text(
            f"{plural(len(table.agents), 'agent span')}, {table.open_agents} open, "
            f"{plural(table.open_phases, 'open phase')}; "
            f"settled total {format_usd(table.total_cost_usd)}"
        )
    )
    shown.print(_roles_table(table, clean))
    _print_critical_path(shown, path, clean)


class _Printer:
    """Prints renderables line by line, each rendered line cleaned again once composed: cells
    side by side (or a cell folded over lines) must not form what no single cell held."""

    def __init__(self, console: Console, masker: SecretMasker) -> None:
        self.console = console
        self.masker = masker

    def print(self, renderable: RenderableType) -> None:
        console = self.console
        lines = console.render_lines(renderable, console.options, pad=False)
        kept: list[list[Segment]] = []
        for line in lines:
            plain = "".join(segment.text for segment in line)
            cleaned = self.masker.clean(plain)
            # A changed line loses its styles: the masked text is what matters.
            kept.append(line if cleaned == plain else [Segment(cleaned)])
        console.print(SegmentLines(kept, new_lines=True))


def _agents_table(table: InvocationTable, clean: Cleaner) -> Table:
    """One row per agent span, and a dim row under it per invocation (phase pair)."""
    agents = Table(title="Invocation table", box=box.SIMPLE, title_justify="left")
    for header in _AGENT_HEADERS:
        agents.add_column(header, overflow="fold")
    for row in table.agents:
        agents.add_row(*(Text(cell) for cell in _agent_cells(row, clean)))
        for phase in row.phases:
            agents.add_row(*(Text(cell, style="dim") for cell in _phase_cells(phase, clean)))
    return agents


def _agent_cells(row: AgentInvocationRow, clean: Cleaner) -> tuple[str, ...]:
    # As the span name says it: the agent type, never the label (free text, maybe content).
    name = row.agent_type or "(anon)"
    usage = row.usage or {}
    cells = (
        row.span_id,
        clean(name) + (" (replayed)" if row.replayed else ""),
        row.role,
        row.model,
        "open" if row.open else clean(row.status) + (" host-rejected" if row.host_rejected else ""),
        _ms(row.duration_ms),
        format_tokens(usage.get("inputTokens")) if row.usage is not None else "-",
        format_tokens(usage.get("outputTokens")) if row.usage is not None else "-",
        format_usd(row.cost_usd) + ("~" if row.usage_approx else ""),
        row.cost_basis,
        "-" if row.retry_count is None else str(row.retry_count),
    )
    return tuple(clean(cell) for cell in cells)


def _phase_cells(phase: InvocationPhaseRow, clean: Cleaner) -> tuple[str, ...]:
    p_usage = phase.usage or {}
    cells = (
        "",
        f"  #{phase.invocation if phase.invocation is not None else '?'}",
        phase.role,
        phase.model,
        "open" if phase.open else _phase_outcome(phase.outcome),
        _ms(phase.duration_ms),
        format_tokens(p_usage.get("inputTokens")) if phase.usage is not None else "-",
        format_tokens(p_usage.get("outputTokens")) if phase.usage is not None else "-",
        format_usd(phase.cost_usd),
        phase.cost_basis,
        "-" if phase.retries is None else str(phase.retries),
    )
    return tuple("" if cell == "" else clean(cell) for cell in cells)


def _roles_table(table: InvocationTable, clean: Cleaner) -> Table:
    roles = Table(title="By role (completed phase pairs)", box=box.SIMPLE, title_justify="left")
    for header in ("role", "phases", "in", "out", "USD", "basis"):
        roles.add_column(header)
    for role, bucket in table.by_role.items():
        cells = (
            role,
            str(bucket.phases),
            format_tokens(bucket.usage.get("inputTokens", 0)),
            format_tokens(bucket.usage.get("outputTokens", 0)),
            format_usd(bucket.cost_usd),
            bucket.cost_basis,
        )
        roles.add_row(*(Text(clean(cell)) for cell in cells))
    return roles


def _print_critical_path(console: _Printer, path: CriticalPath, clean: Cleaner) -> None:
    """The critical-path figures, then what they mean; a row whose figures are all zero says
    nothing and is hidden ("-", a figure the stream cannot support, is kept)."""
    crit = Table(title="Critical path", box=box.SIMPLE, title_justify="left", show_header=False)
    crit.add_column("figure")
    crit.add_column("value")
    rows = _critical_rows(path)
    if path.post_fan_in is not None:
        rows += _post_fan_in_rows(path.post_fan_in, clean)
    hidden = 0
    for label, value, figures in rows:
        if all(f is not None and f == 0 for f in figures):
            hidden += 1
            continue
        crit.add_row(Text(label), Text(clean(value)))
    console.print(crit)
    width = max(len(term) for term, _ in CRITICAL_PATH_TERMS)
    for term, meaning in CRITICAL_PATH_TERMS:
        console.print(Text(f"  {term:<{width}}  {meaning}", style="dim"))
    if hidden:
        console.print(Text(f"  ({plural(hidden, 'row')} whose figures are all zero not shown)", style="dim"))


def _critical_rows(path: CriticalPath) -> list[CriticalRow]:
    return [
        ("segments", str(path.segments), (None,)),
        ("run wall", _ms(path.run_wall_ms), (None,)),
        ("worker spans", str(path.worker_spans), (None,)),
        (
            "post-fan-in",
            f"{_ms(path.post_fan_in_ms)} ({_share(path.post_fan_in_share)} of wall)",
            (None,),
        ),
        (
            "synthesis",
            f"{_ms(path.synthesis_ms)} ({_share(path.synthesis_share)} of wall)",
            (path.synthesis_ms,),
        ),
        (
            "  final composition",
            f"{_ms(path.final_composition_ms)} in {plural(path.composition_spans, 'span')}",
            (path.final_composition_ms, path.composition_spans),
        ),
        (
            "  claim judge",
            f"{_ms(path.semantic_judge_ms)} in {plural(path.judge_spans, 'span')} "
            f"(draft {_ms(path.draft_judge_ms)}, final {_ms(path.final_judge_ms)})",
            (path.semantic_judge_ms, path.judge_spans, path.draft_judge_ms, path.final_judge_ms),
        ),
        (
            "  citation judge",
            f"{_ms(path.citation_judge_ms)} in {plural(path.citation_judge_spans, 'span')}",
            (path.citation_judge_ms, path.citation_judge_spans),
        ),
        (
            "  unclassified",
            f"{_ms(path.unclassified_synthesis_ms)} in {plural(path.unclassified_synthesis_spans, 'span')}",
            (path.unclassified_synthesis_ms, path.unclassified_synthesis_spans),
        ),
        ("first candidate", _ms(path.first_candidate_ms), (None,)),
        ("last candidate", _ms(path.last_candidate_ms), (None,)),
        ("host-rejected spans", str(path.host_rejected_spans), (path.host_rejected_spans,)),
    ]


def _post_fan_in_rows(b: PostFanInBreakdown, clean: Cleaner) -> list[CriticalRow]:
    by_phase = ", ".join(f"{clean(k)} {_ms(v)}" for k, v in b.coordination_model_ms_by_phase.items())
    by_tool = ", ".join(
        f"{clean(k)} {_ms(v)} x{b.coordination_tool_calls_by_name.get(k, 0)}"
        for k, v in b.coordination_tool_ms_by_name.items()
    )
    return [
        (
            "post-fan-in: coordination model",
            f"{_ms(b.coordination_model_ms)}" + (f" ({by_phase})" if by_phase else ""),
            (b.coordination_model_ms,),
        ),
        ("post-fan-in: model only", _ms(b.coordination_model_only_ms), (b.coordination_model_only_ms,)),
        (
            "post-fan-in: coordination tools",
            f"{_ms(b.coordination_tool_ms)}" + (f" ({by_tool})" if by_tool else ""),
            (b.coordination_tool_ms,),
        ),
        ("post-fan-in: synthesis", _ms(b.synthesis_ms), (b.synthesis_ms,)),
        ("post-fan-in: covered", _ms(b.covered_ms), (b.covered_ms,)),
        ("post-fan-in: residue", f"{_ms(b.residue_ms)} ({_share(b.residue_share)})", (None,)),
    ]


def _json_document(table: InvocationTable, path: CriticalPath, masker: SecretMasker) -> str:
    doc = {"invocationTable": _table_json(table), "criticalPath": path.to_json_dict()}
    # ASCII escapes keep raw control characters (C1 included) off the terminal.
    # Every string (keys included) is cleaned before encoding: a JSON escape would hide a key's start.
    text = json.dumps(_round_floats(masker.clean_deep(doc)), ensure_ascii=True, indent=2)
    # And every line once composed: a member's name beside its value is a new string.
    return "\n".join(masker.clean(line) for line in text.split("\n"))


def run_inspect(
    stream: str,
    *,
    as_json: bool,
    patterns: Sequence[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The command body; returns the exit code (2 for unreadable input or bad options)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        masker = compile_secret_masker(patterns or None)
        events, problems = read_jsonl_events(stream)
    except RulvarOtelError as exc:
        say(f"inspect: {exc}", stream=err)
        return EXIT_USAGE
    for problem in problems[:5]:
        say(f"inspect: skipped {problem}", masker, stream=err)
    if len(problems) > 5:
        say(f"inspect: skipped {plural(len(problems) - 5, 'more malformed line')}", masker, stream=err)
    if not events:
        say(f"inspect: {stream} holds no events", masker, stream=err)
        return EXIT_USAGE
    table, path = inspect_events(events)
    if as_json:
        out.write(_json_document(table, path, masker) + "\n")
    else:
        render_inspect(table, path, out, masker=masker)
    return EXIT_OK


def register(app: typer.Typer) -> None:
    """Add ``inspect`` to ``app``."""

    @app.command("inspect")
    def inspect(
        stream: Annotated[
            Path,
            typer.Argument(
                metavar="STREAM.jsonl|-",
                help="A JSONL event stream (one WorkflowEvent per line); '-' reads stdin.",
            ),
        ],
        as_json: Annotated[
            bool, typer.Option("--json", help="Print the readings as one JSON object.")
        ] = False,
        pattern: PatternOption = None,
    ) -> None:
        """Print the invocation table, the per-role split and the critical path of a recorded run."""
        code = run_inspect(str(stream), as_json=as_json, patterns=pattern)
        if code:
            raise typer.Exit(code)
