"""Follow a run on a Rulvar server over Server-Sent Events.

``GET /runs/:id/events`` streams one frame per event (``id: <seq>``, ``event: <type>``,
``data: <event JSON>``, a blank line) plus comment lines (``: ...``) the server uses for notes.
:func:`follow_server_run` returns a :class:`ServerRunHandle` (a :class:`RunHandle`) whose events
are every event of the run exactly once, in order, across any number of disconnects:

- after any disconnect or server close before the run's final ``run:end`` the client reconnects
  with ``Last-Event-ID: <last seq>`` (bounded exponential backoff, a limit on consecutive
  attempts that delivered nothing), and drops any event whose ``seq`` it already delivered;
- a ``run:end`` with status ``suspended`` is not the end: the server keeps the connection open
  and sends the resumed segment on it (``until_suspended=True`` stops there instead);
- comment notes become typed :class:`SseNote` diagnostics: a replay-window gap, a slow-consumer
  close, a run that failed before settling, and "run is not live in this process" (which never
  carries events: the client stops and takes the terminal facts ``GET /runs/:id`` gives);
- the outcome (``handle.result``) is the server's ``GET /runs/:id`` body once the stream ends,
  or the stream's last ``run:end`` when that request fails;
- an unknown run (404) raises :class:`~rulvar_otel.errors.RunNotFoundError`.

Every note's text is masked and terminal-sanitized before it is kept: a server is untrusted input.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal
from urllib.parse import quote, urlsplit

import httpx
import orjson

# httpx-sse's incremental decoders; its public EventSource drops comment lines, and the notes
# this protocol sends ride exactly those, so the lines are split here and comments intercepted.
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from rulvar_otel.core.handle import EventLike, RecordedRunHandle, RunOutcome, outcome_from_run_end
from rulvar_otel.core.masking import SecretMasker, default_masker, redact_url, sanitize_terminal_text
from rulvar_otel.errors import ConfigError, RunNotFoundError, SourceError
from rulvar_otel.sources.jsonl import check_envelope

__all__ = [
    "NoteKind",
    "ReconnectPolicy",
    "ServerRunHandle",
    "SseNote",
    "SseStats",
    "fetch_run_status",
    "follow_server_run",
    "outcome_from_status",
]

NoteKind = Literal["gap", "slow-consumer", "run-failed", "not-live", "bad-frame", "comment"]

_NOTE_LIMIT: Final = 300  # characters kept of one note: a server cannot flood the diagnostics
_MAX_NOTES: Final = 1000
_GAP = re.compile(r"starts at seq (\d+)|(\d+) earlier events? (?:were|was) dropped")


@dataclass(frozen=True)
class SseNote:
    """A diagnostic the server sent as an SSE comment (or a frame the client had to skip)."""

    kind: NoteKind
    text: str  # masked and sanitized
    after_seq: int | None  # the last seq delivered when the note arrived
    first_retained_seq: int | None = None  # gap notes: where the server's replay window starts
    dropped: int | None = None  # gap notes: how many earlier events the server no longer holds


@dataclass(frozen=True)
class ReconnectPolicy:
    """How hard the client tries. Every wait and every request is bounded."""

    max_attempts: int = 8  # consecutive connections that delivered no new event
    initial_backoff_s: float = 0.25
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    connect_timeout_s: float = 5.0
    # An open stream quiet this long is re-established (a suspension may last days; a dead
    # peer must not hang the client). Quiet reconnects do not count as failed attempts.
    read_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {self.max_attempts}")
        for name in ("initial_backoff_s", "max_backoff_s", "connect_timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(f"{name} must be a non-negative number, got {value!r}")
        if self.multiplier < 1:
            raise ConfigError(f"multiplier must be at least 1, got {self.multiplier}")

    def backoff(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return float(min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (failures - 1)))


@dataclass
class SseStats:
    connections: int = 0
    reconnects: int = 0
    delivered: int = 0
    duplicates_dropped: int = 0
    last_seq: int | None = None
    not_live: bool = False
    run_failed: bool = False
    suspended_stops: int = 0
    notes: list[SseNote] = field(default_factory=list[SseNote])


def _base_url(server: str) -> str:
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        shown = redact_url(server)
        raise ConfigError(f"--server must be an http(s) URL such as http://127.0.0.1:8787, got {shown!r}")
    return server.rstrip("/")


def _error_detail(response: httpx.Response) -> str:
    """The server's typed error code (never its free-text message: it may echo input)."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
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
    """``GET /runs/:id``: the run's status body. 404 raises :class:`RunNotFoundError`."""
    try:
        response = await client.get(f"/runs/{quote(run_id, safe='')}", headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise SourceError(f"GET /runs/{run_id} on {server} failed: {type(exc).__name__}") from exc
    if response.status_code == 404:
        raise RunNotFoundError(f"run {run_id!r} not found on {server}{_error_detail(response)}")
    if response.status_code != 200:
        raise SourceError(f"GET /runs/{run_id} on {server} answered HTTP {response.status_code}")
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise SourceError(f"GET /runs/{run_id} on {server} did not answer JSON") from exc
    if not isinstance(body, dict):
        raise SourceError(f"GET /runs/{run_id} on {server} did not answer a JSON object")
    return body


def terminal_facts_events(
    run_id: str, outcome: RunOutcome, now: datetime | None = None
) -> list[dict[str, Any]]:
    """A run span's worth of events built from ``GET /runs/:id`` alone.

    A run that is not live in the server's process never streams an event, but its terminal facts
    (status, envelope, completion) are still worth a span. They carry no time of their own, so the
    pair is stamped with the time they were read.
    """
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    extra = outcome.model_extra or {}
    workflow = extra.get("workflow")
    base = {"runId": run_id, "ts": stamp, "spanId": "run-status"}
    end: dict[str, Any] = {**base, "seq": 1, "type": "run:end", "status": outcome.status}
    envelope = outcome.envelope
    if isinstance(envelope, Mapping):
        end["envelope"] = dict(envelope)
        if isinstance(total := envelope.get("totalUsd"), int | float):
            end["totalUsd"] = total
        if isinstance(workflow, str) is False and isinstance(envelope.get("workflow"), str):
            workflow = envelope["workflow"]
    if outcome.completion is not None:
        end["completion"] = outcome.completion
    start = {**base, "seq": 0, "type": "run:start", "workflow": workflow, "resumed": False}
    return [start, end]


class _DisconnectError(Exception):
    """One connection ended before the run did; ``progressed`` says whether it delivered."""

    def __init__(self, reason: str, *, progressed: bool, quiet: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.progressed = progressed
        self.quiet = quiet


class ServerRunHandle:
    """A :class:`RunHandle` over a run a Rulvar server holds.

    ``events`` is buffered (several consumers may iterate it); ``result`` drains the stream,
    then settles with the server's terminal facts. ``stats`` and ``notes`` report what the
    connection went through.
    """

    def __init__(
        self,
        server: str,
        run_id: str,
        *,
        until_suspended: bool = False,
        policy: ReconnectPolicy | None = None,
        masker: SecretMasker | None = None,
        on_note: Callable[[SseNote], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not run_id:
            raise ConfigError("--run must name a run id")
        self._server = _base_url(server)
        self._shown = redact_url(self._server)  # for messages: no userinfo
        self._run_id = run_id
        self._until_suspended = until_suspended
        self._policy = policy or ReconnectPolicy()
        self._masker = masker or default_masker()
        self._on_note = on_note
        self._transport = transport
        self._sleep = sleep
        self.stats = SseStats()
        self._last_run_end: dict[str, Any] | None = None
        self._outcome: RunOutcome | BaseException | None = None
        self._recorded = RecordedRunHandle(self._follow(), None, run_id)

    # -- RunHandle -----------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def events(self) -> AsyncIterator[EventLike]:
        return self._recorded.events

    @property
    def result(self) -> Awaitable[RunOutcome]:
        return self._result()

    def on(self, type: str, callback: Callable[[EventLike], object]) -> Callable[[], None]:  # noqa: A002
        return self._recorded.on(type, callback)

    @property
    def notes(self) -> list[SseNote]:
        return self.stats.notes

    async def _result(self) -> RunOutcome:
        async for _ in self._recorded.events:
            pass
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        if self._outcome is None:  # pragma: no cover - _follow always settles it
            raise SourceError("the event stream ended without an outcome")
        return self._outcome

    def settle_now(self) -> RunOutcome | BaseException | None:
        """The outcome once the stream has ended (None before)."""
        return self._outcome

    # -- the follower --------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        p = self._policy
        timeout = httpx.Timeout(
            connect=p.connect_timeout_s,
            read=p.read_timeout_s,
            write=p.connect_timeout_s,
            pool=p.connect_timeout_s,
        )
        return httpx.AsyncClient(base_url=self._server, timeout=timeout, transport=self._transport)

    def _note(self, kind: NoteKind, raw: str, **extra: int | None) -> SseNote:
        text = self._masker.clean(raw.strip())[:_NOTE_LIMIT]
        note = SseNote(kind, text, self.stats.last_seq, **extra)
        if len(self.stats.notes) < _MAX_NOTES:
            self.stats.notes.append(note)
        if self._on_note is not None:
            try:
                self._on_note(note)
            except Exception:  # noqa: BLE001 - a diagnostic sink never stops the follower
                pass
        return note

    def _comment(self, raw: str) -> NoteKind:
        lowered = raw.lower()
        if "not live in this process" in lowered:
            self.stats.not_live = True
            self._note("not-live", raw)
            return "not-live"
        if "replay window" in lowered or "were dropped" in lowered:
            first: int | None = None
            dropped: int | None = None
            for match in _GAP.finditer(raw):
                if match.group(1) is not None:
                    first = int(match.group(1))
                elif match.group(2) is not None:
                    dropped = int(match.group(2))
            self._note("gap", raw, first_retained_seq=first, dropped=dropped)
            return "gap"
        if "slow consumer" in lowered or "slow-consumer" in lowered:
            self._note("slow-consumer", raw)
            return "slow-consumer"
        if "failed before" in lowered:
            self.stats.run_failed = True
            self._note("run-failed", raw)
            return "run-failed"
        if raw.strip():
            self._note("comment", raw)
        return "comment"  # a bare ':' is a keep-alive

    async def _follow(self) -> AsyncIterator[dict[str, Any]]:
        policy = self._policy
        failures = 0
        async with self._client() as client:
            try:
                while True:
                    try:
                        async for event in self._connection(client):
                            yield event
                        break  # the run ended (or stopped at a suspension, or is not live)
                    except _DisconnectError as retry:
                        if retry.progressed or retry.quiet:
                            failures = 0
                        else:
                            failures += 1
                        if failures >= policy.max_attempts:
                            raise SourceError(
                                f"gave up on run {self._run_id!r} at {self._shown} after {failures} "
                                f"attempts without progress (last: {retry.reason}); "
                                f"last seq delivered: {self.stats.last_seq}"
                            ) from None
                        self.stats.reconnects += 1
                        await self._sleep(policy.backoff(failures))
                self._outcome = await self._terminal_outcome(client)
                if (
                    self.stats.not_live
                    and self.stats.delivered == 0
                    and isinstance(self._outcome, RunOutcome)
                ):
                    for event in terminal_facts_events(self._run_id, self._outcome):
                        yield event
            except BaseException as exc:
                if self._outcome is None:
                    self._outcome = (
                        exc if isinstance(exc, Exception) else SourceError("the follower was stopped")
                    )
                raise

    async def _terminal_outcome(self, client: httpx.AsyncClient) -> RunOutcome | BaseException:
        try:
            body = await fetch_run_status(client, self._run_id, server=self._shown)
            outcome = outcome_from_status(body)
            if outcome.status != "running":
                return outcome
        except RunNotFoundError:
            raise
        except SourceError:
            pass
        return self._stream_outcome()

    def _stream_outcome(self) -> RunOutcome | BaseException:
        return outcome_from_run_end(self._last_run_end)

    async def _connection(self, client: httpx.AsyncClient) -> AsyncIterator[dict[str, Any]]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.stats.last_seq is not None:
            headers["Last-Event-ID"] = str(self.stats.last_seq)
        path = f"/runs/{quote(self._run_id, safe='')}/events"
        progressed = False
        self.stats.connections += 1
        try:
            async with client.stream("GET", path, headers=headers) as response:
                if response.status_code == 404:
                    await response.aread()
                    raise RunNotFoundError(
                        f"run {self._run_id!r} not found on {self._shown}{_error_detail(response)}"
                    )
                if response.status_code in (408, 429) or response.status_code >= 500:
                    raise _DisconnectError(f"HTTP {response.status_code}", progressed=False)
                if response.status_code != 200:
                    await response.aread()
                    raise SourceError(
                        f"GET {path} on {self._shown} answered HTTP {response.status_code}"
                        f"{_error_detail(response)}"
                    )
                content_type = response.headers.get("content-type", "")
                if "text/event-stream" not in content_type:
                    raise SourceError(
                        f"GET {path} on {self._shown} did not answer an event stream "
                        f"(content-type {sanitize_terminal_text(content_type)[:80]!r})"
                    )
                lines = SSELineDecoder()
                frames = SSEDecoder()
                async for chunk in response.aiter_text():
                    for line in lines.decode(chunk):
                        if line.startswith(":"):
                            self._comment(line[1:])
                            continue
                        sse = frames.decode(line)
                        # Per the SSE spec a frame with no data dispatches nothing (the decoder
                        # still reports one after a comment's blank line, carrying the old id).
                        if sse is None or not sse.data:
                            continue
                        event = self._event_of(sse.data)
                        if event is None:
                            continue
                        progressed = True
                        yield event
                        if event.get("type") == "run:end":
                            if event.get("status") != "suspended":
                                return
                            if self._until_suspended:
                                self.stats.suspended_stops += 1
                                return
                # A partial trailing frame (the server dropped mid-frame) is discarded unread.
        except httpx.TimeoutException as exc:
            quiet = isinstance(exc, httpx.ReadTimeout)
            raise _DisconnectError(type(exc).__name__, progressed=progressed, quiet=quiet) from None
        except httpx.TransportError as exc:
            raise _DisconnectError(type(exc).__name__, progressed=progressed) from None
        if self.stats.not_live:
            return  # nothing will ever arrive: take the terminal facts GET /runs/:id gives
        if self.stats.run_failed:
            return
        raise _DisconnectError("the server closed the stream before the run ended", progressed=progressed)

    def _event_of(self, data: str) -> dict[str, Any] | None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            self._note("bad-frame", f"a frame's data is not JSON ({exc.msg})")
            return None
        if not isinstance(event, dict):
            self._note("bad-frame", "a frame's data is not a JSON object")
            return None
        defect = check_envelope(event)
        if defect is not None:
            self._note("bad-frame", f"a frame is not an event: {defect}")
            return None
        if event["runId"] != self._run_id:
            self._note("bad-frame", "a frame names another run; skipped")
            return None
        seq: int = event["seq"]
        last = self.stats.last_seq
        if last is not None and seq <= last:
            self.stats.duplicates_dropped += 1
            return None
        self.stats.last_seq = seq
        self.stats.delivered += 1
        if event.get("type") == "run:end":
            self._last_run_end = event
        return event


def follow_server_run(
    server: str,
    run_id: str,
    *,
    until_suspended: bool = False,
    policy: ReconnectPolicy | None = None,
    masker: SecretMasker | None = None,
    on_note: Callable[[SseNote], None] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ServerRunHandle:
    """A :class:`ServerRunHandle` following ``run_id`` on ``server`` (nothing connects until
    its events or result are read)."""
    return ServerRunHandle(
        server,
        run_id,
        until_suspended=until_suspended,
        policy=policy,
        masker=masker,
        on_note=on_note,
        transport=transport,
    )
