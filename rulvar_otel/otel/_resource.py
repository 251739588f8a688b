"""The resource every export carries, masked like every other exported string.

The resource is composed from the service name, the project and, by the SDK, from
``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``: text an operator typed, which can hold a
token as easily as a span name can. :func:`compose_resource` builds it and :func:`mask_resource`
cleans every key and every string value (sequence items included) after composition, so OTLP
(both pipelines) and Prometheus ``target_info`` only ever see the masked form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.util.types import AttributeValue

from rulvar_otel.core.masking import SecretMasker, default_masker

__all__ = ["compose_resource", "mask_resource"]


def _clean_value(value: AttributeValue, masker: SecretMasker) -> AttributeValue:
    if isinstance(value, str):
        return masker.clean(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return tuple(masker.clean(item) if isinstance(item, str) else item for item in value)  # type: ignore[return-value]
    return value


def mask_resource(resource: Resource, masker: SecretMasker | None = None) -> Resource:
    """``resource`` with every key and string value cleaned by ``masker`` (default: the default set)."""
    chosen = masker or default_masker()
    attributes = {
        chosen.clean(key): _clean_value(value, chosen) for key, value in resource.attributes.items()
    }
    if attributes == dict(resource.attributes):
        return resource
    return Resource(attributes, resource.schema_url)


def compose_resource(attributes: Mapping[str, str], masker: SecretMasker | None = None) -> Resource:
    """``Resource.create(attributes)`` (the SDK merges in the ``OTEL_*`` variables), then masked."""
    return mask_resource(Resource.create(dict(attributes)), masker)
