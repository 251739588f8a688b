"""The direct export path against the SDK path, doing the same work end to end (figures 6-8).

Both paths read the stream with the JSONL source and map it with the same mapper; the SDK path
drives a ``TracerProvider`` (the CLI's span limits, always-on sampling) with a
``BatchSpanProcessor`` in front of the exporter, the direct path hands finished records to
:class:`~rulvar_otel.otel.direct.DirectSpanSink`. Each timed run ends when every span has been
exported (provider or sink shut down).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from rulvar_otel.otel import semconv

__all__ = ["Checked", "direct_run", "sdk_run"]

_RESOURCE = Resource.create({SERVICE_NAME: "rulvar-otel-bench"})


class Checked:
    """Counts what one case's exporter accepted, so a fast but lossy run cannot pass."""

    def __init__(self) -> None:
        self.spans = 0
        self.span_events = 0


def sdk_run(stream: Path, make_exporter: Callable[[], SpanExporter], *, meter: Any = None) -> int:
    """parse + map through the SDK + export, until every span is exported; returns spans made."""
    from rulvar_otel.otel import export_events
    from rulvar_otel.sources.jsonl import JsonlEventSource

    provider = TracerProvider(
        resource=_RESOURCE, sampler=ALWAYS_ON, span_limits=SpanLimits(max_events=SpanLimits.UNSET)
    )
    provider.add_span_processor(
        BatchSpanProcessor(make_exporter(), max_queue_size=262_144, max_export_batch_size=512)
    )
    try:
        with JsonlEventSource(stream) as source:
            return export_events(source, provider.get_tracer(semconv.INSTRUMENTATION_SCOPE), meter=meter)
    finally:
        provider.shutdown()


def direct_run(stream: Path, make_exporter: Callable[[], SpanExporter], *, metrics: Any = None) -> int:
    """parse + map + export on the direct path; returns the spans made.

    ``metrics(masker, resource=...)`` makes an aggregator fed the same pass, its exemplars naming
    the mapper's spans, as the CLI wires it: the CLI composes the resource once for the export and
    hands it to both pipelines, so the aggregator gets the traces' resource here too.
    """
    from rulvar_otel.core.masking import compile_secret_masker
    from rulvar_otel.otel.direct import export_events_direct
    from rulvar_otel.sources.jsonl import JsonlEventSource

    masker = compile_secret_masker()  # one per export, shared as export_events shares it
    aggregator = metrics(masker, resource=_RESOURCE) if metrics is not None else None
    try:
        with JsonlEventSource(stream) as source:
            return export_events_direct(
                source, make_exporter(), resource=_RESOURCE, masker=masker, aggregator=aggregator
            )
    finally:
        if aggregator is not None:
            # The aggregates rendered and OTLP-encoded, as a push would send them.
            from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

            encode_metrics(aggregator.metrics_data()).SerializeToString()


def file_exporter(directory: Path, name: str) -> Callable[[], SpanExporter]:
    from rulvar_otel.export import OtlpJsonFileExporter

    return lambda: OtlpJsonFileExporter(directory / name)


def temp_directory() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="rulvar-otel-bench-")
