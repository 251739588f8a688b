"""OpenTelemetry mapping: spans (and metrics) from a run's event stream."""

from rulvar_otel.otel._mapper import SpanMapper
from rulvar_otel.otel.exporter import create_mapper, export_events, to_otel

__all__ = ["SpanMapper", "create_mapper", "export_events", "to_otel"]
