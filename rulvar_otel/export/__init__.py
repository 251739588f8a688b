"""The export pipeline as a library: a run's events to OTLP (or an OTLP/JSON file), plus metrics.

What the ``rulvar-otel`` commands do, for a host that wants the same behaviour without the CLI::

    from rulvar_otel.export import ExportOptions, StreamedRun, export_run
    from rulvar_otel.sources import open_jsonl

    report = export_run(
        StreamedRun(open_jsonl("run.jsonl")),  # read once, nothing kept in memory
        ExportOptions(endpoint="http://localhost:4317", service_name="checkout-agents"),
    )
    if not report.ok:
        for failure in report.failures:
            print(failure.kind, failure.message)
    print(report.spans, report.trace_ids)

:func:`export_run` (or :func:`export_run_async` from async code) never raises for bad options,
bad input or a dead backend: each is an :class:`ExportFailure` in the :class:`ExportReport`.
Spans are never dropped (a full queue makes the producer wait), a file destination is replaced
only when the export succeeded, and the ``OTEL_*`` variables in :data:`SETTINGS` are honoured.
The pieces are public too: :func:`build_trace_delivery` (a provider wired to the destinations,
``.finish()`` returns a :class:`DeliveryReport`), :func:`build_meter_provider` for metrics, and
the OTLP/JSON lines reader :func:`iter_otlp_json_file`.
"""

from rulvar_otel.export._metrics import (
    MetricsPipeline,
    MetricsSetup,
    build_meter_provider,
    build_metrics_delivery,
)
from rulvar_otel.export._options import DEFAULT_PROMETHEUS_HOST, ExportOptions, parse_header
from rulvar_otel.export._otlp_json import (
    DEFAULT_OTLP_JSON_PATH,
    OtlpJsonFileExporter,
    iter_otlp_json_file,
    parse_otlp_json_line,
    spans_to_otlp_json,
)
from rulvar_otel.export._report import (
    EventObserver,
    ExportFailure,
    ExportReport,
    FailureKind,
    PipelineFactory,
    SpanPipeline,
)
from rulvar_otel.export._run import export_run, export_run_async
from rulvar_otel.export._sdk_pipeline import sdk_pipeline
from rulvar_otel.export._settings import SETTINGS, EnvSetting, SettingKind
from rulvar_otel.export._stream import StreamedRun
from rulvar_otel.export._traces import (
    DEFAULT_EXPORT_TIMEOUT_S,
    DEFAULT_MAX_QUEUE_SIZE,
    DEFAULT_VALUE_LENGTH_LIMIT,
    PROJECT_ATTRIBUTE,
    DeliveryReport,
    OtlpTarget,
    TargetReport,
    TraceDelivery,
    build_trace_delivery,
    check_output_is_not_input,
    resolve_otlp_target,
    resolve_project,
    resolve_service_name,
)

__all__ = [
    "DEFAULT_EXPORT_TIMEOUT_S",
    "DEFAULT_MAX_QUEUE_SIZE",
    "DEFAULT_OTLP_JSON_PATH",
    "DEFAULT_PROMETHEUS_HOST",
    "DEFAULT_VALUE_LENGTH_LIMIT",
    "PROJECT_ATTRIBUTE",
    "SETTINGS",
    "DeliveryReport",
    "EnvSetting",
    "EventObserver",
    "ExportFailure",
    "ExportOptions",
    "ExportReport",
    "FailureKind",
    "MetricsPipeline",
    "MetricsSetup",
    "OtlpJsonFileExporter",
    "OtlpTarget",
    "PipelineFactory",
    "SettingKind",
    "SpanPipeline",
    "StreamedRun",
    "TargetReport",
    "TraceDelivery",
    "build_meter_provider",
    "build_metrics_delivery",
    "build_trace_delivery",
    "check_output_is_not_input",
    "export_run",
    "export_run_async",
    "iter_otlp_json_file",
    "parse_header",
    "parse_otlp_json_line",
    "resolve_otlp_target",
    "resolve_project",
    "resolve_service_name",
    "sdk_pipeline",
    "spans_to_otlp_json",
]
