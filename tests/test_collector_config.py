"""Checks of the collector, Prometheus, Alertmanager, Grafana and compose configs.

Field-level validation is real: the collector distribution built from
collector_config/builder/otelcol-rulvar.yaml (scripts/build_pipeline.sh) runs `validate` on every
shipped collector config, and on a config with a misspelled key, which it must reject. The
structural checks below add what validation cannot know: that the manifest lists exactly the
components the configs use, all at one release, the pipeline wiring, and every attribute a rule
names. Tempo is not run by the tests (its builds are AGPL-licensed); its config is checked here
structurally only.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rulvar_otel.core.masking import DEFAULT_SECRET_PATTERNS
from rulvar_otel.otel import semconv as sc
from rulvar_otel.otel._event_facts import EVENT_PLANS
from tests._support import BUILD_TIMEOUT_S, binaries, require_tool

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "collector_config"
MANIFEST = CONFIG / "builder" / "otelcol-rulvar.yaml"
OTELCOL_FILES = ("otelcol-agent.yaml", "otelcol-gateway-loadbalancer.yaml", "otelcol-gateway-sampler.yaml")
# The one collector release of the distribution (core v0.161.0 pairs with the v1.67.0 modules),
# and the Jaeger release (v1.76.0 is the Go module of the Jaeger v2.13.0 binary and image).
RELEASE = "0.161.0"
CORE_STABLE = "1.67.0"
JAEGER_MODULE = "v1.76.0"
JAEGER_IMAGE = "2.13.0"

CORE = "go.opentelemetry.io/collector/"
CONTRIB = "github.com/open-telemetry/opentelemetry-collector-contrib/"
# component type -> the module that provides it (every type a config here uses).
COMPONENT_MODULES: dict[str, dict[str, str]] = {
    "receivers": {"otlp": CORE + "receiver/otlpreceiver"},
    "processors": {
        "memory_limiter": CORE + "processor/memorylimiterprocessor",
        "batch": CORE + "processor/batchprocessor",
        "redaction": CONTRIB + "processor/redactionprocessor",
        "tail_sampling": CONTRIB + "processor/tailsamplingprocessor",
        "attributes": CONTRIB + "processor/attributesprocessor",
    },
    "exporters": {
        "otlp_grpc": CORE + "exporter/otlpexporter",
        "otlp_http": CORE + "exporter/otlphttpexporter",
        "prometheus": CONTRIB + "exporter/prometheusexporter",
        "load_balancing": CONTRIB + "exporter/loadbalancingexporter",
    },
    "connectors": {"span_metrics": CONTRIB + "connector/spanmetricsconnector"},
    "extensions": {"health_check": CONTRIB + "extension/healthcheckextension"},
}
SECTIONS = tuple(COMPONENT_MODULES)


def _span_attributes() -> set[str]:
    """Every span attribute key the exporter emits: semconv's constants above its metrics section."""
    source = (ROOT / "rulvar_otel" / "otel" / "semconv.py").read_text(encoding="utf-8")
    span_part = source.split("# --- metrics ---", 1)[0]
    names = set(re.findall(r"^([A-Z][A-Z0-9_]*): Final = ", span_part, flags=re.MULTILINE))
    values = {getattr(sc, name) for name in names}
    fields = {attr for _, attr in sc.EXPLORATION_FIELDS} | {attr for _, attr in sc.RUN_JSON_FACTS}
    return {v for v in values | fields if isinstance(v, str) and "." in v}


SPAN_ATTRIBUTES = _span_attributes()
# Every span-event attribute the exporter can write: the allow-list's keys, per event type.
EVENT_ATTRIBUTES = {key for plan in EVENT_PLANS.values() for *_, keys in plan for key in keys}
# Content-like span-event fields, as an older or foreign producer would name them.
CONTENT_EVENT_FIELDS = (
    "text", "msg", "message", "messages", "content", "contents", "prompt", "prompts", "completions",
    "response", "responses", "input", "output", "inputs", "outputs", "error", "data", "delta",
    "label", "frame", "result", "reasoning", "thinking", "arguments", "args", "body", "raw",
    "provider_raw", "transcript", "instructions", "tool_input", "tool_output", "risk", "rule",
    "advisory",
)  # fmt: skip
CONTENT_KEYS = (
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "message",
    "log.msg",
    "llm.prompts",
    "rulvar.event.delta",
    "input.value",
    "output.value",
    "llm.response",
    *(sc.EVENT_FIELD_PREFIX + field for field in CONTENT_EVENT_FIELDS),
)


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIG / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_assumed_span_attributes_are_real() -> None:
    assert {sc.RUN_SETTLED, sc.AGENT_TYPE, sc.GEN_AI_REQUEST_MODEL, sc.RUN_ID} <= SPAN_ATTRIBUTES
    assert sc.WORKFLOW not in SPAN_ATTRIBUTES  # metric-only keys are not span attributes


def test_every_yaml_file_parses() -> None:
    files = sorted(CONFIG.rglob("*.y*ml"))
    assert len(files) >= 10
    for path in files:
        assert isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict), path


@pytest.mark.parametrize("name", OTELCOL_FILES)
def test_pipelines_name_only_defined_components_of_the_distribution(name: str) -> None:
    config = _load(name)
    defined = {section: set(config.get(section) or {}) for section in SECTIONS}
    for section, ids in defined.items():
        for component_id in ids:
            kind = component_id.split("/", 1)[0]
            assert kind in COMPONENT_MODULES[section], (
                f"{name}: {section} type {kind!r} is not in the manifest"
            )
    service = config["service"]
    assert set(service.get("extensions", [])) <= defined["extensions"]
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for pipeline_id, pipeline in service["pipelines"].items():
        assert pipeline_id.split("/", 1)[0] in {"traces", "metrics", "logs"}, pipeline_id
        assert pipeline.get("receivers") and pipeline.get("exporters"), pipeline_id
        for role, section in (
            ("receivers", "receivers"),
            ("processors", "processors"),
            ("exporters", "exporters"),
        ):
            for component_id in pipeline.get(role, []):
                if component_id in defined["connectors"] and role != "processors":
                    used["connectors"].add(component_id)
                    continue
                assert component_id in defined[section], (
                    f"{name}: {pipeline_id} uses undefined {component_id}"
                )
                used[section].add(component_id)
    # A connector must leave one pipeline and enter another.
    for connector in defined["connectors"]:
        as_exporter = any(connector in p.get("exporters", []) for p in service["pipelines"].values())
        as_receiver = any(connector in p.get("receivers", []) for p in service["pipelines"].values())
        assert as_exporter and as_receiver, f"{name}: connector {connector} is not wired both ways"
    for section in ("receivers", "processors", "exporters", "connectors"):
        assert used[section] == defined[section], (
            f"{name}: unused {section} {defined[section] - used[section]}"
        )
    if "memory_limiter" in defined["processors"]:
        for pipeline in service["pipelines"].values():
            assert pipeline.get("processors", ["memory_limiter"])[0] == "memory_limiter"


@pytest.mark.parametrize("name", OTELCOL_FILES)
def test_every_exporter_has_a_bounded_timeout(name: str) -> None:
    for component_id, exporter in (_load(name).get("exporters") or {}).items():
        kind = component_id.split("/", 1)[0]
        if kind in ("otlp_grpc", "otlp_http"):
            assert exporter.get("timeout"), component_id
        if kind == "load_balancing":
            assert exporter["protocol"]["otlp"].get("timeout"), component_id


def test_agent_spanmetrics_dimensions_are_attributes_we_emit() -> None:
    spanmetrics = _load("otelcol-agent.yaml")["connectors"]["span_metrics"]
    dimensions = {d["name"] for d in spanmetrics["dimensions"]}
    assert dimensions and dimensions <= SPAN_ATTRIBUTES, dimensions - SPAN_ATTRIBUTES
    buckets = spanmetrics["histogram"]["explicit"]["buckets"]
    assert buckets[-1] in ("3600s", "1h") and len(buckets) >= 10  # sized for LLM latencies


def test_agent_pipeline_order_and_destinations() -> None:
    config = _load("otelcol-agent.yaml")
    traces = config["service"]["pipelines"]["traces"]
    assert traces["processors"] == ["memory_limiter", "redaction", "batch"]
    assert {"otlp_grpc/tempo", "otlp_http/jaeger", "span_metrics"} == set(traces["exporters"])
    assert config["service"]["pipelines"]["metrics"]["exporters"] == ["prometheus"]


def test_redaction_rules_name_only_attributes_we_emit_and_block_content() -> None:
    redaction = _load("otelcol-agent.yaml")["processors"]["redaction"]
    assert redaction["allow_all_keys"] is True
    assert "ignored_keys" not in redaction  # an ignored key would mark every span with a count
    key_patterns = [re.compile(p) for p in redaction["blocked_key_patterns"]]
    for key in SPAN_ATTRIBUTES | EVENT_ATTRIBUTES:
        assert not any(p.search(key) for p in key_patterns), f"redaction would mask our own {key}"
    for key in CONTENT_KEYS:
        assert any(p.search(key) for p in key_patterns), f"content key {key} passes the redaction"
    # The value patterns are the exporter's own credential set (RE2 reads these as Python does).
    values = redaction["blocked_values"]
    assert values == list(DEFAULT_SECRET_PATTERNS)
    for sample in (
        "sk-" + "a" * 24,
        "AKIA" + "B" * 16,
        "Bearer " + "c" * 30,
        "-----BEGIN RSA PRIVATE KEY-----",
    ):
        assert any(re.search(p, f"x {sample} y") for p in values), sample


def test_gateway_routes_by_trace_id_to_a_tail_sampler() -> None:
    lb = _load("otelcol-gateway-loadbalancer.yaml")
    exporter = lb["exporters"]["load_balancing"]
    assert exporter["routing_key"] == "traceID"
    assert exporter["resolver"]["dns"]["port"] == "4317"
    assert "load_balancing" in lb["service"]["pipelines"]["traces"]["exporters"]
    sampler = _load("otelcol-gateway-sampler.yaml")
    assert sampler["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")


def test_tail_sampling_keeps_errors_and_unsettled_terminals() -> None:
    tail = _load("otelcol-gateway-sampler.yaml")["processors"]["tail_sampling"]
    assert int(tail["decision_wait"].removesuffix("s")) >= 600  # long agent runs
    policies = {p["type"]: p for p in tail["policies"]}
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    assert policies["boolean_attribute"]["boolean_attribute"] == {"key": sc.RUN_SETTLED, "value": False}
    assert 0 < policies["probabilistic"]["probabilistic"]["sampling_percentage"] < 100
    for policy in tail["policies"]:
        for kind in ("boolean_attribute", "string_attribute", "numeric_attribute"):
            if kind in policy:
                assert policy[kind]["key"] in SPAN_ATTRIBUTES, policy


@pytest.mark.parametrize("name", ["prometheus.yml", "prometheus-local.yml"])
def test_promtool_check_config(name: str) -> None:
    result = subprocess.run(
        [require_tool("promtool"), "check", "config", name],
        cwd=CONFIG / "prometheus",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_prometheus_intervals_are_bounded() -> None:
    config = _load("prometheus/prometheus.yml")
    seconds = {k: int(v.removesuffix("s")) for k, v in config["global"].items()}
    assert seconds["scrape_timeout"] <= seconds["scrape_interval"] <= 60
    assert seconds["evaluation_interval"] <= 60
    targets = {t for job in config["scrape_configs"] for sc_ in job["static_configs"] for t in sc_["targets"]}
    assert "otelcol:8889" in targets


def test_amtool_check_config() -> None:
    result = subprocess.run(
        [require_tool("amtool"), "check-config", "alertmanager.yml"],
        cwd=CONFIG / "alertmanager",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_provisioning_and_compose_agree() -> None:
    sources = {d["uid"]: d for d in _load("grafana/provisioning/datasources/datasources.yaml")["datasources"]}
    assert sources["prometheus"]["type"] == "prometheus" and sources["prometheus"]["isDefault"] is True
    assert {"tempo", "jaeger"} <= set(sources)
    provider = _load("grafana/provisioning/dashboards/dashboards.yaml")["providers"][0]
    compose = _load("compose.yaml")
    services = compose["services"]
    assert {"otelcol", "jaeger", "tempo", "prometheus", "grafana"} <= set(services)
    grafana_mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in services["grafana"]["volumes"])
    assert grafana_mounts["../dashboards"] == provider["options"]["path"]
    for service in services.values():
        for volume in service.get("volumes", []):
            host = volume.split(":", 1)[0]
            assert (CONFIG / host).exists(), f"compose mounts missing {host}"
    assert services["otelcol"]["image"] == f"otel/opentelemetry-collector-contrib:{RELEASE}"
    assert services["jaeger"]["image"] == f"jaegertracing/jaeger:{JAEGER_IMAGE}"
    assert "--config=/etc/otelcol/config.yaml" in services["otelcol"]["command"]


# --- the distribution: manifest, one release, real validation -----------------------------------


def _manifest_modules() -> dict[str, dict[str, str]]:
    manifest = _load("builder/otelcol-rulvar.yaml")
    modules: dict[str, dict[str, str]] = {}
    for section in (*SECTIONS, "providers"):
        entries = [entry["gomod"].split() for entry in manifest.get(section) or []]
        modules[section] = dict(entries)
    return modules


def test_the_manifest_lists_exactly_the_components_the_configs_use() -> None:
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for name in OTELCOL_FILES:
        config = _load(name)
        for section in SECTIONS:
            for component_id in config.get(section) or {}:
                used[section].add(COMPONENT_MODULES[section][component_id.split("/", 1)[0]])
    modules = _manifest_modules()
    for section in SECTIONS:
        assert set(modules[section]) == used[section], section


def test_every_module_is_at_the_one_release() -> None:
    modules = _manifest_modules()
    for section, entries in modules.items():
        for path, version in entries.items():
            stable_core = section == "providers"
            assert version == f"v{CORE_STABLE if stable_core else RELEASE}", (path, version)
    manifest = _load("builder/otelcol-rulvar.yaml")
    assert manifest["dist"]["version"] == RELEASE
    script = (ROOT / "scripts" / "build_pipeline.sh").read_text(encoding="utf-8")
    assert f'BUILDER_VERSION="v{RELEASE}"' in script
    jaeger_mod = (CONFIG / "builder" / "jaeger" / "go.mod").read_text(encoding="utf-8")
    assert f"github.com/jaegertracing/jaeger {JAEGER_MODULE}" in jaeger_mod
    assert "tool github.com/jaegertracing/jaeger/cmd/jaeger" in jaeger_mod


def _validate(binary: Path, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), "validate", f"--config={config}", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.timeout(BUILD_TIMEOUT_S)
@pytest.mark.parametrize("name", OTELCOL_FILES)
def test_the_built_collector_validates_every_shipped_config(name: str) -> None:
    result = _validate(binaries().otelcol, CONFIG / name)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_jaeger_validates_its_config() -> None:
    result = _validate(binaries().jaeger, CONFIG / "jaeger" / "jaeger.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(BUILD_TIMEOUT_S)
@pytest.mark.parametrize(
    ("name", "old", "new", "complaint"),
    [
        ("otelcol-agent.yaml", "    send_batch_size: 1024", "    send_batch_sise: 1024", "send_batch_sise"),
        (
            "otelcol-gateway-sampler.yaml",
            "    decision_wait: 900s",
            "    decision_wiat: 900s",
            "decision_wiat",
        ),
        (
            "otelcol-gateway-loadbalancer.yaml",
            "    routing_key: traceID",
            "    routing_kee: traceID",
            "routing_kee",
        ),
        ("otelcol-agent.yaml", "  redaction:", "  redacton:", "redacton"),
    ],
)
def test_validation_rejects_a_misspelled_key(
    name: str, old: str, new: str, complaint: str, tmp_path: Path
) -> None:
    text = (CONFIG / name).read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    broken = tmp_path / name
    broken.write_text(text.replace(old, new), encoding="utf-8")
    result = _validate(binaries().otelcol, broken)
    assert result.returncode != 0
    assert complaint in result.stdout + result.stderr


def test_the_local_prometheus_scrapes_the_agent_on_loopback() -> None:
    local = _load("prometheus/prometheus-local.yml")
    jobs = {job["job_name"]: job for job in local["scrape_configs"]}
    agent_port = _load("otelcol-agent.yaml")["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    assert jobs["otelcol-agent"]["static_configs"][0]["targets"] == [f"127.0.0.1:{agent_port}"]
    assert jobs["otelcol-agent"]["honor_labels"] is True
    shipped = {job["job_name"]: job for job in _load("prometheus/prometheus.yml")["scrape_configs"]}
    assert set(jobs) == set(shipped) and local["rule_files"] == ["alerts.yml"]


def test_tempo_receives_what_the_collectors_send_it() -> None:
    """Tempo is not run by the tests (AGPL builds): its config is checked structurally only."""
    tempo = _load("tempo/tempo.yaml")
    grpc = tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    for name in ("otelcol-agent.yaml", "otelcol-gateway-sampler.yaml"):
        exporter = _load(name)["exporters"]["otlp_grpc/tempo"]
        assert exporter["endpoint"] == f"tempo:{grpc.rsplit(':', 1)[1]}"
        assert exporter["tls"]["insecure"] is True
    assert tempo["storage"]["trace"]["backend"] == "local"
    assert _load("compose.yaml")["services"]["tempo"]["image"].startswith("grafana/tempo:")


def test_jaeger_config_keeps_every_address_on_loopback_and_movable() -> None:
    jaeger = _load("jaeger/jaeger.yaml")
    addresses = [
        jaeger["extensions"]["healthcheckv2"]["http"]["endpoint"],
        jaeger["extensions"]["jaeger_query"]["http"]["endpoint"],
        jaeger["extensions"]["jaeger_query"]["grpc"]["endpoint"],
        *(p["endpoint"] for p in jaeger["receivers"]["otlp"]["protocols"].values()),
    ]
    for address in addresses:
        assert re.fullmatch(r"\$\{env:JAEGER_[A-Z_]+_ENDPOINT:-127\.0\.0\.1:\d+\}", address), address
    assert jaeger["service"]["telemetry"]["metrics"]["level"] == "none"  # :8888 stays free
    assert "memory" in jaeger["extensions"]["jaeger_storage"]["backends"]["memstore"]
