"""Reading PromQL for the dashboard and alert tests: which series and labels an expression uses.

:func:`assert_reads_only_the_registry` holds an expression to the series and labels the metric
registry (and the collector's spanmetrics) actually write.
"""

from __future__ import annotations

import re

__all__ = ["assert_reads_only_the_registry", "promql_references", "registry_series_labels"]

_SELECTOR = re.compile(
    r"(?<![\w$.])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*(?=\[|\{|\)|\s+offset|\s*$|\s+(?:unless|or|and)\b)"
)
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_FUNCTIONS = {
    "sum",
    "rate",
    "increase",
    "delta",
    "last_over_time",
    "histogram_quantile",
    "by",
    "offset",
    "unless",
    "or",
    "and",
}


def promql_references(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """(metric name -> labels its matchers use, labels named in by/without clauses)."""
    metrics: dict[str, set[str]] = {}
    body = re.sub(r"\[[^\]]*\]", "[]", _GROUPING.sub(" ", expr))
    body = re.sub(r"\boffset\s+\w+", " ", body)
    for name, braces in _SELECTOR.findall(body):
        if name in _FUNCTIONS or name.startswith("$") or name.isdigit():
            continue
        metrics.setdefault(name, set()).update(_MATCHER.findall(braces or ""))
    grouping = {
        part.strip() for group in _GROUPING.findall(expr) for part in group.split(",") if part.strip()
    }
    return metrics, grouping


def registry_series_labels() -> dict[str, set[str]]:
    """Every Prometheus series the registry defines -> the labels it carries.

    The registry's own metrics, and the engine's and the collector's series it names.
    """
    from rulvar_otel.otel.metrics import REGISTRY
    from rulvar_otel.otel.metrics.registry import ENGINE_METRICS, SPAN_METRICS

    out: dict[str, set[str]] = {}
    for entry in (*REGISTRY, *ENGINE_METRICS, *SPAN_METRICS):
        for name in entry.prometheus_series:
            out[name] = set(entry.prometheus_labels) | ({"le"} if name.endswith("_bucket") else set())
    return out


def assert_reads_only_the_registry(expr: str) -> set[str]:
    """Every series and label ``expr`` reads is one the recorder writes; returns the series."""
    known = registry_series_labels()
    metrics, grouping = promql_references(expr)
    assert metrics, f"no series found in {expr!r}"
    for name, used in metrics.items():
        assert name in known, f"{name} (in {expr!r}) is not a registry series"
        assert used <= known[name], f"{name} has no label {used - known[name]} (in {expr!r})"
    available = set().union(*(known[name] for name in metrics))
    assert grouping <= available, f"grouping by {grouping - available} (in {expr!r})"
    return set(metrics)
