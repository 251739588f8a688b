"""Sources of run events: recorded JSONL streams (and, in sibling modules, live servers)."""

from rulvar_otel.sources.jsonl import (
    STDIN,
    JsonlEventSource,
    check_envelope,
    handle_from_jsonl,
    open_jsonl,
    read_jsonl_events,
)

__all__ = [
    "STDIN",
    "JsonlEventSource",
    "check_envelope",
    "handle_from_jsonl",
    "open_jsonl",
    "read_jsonl_events",
]
