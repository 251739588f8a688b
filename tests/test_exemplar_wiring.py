"""The shipped configs carry exemplars from the collector to Grafana (docs/metrics.md, spike to trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "collector_config"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_agent_collector_serves_openmetrics_with_exemplars() -> None:
    config = _yaml(CONFIG / "otelcol-agent.yaml")
    assert config["exporters"]["prometheus"]["enable_open_metrics"] is True
    assert config["connectors"]["span_metrics"]["exemplars"] == {"enabled": True}
    # The OTLP metrics our exports push reach that exporter unchanged.
    assert "prometheus" in config["service"]["pipelines"]["metrics"]["exporters"]


def test_both_prometheus_deployments_store_exemplars() -> None:
    compose = _yaml(CONFIG / "compose.yaml")
    assert "--enable-feature=exemplar-storage" in compose["services"]["prometheus"]["command"]
    stack = (ROOT / "scripts" / "stack.sh").read_text(encoding="utf-8")
    start = stack[stack.index('start prometheus "$prometheus"') :]
    assert "--enable-feature=exemplar-storage" in start[: start.index("wait_healthy prometheus")]


def test_grafana_links_an_exemplars_trace_id_to_the_trace_data_sources() -> None:
    sources = _yaml(CONFIG / "grafana" / "provisioning" / "datasources" / "datasources.yaml")["datasources"]
    by_uid = {source["uid"]: source for source in sources}
    destinations = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert {d["datasourceUid"] for d in destinations} == {"tempo", "jaeger"}
    assert all(d["name"] == "trace_id" and d["datasourceUid"] in by_uid for d in destinations)
    assert {by_uid[d["datasourceUid"]]["type"] for d in destinations} == {"tempo", "jaeger"}


def test_the_stack_hint_names_the_grpc_protocol_whatever_port_it_chose() -> None:
    stack = (ROOT / "scripts" / "stack.sh").read_text(encoding="utf-8")
    hint = stack[stack.index("demo_hint() {") :].split("\n}", 1)[0]
    assert "--endpoint http://127.0.0.1:$OTLP_GRPC --protocol grpc" in hint
    assert "See a trace: $(demo_hint)" in stack
