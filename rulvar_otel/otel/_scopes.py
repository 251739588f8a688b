"""Which span hosts what: closed scopes, the innermost open span and the innermost open scope.

Span events land on the innermost span still open in a live scope, and orphans group under the
innermost open scope (docs/otel-mapping.md#where-a-span-event-lands). These lookups read the
mapper's start-ordered stacks and pop ended or closed entries from the top as they go.
"""

from __future__ import annotations

from typing import TypeGuard

from rulvar_otel.otel._span_state import CHILD, RUN, MappedSpan

__all__ = ["hosts_events", "innermost_open", "innermost_scope", "scope_closed"]


def scope_closed(rec: MappedSpan) -> bool:
    """Whether ``rec`` lies in a child workflow or segment that has closed (``rec`` included).

    The walk stops at the run span of the segment: later segments hang off the first run span
    for the trace's sake, but the first segment's end does not close them.
    """
    node: MappedSpan | None = rec
    while node is not None:
        kind = node.kind
        if kind in (CHILD, RUN):
            if node.ended or node.pending_end is not None:
                return True
            if kind == RUN:
                return False
        node = node.parent
    return False


def hosts_events(rec: object) -> TypeGuard[MappedSpan]:
    """Whether ``rec`` is a record still open in a live scope (a RetiredSpan has ended)."""
    return isinstance(rec, MappedSpan) and not rec.ended and rec.pending_end is None and not scope_closed(rec)


def innermost_open(stack: list[MappedSpan], stranded: list[MappedSpan]) -> MappedSpan | None:
    """The most recently started span still open, as a span and as a scope."""
    while stack:
        top = stack[-1]
        if top.ended or top.pending_end is not None:
            stack.pop()
        elif scope_closed(top):
            # Open, but its child workflow or segment has finished: it hosts nothing more; it is
            # still ended later, so it moves to ``stranded``.
            stranded.append(stack.pop())
        else:
            return top
    return None


def innermost_scope(scopes: list[MappedSpan], current_run: MappedSpan | None) -> MappedSpan | None:
    """The innermost phase or child span still open, else the current run span if open."""
    while scopes and scope_closed(scopes[-1]):
        scopes.pop()
    if scopes:
        return scopes[-1]
    return current_run if current_run is not None and not current_run.ended else None
