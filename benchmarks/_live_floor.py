"""The streaming floor: the very SDK calls the exporter makes, without the mapping that decides them.

The SDK floor (``_floor``) knows every span whole: all attributes at ``start_span``, each span
started and ended at once. An exporter fed events one at a time cannot: a span starts when its
opening event arrives, and what only its closing event says (status, tokens, cost) is set on the
live span later. :func:`capture_calls` records every call the exporter makes on a real SDK tracer
(through a transparent proxy) and :func:`compile_calls` turns that record into one straight-line
function making the same calls in the same order, as hand-written instrumentation would: no event
parsing, no state machine, no masking. The exporter's time over this floor's is the mapping alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, Tracer

from rulvar_otel.otel import export_events

__all__ = ["capture_calls", "compile_calls"]


class _Recording:
    """The call record: statements of the replay function and the constants they name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: list[Any] = []
        self.contexts: dict[int, str] = {}
        self.spans_by_id: dict[int, int] = {}
        self.count = 0

    def const(self, value: Any) -> str:
        self.constants.append(value)
        return f"X[{len(self.constants) - 1}]"

    def context_for(self, context: Context | None) -> str:
        if context is None:
            return "root"
        key = id(context)
        found = self.contexts.get(key)
        if found is not None:
            return found
        span = trace.get_current_span(context)
        index = self.spans_by_id.get(span.get_span_context().span_id)
        if index is None:  # no span in it: the run's root context
            self.contexts[key] = "root"
            return "root"
        name = f"C[{len(self.contexts)}]"
        if isinstance(span, _ProxySpan):
            self.lines.append(f"{name} = set_in(S[{index}])")
        else:  # an ended parent stands in by its span context
            self.lines.append(f"{name} = set_in(NonRecording(S[{index}].get_span_context()))")
        self.contexts[key] = name
        return name


class _ProxySpan(Span):
    """Passes every call to the SDK span and writes it down."""

    def __init__(self, inner: Span, index: int, record: _Recording) -> None:
        self._inner, self._index, self._record = inner, index, record

    def _log(self, method: str, *args: Any) -> None:
        consts = ", ".join(self._record.const(a) for a in args)
        self._record.lines.append(f"S[{self._index}].{method}({consts})")

    def get_span_context(self) -> SpanContext:
        self._record.lines.append(f"S[{self._index}].get_span_context()")
        return self._inner.get_span_context()

    def set_attribute(self, key: str, value: Any) -> None:
        self._log("set_attribute", key, value)
        self._inner.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._log("set_attributes", dict(attributes))
        self._inner.set_attributes(attributes)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        self._log("add_event", name, attributes, timestamp)
        self._inner.add_event(name, attributes, timestamp)

    def set_status(self, status: Any, description: str | None = None) -> None:
        self._log("set_status", status, description)
        self._inner.set_status(status, description)

    def end(self, end_time: int | None = None) -> None:
        self._log("end", end_time)
        self._inner.end(end_time)

    def update_name(self, name: str) -> None:
        self._log("update_name", name)
        self._inner.update_name(name)

    def is_recording(self) -> bool:
        return self._inner.is_recording()

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        raise NotImplementedError("the benchmark streams make no links")

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the exporter records no exceptions")


class _ProxyTracer(Tracer):
    def __init__(self, inner: Tracer, record: _Recording) -> None:
        self._inner, self._record = inner, record

    def start_span(self, name: str, context: Context | None = None, *args: Any, **kwargs: Any) -> Span:
        if args or set(kwargs) - {"attributes", "links", "start_time"} or kwargs.get("links"):
            raise NotImplementedError(f"an unexpected start_span shape: {args!r} {sorted(kwargs)}")
        record = self._record
        parent = record.context_for(context)
        attributes, start = kwargs.get("attributes"), kwargs.get("start_time")
        inner = self._inner.start_span(name, context=context, attributes=attributes, start_time=start)
        index = record.count
        record.count += 1
        record.spans_by_id[inner.get_span_context().span_id] = index
        record.lines.append(
            f"S[{index}] = start({record.const(name)}, context={parent}, "
            f"attributes={record.const(dict(attributes or {}))}, start_time={record.const(start)})"
        )
        return _ProxySpan(inner, index, record)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the exporter starts no current spans")


def capture_calls(events: Sequence[Mapping[str, Any]], tracer: Tracer) -> _Recording:
    """Export ``events`` once through ``tracer`` (an SDK one), writing down every SDK call made."""
    record = _Recording()
    export_events(events, _ProxyTracer(tracer, record))
    return record


def compile_calls(record: _Recording) -> Callable[[Tracer], int]:
    """The recorded calls as one function of a tracer: straight-line code, constants prebuilt."""
    body = "\n".join(f"    {line}" for line in record.lines) or "    pass"
    source = f"def replay(start, set_in, NonRecording, X, root, S, C):\n{body}\n    return len(S)\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<streaming floor>", "exec"), namespace)
    replay = namespace["replay"]
    constants = tuple(record.constants)
    spans, contexts = record.count, sum(1 for name in record.contexts.values() if name != "root")

    def run(tracer: Tracer) -> int:
        return int(
            replay(
                tracer.start_span,
                trace.set_span_in_context,
                NonRecordingSpan,
                constants,
                Context(),
                [None] * spans,
                [None] * contexts,
            )
        )

    return run
