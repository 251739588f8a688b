"""OTLP/JSON lines: one ``ExportTraceServiceRequest`` per line, as the collector's file exporter writes.

The protobuf message comes from OpenTelemetry's own OTLP encoder and is rendered by protobuf's
JSON mapping (lowerCamelCase names, enums as integers, 64-bit integers as strings). The one
place OTLP/JSON departs from the canonical protobuf JSON mapping is ids: ``traceId``,
``spanId`` and ``parentSpanId`` are lowercase hex, not base64. :func:`parse_otlp_json_line`
reverses that, so a written line reads back into the protobuf message.
"""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from rulvar_otel.export._output_file import OpenedOutput, open_output
from rulvar_otel.otel._encode import EncodedBatch

__all__ = [
    "DEFAULT_OTLP_JSON_PATH",
    "OtlpJsonFileExporter",
    "iter_otlp_json_file",
    "parse_otlp_json_line",
    "spans_to_otlp_json",
]

DEFAULT_OTLP_JSON_PATH: Final = "rulvar-traces.otlp.jsonl"

_SPAN_IDS: Final = ("traceId", "spanId", "parentSpanId")


def _map_ids(request: dict[str, Any], convert: Callable[[str], str]) -> None:
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                for key in _SPAN_IDS:
                    if key in span:
                        span[key] = convert(span[key])
                for link in span.get("links", ()):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = convert(link[key])


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_b64(value: str) -> str:
    try:
        raw = bytes.fromhex(value)
    except ValueError as exc:
        raise ValueError(f"id {value!r} is not hex") from exc
    return base64.b64encode(raw).decode("ascii")


def spans_to_otlp_json(spans: Sequence[ReadableSpan]) -> bytes:
    """One OTLP/JSON ``ExportTraceServiceRequest`` for ``spans`` (no trailing newline).

    A direct-path batch renders itself (the same request, without protobuf's JSON printer).
    """
    if isinstance(spans, EncodedBatch):
        return spans.otlp_json()
    from google.protobuf import json_format  # only for spans that are not a direct batch

    request = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    _map_ids(request, _b64_to_hex)
    return orjson.dumps(request)


def parse_otlp_json_line(line: str | bytes) -> ExportTraceServiceRequest:
    """Read one OTLP/JSON line (hex ids) back into an ``ExportTraceServiceRequest``."""
    request = orjson.loads(line)
    if not isinstance(request, dict):
        raise ValueError("an OTLP/JSON line must hold a JSON object")
    _map_ids(request, _hex_to_b64)
    message = ExportTraceServiceRequest()
    from google.protobuf import json_format

    json_format.ParseDict(request, message)
    return message


def iter_otlp_json_file(path: str | Path) -> Iterator[ExportTraceServiceRequest]:
    """Every request of an OTLP/JSON lines file, blank lines skipped."""
    with Path(path).open("rb") as handle:
        for line in handle:
            if line.strip():
                yield parse_otlp_json_line(line)


class OtlpJsonFileExporter(SpanExporter):
    """A :class:`SpanExporter` appending one OTLP/JSON request line per exported batch.

    ``target`` is a path or an open text stream (left open on shutdown). A path is created or
    truncated when the exporter is built, so an unwritable path fails at once with
    :class:`ConfigError`. With ``atomic=True`` the lines go to a temporary file beside the path
    instead, and :meth:`commit` renames it into place (:meth:`discard` removes it): a failed
    export never touches an earlier file at the path. A path that is not a regular file (a
    device, a FIFO, ``/dev/stdout``) is written in place, never renamed over.
    """

    def __init__(self, target: str | Path | IO[str], *, atomic: bool = False) -> None:
        self._lock = threading.Lock()
        self._owned: IO[bytes] | None = None
        self._text: IO[str] | None = None
        self._output: OpenedOutput | None = None
        if isinstance(target, str | Path):
            self.path: Path | None = Path(target)
            self._output = open_output(self.path, atomic=atomic)
            self._owned = self._output.stream
        else:
            self.path = None
            self._text = target
        self._closed = False
        self.error: str | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            try:
                line = spans_to_otlp_json(spans) + b"\n"
                if self._owned is not None:
                    self._owned.write(line)
                    self._owned.flush()
                elif self._text is not None:
                    self._text.write(line.decode("utf-8"))
                    self._text.flush()
            except (OSError, ValueError) as exc:
                where = self.path if self.path is not None else "the output stream"
                self.error = f"cannot write {where}: {getattr(exc, 'strerror', None) or exc}"
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            if self._owned is not None:
                try:
                    self._owned.close()
                except OSError as exc:
                    # Every line was flushed on write; a close failure only repeats a write failure.
                    self.error = self.error or f"cannot write {self.path}: {exc.strerror or exc}"
                self._owned = None

    def commit(self) -> bool:
        """Move the temporary file into place (after :meth:`shutdown`); ``False`` if that failed."""
        self.shutdown()
        if self._output is None or self._output.temp is None:
            return self.error is None
        try:
            self._output.commit()
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"
            self.discard()
            return False
        return True

    def discard(self) -> None:
        """Remove the temporary file, leaving the target as it was."""
        self.shutdown()
        if self._output is not None and self._output.temp is not None:
            with contextlib.suppress(OSError):
                self._output.temp.unlink()
            self._output.temp = None
