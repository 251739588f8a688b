"""Shared test helpers: the one import surface for tests, ``tests/conftest.py`` and ``benchmarks``.

Import from ``tests._support`` only, never from its submodules (``test_helper_imports.py`` checks
this). The in-memory span and metric harness itself is the public :mod:`rulvar_otel.testing`
(``SpanCapture``, ``MetricCapture``, ``SpanRecorder``, ``capture_export``, ``metric_points``);
what lives here is what only this project's tests need:

Reference corpus (``_corpus``)
    ``REFERENCE``, ``STREAMS``, ``SPANS``, ``stream_names``, ``events``, ``outcome``,
    ``reference_files``, ``load_reference``, ``reference_span_count``, ``MIN_STREAMS``, ``MIN_SPAN_TREES``,
    ``MissingFixtureError``.
Span exports, hand-built events and the CLI (``_harness``)
    ``export`` / ``Export`` (``to_otel`` into a capture, spans indexed by start order), ``ev``,
    ``t``, ``ms``, ``run_stream``, ``agent_start``, ``agent_end``, ``OK_OUTCOME``, ``USAGE``,
    ``run_cli``, ``write_stream``, ``otlp_file_spans``.
A deterministic bundled engine (``_engine``)
    ``make_engine`` (fixed ``PRICES``, a ``TickClock``, ``no_sleep``), ``settle``,
    ``run_scenario``, ``Run``, ``run_demo_with_meter`` (the scripted demo on a meter),
    ``event_tokens``.
Reference engine scenarios (``_engine_scenarios``)
    ``ENGINE_SCENARIOS`` (corpus stream name -> scenario builder), ``suspension_flow``.
A credential corpus (``_credentials``)
    ``CREDENTIALS`` (one fake sample of every masked shape, each holding ``MARK``), ``Credential``,
    ``credential``, ``credential_kinds``.
A fake OpenAI-compatible server (``_openai_server``)
    ``FakeProvider``, ``SseChunks``, ``chat_completion``, ``make_openai_engine``, ``weather``,
    ``FAKE_API_KEY``.
Metric streams (``_metric_streams``)
    ``build_stream``, ``adaptive_stream``, ``adaptive_outcome``, ``unsettled_quota_stream``,
    ``feed``, ``fold_reference``, ``attrs``, ``run_settled_key``, ``phase_attributes``,
    ``count_and_sum``, ``histogram_points``, ``T0``.
PromQL reading (``_promql``)
    ``promql_references``, ``registry_series_labels``, ``assert_reads_only_the_registry``.
Dashboards and alert rules (``_dashboards``)
    ``generator_module``, ``dashboards``, ``data_panels``, ``panel_queries``, ``series_sources``
    (``RECORDER``, ``ENGINE``, ``COLLECTOR``), ``query_source``, ``panels_fed_by``, ``runnable``,
    ``spanmetrics_panel_queries``, ``DASHBOARDS``, ``PROMETHEUS_DIR``, ``ALERTS``, ``ALERTS_TEST``.
OTLP receivers that answer badly (``_hostile_receivers``)
    ``HostileHttpReceiver`` / ``HttpAnswer``, ``HostileGrpcReceiver`` / ``GrpcAnswer``,
    ``ScriptedGrpcReceiver`` / ``retry_info``, ``REJECTION_MESSAGE``.
OTLP receivers on loopback (``_receivers``)
    ``GrpcTraceReceiver``, ``HttpTraceReceiver``, ``TraceReceiver``, ``ReceivedSpan``,
    ``GrpcMetricsReceiver``, ``attributes_of``, ``span_index``, ``closed_port``.
A Rulvar SSE server on loopback (``_sse_server``)
    ``RulvarTestServer``, ``ServedRun``, ``served``, ``serve``, ``serve_in_thread``, ``frame``,
    ``skip_status_line``, ``DropMode``, ``SLOW_NOTE``, ``OLD_SLOW_NOTE``.
Live pipeline services (``_services``)
    ``binaries`` / ``Binaries``, ``start_collector``, ``start_jaeger`` / ``Jaeger`` /
    ``JaegerSpan``, ``start_prometheus`` / ``Prometheus``, ``Service``, ``otelcol_args``,
    ``otlp_attributes``, ``otlp_json_spans``, ``require_tool``, ``free_port``, ``wait_for``, ``write_yaml``,
    ``spawn``, ``stop_process``, ``rulvar_otel_command`` (the installed CLI), ``ROOT``, ``CONFIG``,
    ``BUILD_TIMEOUT_S``.
"""

from __future__ import annotations

from tests._support._corpus import (
    MIN_SPAN_TREES,
    MIN_STREAMS,
    REFERENCE,
    SPANS,
    STREAMS,
    MissingFixtureError,
    events,
    load_reference,
    outcome,
    reference_files,
    reference_span_count,
    stream_names,
)
from tests._support._credentials import CREDENTIALS, MARK, Credential, credential, credential_kinds
from tests._support._dashboards import (
    ALERTS,
    ALERTS_TEST,
    COLLECTOR,
    DASHBOARDS,
    ENGINE,
    PROMETHEUS_DIR,
    RECORDER,
    dashboards,
    data_panels,
    generator_module,
    panel_queries,
    panels_fed_by,
    query_source,
    runnable,
    series_sources,
    spanmetrics_panel_queries,
)
from tests._support._engine import (
    PRICES,
    Run,
    TickClock,
    event_tokens,
    make_engine,
    no_sleep,
    run_demo_with_meter,
    run_scenario,
    settle,
)
from tests._support._engine_scenarios import ENGINE_SCENARIOS, suspension_flow
from tests._support._harness import (
    OK_OUTCOME,
    USAGE,
    Export,
    agent_end,
    agent_start,
    default_sigint,
    ev,
    export,
    ms,
    otlp_file_spans,
    run_cli,
    run_stream,
    t,
    write_stream,
)
from tests._support._hostile_receivers import (
    REJECTION_MESSAGE,
    GrpcAnswer,
    HostileGrpcReceiver,
    HostileHttpReceiver,
    HttpAnswer,
    ScriptedGrpcReceiver,
    retry_info,
)
from tests._support._metric_streams import (
    T0,
    adaptive_outcome,
    adaptive_stream,
    attrs,
    build_stream,
    count_and_sum,
    feed,
    fold_reference,
    histogram_points,
    phase_attributes,
    run_settled_key,
    unsettled_quota_stream,
)
from tests._support._openai_server import (
    FAKE_API_KEY,
    FakeProvider,
    SseChunks,
    chat_completion,
    make_openai_engine,
    weather,
)
from tests._support._orchestrate import Orchestrated, adaptive, of_type, orchestrated, replayed
from tests._support._promql import assert_reads_only_the_registry, promql_references, registry_series_labels
from tests._support._receivers import (
    GrpcMetricsReceiver,
    GrpcTraceReceiver,
    HttpTraceReceiver,
    ReceivedSpan,
    TraceReceiver,
    attributes_of,
    closed_port,
    span_index,
)
from tests._support._services import (
    BUILD_TIMEOUT_S,
    CONFIG,
    ROOT,
    Binaries,
    Jaeger,
    JaegerSpan,
    Prometheus,
    Service,
    binaries,
    free_port,
    otelcol_args,
    otlp_attributes,
    otlp_json_spans,
    require_tool,
    rulvar_otel_command,
    spawn,
    start_collector,
    start_jaeger,
    start_prometheus,
    stop_process,
    wait_for,
    write_yaml,
)
from tests._support._sse_server import (
    OLD_SLOW_NOTE,
    SLOW_NOTE,
    DropMode,
    RulvarTestServer,
    ServedRun,
    frame,
    serve,
    serve_in_thread,
    served,
    skip_status_line,
)

__all__ = [
    "default_sigint",
    "Orchestrated",
    "adaptive",
    "of_type",
    "orchestrated",
    "replayed",
    "CREDENTIALS",
    "MARK",
    "Credential",
    "credential",
    "credential_kinds",
    "REJECTION_MESSAGE",
    "GrpcAnswer",
    "HostileGrpcReceiver",
    "HostileHttpReceiver",
    "ScriptedGrpcReceiver",
    "retry_info",
    "HttpAnswer",
    "reference_span_count",
    "require_tool",
    "FAKE_API_KEY",
    "FakeProvider",
    "SseChunks",
    "chat_completion",
    "make_openai_engine",
    "weather",
    "OLD_SLOW_NOTE",
    "DropMode",
    "SLOW_NOTE",
    "RulvarTestServer",
    "ServedRun",
    "frame",
    "serve",
    "serve_in_thread",
    "served",
    "skip_status_line",
    "count_and_sum",
    "fold_reference",
    "histogram_points",
    "phase_attributes",
    "run_settled_key",
    "OK_OUTCOME",
    "USAGE",
    "agent_end",
    "agent_start",
    "run_stream",
    "ENGINE_SCENARIOS",
    "PRICES",
    "Run",
    "TickClock",
    "make_engine",
    "no_sleep",
    "run_scenario",
    "settle",
    "suspension_flow",
    "BUILD_TIMEOUT_S",
    "CONFIG",
    "MIN_SPAN_TREES",
    "MIN_STREAMS",
    "REFERENCE",
    "ROOT",
    "SPANS",
    "STREAMS",
    "T0",
    "Binaries",
    "Export",
    "GrpcMetricsReceiver",
    "GrpcTraceReceiver",
    "HttpTraceReceiver",
    "Jaeger",
    "JaegerSpan",
    "MissingFixtureError",
    "Prometheus",
    "ReceivedSpan",
    "Service",
    "TraceReceiver",
    "adaptive_outcome",
    "adaptive_stream",
    "assert_reads_only_the_registry",
    "attributes_of",
    "attrs",
    "binaries",
    "build_stream",
    "closed_port",
    "ev",
    "events",
    "export",
    "feed",
    "free_port",
    "load_reference",
    "ms",
    "otelcol_args",
    "otlp_attributes",
    "otlp_file_spans",
    "otlp_json_spans",
    "outcome",
    "promql_references",
    "reference_files",
    "registry_series_labels",
    "run_cli",
    "span_index",
    "start_collector",
    "start_jaeger",
    "start_prometheus",
    "stream_names",
    "t",
    "unsettled_quota_stream",
    "wait_for",
    "write_stream",
    "write_yaml",
    "ALERTS",
    "ALERTS_TEST",
    "COLLECTOR",
    "DASHBOARDS",
    "ENGINE",
    "PROMETHEUS_DIR",
    "RECORDER",
    "dashboards",
    "data_panels",
    "generator_module",
    "panel_queries",
    "panels_fed_by",
    "query_source",
    "runnable",
    "series_sources",
    "spanmetrics_panel_queries",
    "event_tokens",
    "run_demo_with_meter",
    "rulvar_otel_command",
    "spawn",
    "stop_process",
]
