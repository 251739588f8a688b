"""The terminal envelope and its runtime gate.

:class:`TerminalEnvelope` is the one shape every terminal fact travels in. Envelopes read from
outside the process (a journal, a server response, a queue message) are external bytes:
:func:`parse_terminal_envelope` validates them and refuses with a :class:`ConfigError` naming the
field and the defect. Unknown top-level fields pass through, so an additive release is never a
wire break.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, JsonValue

from rulvar_otel.core.events import Usage, WireError
from rulvar_otel.errors import ConfigError

__all__ = ["TerminalEnvelope", "parse_terminal_envelope"]

_STATUSES: Final = ("ok", "error", "cancelled", "exhausted", "suspended")
_COMPLETIONS: Final = ("complete", "partial", "rejected")
_USAGE_COUNTERS: Final = (
    ("inputTokens", True),
    ("outputTokens", True),
    ("cacheReadTokens", True),
    ("cacheWriteTokens", True),
    ("reasoningTokens", False),
    ("cacheWrite5mTokens", False),
    ("cacheWrite1hTokens", False),
)


class TerminalEnvelope(BaseModel):
    """Every terminal fact of a run, in one shape (wire names kept: it is read back verbatim)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    runId: str  # noqa: N815 - wire name
    workflow: str
    status: Literal["ok", "error", "cancelled", "exhausted", "suspended"]
    error: WireError | None = None
    completion: Literal["complete", "partial", "rejected"] | None = None
    settled: bool
    settledReason: Literal["superseded"] | None = None  # noqa: N815
    totalUsd: float  # noqa: N815
    grossUsd: float  # noqa: N815
    costBasis: Literal["locally-estimated"]  # noqa: N815
    costByModel: dict[str, float]  # noqa: N815
    wireRequests: int | None = None  # noqa: N815
    usage: Usage
    usageApprox: bool  # noqa: N815
    agentsSpawned: int  # noqa: N815
    deliverableAccepted: bool | None = None  # noqa: N815
    resultAvailable: bool | None = None  # noqa: N815
    acceptedArtifactRef: int | None = None  # noqa: N815
    claimConsistencyMeta: JsonValue = None  # noqa: N815
    semanticTerminalVerdict: JsonValue = None  # noqa: N815
    configFingerprint: str | None = None  # noqa: N815
    provenance: Literal["journal"] | None = None


def _fail(field: str, defect: str) -> ConfigError:
    return ConfigError(f"terminal envelope field {field!r} {defect}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _money(obj: Mapping[str, Any], field: str, *, required: bool = True) -> None:
    if field not in obj:
        if required:
            raise _fail(field, "is missing")
        return
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(field, f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise _fail(field, f"must be finite, got {value!r}")
    if value < 0:
        raise _fail(field, f"must be nonnegative, got {value!r}")


def _counter(obj: Mapping[str, Any], field: str, *, required: bool, prefix: str = "") -> None:
    name = prefix + field
    if field not in obj:
        if required:
            raise _fail(name, "is missing")
        return
    value = obj[field]
    if not _is_int(value):
        raise _fail(name, f"must be an integer, got {value!r}")
    if value < 0:
        raise _fail(name, f"must be nonnegative, got {value!r}")


def _literal(obj: Mapping[str, Any], field: str, allowed: tuple[object, ...], *, required: bool) -> None:
    if field not in obj:
        if required:
            raise _fail(field, "is missing")
        return
    if obj[field] not in allowed or isinstance(obj[field], bool) != isinstance(allowed[0], bool):
        raise _fail(field, f"must be one of {list(allowed)}, got {obj[field]!r}")


def _string(obj: Mapping[str, Any], field: str, *, required: bool) -> None:
    if field not in obj:
        if required:
            raise _fail(field, "is missing")
        return
    if not isinstance(obj[field], str):
        raise _fail(field, f"must be a string, got {type(obj[field]).__name__}")


def _boolean(obj: Mapping[str, Any], field: str, *, required: bool) -> None:
    if field not in obj:
        if required:
            raise _fail(field, "is missing")
        return
    if not isinstance(obj[field], bool):
        raise _fail(field, f"must be a boolean, got {obj[field]!r}")


def parse_terminal_envelope(value: Mapping[str, Any] | TerminalEnvelope) -> TerminalEnvelope:
    """Validate an envelope from outside the process; raise :class:`ConfigError` on any defect.

    Checks the status and completion literals, finite nonnegative money with
    ``totalUsd <= grossUsd``, the usage subtree and the integer counters, ``settledReason`` only
    beside ``settled: false``, the ``costBasis`` and ``provenance`` literals, and the typed error
    shape. Unknown top-level fields pass through untouched.
    """
    if isinstance(value, TerminalEnvelope):
        value = value.model_dump(exclude_unset=True)
    if not isinstance(value, Mapping):
        raise ConfigError(f"a terminal envelope must be an object, got {type(value).__name__}")
    env: Mapping[str, Any] = value
    _string(env, "runId", required=True)
    _string(env, "workflow", required=True)
    _literal(env, "status", _STATUSES, required=True)
    _literal(env, "completion", _COMPLETIONS, required=False)
    _boolean(env, "settled", required=True)
    if "settledReason" in env:
        _literal(env, "settledReason", ("superseded",), required=False)
        if env["settled"] is not False:
            raise _fail("settledReason", "is only allowed beside settled: false")
    _money(env, "totalUsd")
    _money(env, "grossUsd")
    if env["totalUsd"] > env["grossUsd"]:
        raise _fail("totalUsd", f"must not exceed grossUsd ({env['totalUsd']!r} > {env['grossUsd']!r})")
    _literal(env, "costBasis", ("locally-estimated",), required=True)
    by_model = env.get("costByModel")
    if not isinstance(by_model, Mapping):
        raise _fail("costByModel", "must be an object of model ref to USD")
    for ref in by_model:  # pyright: ignore[reportUnknownVariableType]
        _money(by_model, ref)  # pyright: ignore[reportUnknownArgumentType]
    _counter(env, "wireRequests", required=False)
    usage = env.get("usage")
    if not isinstance(usage, Mapping):
        raise _fail("usage", "must be an object")
    for field, required in _USAGE_COUNTERS:
        _counter(usage, field, required=required, prefix="usage.")  # pyright: ignore[reportUnknownArgumentType]
    _boolean(env, "usageApprox", required=True)
    _counter(env, "agentsSpawned", required=True)
    _counter(env, "acceptedArtifactRef", required=False)
    _boolean(env, "deliverableAccepted", required=False)
    _boolean(env, "resultAvailable", required=False)
    _string(env, "configFingerprint", required=False)
    _literal(env, "provenance", ("journal",), required=False)
    if "error" in env:
        error = env["error"]
        if not isinstance(error, Mapping):
            raise _fail("error", "must be a typed wire error object {code, message, retryable}")
        for field, kind in (("code", str), ("message", str), ("retryable", bool)):
            if not isinstance(error.get(field), kind):  # pyright: ignore[reportUnknownMemberType]
                raise _fail(f"error.{field}", f"must be a {kind.__name__}")
    return TerminalEnvelope.model_validate(dict(env))
