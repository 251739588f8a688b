"""OpenTelemetry mapping: spans (and metrics) from a run's event stream.

Through the host's tracer (``to_otel(handle, tracer)``, ``export_events(events, tracer)``), or on
the direct path straight to SDK span exporters (``exporter=``; :func:`grpc_span_exporter` and
:func:`http_span_exporter` are the library's OTLP/gRPC and OTLP/HTTP exporters sending a direct
batch's prebuilt request), with metrics aggregated by :class:`MetricsAggregator` for the OTel
metric readers.

Each name loads on first use: a command that needs one part (the direct mapper, say) does not
import the others (the SDK exporter, the metrics aggregator).
"""

from typing import TYPE_CHECKING

from rulvar_otel._lazy import lazy_facade

if TYPE_CHECKING:
    from rulvar_otel.otel._mapper import SpanMapper
    from rulvar_otel.otel.direct import DirectSpanSink, grpc_span_exporter, http_span_exporter
    from rulvar_otel.otel.direct_metrics import MetricsAggregator
    from rulvar_otel.otel.exporter import create_mapper, export_events, to_otel

# name -> module that defines it; resolved on first attribute access (PEP 562).
_LAZY: dict[str, str] = {
    "SpanMapper": "rulvar_otel.otel._mapper",
    "DirectSpanSink": "rulvar_otel.otel.direct",
    "grpc_span_exporter": "rulvar_otel.otel.direct",
    "http_span_exporter": "rulvar_otel.otel.direct",
    "MetricsAggregator": "rulvar_otel.otel.direct_metrics",
    "create_mapper": "rulvar_otel.otel.exporter",
    "export_events": "rulvar_otel.otel.exporter",
    "to_otel": "rulvar_otel.otel.exporter",
}


__all__ = [
    "DirectSpanSink",
    "MetricsAggregator",
    "SpanMapper",
    "create_mapper",
    "export_events",
    "grpc_span_exporter",
    "http_span_exporter",
    "to_otel",
]

__getattr__, __dir__ = lazy_facade(__name__, _LAZY, globals(), __all__)
