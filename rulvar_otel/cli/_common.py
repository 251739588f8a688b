"""What every exporting command shares: its option declarations, and one call that exports and prints.

The pipeline itself is library code (:mod:`rulvar_otel.export`); this module turns command-line
values into :class:`~rulvar_otel.export.ExportOptions` (``@with_export_options`` gives every
exporting command the same flags), runs :func:`~rulvar_otel.export.export_run` with the progress
view as an observer, and hands the report to ``_output`` for printing. The exit codes are the
table in ``_text``.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TextIO
from urllib.parse import parse_qsl, urlsplit

import typer

from rulvar_otel.cli._output import print_report
from rulvar_otel.cli._text import (
    EXIT_EXPORT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROGRESS_MODES,
    say,
    terminal_safe,
)
from rulvar_otel.cli._traceparent import parentage_from_cli
from rulvar_otel.core.handle import RunHandle, RunOutcome
from rulvar_otel.errors import ConfigError, InvalidHeaderError
from rulvar_otel.export import (
    DEFAULT_PROMETHEUS_HOST,
    EventObserver,
    ExportOptions,
    ExportReport,
    export_run,
    export_run_async,
    parse_header,
    resolve_otlp_target,
    resolve_service_name,
)
from rulvar_otel.masking import compile_secret_masker, set_output_masker
from rulvar_otel.otel.semconv import DEFAULT_METRIC_CARDINALITY_LIMIT

if TYPE_CHECKING:
    from rulvar_otel.export import MetricsPipeline

__all__ = [
    "EXIT_EXPORT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandOptions",
    "PatternOption",
    "open_metrics",
    "options_from_cli",
    "run_export",
    "run_export_async",
    "say",
    "terminal_safe",
    "with_export_options",
]


# --- reusable Typer options ---------------------------------------------------------------------

EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        metavar="URL",
        help="OTLP endpoint (http://host:4317 for gRPC, http://host:4318 for HTTP). "
        "Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, "
        "else write OTLP/JSON lines to a file.",
    ),
]
ProtocolOption = Annotated[
    str | None,
    typer.Option(
        "--protocol",
        metavar="grpc|http/protobuf",
        help="OTLP transport. Default: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else grpc on port 4317 "
        "and http/protobuf otherwise.",
    ),
]
HeaderOption = Annotated[
    list[str] | None,
    typer.Option("--header", metavar="KEY=VALUE", help="Header sent with every OTLP request (repeatable)."),
]
OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        metavar="FILE",
        help="Write OTLP/JSON lines (one ExportTraceServiceRequest per line) to FILE, replaced only "
        "when the export succeeds; without an endpoint the default is ./rulvar-traces.otlp.jsonl.",
    ),
]
ServiceNameOption = Annotated[
    str | None,
    typer.Option(
        "--service-name",
        metavar="NAME",
        help="service.name resource attribute (default: OTEL_SERVICE_NAME, else 'rulvar'); "
        "also the Phoenix project unless --project is given.",
    ),
]
ProjectOption = Annotated[
    str | None,
    typer.Option(
        "--project",
        metavar="NAME",
        help="openinference.project.name resource attribute: the Phoenix project the traces land in.",
    ),
]
OpenInferenceOption = Annotated[
    bool,
    typer.Option(
        "--openinference/--no-openinference",
        help="Add openinference.span.kind to every span (Phoenix and Arize classify by it).",
    ),
]
PatternOption = Annotated[
    list[str] | None,
    typer.Option(
        "--pattern",
        metavar="REGEX",
        help="Extra secret pattern (RE2 syntax, see docs/masking.md) masked in every exported and "
        "printed string (repeatable).",
    ),
]
ProgressOption = Annotated[
    str,
    typer.Option(
        "--progress",
        metavar="auto|tty|lines|off",
        help="Progress on stderr: a live tree on a terminal, plain lines in pipes (auto), or off.",
    ),
]
TreeOption = Annotated[
    bool | None,
    typer.Option(
        "--tree/--no-tree",
        help="Print the finished span tree (default: only when no endpoint is configured).",
        show_default=False,
    ),
]
ExportTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--export-timeout",
        metavar="SECONDS",
        help="Give up on an OTLP batch after this long (default: OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT "
        "in milliseconds, else 10 s).",
    ),
]
DeterministicIdsOption = Annotated[
    bool,
    typer.Option(
        "--deterministic-ids",
        help="Derive trace and span ids from the run id and span keys, so exporting the same run again "
        "gives the same ids and the backend deduplicates.",
    ),
]
MetricsEndpointOption = Annotated[
    str | None,
    typer.Option("--metrics-endpoint", metavar="URL", help="Also export run metrics over OTLP to URL."),
]
PrometheusPortOption = Annotated[
    int | None,
    typer.Option(
        "--prometheus-port",
        metavar="N",
        help="Also serve run metrics for Prometheus on --prometheus-host:N (0 picks a free port, "
        "which is printed).",
    ),
]
PrometheusHostOption = Annotated[
    str,
    typer.Option(
        "--prometheus-host",
        metavar="ADDR",
        help="Address the Prometheus endpoint listens on (0.0.0.0 lets a container scrape the host).",
    ),
]
PrometheusLingerOption = Annotated[
    float,
    typer.Option(
        "--prometheus-linger",
        metavar="SECONDS",
        help="Keep the Prometheus endpoint up this long after the export, so a scrape can happen.",
    ),
]
MetricCardinalityOption = Annotated[
    int,
    typer.Option(
        "--metric-cardinality-limit",
        metavar="N",
        min=1,
        help="Attribute sets each metric instrument keeps (default 2000, as the OpenTelemetry SDK); "
        "past it, new ones add up in one otel.metric.overflow=true series.",
    ),
]
PipelineOption = Annotated[
    str,
    typer.Option(
        "--pipeline",
        metavar="direct|sdk",
        help="How spans are made: direct (finished span records straight to the exporters, the "
        "fastest) or sdk (an OpenTelemetry SDK TracerProvider). Both export the same content.",
    ),
]
TraceparentOption = Annotated[
    str | None,
    typer.Option(
        "--traceparent",
        metavar="VALUE",
        help="A W3C traceparent to run inside (else the TRACEPARENT variable, with TRACESTATE).",
    ),
]
ParentOption = Annotated[
    str,
    typer.Option(
        "--parent",
        metavar="ambient|link|none",
        help="With a traceparent: ambient (the run joins that trace under that span), link (its "
        "own trace, linked both ways) or none (ignore it).",
    ),
]


# Every export option, in the order --help lists them, with its default.
_SHARED_OPTIONS: Final[tuple[tuple[str, Any, Any], ...]] = (
    ("pattern", PatternOption, None),
    ("endpoint", EndpointOption, None),
    ("protocol", ProtocolOption, None),
    ("header", HeaderOption, None),
    ("out", OutOption, None),
    ("service_name", ServiceNameOption, None),
    ("project", ProjectOption, None),
    ("openinference", OpenInferenceOption, True),
    ("progress", ProgressOption, "auto"),
    ("tree", TreeOption, None),
    ("export_timeout", ExportTimeoutOption, None),
    ("deterministic_ids", DeterministicIdsOption, False),
    ("metrics_endpoint", MetricsEndpointOption, None),
    ("prometheus_port", PrometheusPortOption, None),
    ("prometheus_host", PrometheusHostOption, DEFAULT_PROMETHEUS_HOST),
    ("prometheus_linger", PrometheusLingerOption, 0.0),
    ("metric_cardinality_limit", MetricCardinalityOption, DEFAULT_METRIC_CARDINALITY_LIMIT),
    ("pipeline", PipelineOption, "direct"),
    ("traceparent", TraceparentOption, None),
    ("parent", ParentOption, "ambient"),
)


@dataclass(frozen=True, slots=True)
class CommandOptions:
    """A command's export options: the library's, plus what only a terminal needs."""

    export: ExportOptions
    progress: str = "auto"
    tree: bool | None = None
    ceiling_usd: float | None = None


# Library messages name fields; the terminal names the flags that set them.
_FLAG_NAMES: Final = (
    ("protocol must", "--protocol must"),
    ("endpoint must", "--endpoint must"),
    ("endpoint has", "--endpoint has"),
    ("metrics endpoint must", "--metrics-endpoint must"),
    ("export timeout must", "--export-timeout must"),
    ("Prometheus port must", "--prometheus-port must"),
    ("Prometheus host must", "--prometheus-host must"),
    ("Prometheus linger must", "--prometheus-linger must"),
    ("pipeline must", "--pipeline must"),
    ("header ", "--header "),
)


def _flagged(message: str) -> str:
    for field_text, flag_text in _FLAG_NAMES:
        if message.startswith(field_text):
            return flag_text + message[len(field_text) :]
    return message


# A configured value shorter than this is not masked in messages: "1" or "json" would mask every
# occurrence of an ordinary word.
_MIN_CONFIGURED_SECRET: Final = 6


def configured_secret_patterns(export: ExportOptions) -> tuple[str, ...]:
    """Literal patterns for the secrets an export was given: header values (and each word of
    one, ``Bearer <token>``), and the query values and password of its endpoints."""
    values: set[str] = set()
    for value in export.headers.values():
        values.add(value.strip())
        values.update(value.split())
    for url in (export.endpoint, export.metrics_endpoint):
        if not url:
            continue
        parts = urlsplit(url.strip())
        values.update(value for _, value in parse_qsl(parts.query, keep_blank_values=False))
        values.update(pair.partition("=")[2] for pair in parts.query.split("&"))  # as sent, encoded
        values.update(parts.fragment.split("&"))
        if parts.password:
            values.add(parts.password)
    kept = sorted(v for v in values if len(v) >= _MIN_CONFIGURED_SECRET)
    return tuple(re.escape(v) for v in kept)


def options_from_cli(
    *,
    pattern: Sequence[str] | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    header: Sequence[str] | None = None,
    out: Path | None = None,
    service_name: str | None = None,
    project: str | None = None,
    openinference: bool = True,
    progress: str = "auto",
    tree: bool | None = None,
    export_timeout: float | None = None,
    deterministic_ids: bool = False,
    metrics_endpoint: str | None = None,
    prometheus_port: int | None = None,
    prometheus_host: str = DEFAULT_PROMETHEUS_HOST,
    prometheus_linger: float = 0.0,
    metric_cardinality_limit: int = DEFAULT_METRIC_CARDINALITY_LIMIT,
    pipeline: str = "direct",
    traceparent: str | None = None,
    parent: str = "ambient",
) -> CommandOptions:
    """Raw option values to :class:`CommandOptions`; :class:`ConfigError` names a bad flag."""
    if progress not in PROGRESS_MODES:
        raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)} (got {progress!r})")
    try:
        headers = dict(parse_header(raw) for raw in header or ())
        parentage = parentage_from_cli(parent, traceparent, os.environ)
        export = ExportOptions(
            endpoint=endpoint,
            protocol=protocol,
            headers=headers,
            out=out,
            service_name=service_name,
            project=project,
            patterns=tuple(pattern or ()),
            export_timeout_s=export_timeout,
            deterministic_ids=deterministic_ids,
            openinference=openinference,
            metrics_endpoint=metrics_endpoint,
            prometheus_port=prometheus_port,
            prometheus_host=prometheus_host,
            prometheus_linger_s=prometheus_linger,
            metric_cardinality_limit=metric_cardinality_limit,
            pipeline=pipeline,
            parent=parentage,
        )
    except InvalidHeaderError as exc:
        raise InvalidHeaderError(_flagged(str(exc)), exc.name) from None
    except ConfigError as exc:
        raise ConfigError(_flagged(str(exc))) from None
    # Every line the command prints (its own, the progress view, library logs) uses this masker:
    # the host's patterns, plus the secrets the command was given (an HTTP client's error can
    # quote a header or the endpoint's query, whatever their shape).
    literals = configured_secret_patterns(export)
    patterns = (*export.patterns, *literals)
    set_output_masker(compile_secret_masker(patterns) if patterns else None)
    if out is not None and _is_stdout(out):
        # The spans go to stdout itself (`--out /dev/stdout`): the tree there would corrupt them.
        if tree:
            raise ConfigError(f"--tree prints on stdout, which --out {out} already writes the spans to")
        tree = False
    return CommandOptions(export=export, progress=progress, tree=tree)


def _is_stdout(path: Path) -> bool:
    try:
        written, stdout = path.stat(), os.fstat(1)
    except OSError:
        return False
    return (written.st_dev, written.st_ino) == (stdout.st_dev, stdout.st_ino)


def open_metrics(command: CommandOptions) -> MetricsPipeline | None:
    """The metrics pipeline the options ask for, built before the run starts (None: none asked for).

    A command whose run records metrics of its own (an engine given ``.meter``) opens it first and
    hands it to :func:`run_export_async`, so both land in one provider and one endpoint.
    :class:`ConfigError` (naming the flag) when a destination is unusable, a taken port say.
    """
    # Metrics pull in the metrics SDK and the Prometheus exporter: only a command asking for them.
    from rulvar_otel.export import build_metrics_delivery

    service = resolve_service_name(command.export, None)
    try:
        return build_metrics_delivery(command.export, service_name=service)
    except ConfigError as exc:
        raise ConfigError(_flagged(str(exc))) from None


def with_export_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a Typer command every export option, delivered as one ``options: CommandOptions``.

    The command declares only its own parameters plus ``options``; the shared ones are added to
    its signature here and validated together (a bad value exits 2 with the message), so every
    exporting command takes the same options the same way.
    """
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "options"]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)
        for name, annotation, default in _SHARED_OPTIONS
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        values = {name: kwargs.pop(name) for name, _, _ in _SHARED_OPTIONS}
        try:
            options = options_from_cli(**values)
        except ConfigError as exc:
            say(f"error: {exc}")
            raise typer.Exit(EXIT_USAGE) from None
        command(options=options, **kwargs)

    parameters = [*own, *shared]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper


class _StreamEventCounter:
    """Counts the stream's events per run, for the span tree's run rows."""

    def __init__(self) -> None:
        self.by_run: Counter[str] = Counter()

    def feed(self, event: Mapping[str, Any]) -> None:
        run_id = event.get("runId")
        if isinstance(run_id, str):
            self.by_run[run_id] += 1

    def finish(self, outcome: RunOutcome | BaseException | None) -> None:
        pass


def _tree_wanted(command: CommandOptions) -> bool:
    """Whether the finished span tree will be printed: ``--tree``, or by default only when no OTLP
    endpoint is configured (the spans then go to a file). Spans are kept for it only then."""
    if command.tree is not None:
        return command.tree
    try:
        return resolve_otlp_target(command.export) is None
    except ConfigError:
        return True  # the export itself reports the bad setting, before any span exists


def _observers(command: CommandOptions, counter: _StreamEventCounter, tree: bool) -> list[EventObserver]:
    observers: list[EventObserver] = [counter] if tree else []
    if command.progress == "off":
        return observers
    from rulvar_otel.cli._progress import open_progress

    masker = compile_secret_masker(command.export.patterns or None)
    view = open_progress(command.progress, ceiling_usd=command.ceiling_usd, masker=masker)
    return [*observers, view]  # a view is an observer: feed, then finish


class _LiveNotes:
    """Prints notes as the export makes them; the report's copies are then not printed again."""

    def __init__(self, command: CommandOptions, stderr: TextIO | None) -> None:
        self._masker = compile_secret_masker(command.export.patterns or None)
        self._stderr = stderr
        self.printed = 0

    def __call__(self, text: str) -> None:
        self.printed += 1
        say(text, self._masker, stream=self._stderr)


def run_export(
    handle: RunHandle,
    command: CommandOptions,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    streamed_events: Callable[[], int] | None = None,
) -> tuple[int, ExportReport]:
    """Export ``handle`` as the command options say, print the report; the exit code and report.

    ``streamed_events``: for a source that also builds events of its own (``tail``'s terminal
    facts), the number it really streamed, which the summary and the tree then count instead.
    """
    notes = _LiveNotes(command, stderr)
    counter = _StreamEventCounter()
    tree = _tree_wanted(command)
    report = export_run(
        handle,
        command.export,
        observers=_observers(command, counter, tree),
        on_note=notes,
        keep_spans=tree,
    )
    if streamed_events is not None:
        streamed = streamed_events()
        report = replace(report, events=streamed)
        for run_id in counter.by_run:
            counter.by_run[run_id] = streamed
    return _print(report, command, notes, counter, stdout, stderr), report


async def run_export_async(
    handle: RunHandle,
    command: CommandOptions,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    metrics: MetricsPipeline | None = None,
) -> tuple[int, ExportReport]:
    """:func:`run_export` from async code; ``metrics``: a pipeline built by :func:`open_metrics`."""
    notes = _LiveNotes(command, stderr)
    counter = _StreamEventCounter()
    tree = _tree_wanted(command)
    report = await export_run_async(
        handle,
        command.export,
        observers=_observers(command, counter, tree),
        on_note=notes,
        keep_spans=tree,
        metrics=metrics,
    )
    return _print(report, command, notes, counter, stdout, stderr), report


def _print(
    report: ExportReport,
    command: CommandOptions,
    notes: _LiveNotes,
    counter: _StreamEventCounter,
    stdout: TextIO | None,
    stderr: TextIO | None,
) -> int:
    return print_report(
        report,
        patterns=command.export.patterns,
        tree=command.tree,
        notes_printed=notes.printed,
        stream_events_by_run=counter.by_run,
        stdout=stdout,
        stderr=stderr,
    )
