"""``rulvar-otel demo`` and ``rulvar-otel replay``: the bundled engine, exported live.

``demo`` runs the bundled multi-agent sample on the scripted adapter and exports it while it runs
(with metrics asked for, the engine records its per-request ``gen_ai.client.*`` metrics into the
export's metrics pipeline, next to the run metrics);
``replay`` dry-run resumes a journaled run (zero model calls) and exports the re-emitted history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from pathlib import Path
from typing import Annotated, TextIO

import orjson
import typer

from rulvar_otel.cli._common import CommandOptions, open_metrics, run_export_async, with_export_options
from rulvar_otel.cli._text import EXIT_OK, EXIT_USAGE, say
from rulvar_otel.core.events import event_to_wire
from rulvar_otel.engine import (
    EngineRunHandle,
    JsonlJournalStore,
    ScriptedAdapter,
    Workflow,
    create_engine,
)
from rulvar_otel.engine.demo import DEMO_PRICING, DEMO_WORKFLOWS, build_demo
from rulvar_otel.errors import ConfigError, JournalError, RulvarOtelError, RunRejectedError
from rulvar_otel.export import MetricsPipeline

__all__ = ["demo_command", "register", "replay_command"]

JournalOption = Annotated[
    Path | None,
    typer.Option("--journal", metavar="DIR", help="Journal directory (one RUN_ID.jsonl per run)."),
]
EventsOption = Annotated[
    Path | None,
    typer.Option(
        "--events", metavar="FILE", help="Also write the raw (masked) event stream as JSONL to FILE."
    ),
]


async def _write_events(handle: EngineRunHandle, path: Path) -> None:
    fh: TextIO
    with path.open("w", encoding="utf-8") as fh:
        async for event in handle.events:
            fh.write(orjson.dumps(event_to_wire(event)).decode() + "\n")


async def _export(
    handle: EngineRunHandle,
    options: CommandOptions,
    events: Path | None,
    metrics: MetricsPipeline | None = None,
) -> int:
    writer = asyncio.create_task(_write_events(handle, events)) if events is not None else None
    try:
        code, _ = await run_export_async(handle, options, metrics=metrics)
    finally:
        if writer is not None:
            try:
                await writer
            except OSError as exc:
                say(f"error: cannot write --events {events}: {exc.strerror or exc}")
                return EXIT_USAGE
    refused = _journal_refusal(handle)
    if refused is not None:
        say(f"error: {refused}")
        return EXIT_USAGE
    return code


def _journal_refusal(handle: EngineRunHandle) -> RunRejectedError | None:
    """The run's rejection when the journal refused a write (an unusable --journal: exit 2)."""
    result = handle.result
    if not result.done() or result.cancelled():
        return None
    rejection = result.exception()
    if isinstance(rejection, RunRejectedError) and rejection.error_code == JournalError.code:
        return rejection
    return None


@with_export_options
def demo_command(
    journal: JournalOption = None,
    events: EventsOption = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", metavar="ID", help="Run id (default: a new ULID).")
    ] = None,
    budget_usd: Annotated[
        float | None, typer.Option("--budget-usd", metavar="USD", help="Hard spend ceiling of the run.")
    ] = None,
    *,
    options: CommandOptions,
) -> None:
    """Run the bundled multi-agent sample workflow and export its trace live.

    No model, network or API key is needed: the sample runs on the scripted adapter. Exit codes:
    0 exported, 1 export failed, 2 usage error.
    """
    options = dataclasses.replace(options, ceiling_usd=budget_usd)

    async def main() -> int:
        store = JsonlJournalStore(journal) if journal is not None else None
        try:
            metrics = open_metrics(options)
        except ConfigError as exc:
            say(f"error: {exc}")
            return EXIT_USAGE
        # The engine records the per-request gen_ai.client.* metrics into the export's provider.
        setup = build_demo(journal=store, meter=metrics.meter if metrics is not None else None)
        try:
            handle = setup.engine.run(setup.workflow, setup.args, run_id=run_id, budget_usd=budget_usd)
        except RulvarOtelError as exc:
            if metrics is not None:
                metrics.stop_linger.set()
                metrics.shutdown()
            say(f"error: {exc}")
            return EXIT_USAGE
        code = await _export(handle, options, events, metrics)
        if journal is not None and code == EXIT_OK:
            say(
                f"run {handle.run_id} journaled in {journal}; replay it with: "
                f"rulvar-otel replay {handle.run_id} --journal {journal}"
            )
        return code

    raise typer.Exit(asyncio.run(main()))


def _load_workflow(spec: str) -> Workflow:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--workflow must be 'module:attribute', got {spec!r}")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--workflow {spec}: cannot load it ({type(exc).__name__}: {exc})") from exc
    if not isinstance(value, Workflow):
        raise ConfigError(f"--workflow {spec} is not a @workflow-decorated function")
    return value


@with_export_options
def replay_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The journaled run to replay.")],
    journal: Annotated[Path, typer.Option("--journal", metavar="DIR", help="Journal directory.")],
    workflow_spec: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            metavar="MODULE:ATTR",
            help="The run's workflow (default: the bundled sample's workflows, found by name).",
        ),
    ] = None,
    events: EventsOption = None,
    *,
    options: CommandOptions,
) -> None:
    """Dry-run resume a journaled run (zero model calls) and export the re-emitted history.

    Exit codes: 0 exported, 1 export failed, 2 usage error (unknown run, unknown workflow).
    """

    async def main() -> int:
        store = JsonlJournalStore(journal)
        try:
            entries = store.load(run_id)
            genesis = next((e for e in entries if e.kind == "run_start"), None)
            name = str(genesis.data.get("workflow")) if genesis is not None else ""
            if workflow_spec is not None:
                wf = _load_workflow(workflow_spec)
            elif name in DEMO_WORKFLOWS:
                wf = DEMO_WORKFLOWS[name]
            else:
                raise ConfigError(
                    f"run {run_id!r} ran workflow {name!r}: pass --workflow MODULE:ATTR to replay it"
                )
            # A dry-run never calls a model: inert adapters stand in for every adapter the journal names.
            adapter_ids = {
                str(e.data["model"]).partition(":")[0]
                for e in entries
                if e.kind in ("turn", "agent") and ":" in str(e.data.get("model", ""))
            } or {"demo"}
            engine = create_engine(
                [ScriptedAdapter(a, fallback=None) for a in sorted(adapter_ids)],
                journal=store,
                pricing=DEMO_PRICING,
            )
            handle = engine.resume(run_id, wf, dry_run=True)
        except RulvarOtelError as exc:
            say(f"error: {exc}")
            return EXIT_USAGE
        return await _export(handle, options, events)

    raise typer.Exit(asyncio.run(main()))


def register(app: typer.Typer) -> None:
    """Add ``demo`` and ``replay`` to ``app``."""
    app.command("demo")(demo_command)
    app.command("replay")(replay_command)
