"""``rulvar-otel inspect STREAM.jsonl [--json]``: the reducers' tables for a recorded run.

Prints the invocation table (one row per agent span, one indented row per phase activation),
the per-role split with its cost basis, and the critical path with its post-fan-in
decomposition (rows whose figures are all zero hidden, its terms explained under it).
``--json`` prints the same readings as one JSON object on stdout, floats rounded to 12
significant digits. Every string taken from the stream is sanitized, then masked (the masker's
``clean``), in the JSON form before encoding (keys included), which is also ASCII-escaped.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, TextIO

import typer
from rich import box
from rich.console import Console
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
    console.print(_agents_table(table, clean))
    console.print(
        Text(
            f"{plural(len(table.agents), 'agent span')}, {table.open_agents} open, "
            f"{plural(table.open_phases, 'open phase')}; "
            f"settled total {format_usd(table.total_cost_usd)}"
        )
    )
    console.print(_roles_table(table, clean))
    _print_critical_path(console, path, clean)


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
    name = row.label or row.agent_type or "(anon)"  # as the span name says it
    usage = row.usage or {}
    return (
        clean(row.span_id),
        clean(name) + (" (replayed)" if row.replayed else ""),
        clean(row.role),
        clean(row.model),
        "open" if row.open else clean(row.status) + (" host-rejected" if row.host_rejected else ""),
        _ms(row.duration_ms),
        format_tokens(usage.get("inputTokens")) if row.usage is not None else "-",
        format_tokens(usage.get("outputTokens")) if row.usage is not None else "-",
        format_usd(row.cost_usd) + ("~" if row.usage_approx else ""),
        clean(row.cost_basis),
        "-" if row.retry_count is None else str(row.retry_count),
    )


def _phase_cells(phase: InvocationPhaseRow, clean: Cleaner) -> tuple[str, ...]:
    p_usage = phase.usage or {}
    return (
        "",
        f"  #{phase.invocation if phase.invocation is not None else '?'}",
        clean(phase.role),
        clean(phase.model),
        "open" if phase.open else clean(phase.outcome),
        _ms(phase.duration_ms),
        format_tokens(p_usage.get("inputTokens")) if phase.usage is not None else "-",
        format_tokens(p_usage.get("outputTokens")) if phase.usage is not None else "-",
        format_usd(phase.cost_usd),
        clean(phase.cost_basis),
        "-" if phase.retries is None else str(phase.retries),
    )


def _roles_table(table: InvocationTable, clean: Cleaner) -> Table:
    roles = Table(title="By role (completed phase pairs)", box=box.SIMPLE, title_justify="left")
    for header in ("role", "phases", "in", "out", "USD", "basis"):
        roles.add_column(header)
    for role, bucket in table.by_role.items():
        roles.add_row(
            *(
                Text(cell)
                for cell in (
                    clean(role),
                    str(bucket.phases),
                    format_tokens(bucket.usage.get("inputTokens", 0)),
                    format_tokens(bucket.usage.get("outputTokens", 0)),
                    format_usd(bucket.cost_usd),
                    bucket.cost_basis,
                )
            )
        )
    return roles


def _print_critical_path(console: Console, path: CriticalPath, clean: Cleaner) -> None:
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
        crit.add_row(Text(label), Text(value))
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
    doc = {"invocationTable": table.to_json_dict(), "criticalPath": path.to_json_dict()}
    # ASCII escapes keep raw control characters (C1 included) off the terminal.
    # Every string (keys included) is cleaned before encoding: a JSON escape would hide a key's start.
    return json.dumps(_round_floats(masker.clean_deep(doc)), ensure_ascii=True, indent=2)


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
