"""What every exporting command shares: the export options and one end-to-end export of a RunHandle.

Commands declare their options with the ``*Option`` aliases below, turn them into an
:class:`ExportOptions` with :meth:`ExportOptions.from_cli`, build a :class:`RunHandle` their own
way (a JSONL file, a server, the bundled engine), and call :func:`export_run` (or
:func:`export_run_async` from async code). Exit codes: :data:`EXIT_OK` (every span delivered),
:data:`EXIT_EXPORT_FAILED` (a destination refused or was unreachable), :data:`EXIT_USAGE`
(bad options or bad input).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Protocol, TextIO
from urllib.parse import urlsplit

import typer
from opentelemetry.metrics import Meter

from rulvar_otel.core.events import EventModel, event_to_wire
from rulvar_otel.core.handle import EventLike, RunHandle, RunOutcome
from rulvar_otel.core.log_masking import output_masker, set_output_masker
from rulvar_otel.core.masking import SecretMasker, compile_secret_masker
from rulvar_otel.errors import ConfigError, EventError, ExportError, RulvarOtelError, SourceError
from rulvar_otel.otel._provider import (
    DEFAULT_EXPORT_TIMEOUT_S,
    DeliveryReport,
    TraceDelivery,
    TraceOptions,
    build_trace_delivery,
    parse_header,
    resolve_otlp_target,
    resolve_service_name,
)
from rulvar_otel.otel.ids import RulvarIdGenerator

__all__ = [
    "EXIT_EXPORT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "DeterministicIdsOption",
    "EndpointOption",
    "ExportOptions",
    "ExportResult",
    "ExportTimeoutOption",
    "HeaderOption",
    "MetricsEndpointOption",
    "OutOption",
    "PatternOption",
    "ProgressOption",
    "PrometheusPortOption",
    "ProtocolOption",
    "ServiceNameOption",
    "TreeOption",
    "export_run",
    "export_run_async",
    "with_export_options",
    "terminal_safe",
]

EXIT_OK: Final = 0
EXIT_EXPORT_FAILED: Final = 1
EXIT_USAGE: Final = 2

PROGRESS_MODES: Final = ("auto", "tty", "lines", "off")

# --- reusable Typer options ---------------------------------------------------------------------
# A command imports the aliases it needs and declares e.g. ``endpoint: EndpointOption = None``.

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
        help="Write OTLP/JSON lines (one ExportTraceServiceRequest per line) to FILE; "
        "without an endpoint the default is ./rulvar-traces.otlp.jsonl.",
    ),
]
ServiceNameOption = Annotated[
    str | None,
    typer.Option(
        "--service-name",
        metavar="NAME",
        help="service.name resource attribute (default: OTEL_SERVICE_NAME, else 'rulvar').",
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
        help="Also serve run metrics for Prometheus on port N (of --prometheus-host) while the export runs.",
    ),
]
PrometheusHostOption = Annotated[
    str,
    typer.Option(
        "--prometheus-host",
        metavar="HOST",
        help="Address the --prometheus-port endpoint binds: 0.0.0.0 lets a container (the compose "
        "Prometheus) or another machine scrape it.",
    ),
]
PrometheusLingerOption = Annotated[
    float,
    typer.Option(
        "--prometheus-linger",
        metavar="SECONDS",
        help="Keep the --prometheus-port endpoint up this long after the export, so a scraper sees "
        "the final values (at least its scrape interval; 0 closes it at once).",
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
    ("progress", ProgressOption, "auto"),
    ("tree", TreeOption, None),
    ("export_timeout", ExportTimeoutOption, None),
    ("deterministic_ids", DeterministicIdsOption, False),
    ("metrics_endpoint", MetricsEndpointOption, None),
    ("prometheus_port", PrometheusPortOption, None),
    ("prometheus_host", PrometheusHostOption, "127.0.0.1"),
    ("prometheus_linger", PrometheusLingerOption, 0.0),
)


def with_export_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a Typer command every export option, delivered as one ``options: ExportOptions``.

    The command declares only its own parameters plus ``options``; the shared ones are added to
    its signature here, validated together by :meth:`ExportOptions.from_cli` (a bad value exits 2
    with the message), so every exporting command takes the same options the same way.
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
            options = ExportOptions.from_cli(**values)
        except ConfigError as exc:
            print(f"rulvar-otel: error: {terminal_safe(str(exc))}", file=sys.stderr, flush=True)
            raise typer.Exit(EXIT_USAGE) from None
        command(options=options, **kwargs)

    parameters = [*own, *shared]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """Everything an export needs besides the run itself; ``None`` means "from the environment"."""

    endpoint: str | None = None
    protocol: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    out: Path | None = None
    service_name: str | None = None
    patterns: tuple[str, ...] = ()
    progress: str = "auto"
    tree: bool | None = None
    export_timeout_s: float | None = None
    metrics_endpoint: str | None = None
    prometheus_port: int | None = None
    prometheus_host: str = "127.0.0.1"
    prometheus_linger_s: float = 0.0
    ceiling_usd: float | None = None
    deterministic_ids: bool = False

    @classmethod
    def from_cli(
        cls,
        *,
        endpoint: str | None = None,
        protocol: str | None = None,
        header: Sequence[str] | None = None,
        out: Path | None = None,
        service_name: str | None = None,
        pattern: Sequence[str] | None = None,
        progress: str = "auto",
        tree: bool | None = None,
        export_timeout: float | None = None,
        metrics_endpoint: str | None = None,
        prometheus_port: int | None = None,
        prometheus_host: str = "127.0.0.1",
        prometheus_linger: float = 0.0,
        ceiling_usd: float | None = None,
        deterministic_ids: bool = False,
    ) -> ExportOptions:
        """Build from raw option values; raises :class:`ConfigError` naming a bad one."""
        headers: dict[str, str] = {}
        for raw in header or ():
            key, value = parse_header(raw)
            headers[key] = value
        if progress not in PROGRESS_MODES:
            raise ConfigError(f"--progress must be one of {', '.join(PROGRESS_MODES)} (got {progress!r})")
        if protocol is not None and protocol not in ("grpc", "http/protobuf"):
            raise ConfigError(f"--protocol must be grpc or http/protobuf (got {protocol!r})")
        if export_timeout is not None and not (0 < export_timeout < float("inf")):
            raise ConfigError(f"--export-timeout must be a positive number of seconds (got {export_timeout})")
        if prometheus_port is not None and not (0 <= prometheus_port <= 65535):
            raise ConfigError(f"--prometheus-port must be a TCP port, 0-65535 (got {prometheus_port})")
        if not prometheus_host.strip():
            raise ConfigError("--prometheus-host must name a host or address")
        if not (0 <= prometheus_linger <= 3600):
            raise ConfigError(f"--prometheus-linger must be 0-3600 seconds (got {prometheus_linger})")
        # Every line the command prints (its own, the progress view, library logs) uses this masker.
        set_output_masker(compile_secret_masker(pattern) if pattern else None)
        return cls(
            endpoint=endpoint,
            protocol=protocol,
            headers=headers,
            out=out,
            service_name=service_name,
            patterns=tuple(pattern or ()),
            progress=progress,
            tree=tree,
            export_timeout_s=export_timeout,
            metrics_endpoint=metrics_endpoint,
            prometheus_port=prometheus_port,
            prometheus_host=prometheus_host,
            prometheus_linger_s=prometheus_linger,
            ceiling_usd=ceiling_usd,
            deterministic_ids=deterministic_ids,
        )

    def trace_options(self, *, collect_spans: bool = False) -> TraceOptions:
        return TraceOptions(
            endpoint=self.endpoint,
            protocol=self.protocol,
            headers=dict(self.headers),
            out=self.out,
            service_name=self.service_name,
            timeout_s=self.export_timeout_s,
            collect_spans=collect_spans,
            id_generator=RulvarIdGenerator() if self.deterministic_ids else None,
        )


@dataclass(frozen=True, slots=True)
class ExportResult:
    """How one export ended. ``exit_code`` is what the command exits with."""

    exit_code: int
    spans: int = 0
    events: int = 0
    trace_ids: tuple[str, ...] = ()
    report: DeliveryReport | None = None
    outcome: RunOutcome | BaseException | None = None
    messages: tuple[str, ...] = ()


def terminal_safe(text: str, masker: SecretMasker | None = None) -> str:
    """Sanitize, then mask (URL userinfo redacted): the discipline for every printed dynamic string.

    Without ``masker``, the command's own (``--pattern`` included) once its options are parsed.
    """
    return (masker or output_masker()).clean(text)


class _ProgressSink(Protocol):
    def feed(self, event: Mapping[str, Any]) -> None: ...

    def close(self, outcome: Any) -> None: ...


def _open_progress(mode: str, ceiling_usd: float | None, masker: SecretMasker) -> _ProgressSink | None:
    # auto: the live tree on a terminal, append-only lines in pipes and CI (the view decides).
    if mode == "off":
        return None
    try:
        module = importlib.import_module("rulvar_otel.cli._progress")
    except ImportError:
        return None
    opener = getattr(module, "open_progress", None)
    if opener is None:
        return None
    view: _ProgressSink | None = opener(mode, ceiling_usd=ceiling_usd, masker=masker)
    return view


def _open_metrics(options: ExportOptions) -> tuple[Meter | None, Callable[[], None] | None]:
    """The meter for ``to_otel`` and its shutdown, when a metrics destination was asked for."""
    if options.metrics_endpoint is None and options.prometheus_port is None:
        return None, None
    from rulvar_otel.otel.metrics._provider import MetricsSetup, build_meter_provider

    protocol = options.protocol
    if protocol is None and options.metrics_endpoint is not None:
        # The same rule as for traces: gRPC on its well-known port, http/protobuf elsewhere.
        port = urlsplit(options.metrics_endpoint).port if "://" in options.metrics_endpoint else None
        protocol = "grpc" if port == 4317 else "http/protobuf"
    setup = MetricsSetup(
        otlp_endpoint=options.metrics_endpoint,
        otlp_protocol="http/protobuf" if protocol == "http/protobuf" else "grpc",
        headers=dict(options.headers),
        timeout_s=min(options.export_timeout_s or DEFAULT_EXPORT_TIMEOUT_S, 60.0),
        prometheus_port=options.prometheus_port,
        prometheus_host=options.prometheus_host,
        prometheus_linger_s=options.prometheus_linger_s,
        service_name=resolve_service_name(options.trace_options()),
    )
    pipeline = build_meter_provider(setup)
    return pipeline.meter, pipeline.shutdown


class _ObservedHandle:
    """A RunHandle view that counts events, feeds the progress view, and keeps a source failure.

    ``to_otel`` treats a failing source as the end of the stream (it must never raise into a
    host); the command still needs to know, to exit with an input error.
    """

    def __init__(self, inner: RunHandle, progress: _ProgressSink | None) -> None:
        self._inner = inner
        self._progress = progress
        self.events_seen = 0
        self.source_error: Exception | None = None

    @property
    def run_id(self) -> str:
        return self._inner.run_id

    @property
    def events(self) -> AsyncIterator[EventLike]:
        return self._events()

    async def _events(self) -> AsyncIterator[EventLike]:
        try:
            async for event in self._inner.events:
                self.events_seen += 1
                if self._progress is not None:
                    self._feed(event)
                yield event
        except Exception as exc:  # noqa: BLE001 - recorded, reported by the command
            self.source_error = exc

    def _feed(self, event: EventLike) -> None:
        assert self._progress is not None
        try:
            self._progress.feed(event_to_wire(event) if isinstance(event, EventModel) else event)
        except Exception:  # noqa: BLE001 - a progress view never costs a span
            self._progress = None

    @property
    def result(self) -> Awaitable[RunOutcome]:
        return self._inner.result

    def on(self, type: str, callback: Callable[[EventLike], object]) -> Callable[[], None]:  # noqa: A002
        return self._inner.on(type, callback)


def _describe_source_error(exc: Exception) -> str:
    if isinstance(exc, RulvarOtelError):
        return str(exc)
    return f"the event stream failed ({type(exc).__name__})"


async def export_run_async(
    handle: RunHandle,
    options: ExportOptions,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> ExportResult:
    """Export one run end to end: provider, ``to_otel``, flush, report, span tree.

    Never raises for bad options, bad input or an unreachable backend: those come back as
    :data:`EXIT_USAGE` / :data:`EXIT_EXPORT_FAILED` with the messages already printed on
    ``stderr``. The span tree (when wanted) goes to ``stdout``.
    """
    err = stderr if stderr is not None else sys.stderr
    messages: list[str] = []
    try:
        masker = compile_secret_masker(options.patterns or None)
    except ConfigError as exc:
        return _fail(err, messages, EXIT_USAGE, str(exc), None)
    set_output_masker(masker)

    def say(text: str) -> None:
        safe = terminal_safe(text, masker)
        messages.append(safe)
        print(f"rulvar-otel: {safe}", file=err, flush=True)

    try:
        otlp = resolve_otlp_target(options.trace_options())
        want_tree = options.tree if options.tree is not None else otlp is None
        delivery: TraceDelivery = build_trace_delivery(options.trace_options(collect_spans=want_tree))
    except ConfigError as exc:
        return _fail(err, messages, EXIT_USAGE, f"error: {exc}", masker)

    meter_shutdown: Callable[[], None] | None = None
    progress: _ProgressSink | None = None
    observed: _ObservedHandle | None = None
    spans = 0
    outcome: RunOutcome | BaseException | None = None
    try:
        meter, meter_shutdown = _open_metrics(options)
        progress = _open_progress(options.progress, options.ceiling_usd, masker)
        observed = _ObservedHandle(handle, progress)
        from rulvar_otel.otel.exporter import to_otel

        spans = await to_otel(observed, delivery.tracer, patterns=options.patterns or None, meter=meter)
        try:
            outcome = await handle.result
        except Exception as exc:  # noqa: BLE001 - a rejected result is a fact of the run
            outcome = exc
    except (ConfigError, EventError, SourceError) as exc:
        await asyncio.to_thread(delivery.finish)
        _close_progress(progress, outcome)
        return _fail(err, messages, EXIT_USAGE, f"error: {exc}", masker)
    except ExportError as exc:
        await asyncio.to_thread(delivery.finish)
        _close_progress(progress, outcome)
        return _fail(err, messages, EXIT_EXPORT_FAILED, f"export failed: {exc}", masker)
    finally:
        if meter_shutdown is not None:
            try:
                meter_shutdown()
            except Exception as exc:  # noqa: BLE001 - metrics never hide the trace result
                say(f"metrics export failed: {type(exc).__name__}")
    _close_progress(progress, outcome)

    # Flushing can block for up to one export timeout; keep the event loop free meanwhile.
    report = await asyncio.to_thread(delivery.finish)
    events = observed.events_seen if observed is not None else 0
    exit_code = EXIT_OK
    if observed is not None and observed.source_error is not None:
        say(f"error: {_describe_source_error(observed.source_error)}")
        exit_code = EXIT_USAGE
    elif events == 0:
        say("error: the stream held no events")
        exit_code = EXIT_USAGE

    if want_tree and delivery.spans:
        _print_tree(delivery, masker, stdout)

    problems = report.problems()
    for problem in problems:
        say(f"export failed: {problem}")
    if problems and exit_code == EXIT_OK:
        exit_code = EXIT_EXPORT_FAILED
    if not problems:
        where = " and ".join(t.target for t in report.targets) or "nowhere"
        traces = delivery.trace_ids
        trace_text = f" in trace {traces[0]}" if len(traces) == 1 else f" in {len(traces)} traces"
        say(f"exported {report.spans_ended} spans from {events} events{trace_text} to {where}")
    return ExportResult(
        exit_code=exit_code,
        spans=spans,
        events=events,
        trace_ids=tuple(delivery.trace_ids),
        report=report,
        outcome=outcome,
        messages=tuple(messages),
    )


def _print_tree(delivery: TraceDelivery, masker: SecretMasker, stdout: TextIO | None) -> None:
    from rich.console import Console

    from rulvar_otel.cli._tree import print_span_tree

    console = Console(file=stdout if stdout is not None else sys.stdout, highlight=False, soft_wrap=True)
    print_span_tree(delivery.spans, console, masker=masker)


def _close_progress(progress: _ProgressSink | None, outcome: RunOutcome | BaseException | None) -> None:
    if progress is None:
        return
    try:
        progress.close(outcome)
    except Exception:  # noqa: BLE001 - the view's failure is not the export's
        pass


def _fail(
    err: TextIO, messages: list[str], code: int, text: str, masker: SecretMasker | None
) -> ExportResult:
    safe = terminal_safe(text, masker)
    messages.append(safe)
    print(f"rulvar-otel: {safe}", file=err, flush=True)
    return ExportResult(exit_code=code, messages=tuple(messages))


def export_run(
    handle: RunHandle,
    options: ExportOptions,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> ExportResult:
    """:func:`export_run_async` for synchronous callers (runs its own event loop)."""
    return asyncio.run(export_run_async(handle, options, stdout=stdout, stderr=stderr))
