"""Follow a run on a Rulvar server over Server-Sent Events.

``GET /runs/:id/events`` streams one frame per event (``id: <seq>``, ``event: <type>``,
``data: <event JSON>``, a blank line) plus comment lines (``: ...``) the server uses for notes.
:func:`follow_server_run` returns a :class:`ServerRunHandle` (a :class:`RunHandle`) whose events
are every event of the run exactly once, in order, across any number of disconnects:

- after any disconnect or server close before the run's final ``run:end`` the client reconnects
  with ``Last-Event-ID: <last seq>`` and drops any event whose ``seq`` it already delivered
  (the delivered seqs are tracked as a set, so an event arriving out of order still exports).
  A connection that delivered a new event (or stayed open through a quiet spell) is followed by
  an immediate reconnect, so a backlog replayed in the server's bounded chunks is caught up at
  the network's pace; only connections that made no progress wait, with a growing backoff, and
  consecutive ones are bounded (a server that never answers, answers with nothing, or closes at
  once counts as one);
- a ``run:end`` with status ``suspended`` is not the end: the server keeps the connection open
  and sends the resumed segment on it (``until_suspended=True`` stops there instead);
- comment notes become typed :class:`SseNote` diagnostics: a replay-window gap, a slow-consumer
  close, a run that failed before settling, and "run is not live in this process" (which never
  carries events: the client stops and builds the run span from the facts ``GET /runs/:id``
  gives, see :func:`terminal_facts_events`); keep-alive comments are only counted;
- one SSE line or frame is bounded (:attr:`ReconnectPolicy.max_frame_bytes`);
- the outcome (``handle.result``) is the server's ``GET /runs/:id`` body once the stream ends,
  or the stream's last ``run:end`` when that request fails;
- an unknown run (404) raises :class:`~rulvar_otel.errors.RunNotFoundError`.

Every note's text is masked and terminal-sanitized before it is kept: a server is untrusted input.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import quote, urlsplit

import httpx
import orjson

from rulvar_otel.core.handle import EventLike, RunOutcome, outcome_from_run_end
from rulvar_otel.core.masking import SecretMasker, default_masker, redact_url, sanitize_terminal_text
from rulvar_otel.core.run_source import RecordedRun
from rulvar_otel.errors import ConfigError, RunNotFoundError, SourceError
from rulvar_otel.sources._http_reads import (
    ENCODINGS,
    STATUS_BODY_LIMIT,
    STATUS_TIME_S,
    decoded,
    error_detail,
    fetch_run_status,
    outcome_from_status,
)
from rulvar_otel.sources._seq_set import SeqSet
from rulvar_otel.sources._sse_lines import FrameDecoder, OversizeLineError
from rulvar_otel.sources._terminal_facts import terminal_facts_events, ulid_time
from rulvar_otel.sources.jsonl import check_envelope

__all__ = [
    "STATUS_BODY_LIMIT",
    "STATUS_TIME_S",
    "NoteKind",
    "ReconnectPolicy",
    "ServerRunHandle",
    "SseNote",
    "SseStats",
    "fetch_run_status",
    "follow_server_run",
    "outcome_from_status",
    "terminal_facts_events",
    "ulid_time",
]

NoteKind = Literal[
    "gap", "slow-consumer", "run-failed", "not-live", "bad-frame", "other-run", "oversize", "comment"
]

_NOTE_LIMIT: Final = 300  # characters kept of one note: a server cannot flood the diagnostics
_NOTE_SCAN: Final = 2 * _NOTE_LIMIT  # characters of a raw note masked before it is cut
_MAX_NOTES: Final = 1000
_GAP = re.compile(r"starts at seq (\d+)|(\d+) earlier events? (?:were|was) dropped")
# The Rulvar server's slow-consumer close ("pending frames reached maxPendingEventsPerClient
# (20); reconnect with Last-Event-ID to continue") and the older "slow consumer" wording.
_SLOW_CONSUMER = re.compile(r"maxpendingeventsperclient|pending frames reached|slow[ -]consumer")
_HEARTBEAT = re.compile(r"[\s.:]*(?:heartbeat|ping|keep-?alive|hb)?[\s\d:.tz+-]*")
# Server notes, classified by the first rule whose pattern their lowered text contains. The
# wording is the Rulvar server's: ": run is not live in this process", ": replay window starts at
# seq N; M earlier events were dropped ...", ": pending frames reached maxPendingEventsPerClient
# (20); reconnect with Last-Event-ID to continue" (older servers: "slow consumer") and ": run
# failed before settling: <message>". Anything else is a plain comment note.
_NOTE_RULES: Final[tuple[tuple[NoteKind, re.Pattern[str]], ...]] = (
    ("not-live", re.compile(r"not live in this process")),
    ("gap", re.compile(r"replay window|were dropped")),
    ("slow-consumer", _SLOW_CONSUMER),
    ("run-failed", re.compile(r"failed before")),
)


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
    """How hard the client tries. Every wait, every request and every frame is bounded."""

    max_attempts: int = 8  # consecutive connections that delivered no new event
    initial_backoff_s: float = 0.25
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    connect_timeout_s: float = 5.0
    # A server that accepts the connection but sends no response head within this time is a
    # failed attempt (it is not a quiet run: a quiet run's server has answered).
    response_timeout_s: float = 10.0
    # An open stream quiet this long is re-established (a suspension may last days; a dead
    # peer must not hang the client). A quiet reconnect counts as a failed attempt only when the
    # connection carried no byte at all after its head.
    read_timeout_s: float = 300.0
    # One SSE line or one frame's data beyond this is refused (the connection is dropped and the
    # attempt fails): an endless data line cannot grow memory.
    max_frame_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {self.max_attempts}")
        for name in (
            "initial_backoff_s",
            "max_backoff_s",
            "connect_timeout_s",
            "response_timeout_s",
            "read_timeout_s",
        ):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(f"{name} must be a non-negative number, got {value!r}")
        if self.multiplier < 1:
            raise ConfigError(f"multiplier must be at least 1, got {self.multiplier}")
        if self.max_frame_bytes < 1024:
            raise ConfigError(f"max_frame_bytes must be at least 1024, got {self.max_frame_bytes}")

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
    heartbeats: int = 0  # keep-alive comments (never notes)
    # Not live and nothing streamed: the run span was built from GET /runs/:id alone.
    terminal_facts_only: bool = False
    # The time that span carries and where it came from ("run id" or "status"), or None when no
    # fact dates the run (then no span is exported).
    terminal_facts_time_source: str | None = None
    notes: list[SseNote] = field(default_factory=list[SseNote])


def _base_url(server: str) -> str:
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        shown = redact_url(server)
        raise ConfigError(f"--server must be an http(s) URL such as http://127.0.0.1:8787, got {shown!r}")
    return server.rstrip("/")


class _DisconnectError(Exception):
    """One connection ended before the run did.

    ``progressed``: it delivered a new event; ``quiet``: it was open and alive (it carried bytes)
    but silent past the idle timeout. Either reconnects at once; anything else backs off.
    """

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
        self._delivered = SeqSet()
        self._outcome: RunOutcome | BaseException | None = None
        # Buffered, and the listeners' one failure policy: the recorded run does both.
        self._recorded = RecordedRun(self._follow(), None, run_id)

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
        # Cleaned on a bounded prefix (a note can be a megabyte long), then cut to the limit.
        text = self._masker.clean(raw.strip()[:_NOTE_SCAN])[:_NOTE_LIMIT]
        note = SseNote(kind, text, self.stats.last_seq, **extra)
        if len(self.stats.notes) < _MAX_NOTES:
            self.stats.notes.append(note)
        if self._on_note is not None:
            try:
                self._on_note(note)
            except Exception:  # noqa: BLE001 - a diagnostic sink never stops the follower
                pass
        return note

    def _comment(self, raw: str) -> NoteKind | None:
        """Classify one comment line (``raw`` without its colon); ``None`` for a keep-alive."""
        lowered = raw[:_NOTE_SCAN].lower()
        if _HEARTBEAT.fullmatch(lowered):
            self.stats.heartbeats += 1
            return None
        kind: NoteKind = next((k for k, pattern in _NOTE_RULES if pattern.search(lowered)), "comment")
        if kind == "gap":
            first: int | None = None
            dropped: int | None = None
            for match in _GAP.finditer(raw[:_NOTE_SCAN]):
                if match.group(1) is not None:
                    first = int(match.group(1))
                elif match.group(2) is not None:
                    dropped = int(match.group(2))
            self._note(kind, raw, first_retained_seq=first, dropped=dropped)
            return kind
        if kind == "not-live":
            self.stats.not_live = True
        elif kind == "run-failed":
            self.stats.run_failed = True
        self._note(kind, raw)
        return kind

    async def _follow(self) -> AsyncIterator[dict[str, Any]]:
        policy = self._policy
        failures = 0  # consecutive attempts without a new event: bounded by max_attempts
        async with self._client() as client:
            try:
                while True:
                    try:
                        async for event in self._connection(client):
                            yield event
                        break  # the run ended (or stopped at a suspension, or is not live)
                    except _DisconnectError as retry:
                        # Progress reconnects at once (a replay comes in the server's bounded
                        # chunks, and waiting between them is what falls behind a busy run);
                        # only attempts that delivered nothing back off.
                        failures = 0 if retry.progressed or retry.quiet else failures + 1
                        if failures >= policy.max_attempts:
                            raise SourceError(
                                f"gave up on run {self._run_id!r} at {self._shown} after {failures} "
                                f"attempts without progress (last: {retry.reason}); "
                                f"last seq delivered: {self.stats.last_seq}"
                            ) from None
                        self.stats.reconnects += 1
                        if failures:
                            await self._sleep(policy.backoff(failures))
                self._outcome, status = await self._terminal_outcome(client)
                if (
                    self.stats.not_live
                    and self.stats.delivered == 0
                    and isinstance(self._outcome, RunOutcome)
                ):
                    self.stats.terminal_facts_only = True
                    facts, source = terminal_facts_events(self._run_id, self._outcome, status)
                    self.stats.terminal_facts_time_source = source
                    for event in facts:
                        yield event
            except BaseException as exc:
                if self._outcome is None:
                    self._outcome = (
                        exc if isinstance(exc, Exception) else SourceError("the follower was stopped")
                    )
                raise

    async def _terminal_outcome(
        self, client: httpx.AsyncClient
    ) -> tuple[RunOutcome | BaseException, dict[str, Any] | None]:
        try:
            body = await fetch_run_status(client, self._run_id, server=self._shown)
            outcome = outcome_from_status(body)
            if outcome.status != "running":
                return outcome, body
            if self.stats.not_live or body.get("live") is False:
                return self._unsettled_error(body), body
        except RunNotFoundError:
            raise
        except SourceError:
            pass
        return self._stream_outcome(), None

    def _unsettled_error(self, body: Mapping[str, Any]) -> SourceError:
        """What the server said of a run still ``running`` that no process there holds live."""
        said = f"{self._shown} answers status 'running', live: false (no process there holds it)"
        unavailable = body.get("terminalUnavailable")
        if isinstance(unavailable, Mapping) and isinstance(reason := unavailable.get("reason"), str):
            said += f", terminalUnavailable: {self._masker.clean(reason)[:80]}"
        if self.stats.delivered:
            return SourceError(
                f"run {self._run_id!r} is unsettled: {said}; the trace ends with the "
                f"{self.stats.delivered} streamed events"
            )
        return SourceError(
            f"run {self._run_id!r} is unsettled: {said}; nothing settled to export until a process "
            "holds it again (tail the server that runs it)"
        )

    def _stream_outcome(self) -> RunOutcome | BaseException:
        return outcome_from_run_end(self._last_run_end)

    async def _open_events(
        self, stack: contextlib.AsyncExitStack, client: httpx.AsyncClient
    ) -> httpx.Response:
        """``GET /runs/:id/events`` answered with an event stream, or the typed reason it was not."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache", **ENCODINGS}
        if self.stats.last_seq is not None:
            headers["Last-Event-ID"] = str(self.stats.last_seq)
        path = f"/runs/{quote(self._run_id, safe='')}/events"
        timeout = self._policy.response_timeout_s
        try:
            async with asyncio.timeout(timeout):
                response = await stack.enter_async_context(client.stream("GET", path, headers=headers))
        except TimeoutError:
            raise _DisconnectError(f"no response within {timeout:g} s", progressed=False) from None
        status = response.status_code
        if status == 404:
            raise RunNotFoundError(
                f"run {self._run_id!r} not found on {self._shown}{await error_detail(response)}"
            )
        if status in (408, 429) or status >= 500:
            raise _DisconnectError(f"HTTP {status}", progressed=False)
        if status != 200:
            detail = await error_detail(response)
            raise SourceError(f"GET {path} on {self._shown} answered HTTP {status}{detail}")
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" not in content_type:
            raise SourceError(
                f"GET {path} on {self._shown} did not answer an event stream "
                f"(content-type {sanitize_terminal_text(content_type)[:80]!r})"
            )
        return response

    def _stops_after(self, event: Mapping[str, Any]) -> bool:
        """The stream's end: a final ``run:end``, or a suspension under ``until_suspended``."""
        if event.get("type") != "run:end":
            return False
        if event.get("status") != "suspended":
            return True
        if self._until_suspended:
            self.stats.suspended_stops += 1
            return True
        return False  # a suspension is not the end: the resumed segment follows on this stream

    async def _connection(self, client: httpx.AsyncClient) -> AsyncIterator[dict[str, Any]]:
        """One connection's new events; a :class:`_DisconnectError` when it ends before the run."""
        limit = self._policy.max_frame_bytes
        progressed = False
        slow = False
        body_bytes = 0
        self.stats.connections += 1
        try:
            async with contextlib.AsyncExitStack() as stack:
                response = await self._open_events(stack, client)
                decoder = FrameDecoder(limit)
                try:
                    async for chunk in decoded(response):
                        body_bytes += len(chunk)
                        for item in decoder.feed(chunk):
                            if item.comment:
                                slow = self._comment(item.text) == "slow-consumer" or slow
                                continue
                            event = self._event_of(item.text)
                            if event is None:
                                continue
                            progressed = True
                            yield event
                            if self._stops_after(event):
                                return
                except OversizeLineError:
                    self._note("oversize", f"a frame passed {limit} bytes; dropped the connection")
                    # The same frame comes back on reconnect: no progress.
                    raise _DisconnectError(f"a frame passed {limit} bytes", progressed=False) from None
        except httpx.TimeoutException as exc:
            # Silence on a stream that carried bytes is a quiet run; a stream that never carried
            # one (or never answered) is a failed attempt.
            quiet = isinstance(exc, httpx.ReadTimeout) and body_bytes > 0
            raise _DisconnectError(type(exc).__name__, progressed=progressed, quiet=quiet) from None
        except httpx.TransportError as exc:
            raise _DisconnectError(type(exc).__name__, progressed=progressed) from None
        if self.stats.not_live or self.stats.run_failed:
            return  # nothing will ever arrive: take the terminal facts GET /runs/:id gives
        reason = "slow consumer" if slow else "the server closed the stream before the run ended"
        raise _DisconnectError(reason, progressed=progressed)

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
            self._note("other-run", "a frame names another run; skipped")
            return None
        seq: int = event["seq"]
        if not self._delivered.add(seq):
            self.stats.duplicates_dropped += 1
            return None
        # The cursor is the last new seq in stream order: the server replays after it.
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
