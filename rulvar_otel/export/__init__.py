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

Each name loads on first use: a traces-only export imports no metrics SDK and no Prometheus
exporter.
"""

from typing import TYPE_CHECKING

from rulvar_otel._lazy import lazy_facade

if TYPE_CHECKING:
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

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY: dict[str, str] = {
    "MetricsPipeline": "rulvar_otel.export._metrics",
    "MetricsSetup": "rulvar_otel.export._metrics",
    "build_meter_provider": "rulvar_otel.export._metrics",
    "build_metrics_delivery": "rulvar_otel.export._metrics",
    "DEFAULT_PROMETHEUS_HOST": "rulvar_otel.export._options",
    "ExportOptions": "rulvar_otel.export._options",
    "parse_header": "rulvar_otel.export._options",
    "DEFAULT_OTLP_JSON_PATH": "rulvar_otel.export._otlp_json",
    "OtlpJsonFileExporter": "rulvar_otel.export._otlp_json",
    "iter_otlp_json_file": "rulvar_otel.export._otlp_json",
    "parse_otlp_json_line": "rulvar_otel.export._otlp_json",
    "spans_to_otlp_json": "rulvar_otel.export._otlp_json",
    "EventObserver": "rulvar_otel.export._report",
    "ExportFailure": "rulvar_otel.export._report",
    "ExportReport": "rulvar_otel.export._report",
    "FailureKind": "rulvar_otel.export._report",
    "PipelineFactory": "rulvar_otel.export._report",
    "SpanPipeline": "rulvar_otel.export._report",
    "export_run": "rulvar_otel.export._run",
    "export_run_async": "rulvar_otel.export._run",
    "sdk_pipeline": "rulvar_otel.export._sdk_pipeline",
    "SETTINGS": "rulvar_otel.export._settings",
    "EnvSetting": "rulvar_otel.export._settings",
    "SettingKind": "rulvar_otel.export._settings",
    "StreamedRun": "rulvar_otel.export._stream",
    "DEFAULT_EXPORT_TIMEOUT_S": "rulvar_otel.export._traces",
    "DEFAULT_MAX_QUEUE_SIZE": "rulvar_otel.export._traces",
    "DEFAULT_VALUE_LENGTH_LIMIT": "rulvar_otel.export._traces",
    "PROJECT_ATTRIBUTE": "rulvar_otel.export._traces",
    "DeliveryReport": "rulvar_otel.export._traces",
    "OtlpTarget": "rulvar_otel.export._traces",
    "TargetReport": "rulvar_otel.export._traces",
    "TraceDelivery": "rulvar_otel.export._traces",
    "build_trace_delivery": "rulvar_otel.export._traces",
    "check_output_is_not_input": "rulvar_otel.export._traces",
    "resolve_otlp_target": "rulvar_otel.export._traces",
    "resolve_project": "rulvar_otel.export._traces",
    "resolve_service_name": "rulvar_otel.export._traces",
}


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

__getattr__, __dir__ = lazy_facade(__name__, _LAZY, globals(), __all__)
