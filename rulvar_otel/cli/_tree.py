"""The finished span tree of an export, printed on the terminal with rich.

Every dynamic string (span names, status words, attribute values) passes the masker's ``clean``
(sanitize, then mask) and reaches rich as plain ``Text`` (never markup), so a span name can
neither restyle the terminal nor break a row in two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from rulvar_otel.cli._text import plural
from rulvar_otel.core.masking import SecretMasker, default_masker
from rulvar_otel.otel import semconv

__all__ = ["format_duration_ns", "print_span_tree", "render_span_tree"]

# A 1,000-agent run stays legible: each parent shows its first children, then a count.
DEFAULT_MAX_CHILDREN: Final = 25
DEFAULT_MAX_ROWS: Final = 400
MAX_LABEL_CHARS: Final = 200
# Width of the tree when it is piped: wide enough that no row is ever wrapped or cut.
_PIPED_WIDTH: Final = 100_000

_STATUS: Final = {
    StatusCode.OK: ("✓", "green"),
    StatusCode.ERROR: ("✗", "red"),
    StatusCode.UNSET: ("·", "dim"),
}


def format_duration_ns(duration_ns: int | None) -> str:
    """A short human duration: ``850µs``, ``12ms``, ``3.40s``, ``2m05s``, ``1h02m``."""
    if duration_ns is None or duration_ns < 0:
        return "?"
    micros = duration_ns / 1_000
    if micros < 1_000:
        return f"{micros:.0f}µs"
    millis = micros / 1_000
    if millis < 1_000:
        return f"{millis:.0f}ms"
    seconds = millis / 1_000
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _cost(attrs: Mapping[str, object]) -> float | None:
    for key in (semconv.COST_USD, semconv.RUN_TOTAL_USD):
        value = attrs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _label(span: ReadableSpan, clean: SecretMasker, stream_events: int | None = None) -> Text:
    attrs: Mapping[str, object] = span.attributes or {}
    glyph, style = _STATUS.get(span.status.status_code, ("·", "dim"))
    text = Text()
    text.append(glyph + " ", style=style)
    text.append(_safe(span.name, clean), style="bold")
    duration = None
    if span.start_time is not None and span.end_time is not None:
        duration = span.end_time - span.start_time
    text.append("  " + format_duration_ns(duration), style="cyan")
    status_word = attrs.get(semconv.STATUS)
    if isinstance(status_word, str):
        text.append("  " + _safe(status_word, clean), style=style)
    elif span.status.status_code is StatusCode.ERROR:
        text.append("  error", style=style)
    cost = _cost(attrs)
    if cost is not None:
        text.append(f"  ${cost:.6f}".rstrip("0").rstrip(".") if cost else "  $0", style="yellow")
    if attrs.get(semconv.END_INFERRED) is True:
        text.append("  (end inferred)", style="dim")
    if attrs.get(semconv.PARENT_INFERRED) is True:
        text.append("  (parent inferred)", style="dim")
    # A run's row counts the stream events it was made from, in the words and numbers of the
    # summary line; every row counts its own span events (budget updates, logs, waits...).
    counts = []
    if stream_events is not None:
        counts.append(plural(stream_events, "stream event"))
    if span.events:
        counts.append(plural(len(span.events), "span event"))
    if counts:
        text.append(f"  [{', '.join(counts)}]", style="dim")
    return text


def _safe(value: str, masker: SecretMasker) -> str:
    # Cut to a row's worth after cleaning, so a huge name neither floods the terminal nor
    # unmasks a cut secret.
    clean = masker.clean(value)
    return clean if len(clean) <= MAX_LABEL_CHARS else clean[: MAX_LABEL_CHARS - 1] + "…"


def render_span_tree(
    spans: Sequence[ReadableSpan],
    *,
    masker: SecretMasker | None = None,
    max_children: int = DEFAULT_MAX_CHILDREN,
    max_rows: int = DEFAULT_MAX_ROWS,
    stream_events_by_run: Mapping[str, int] | None = None,
) -> list[Tree]:
    """One rich ``Tree`` per root span (normally one: the run), children in start order.

    ``stream_events_by_run`` (stream events read per run id) puts each run's count on its root row.
    """
    clean = masker or default_masker()
    per_run = stream_events_by_run or {}

    def stream_events(span: ReadableSpan) -> int | None:
        if span.parent is not None:
            return None
        run_id = (span.attributes or {}).get(semconv.RUN_ID)
        return per_run.get(run_id) if isinstance(run_id, str) else None

    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent_id = span.parent.span_id if span.parent is not None else None
        key = parent_id if parent_id in by_id else None
        children.setdefault(key, []).append(span)
    for group in children.values():
        group.sort(key=lambda s: s.start_time or 0)

    rows = 0

    def subtree_size(span: ReadableSpan) -> int:
        stack, total = [span], 0
        while stack:
            node = stack.pop()
            total += 1
            if node.context is not None:
                stack.extend(children.get(node.context.span_id, ()))
        return total

    def fill(node: Tree, span: ReadableSpan) -> None:
        kids = children.get(span.context.span_id, []) if span.context is not None else []
        shown = 0
        for kid in kids:
            if shown >= max_children or rows >= max_rows:
                break
            add(node, kid)
            shown += 1
        rest = kids[shown:]
        if rest:
            count = sum(subtree_size(k) for k in rest)
            node.add(Text(f"… {count} more span{'s' if count != 1 else ''}", style="dim"))

    def add(parent: Tree, span: ReadableSpan) -> None:
        nonlocal rows
        node = parent.add(_label(span, clean))
        rows += 1
        fill(node, span)

    trees: list[Tree] = []
    skipped = 0
    for root in children.get(None, []):
        if rows >= max_rows:
            skipped += subtree_size(root)
            continue
        tree = Tree(_label(root, clean, stream_events(root)), guide_style="dim")
        rows += 1
        fill(tree, root)
        trees.append(tree)
    if skipped:
        trees.append(Tree(Text(f"… {skipped} more span{'s' if skipped != 1 else ''}", style="dim")))
    return trees


def print_span_tree(
    spans: Sequence[ReadableSpan],
    console: Console | None = None,
    *,
    masker: SecretMasker | None = None,
    max_children: int = DEFAULT_MAX_CHILDREN,
    max_rows: int = DEFAULT_MAX_ROWS,
    stream_events_by_run: Mapping[str, int] | None = None,
) -> None:
    """Print the tree (stdout by default); ``stream_events_by_run`` as for :func:`render_span_tree`.

    On a terminal rows fold at its width; piped or redirected, every row is printed whole (a
    consumer such as ``grep`` or a log file must never see a name cut mid-word at 80 columns).
    """
    out = console if console is not None else Console(highlight=False)
    if not out.is_terminal:
        out = Console(
            file=out.file,
            width=_PIPED_WIDTH,
            highlight=False,
            soft_wrap=True,
            color_system=out.color_system,  # type: ignore[arg-type]
            no_color=out.no_color,
        )
    trees = render_span_tree(
        spans,
        masker=masker,
        max_children=max_children,
        max_rows=max_rows,
        stream_events_by_run=stream_events_by_run,
    )
    for tree in trees:
        out.print(tree)
