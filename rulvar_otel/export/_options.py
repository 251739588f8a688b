"""``ExportOptions``: everything an export needs besides the run, validated when built.

The fields name concepts, not command-line flags; ``None`` means "from the environment" (see
``_settings`` for the variables). A bad value raises :class:`~rulvar_otel.errors.ConfigError`
naming the field, before anything is read or written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from opentelemetry.context import Context

from rulvar_otel.core.masking import compile_secret_masker
from rulvar_otel.errors import ConfigError, InvalidHeaderError
from rulvar_otel.export._settings import PROTOCOLS, check_endpoint, check_header
from rulvar_otel.otel._parentage import PARENT_MODES, Parentage
from rulvar_otel.otel.semconv import DEFAULT_METRIC_CARDINALITY_LIMIT

__all__ = ["DEFAULT_PROMETHEUS_HOST", "ExportOptions", "parse_header"]

DEFAULT_PROMETHEUS_HOST: Final = "127.0.0.1"
# How spans are made: "direct" (finished records straight to the exporters) or "sdk" (a
# TracerProvider's spans and processors); both export the same content.
PIPELINES: Final = ("direct", "sdk")
MAX_LINGER_S: Final = 3600.0


def parse_header(text: str) -> tuple[str, str]:
    """``"K=V"`` -> ``("k", "V")``; header names are case-insensitive (gRPC wants lowercase).

    :class:`~rulvar_otel.errors.InvalidHeaderError` for text without ``=``, or a name or value
    no transport can send; the message never quotes the value.
    """
    key, sep, value = text.partition("=")
    if not sep:
        raise InvalidHeaderError(
            "header must be given as KEY=VALUE (this one has no '='; it is not shown)", ""
        )
    if not key.strip():
        raise InvalidHeaderError("header must be given as KEY=VALUE (the name is empty)", "")
    value = value.strip()
    return check_header(key, value), value


def _positive_seconds(name: str, value: float | None, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    low_ok = value >= 0 if zero_ok else value > 0
    if not (low_ok and math.isfinite(value)):
        kind = "a non-negative" if zero_ok else "a positive"
        raise ConfigError(f"{name} must be {kind} number of seconds (got {value!r})")


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """Where an export delivers spans and metrics, and how.

    Traces: ``endpoint`` / ``protocol`` / ``headers`` / ``export_timeout_s`` configure OTLP
    (else the ``OTEL_EXPORTER_OTLP_*`` variables); with no endpoint anywhere, OTLP/JSON lines go
    to ``out`` or ``./rulvar-traces.otlp.jsonl``; ``out`` beside an endpoint writes a copy.
    Resource: ``service_name`` (else ``OTEL_SERVICE_NAME``, else ``rulvar``) and ``project``
    (``openinference.project.name``, Phoenix's project; defaults to a chosen service name).
    Content: ``patterns`` are extra secret regexes; ``openinference`` adds the OpenInference
    span kinds beside the GenAI conventions; ``deterministic_ids`` derives ids from the run.
    ``pipeline``: ``"direct"`` (the default: finished span records straight to the exporters,
    metrics aggregated for the readers) or ``"sdk"`` (a TracerProvider and SDK instruments); the
    two export the same content.
    Metrics (opt-in): ``metrics_endpoint`` pushes OTLP; ``prometheus_port`` serves ``/metrics``
    on ``prometheus_host`` (0 picks a free port), kept up ``prometheus_linger_s`` after the run;
    ``metric_cardinality_limit`` attribute sets per instrument (default 2000, as the SDK's), past
    which new sets add up in one ``otel.metric.overflow=true`` series, on both pipelines.
    Parentage: ``parent`` is ``"ambient"`` (the default: each run's root span is a child of the
    caller's span, the current context's or the one the engine captured at ``engine.run``),
    ``"link"``, ``"none"`` or an OpenTelemetry ``Context`` (docs/otel-mapping.md#parentage).
    """

    endpoint: str | None = None
    protocol: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    out: Path | None = None
    service_name: str | None = None
    project: str | None = None
    patterns: tuple[str, ...] = ()
    export_timeout_s: float | None = None
    deterministic_ids: bool = False
    openinference: bool = True
    pipeline: str = "direct"
    metrics_endpoint: str | None = None
    prometheus_port: int | None = None
    prometheus_host: str = DEFAULT_PROMETHEUS_HOST
    prometheus_linger_s: float = 0.0
    # A mode or a Context; export_run resolves it once (to a Parentage) before the pipeline opens.
    parent: str | Context | Parentage = "ambient"
    metric_cardinality_limit: int = DEFAULT_METRIC_CARDINALITY_LIMIT

    def __post_init__(self) -> None:
        if not isinstance(self.parent, Context | Parentage) and self.parent not in PARENT_MODES:
            raise ConfigError(
                f"parent must be one of {', '.join(PARENT_MODES)} or a Context (got {self.parent!r})"
            )
        if self.pipeline not in PIPELINES:
            raise ConfigError(f"pipeline must be one of {', '.join(PIPELINES)} (got {self.pipeline!r})")
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise ConfigError(f"protocol must be grpc or http/protobuf (got {self.protocol!r})")
        if self.endpoint is not None:
            check_endpoint(self.endpoint.strip(), "endpoint")
        if self.metrics_endpoint is not None:
            check_endpoint(self.metrics_endpoint.strip(), "metrics endpoint")
        _positive_seconds("export timeout", self.export_timeout_s)
        _positive_seconds("Prometheus linger", self.prometheus_linger_s, zero_ok=True)
        limit = self.metric_cardinality_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"metric cardinality limit must be a whole number >= 1 (got {limit!r})")
        if self.prometheus_linger_s > MAX_LINGER_S:
            raise ConfigError(f"Prometheus linger must be at most {MAX_LINGER_S:g} seconds")
        if self.prometheus_port is not None and not (0 <= self.prometheus_port <= 65535):
            raise ConfigError(f"Prometheus port must be a TCP port, 0-65535 (got {self.prometheus_port})")
        if not self.prometheus_host.strip():
            raise ConfigError("Prometheus host must not be empty")
        normalized: dict[str, str] = {}
        for key, value in self.headers.items():
            if not isinstance(key, str) or not key.strip() or not isinstance(value, str):
                raise ConfigError("headers must map non-empty names to string values")
            normalized[check_header(key, value)] = value
        object.__setattr__(self, "headers", normalized)
        object.__setattr__(self, "patterns", tuple(self.patterns))
        if self.patterns:
            compile_secret_masker(self.patterns)
