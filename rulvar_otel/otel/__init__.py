"""OpenTelemetry mapping: spans (and metrics) from a run's event stream.

Through the host's tracer (``to_otel(handle, tracer)``, ``export_events(events, tracer)``), or on
the direct path straight to SDK span exporters (``exporter=``; :func:`grpc_span_exporter` is the
library's OTLP/gRPC exporter reading a direct batch's prebuilt request), with metrics aggregated
by :class:`MetricsAggregator` for the OTel metric readers.
"""

from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel.direct import DirectSpanSink, grpc_span_exporter
from rulvar_otel.otel.direct_metrics import MetricsAggregator
from rulvar_otel.otel.exporter import create_mapper, export_events, to_otel

__all__ = [
    "DirectSpanSink",
    "MetricsAggregator",
    "SpanMapper",
    "create_mapper",
    "export_events",
    "grpc_span_exporter",
    "to_otel",
]
