"""The generator behind ``scripts/generate_dashboards.py``: registry metrics to dashboards and alerts.

Every series and label the generated files read is derived from
:mod:`rulvar_otel.otel.metrics.registry`, so a panel or an alert can only read what the recorder
(or, for the rows that say so, the engine or the collector) writes. The pieces:

- ``_queries``: series names, label matchers and the PromQL shapes (``counted``, ``total``, ...);
- ``_panels``: the panel spec, template variables and the Grafana builder calls (grafana-foundation-sdk);
- ``_runs``, ``_orchestration``, ``_tools_quotas``, ``_spans``: one module per dashboard, and
  ``_boards``: the list of them;
- ``_alerts``: the Prometheus alert rules;
- ``_docs_table``: the registry table of docs/metrics.md.
"""

from dashboard_generator._alerts import build_alert_rules, build_alerts_text
from dashboard_generator._boards import build_dashboards
from dashboard_generator._docs_table import TABLE_BEGIN, TABLE_END, build_metrics_table, with_metrics_table
from dashboard_generator._queries import changed, counted, quantile, total

__all__ = [
    "TABLE_BEGIN",
    "TABLE_END",
    "build_alert_rules",
    "build_alerts_text",
    "build_dashboards",
    "build_metrics_table",
    "changed",
    "counted",
    "quantile",
    "total",
    "with_metrics_table",
]
