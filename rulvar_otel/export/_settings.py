"""The ``OTEL_*`` environment variables the export pipeline reads, as one declarative table.

Every variable the pipeline honours is a row of :data:`SETTINGS` (name, kind, default, meaning);
the readers below are the only code that parses them: one integer parser (:func:`read_int`), one
millisecond parser (:func:`read_millis`), one endpoint resolver, one protocol resolver and one
compression reader (:func:`read_compression`) shared by traces and metrics. A bad value is a
:class:`~rulvar_otel.errors.ConfigError` naming the variable, raised before any span exists.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from opentelemetry.util.re import parse_env_headers

from rulvar_otel.core.masking import redact_url
from rulvar_otel.errors import ConfigError, InvalidHeaderError

__all__ = [
    "COMPRESSIONS",
    "PROTOCOLS",
    "SETTINGS",
    "EnvSetting",
    "Compression",
    "Protocol",
    "SettingKind",
    "Signal",
    "check_endpoint",
    "check_header",
    "env_value",
    "read_compression",
    "read_headers",
    "read_int",
    "read_millis",
    "resolve_endpoint",
    "resolve_protocol",
    "with_signal_path",
]

Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: Final[tuple[Protocol, ...]] = ("grpc", "http/protobuf")
Signal = Literal["TRACES", "METRICS"]
Compression = Literal["gzip", "none"]
COMPRESSIONS: Final[tuple[Compression, ...]] = ("gzip", "none")

# gRPC's well-known OTLP port: a bare collector address there means gRPC.
GRPC_DEFAULT_PORT: Final = 4317


class SettingKind(enum.StrEnum):
    """How a variable's text is read."""

    URL = "url"
    PROTOCOL = "protocol"
    HEADERS = "headers"
    MILLISECONDS = "milliseconds"
    COMPRESSION = "compression"
    INTEGER = "integer"
    TEXT = "text"


@dataclass(frozen=True, slots=True)
class EnvSetting:
    """One environment variable: its name, how it is read, its default, what it sets."""

    name: str
    kind: SettingKind
    default: str | None
    meaning: str


SETTINGS: Final[tuple[EnvSetting, ...]] = (
    EnvSetting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        SettingKind.URL,
        None,
        "traces endpoint, used as given (a full URL for http/protobuf)",
    ),
    EnvSetting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        SettingKind.URL,
        None,
        "base endpoint for every signal (http/protobuf gets /v1/traces or /v1/metrics)",
    ),
    EnvSetting("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", SettingKind.PROTOCOL, None, "traces transport"),
    EnvSetting("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", SettingKind.PROTOCOL, None, "metrics transport"),
    EnvSetting(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        SettingKind.PROTOCOL,
        None,
        "transport for every signal (else grpc on port 4317, http/protobuf elsewhere)",
    ),
    EnvSetting("OTEL_EXPORTER_OTLP_TRACES_HEADERS", SettingKind.HEADERS, None, "headers of trace exports"),
    EnvSetting("OTEL_EXPORTER_OTLP_METRICS_HEADERS", SettingKind.HEADERS, None, "headers of metric exports"),
    EnvSetting("OTEL_EXPORTER_OTLP_HEADERS", SettingKind.HEADERS, None, "headers of every export"),
    EnvSetting("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", SettingKind.MILLISECONDS, None, "one trace batch"),
    EnvSetting("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", SettingKind.MILLISECONDS, None, "one metrics export"),
    EnvSetting("OTEL_EXPORTER_OTLP_TIMEOUT", SettingKind.MILLISECONDS, "10000", "one export, any signal"),
    EnvSetting("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", SettingKind.COMPRESSION, None, "trace exports"),
    EnvSetting("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", SettingKind.COMPRESSION, None, "metric exports"),
    EnvSetting(
        "OTEL_EXPORTER_OTLP_COMPRESSION", SettingKind.COMPRESSION, "none", "every export: gzip or none"
    ),
    EnvSetting("OTEL_SERVICE_NAME", SettingKind.TEXT, "rulvar", "the resource's service.name"),
    EnvSetting(
        "OTEL_RESOURCE_ATTRIBUTES", SettingKind.TEXT, None, "other resource attributes (read by the SDK)"
    ),
    EnvSetting("OTEL_BSP_MAX_QUEUE_SIZE", SettingKind.INTEGER, "8192", "spans waiting for export"),
    EnvSetting("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", SettingKind.INTEGER, "512", "spans per export request"),
    EnvSetting(
        "OTEL_SPAN_EVENT_COUNT_LIMIT",
        SettingKind.INTEGER,
        None,
        "span events kept per span (unset: no limit; the SDK's default 128 would cut long runs)",
    ),
    EnvSetting(
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        SettingKind.INTEGER,
        None,
        "characters kept of a span or span-event attribute value",
    ),
    EnvSetting(
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        SettingKind.INTEGER,
        "16384",
        "characters kept of any attribute value (and of a span name)",
    ),
)

_KNOWN: Final = frozenset(s.name for s in SETTINGS)


def _known(name: str) -> str:
    # A typo in a variable name here would silently read nothing: the table is the list.
    if name not in _KNOWN:
        raise KeyError(f"{name} is not in SETTINGS")
    return name


def env_value(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-blank value, as ``(name, value)``."""
    for name in names:
        value = environ.get(_known(name), "").strip()
        if value:
            return name, value
    return None


def read_int(environ: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    """The integer in ``name`` (``None`` when unset); :class:`ConfigError` below ``minimum``."""
    found = env_value(environ, name)
    if found is None:
        return None
    try:
        value = int(found[1])
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer (got {found[1]!r})") from exc
    if value < minimum:
        bound = "positive" if minimum == 1 else f"at least {minimum}"
        raise ConfigError(f"{name} must be {bound} (got {found[1]!r})")
    return value


def read_millis(environ: Mapping[str, str], *names: str) -> float | None:
    """The first set timeout of ``names`` in milliseconds (as the specification defines them), as seconds."""
    found = env_value(environ, *names)
    if found is None:
        return None
    name, raw = found
    try:
        millis = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number of milliseconds (got {raw!r})") from exc
    if not millis > 0 or millis == float("inf"):
        raise ConfigError(f"{name} must be a positive number of milliseconds (got {raw!r})")
    return millis / 1000.0


def read_compression(environ: Mapping[str, str], signal: Signal) -> Compression:
    """The signal's compression variable, else the shared one, else ``none``.

    The specification's values are ``gzip`` and ``none`` (any case); anything else is a
    :class:`ConfigError` naming the variable, rather than an export sent some other way.
    """
    found = env_value(environ, f"OTEL_EXPORTER_OTLP_{signal}_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
    if found is None:
        return "none"
    name, raw = found
    for compression in COMPRESSIONS:
        if raw.lower() == compression:
            return compression
    raise ConfigError(f"{name} must be one of {', '.join(COMPRESSIONS)} (got {raw[:40]!r})")


# What both transports can send: a gRPC metadata key (lowercase letters, digits, "-", "_", ".";
# also a valid HTTP field name) and a value of visible ASCII, spaces and tabs.
_HEADER_NAME: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
_HEADER_VALUE: Final = frozenset(chr(c) for c in range(0x20, 0x7F)) | {"\t"}


def check_header(name: str, value: str, origin: str = "header") -> str:
    """``name`` lowercased, or :class:`InvalidHeaderError` when either part cannot be sent.

    The message shows the name only up to its first refused character and never the value:
    ``--header "authorization: Bearer ..."`` has no ``=`` before its token.
    """
    lowered = name.strip().lower()
    for index, char in enumerate(lowered):
        if char not in _HEADER_NAME:
            shown = lowered[:index]
            raise InvalidHeaderError(
                f"{origin} name {shown!r} is followed by a character a header name cannot hold "
                f"(position {index + 1}; names are letters, digits, '-', '_' and '.'; the rest "
                "is not shown)",
                shown,
            )
    if not lowered:
        raise InvalidHeaderError(f"{origin} has an empty name", "")
    if lowered.endswith("-bin"):
        return lowered  # gRPC sends binary values base64-encoded
    if any(char not in _HEADER_VALUE for char in value):
        raise InvalidHeaderError(
            f"{origin} {lowered!r} has a value with a control or non-ASCII character (not shown)",
            lowered,
        )
    return lowered


def read_headers(environ: Mapping[str, str], signal: Signal) -> dict[str, str]:
    """Headers from the signal's variable, else the shared one; names lowercased and checked."""
    found = env_value(environ, f"OTEL_EXPORTER_OTLP_{signal}_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
    if found is None:
        return {}
    headers = parse_env_headers(found[1], liberal=True)
    return {check_header(k, v, f"a header in {found[0]}"): v for k, v in headers.items()}


def check_endpoint(url: str, origin: str) -> None:
    """:class:`ConfigError` unless ``url`` is an http(s) URL with a host and a valid port."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"{origin} must be an http:// or https:// URL with a host, e.g. http://localhost:4317 "
            f"(got {redact_url(url)!r})"
        )
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ConfigError(f"{origin} has an invalid port (got {redact_url(url)!r})") from exc


def resolve_protocol(
    explicit: str | None, endpoint: str, signal: Signal, environ: Mapping[str, str]
) -> Protocol:
    """The transport: ``explicit``, else the signal's variable, else the shared one, else by port.

    The specification's default is http/protobuf; port 4317 is gRPC's well-known port, so a bare
    collector address there means gRPC.
    """
    raw = explicit
    if raw is None:
        found = env_value(environ, f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        raw = found[1] if found is not None else None
    if raw is None:
        try:
            port = urlsplit(endpoint).port
        except ValueError:
            port = None
        return "grpc" if port == GRPC_DEFAULT_PORT else "http/protobuf"
    for protocol in PROTOCOLS:
        if raw == protocol:
            return protocol
    raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)} (got {raw!r})")


def resolve_endpoint(
    explicit: str | None, signal: Signal, environ: Mapping[str, str], *, origin: str = "endpoint"
) -> tuple[str, str, bool] | None:
    """``(url, where it came from, is a base URL)``, or ``None`` when nothing configures one.

    ``explicit`` wins, then ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` (used as given), then
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL). Metrics read only an explicit endpoint: the
    shared variable configures traces, and metrics are opt-in.
    """
    if explicit is not None and explicit.strip():
        url, where, base = explicit.strip(), origin, True
    elif signal == "TRACES" and (found := env_value(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        url, where, base = found[1], found[0], False
    elif signal == "TRACES" and (found := env_value(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")):
        url, where, base = found[1], found[0], True
    else:
        return None
    check_endpoint(url, where)
    return url, where, base


def with_signal_path(endpoint: str, path: str) -> str:
    """A base ``endpoint`` with a signal's ``path`` (``/v1/traces``) appended to its path: before
    its query and fragment, which stay as they are."""
    parts = urlsplit(endpoint)
    return parts._replace(path=parts.path.rstrip("/") + path).geturl()
