"""Per-request GenAI client metrics, recorded where the engine itself calls the provider.

``gen_ai.client.operation.duration`` (seconds) and ``gen_ai.client.token.usage`` (tokens, by
``gen_ai.token.type``) are defined per provider request, so only the engine, which makes each
request, can record them truly (the stream fold records invocation-level metrics instead). The
metric and attribute names come from the OpenTelemetry semantic-conventions package (the
histograms carry the conventions' advisory bucket boundaries), imported only when an engine is given
a meter, so importing the engine loads no OpenTelemetry module.

Attributes, as on the exported invocation spans: ``gen_ai.operation.name`` = ``chat``;
``gen_ai.provider.name`` = the adapter id (name adapters by the convention's well-known values,
``openai``, ``anthropic``, ``gcp.gemini``, ``aws.bedrock``, ``azure.ai.openai``, ..., and backends
recognise them); ``gen_ai.request.model`` = the model id after the adapter prefix; ``error.type`` on
a failed request (the adapter's error code, else the exception type). Every string value is
masked, and the provider and model are split from the masked ``adapter:model`` ref.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from rulvar_otel.core.events import Usage
from rulvar_otel.core.masking import SecretMasker

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, Meter

__all__ = [
    "NO_TIMER",
    "REQUEST_DURATION_BUCKETS",
    "TOKEN_USAGE_BUCKETS",
    "ProviderCallMetrics",
    "RequestTimer",
]

# The GenAI semantic conventions' advisory bucket boundaries of the two metrics.
REQUEST_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
TOKEN_USAGE_BUCKETS: Final = (
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
    4194304.0, 16777216.0, 67108864.0,
)  # fmt: skip


class RequestTimer(Protocol):
    """Times one provider request; exactly one of ``answered`` or ``failed`` ends it."""

    def answered(self, usage: Usage) -> None: ...

    def failed(self, error_type: str) -> None: ...


class _NoTimer:
    def answered(self, usage: Usage) -> None:
        pass

    def failed(self, error_type: str) -> None:
        pass


NO_TIMER: RequestTimer = _NoTimer()


class ProviderCallMetrics:
    """The two per-request instruments on one meter, and the masker their attribute values go through."""

    def __init__(self, meter: Meter, masker: SecretMasker) -> None:
        from opentelemetry.semconv._incubating.metrics.gen_ai_metrics import (
            GEN_AI_CLIENT_OPERATION_DURATION,
            GEN_AI_CLIENT_TOKEN_USAGE,
        )

        # The semconv package's create_* helpers leave out the conventions' advisory buckets; the
        # SDK's defaults (0, 5, 10, 25, ... 10000) would put every request of a few seconds, and
        # every token count below 5 000, into one bucket.
        self.duration: Histogram = meter.create_histogram(
            GEN_AI_CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=REQUEST_DURATION_BUCKETS,
        )
        self.token_usage: Histogram = meter.create_histogram(
            GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_USAGE_BUCKETS,
        )
        self.masker = masker

    def timer(self, model_ref: str) -> RequestTimer:
        """Start timing one request to ``model_ref`` (``adapter:model``)."""
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        provider, _, model = self.masker.clean(model_ref).partition(":")
        attributes = {
            gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.CHAT.value,
            gen_ai.GEN_AI_PROVIDER_NAME: provider,
            gen_ai.GEN_AI_REQUEST_MODEL: model or provider,
        }
        return _Timer(self, attributes)


class _Timer:
    def __init__(self, metrics: ProviderCallMetrics, attributes: dict[str, str]) -> None:
        import time

        self._metrics = metrics
        self._attributes = attributes
        self._clock = time.perf_counter
        self._started = time.perf_counter()

    def _elapsed(self) -> float:
        return max(0.0, self._clock() - self._started)

    def answered(self, usage: Usage) -> None:
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        self._metrics.duration.record(self._elapsed(), self._attributes)
        for token_type, count in (
            (gen_ai.GenAiTokenTypeValues.INPUT.value, usage.input_tokens),
            (gen_ai.GenAiTokenTypeValues.OUTPUT.value, usage.output_tokens),
        ):
            self._metrics.token_usage.record(
                count, {**self._attributes, gen_ai.GEN_AI_TOKEN_TYPE: token_type}
            )

    def failed(self, error_type: str) -> None:
        from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE

        masked = self._metrics.masker.clean(error_type or "_OTHER")
        self._metrics.duration.record(self._elapsed(), {**self._attributes, ERROR_TYPE: masked})
