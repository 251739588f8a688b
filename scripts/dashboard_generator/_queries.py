"""PromQL building blocks: registry series and labels, the dashboards' variables, window shapes.

Names come from the metric registry (``series``, ``span_series``, ``label``); every counter or
histogram read goes through ``counted`` (or ``changed`` for an up-down counter), so a series born
inside the window counts in full. ``total`` and ``quantile`` are the two shapes panels and alerts use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel.metrics.registry import ENGINE_METRICS, SPAN_METRICS, definition, prometheus_label

__all__ = [
    "MODEL",
    "RANGE",
    "RATE",
    "WF",
    "both",
    "changed",
    "counted",
    "label",
    "quantile",
    "select",
    "series",
    "span_series",
    "total",
]


def series(name: str, suffix: str = "") -> str:
    """The Prometheus series of registry metric ``name`` (``suffix``: bucket, sum or count): one
    the recorder writes, or one of the engine's per-request metrics."""
    engine = next((entry for entry in ENGINE_METRICS if entry.name == name), None)
    base = (engine or definition(name)).prometheus_name
    return f"{base}_{suffix}" if suffix else base


def span_series(name: str, suffix: str = "") -> str:
    """The Prometheus series of the collector's spanmetrics metric ``name``."""
    base = next(entry for entry in SPAN_METRICS if entry.name == name).prometheus_name
    return f"{base}_{suffix}" if suffix else base


def label(attribute: str) -> str:
    return prometheus_label(attribute)


WF: Final = f'{label(sc.WORKFLOW)}=~"$workflow"'
MODEL: Final = f'{label(sc.GEN_AI_REQUEST_MODEL)}=~"$model"'
RATE: Final = "$__rate_interval"
RANGE: Final = "$__range"


def both(*matchers: str) -> str:
    """The non-empty ``matchers`` joined into one selector body."""
    return ", ".join(m for m in matchers if m)


# --- counting a window, including series born in it -------------------------------------------
#
# A counter series can appear at its final value: a one-shot `rulvar-otel export` serves or
# pushes each counter once, and a long-lived host's first event of a new label set appears at 1.
# `increase()` needs two samples and measures only growth between them, so it reads such a
# series as 0 (or as nothing). Every panel and alert therefore counts a window per series as:
#   - a series that already existed before the window: its increase() inside the window;
#   - a series born inside the window: everything it counted, which (a cumulative OTel counter
#     starts at 0) is its last value, or its increase() when that is larger (a series whose first
#     scrape was already 0, or that restarted inside the window).


def counted(selector: str, window: str) -> str:
    """Per series: what the counter (or histogram bucket/sum/count) ``selector`` counted in ``window``."""
    grew = f"increase({selector}[{window}])"
    last = f"last_over_time({selector}[{window}])"
    before = f"{selector} offset {window}"
    return f"(({grew} and {before}) or ((({grew} >= {last}) or {last}) unless {before}))"


def changed(selector: str, window: str) -> str:
    """Per series: how much the up-down counter ``selector`` moved in ``window`` (born: its value)."""
    before = f"{selector} offset {window}"
    moved = f"delta({selector}[{window}])"
    last = f"last_over_time({selector}[{window}])"
    return f"(({moved} and {before}) or ({last} unless {before}))"


def select(name: str, matchers: str = "") -> str:
    return f"{name}{{{matchers}}}" if matchers else name


def total(
    metric: str, by: Sequence[str] = (), selector: str = "", window: str = RATE, suffix: str = ""
) -> str:
    """``sum by (...)`` of what registry metric ``metric`` counted in ``window``."""
    group = f" by ({', '.join(label(a) for a in by)})" if by else ""
    return f"sum{group} ({counted(select(series(metric, suffix), selector), window)})"


def quantile(q: float, name: str, by: Sequence[str] = (), selector: str = "", window: str = RATE) -> str:
    group = ", ".join(["le", *(label(a) for a in by)])
    buckets = counted(select(series(name, "bucket"), selector), window)
    return f"histogram_quantile({q}, sum by ({group}) ({buckets}))"
