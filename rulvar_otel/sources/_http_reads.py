"""Bounded plain reads from a Rulvar server: ``GET /runs/:id`` and error bodies.

Every body is read raw and inflated here in bounded pieces (a gzip bomb costs no more than its
pieces), bounded in size after inflation and in time for the whole response; past a bound the
read stops with :class:`~rulvar_otel.errors.ResponseLimitError`. :mod:`rulvar_otel.sources.sse`
uses :func:`decoded` for its event stream too.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final
from urllib.parse import quote

import httpx
import orjson

from rulvar_otel.core.handle import RunOutcome
from rulvar_otel.core.masking import default_masker, sanitize_terminal_text
from rulvar_otel.errors import ResponseLimitError, RunNotFoundError, SourceError

__all__ = [
    "ENCODINGS",
    "STATUS_BODY_LIMIT",
    "STATUS_TIME_S",
    "decoded",
    "error_detail",
    "fetch_run_status",
    "outcome_from_status",
]

# Bounds on the plain (non-stream) reads: the status body and an error body, decompressed.
STATUS_BODY_LIMIT: Final = 8 * 1024 * 1024
STATUS_TIME_S: Final = 30.0
_ERROR_BODY_LIMIT: Final = 64 * 1024
ENCODINGS: Final = {"Accept-Encoding": "gzip, deflate"}  # inflated here, bounded (see decoded)
_BODY_TIME_S: Final = 10.0
_PIECE: Final = 64 * 1024  # the most one decoded piece of a response body may be


async def decoded(response: httpx.Response) -> AsyncIterator[bytes]:
    """A response body decoded as it arrives, an inflated piece at most 64 KiB, whatever the ratio.

    Read raw and inflated here with a bounded output size, so a small gzip body that inflates a
    thousandfold costs no more memory than its pieces: httpx's own decoders inflate a network
    chunk whole. Raw chunks are the transport's reads (httpcore reads at most 64 KiB).
    Encodings other than gzip and deflate were not asked for, and are refused.
    """
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        async for chunk in response.aiter_raw():
            yield chunk
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise SourceError(
            f"the server answered an encoding not asked for ({sanitize_terminal_text(encoding)[:40]!r})"
        )
    inflater = zlib.decompressobj(wbits=47 if encoding != "deflate" else 15)
    try:
        async for chunk in response.aiter_raw():
            data = chunk
            while data:
                piece = inflater.decompress(data, _PIECE)
                if piece:
                    yield piece
                data = inflater.unconsumed_tail
    except zlib.error as exc:
        raise SourceError(f"the server's {encoding} body is corrupt") from exc


async def _bounded_body(response: httpx.Response, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of a response body (decompressed), else :class:`ResponseLimitError`."""
    body = bytearray()
    async for piece in decoded(response):
        body += piece
        if len(body) > limit:
            raise ResponseLimitError(f"{what} passed {limit} bytes; the rest was not read")
    return bytes(body)


async def error_detail(response: httpx.Response) -> str:
    """The server's typed error code (never its free-text message: it may echo input)."""
    try:
        async with asyncio.timeout(_BODY_TIME_S):
            content = await _bounded_body(response, _ERROR_BODY_LIMIT, "an error body")
        body = orjson.loads(content)
    except (orjson.JSONDecodeError, ResponseLimitError, TimeoutError, httpx.HTTPError):
        return ""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        if isinstance(code, str):
            return f" (code {default_masker().clean(code)[:80]})"
    return ""


def outcome_from_status(body: Mapping[str, Any]) -> RunOutcome:
    """A :class:`RunOutcome` from a ``GET /runs/:id`` body (unknown fields kept)."""
    status = body.get("status")
    if not isinstance(status, str):
        raise SourceError("the server's run status has no 'status' string")
    return RunOutcome.model_validate(dict(body))


async def fetch_run_status(
    client: httpx.AsyncClient, run_id: str, *, server: str = "the server"
) -> dict[str, Any]:
    """``GET /runs/:id``: the run's status body. 404 raises :class:`RunNotFoundError`.

    The body is bounded in size (:data:`STATUS_BODY_LIMIT`, decompressed) and in time
    (:data:`STATUS_TIME_S` for the whole response): past either, :class:`ResponseLimitError`.
    """
    path = f"/runs/{quote(run_id, safe='')}"
    try:
        async with (
            asyncio.timeout(STATUS_TIME_S),
            client.stream("GET", path, headers={"Accept": "application/json", **ENCODINGS}) as response,
        ):
            if response.status_code == 404:
                raise RunNotFoundError(f"run {run_id!r} not found on {server}{await error_detail(response)}")
            if response.status_code != 200:
                raise SourceError(f"GET {path} on {server} answered HTTP {response.status_code}")
            content = await _bounded_body(response, STATUS_BODY_LIMIT, f"GET {path} on {server}")
    except TimeoutError:
        raise ResponseLimitError(f"GET {path} on {server} took over {STATUS_TIME_S:g} s") from None
    except httpx.HTTPError as exc:
        raise SourceError(f"GET {path} on {server} failed: {type(exc).__name__}") from exc
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise SourceError(f"GET {path} on {server} did not answer JSON") from exc
    if not isinstance(body, dict):
        raise SourceError(f"GET {path} on {server} did not answer a JSON object")
    return body
