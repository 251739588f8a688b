"""``rulvar-otel inspect STREAM.jsonl [--json]``: the reducers' tables for a recorded run.

Prints the invocation table (one row per agent span, one indented row per phase activation),
the per-role split with its cost basis, and the critical path with its post-fan-in
decomposition. ``--json`` prints the same readings as one JSON object on stdout. Every string
taken from the stream is masked and then made terminal-safe; the JSON form is masked and
ASCII-escaped.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rulvar_otel.cli._common import PatternOption
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker, sanitize_terminal_text
from rulvar_otel.core.progress import format_tokens, format_usd
from rulvar_otel.core.reducers import (
    CriticalPath,
    InvocationTable,
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


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def inspect_events(events: Iterable[Any]) -> tuple[InvocationTable, CriticalPath]:
    """Both reducers over one materialized stream."""
    materialized = list(events)
    return reduce_invocation_table(materialized), reduce_critical_path(materialized)


def render_inspect(
    table: InvocationTable,
    path: CriticalPath,
    out: TextIO,
    *,
    masker: SecretMasker | None = None,
    width: int | None = None,
) -> None:
    """Print the three readings as plain tables (no colour unless ``out`` is a terminal)."""
    masker = masker or compile_secret_masker()

    def clean(value: object) -> str:
        if value is None:
            return "-"
        return sanitize_terminal_text(masker.mask(value if isinstance(value, str) else str(value)))

    console = Console(file=out, highlight=False, width=width or (None if out.isatty() else 160))

    agents = Table(title="Invocation table", box=box.SIMPLE, title_justify="left")
    for header in (
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
    ):
        agents.add_column(header, overflow="fold")
    for row in table.agents:
        name = row.label or row.agent_type or "agent"
        usage = row.usage or {}
        agents.add_row(
            *(
                Text(cell)
                for cell in (
                    clean(row.span_id),
                    clean(name) + (" (replayed)" if row.replayed else ""),
                    clean(row.role),
                    clean(row.model),
                    "open"
                    if row.open
                    else clean(row.status) + (" host-rejected" if row.host_rejected else ""),
                    _ms(row.duration_ms),
                    format_tokens(usage.get("inputTokens")) if row.usage is not None else "-",
                    format_tokens(usage.get("outputTokens")) if row.usage is not None else "-",
                    format_usd(row.cost_usd) + ("~" if row.usage_approx else ""),
                    clean(row.cost_basis),
                    "-" if row.retry_count is None else str(row.retry_count),
                )
            )
        )
        for phase in row.phases:
            p_usage = phase.usage or {}
            agents.add_row(
                *(
                    Text(cell, style="dim")
                    for cell in (
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
                )
            )
    console.print(agents)
    console.print(
        Text(
            f"{len(table.agents)} agent spans, {table.open_agents} open, {table.open_phases} open phases; "
            f"settled total {format_usd(table.total_cost_usd)}"
        )
    )

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
    console.print(roles)

    crit = Table(title="Critical path", box=box.SIMPLE, title_justify="left", show_header=False)
    crit.add_column("figure")
    crit.add_column("value")
    rows: list[tuple[str, str]] = [
        ("segments", str(path.segments)),
        ("run wall", _ms(path.run_wall_ms)),
        ("worker spans", str(path.worker_spans)),
        ("post-fan-in", f"{_ms(path.post_fan_in_ms)} ({_share(path.post_fan_in_share)} of wall)"),
        ("synthesis", f"{_ms(path.synthesis_ms)} ({_share(path.synthesis_share)} of wall)"),
        ("  final composition", f"{_ms(path.final_composition_ms)} in {path.composition_spans} spans"),
        (
            "  claim judge",
            f"{_ms(path.semantic_judge_ms)} in {path.judge_spans} spans "
            f"(draft {_ms(path.draft_judge_ms)}, final {_ms(path.final_judge_ms)})",
        ),
        ("  citation judge", f"{_ms(path.citation_judge_ms)} in {path.citation_judge_spans} spans"),
        (
            "  unclassified",
            f"{_ms(path.unclassified_synthesis_ms)} in {path.unclassified_synthesis_spans} spans",
        ),
        ("first candidate", _ms(path.first_candidate_ms)),
        ("last candidate", _ms(path.last_candidate_ms)),
        ("host-rejected spans", str(path.host_rejected_spans)),
    ]
    b = path.post_fan_in
    if b is not None:
        by_phase = ", ".join(f"{clean(k)} {_ms(v)}" for k, v in b.coordination_model_ms_by_phase.items())
        by_tool = ", ".join(
            f"{clean(k)} {_ms(v)} x{b.coordination_tool_calls_by_name.get(k, 0)}"
            for k, v in b.coordination_tool_ms_by_name.items()
        )
        rows += [
            (
                "post-fan-in: coordination model",
                f"{_ms(b.coordination_model_ms)}" + (f" ({by_phase})" if by_phase else ""),
            ),
            ("post-fan-in: model only", _ms(b.coordination_model_only_ms)),
            (
                "post-fan-in: coordination tools",
                f"{_ms(b.coordination_tool_ms)}" + (f" ({by_tool})" if by_tool else ""),
            ),
            ("post-fan-in: synthesis", _ms(b.synthesis_ms)),
            ("post-fan-in: covered", _ms(b.covered_ms)),
            ("post-fan-in: residue", f"{_ms(b.residue_ms)} ({_share(b.residue_share)})"),
        ]
    for label, value in rows:
        crit.add_row(Text(label), Text(value))
    console.print(crit)


def _json_document(table: InvocationTable, path: CriticalPath, masker: SecretMasker) -> str:
    doc = {"invocationTable": table.to_json_dict(), "criticalPath": path.to_json_dict()}
    # ASCII escapes keep raw control characters (C1 included) off the terminal.
    return json.dumps(masker.mask_deep(doc), ensure_ascii=True, indent=2)


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
        err.write(f"rulvar-otel inspect: {sanitize_terminal_text(compile_secret_masker().mask(str(exc)))}\n")
        return 2
    for problem in problems[:5]:
        err.write(f"rulvar-otel inspect: skipped {sanitize_terminal_text(masker.mask(str(problem)))}\n")
    if len(problems) > 5:
        err.write(f"rulvar-otel inspect: skipped {len(problems) - 5} more malformed lines\n")
    if not events:
        err.write(f"rulvar-otel inspect: {sanitize_terminal_text(masker.mask(stream))} holds no events\n")
        return 2
    table, path = inspect_events(events)
    if as_json:
        out.write(_json_document(table, path, masker) + "\n")
    else:
        render_inspect(table, path, out, masker=masker)
    return 0


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
