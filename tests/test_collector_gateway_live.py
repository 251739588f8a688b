"""The gateway for real: load balancer -> two tail-sampling gateways -> Jaeger v2.

The built collector runs the shipped load-balancer config (its DNS resolver swapped for a static
one naming the two samplers) in front of two instances of the shipped sampler config (addresses
and decision_wait moved with `--set`, each named by RULVAR_SAMPLER_ID). Spans go out one per
request, so routing by trace id, not batching, is what keeps a trace on one sampler. Ids come from
a seeded generator: which sampler and which sampling decision each trace gets is the same on every
run.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from tests._support import (
    BUILD_TIMEOUT_S,
    CONFIG,
    STREAMS,
    Jaeger,
    JaegerSpan,
    Service,
    free_port,
    rulvar_otel_command,
    start_collector,
    start_jaeger,
    wait_for,
    write_yaml,
)

pytestmark = [pytest.mark.live, pytest.mark.timeout(BUILD_TIMEOUT_S)]

SAMPLER_TAG = "rulvar.collector.sampler"
DECISION_WAIT_S = 3
HEALTHY, ERRORED, UNSETTLED = 120, 6, 6
CHILDREN = 3
SAMPLER_CONFIG = yaml.safe_load((CONFIG / "otelcol-gateway-sampler.yaml").read_text(encoding="utf-8"))
SAMPLE_PERCENT = next(
    p["probabilistic"]["sampling_percentage"]
    for p in SAMPLER_CONFIG["processors"]["tail_sampling"]["policies"]
    if p["type"] == "probabilistic"
)


@dataclass
class Gateway:
    jaeger: Jaeger
    lb_endpoint: str
    services: list[Service]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway")
    services: list[Service] = []
    try:
        jaeger = start_jaeger(tmp)
        services.append(jaeger.service)
        sampler_ports = []
        for name in ("a", "b"):
            port = free_port()
            sampler_ports.append(port)
            services.append(
                start_collector(
                    f"otelcol-sampler-{name}",
                    CONFIG / "otelcol-gateway-sampler.yaml",
                    tmp,
                    f"receivers.otlp.protocols.grpc.endpoint=127.0.0.1:{port}",
                    f"exporters.otlp_http/jaeger.endpoint={jaeger.otlp_http}",
                    "service.pipelines.traces.exporters=[otlp_http/jaeger]",
                    f"processors.tail_sampling.decision_wait={DECISION_WAIT_S}s",
                    "processors.batch.timeout=200ms",
                    env={"RULVAR_SAMPLER_ID": f"sampler-{name}"},
                )
            )
        lb = yaml.safe_load((CONFIG / "otelcol-gateway-loadbalancer.yaml").read_text(encoding="utf-8"))
        resolver = lb["exporters"]["load_balancing"]["resolver"]
        assert set(resolver) == {"dns"}
        lb["exporters"]["load_balancing"]["resolver"] = {
            "static": {"hostnames": [f"127.0.0.1:{port}" for port in sampler_ports]}
        }
        lb_port = free_port()
        services.append(
            start_collector(
                "otelcol-loadbalancer",
                write_yaml(tmp / "otelcol-gateway-loadbalancer.yaml", lb),
                tmp,
                f"receivers.otlp.protocols.grpc.endpoint=127.0.0.1:{lb_port}",
                f"receivers.otlp.protocols.http.endpoint=127.0.0.1:{free_port()}",
                f"exporters.prometheus.endpoint=127.0.0.1:{free_port()}",
            )
        )
        yield Gateway(jaeger, f"http://127.0.0.1:{lb_port}", services)
    finally:
        for service in reversed(services):
            service.stop()


class SeededIds(IdGenerator):
    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1


def _send_synthetic(endpoint: str) -> dict[str, set[str]]:
    """Healthy, errored and unsettled runs, each a run span with CHILDREN children; one span per
    request. Returns the trace ids by kind."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rulvar-gateway-synthetic"}),
        id_generator=SeededIds(20261201),
    )
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10))
    )
    tracer = provider.get_tracer("gateway-test")
    kinds = ["healthy"] * HEALTHY + ["errored"] * ERRORED + ["unsettled"] * UNSETTLED
    random.Random(7).shuffle(kinds)
    trace_ids: dict[str, set[str]] = {"healthy": set(), "errored": set(), "unsettled": set()}
    for index, kind in enumerate(kinds):
        run = tracer.start_span(f"run synthetic-{index}")
        run.set_attribute("rulvar.run.settled", kind != "unsettled")
        for child in range(CHILDREN):
            span = tracer.start_span(f"agent worker-{child} loop", context=set_span_in_context(run))
            failed = kind == "errored" and child == CHILDREN - 1
            span.set_status(Status(StatusCode.ERROR if failed else StatusCode.OK))
            span.end()
        run.set_status(Status(StatusCode.OK))
        run.end()
        trace_ids[kind].add(format(run.get_span_context().trace_id, "032x"))
    provider.shutdown()
    return trace_ids


def _export(stream: str, endpoint: str, service: str) -> str:
    path = str(STREAMS / f"{stream}.jsonl")
    result = subprocess.run(
        [rulvar_otel_command(), "export", path, "--endpoint", endpoint, "--protocol", "grpc",
         "--deterministic-ids", "--service-name", service, "--progress", "off", "--no-tree"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stderr.split(" in trace ", 1)[1].split()[0]


def _probabilistic_keeps(trace_id: str, percent: float) -> bool:
    """The tail-sampling probabilistic policy's decision: FNV-1a (64 bit) over its default salt and
    the trace id's bytes, against percent of the 64-bit range."""
    digest = 0xCBF29CE484222325
    for byte in b"default-hash-seed" + bytes.fromhex(trace_id):
        digest = ((digest ^ byte) * 0x100000001B3) % 2**64
    return digest <= int((2**64 - 1) * Fraction(percent) / 100)


def _whole(jaeger: Jaeger, trace_id: str, expected: int) -> list[JaegerSpan]:
    spans: list[JaegerSpan] = []

    def arrived() -> bool:
        nonlocal spans
        spans = jaeger.trace(trace_id, raw=True)
        return len(spans) >= expected

    wait_for(f"{expected} spans of {trace_id}", arrived, timeout=90, interval=1.0)
    return spans


def _one_sampler(spans: list[JaegerSpan]) -> str:
    tags = {span.attributes.get(SAMPLER_TAG) for span in spans}
    assert len(tags) == 1, f"one trace went through several samplers: {tags}"
    (tag,) = tags
    assert tag in {"sampler-a", "sampler-b"}
    return str(tag)


def test_tail_sampling_behind_the_load_balancer(gateway: Gateway) -> None:
    jaeger = gateway.jaeger
    trace_ids = _send_synthetic(gateway.lb_endpoint)
    stream_traces = {
        stream: _export(stream, gateway.lb_endpoint, f"rulvar-gateway-{stream}")
        for stream in ("error", "unsettled")
    }
    healthy_stream = _export("nested", gateway.lb_endpoint, "rulvar-gateway-nested")

    # Kept, always and whole: every trace with an ERROR span or rulvar.run.settled=false.
    samplers: Counter[str] = Counter()
    for kind in ("errored", "unsettled"):
        for trace_id in trace_ids[kind]:
            spans = _whole(jaeger, trace_id, CHILDREN + 1)
            assert len(spans) == CHILDREN + 1
            samplers[_one_sampler(spans)] += 1
    for stream, trace_id in stream_traces.items():
        spans = _whole(jaeger, trace_id, {"error": 7, "unsettled": 4}[stream])
        samplers[_one_sampler(spans)] += 1

    # Healthy runs: decided once decision_wait has passed for all of them; give the last batch time.
    time.sleep(DECISION_WAIT_S + 4)
    kept_healthy = jaeger.trace_ids("rulvar-gateway-synthetic") & trace_ids["healthy"]
    # The policy keeps 10 % of healthy traces by trace-id hash: exactly the ids its hash admits.
    assert kept_healthy == {t for t in trace_ids["healthy"] if _probabilistic_keeps(t, SAMPLE_PERCENT)}
    assert 3 <= len(kept_healthy) <= 30, len(kept_healthy)  # the seeded ids give 11 of 120
    for trace_id in kept_healthy:
        spans = jaeger.trace(trace_id)
        assert len(spans) == CHILDREN + 1, trace_id
        samplers[_one_sampler(spans)] += 1
    assert set(jaeger.trace_ids("rulvar-gateway-synthetic")) <= set().union(*trace_ids.values())
    assert len(jaeger.trace(healthy_stream)) in (0, 10)  # sampled whole or not at all

    # Both samplers took a share of the traces: the load balancer really spreads them.
    assert set(samplers) == {"sampler-a", "sampler-b"}, samplers
