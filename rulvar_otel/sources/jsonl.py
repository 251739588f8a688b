"""Recorded event streams in JSON lines: one ``WorkflowEvent`` per line, from a file or stdin.

Lines come back as wire-form dicts (no pydantic model per line: parsing would dominate an
export's cost). A line that cannot be an event (bad JSON, not an object, a missing or mistyped
envelope field) is reported as a :class:`~rulvar_otel.errors.StreamLineError` naming its line
number and skipped, so the rest of the stream still exports; ``strict=True`` raises the first one
instead, and :meth:`JsonlEventSource.checked` checks a whole stream before the first event is
handed out (without holding the events). Blank lines are ignored, and a UTF-8 byte-order mark
opening line 1 is stripped. A text stream behaves like a path: a line with bytes that are not
UTF-8 is one line's diagnostic.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, cast

import orjson
from mypy_extensions import mypyc_attr

from rulvar_otel.core.handle import RecordedRunHandle, RunOutcome, handle_from_events
from rulvar_otel.errors import SourceError, StreamLineError

__all__ = [
    "STDIN",
    "JsonlEventSource",
    "check_envelope",
    "handle_from_jsonl",
    "open_jsonl",
    "read_jsonl_events",
]

STDIN: Final = "-"

# Diagnostics kept in memory; beyond this only the count grows (a stream of garbage must not
# turn into an unbounded list). ``on_error`` still sees every one.
MAX_KEPT_ERRORS: Final = 1000

# Bytes of an unseekable stream (stdin, a pipe) kept in memory while ``checked`` reads it;
# beyond this the copy spills to a temporary file on disk.
SPOOL_MEMORY_BYTES: Final = 4 * 1024 * 1024
_READ_BUFFER_BYTES: Final = 64 * 1024

# The envelope every event shares: field, accepted types, what the message calls the type.
_REQUIRED: Final[tuple[tuple[str, type | tuple[type, ...], str], ...]] = (
    ("runId", str, "a string"),
    ("seq", int, "an integer"),
    ("ts", str, "a string (ISO-8601 timestamp)"),
    ("spanId", str, "a string"),
    ("type", str, "a string"),
)
_OPTIONAL: Final[tuple[tuple[str, type, str], ...]] = (
    ("parentSpanId", str, "a string"),
    ("replayed", bool, "a boolean"),
)

PathLike = str | os.PathLike[str]


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_envelope(obj: Mapping[str, Any]) -> str | None:
    """Why ``obj`` is not a well-formed event envelope, or ``None`` when it is.

    The message names the field and the defect, never the value (a value may be content).
    """
    # Fast path, one exact-type test per field: what a parser produces for a good line. Anything
    # else (a missing field, a str subclass, a non-dict mapping) takes the loop below, which both
    # decides and words the defect.
    get = obj.get
    if (
        type(get("runId")) is str
        and type(get("seq")) is int
        and type(get("ts")) is str
        and type(get("spanId")) is str
        and type(get("type")) is str
        and ((parent := get("parentSpanId")) is None or type(parent) is str)
        and ((replayed := get("replayed")) is None or type(replayed) is bool)
    ):
        return None
    return _envelope_defect(obj)


def _envelope_defect(obj: Mapping[str, Any]) -> str | None:
    for field, kind, label in _REQUIRED:
        if field not in obj:
            return f"missing envelope field {field!r}"
        value = obj[field]
        # bool is an int subclass; a boolean seq is a mistyped seq.
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"envelope field {field!r} must be {label}, got {_type_name(value)}"
    for field, kind, label in _OPTIONAL:
        value = obj.get(field)
        if value is not None and (
            not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))
        ):
            return f"envelope field {field!r} must be {label} when present, got {_type_name(value)}"
    return None


class JsonlEventSource:
    """An open JSONL stream; iterate it once for the events.

    ``source`` is a path, ``"-"`` for stdin, or an open binary/text file object (left open).
    Opening a path that cannot be read raises :class:`SourceError` at once, before any event.
    Diagnostics for skipped lines collect in :attr:`errors` (the first
    :data:`MAX_KEPT_ERRORS`) and :attr:`error_count`; ``on_error`` is called for each.
    """

    def __init__(
        self,
        source: PathLike | IO[bytes] | IO[str],
        *,
        strict: bool = False,
        on_error: Callable[[StreamLineError], None] | None = None,
        name: str | None = None,
    ) -> None:
        self.strict = strict
        self._on_error = on_error
        self.errors: list[StreamLineError] = []
        self.error_count = 0
        self.lines_read = 0
        self.events_read = 0
        self._stream, self._owned, self.name = _resolve(source, name)
        self._started = False

    @classmethod
    def checked(cls, source: PathLike | IO[bytes], *, name: str | None = None) -> JsonlEventSource:
        """Check every line of ``source``, then return a strict source over the same bytes.

        The first malformed line raises its :class:`StreamLineError` before anything is
        returned, so a caller that exports the result exports nothing from a bad stream. No
        event is held: a seekable file is read twice (the second read ends where the check
        ended, so lines appended meanwhile are never exported unchecked); stdin, a pipe or any
        other unseekable stream is copied while it is checked into a temporary file that stays
        in memory up to :data:`SPOOL_MEMORY_BYTES`. The returned source closes what it reads
        (an opened path, the temporary file) once iterated or closed.
        """
        resolved, owned, label = _resolve(source, name)
        stream = cast("IO[bytes]", resolved)
        try:
            # Only a file opened here is read twice. stdin or a caller's stream is spooled even
            # when seekable: it is not ours to rewind, and a spool cannot change between reads.
            if owned is not None and _seekable(owned):
                start = owned.tell()
                for _ in cls(owned, strict=True, name=label):
                    pass
                checked_bytes = owned.tell() - start
                owned.seek(start)
                replay: IO[bytes] = io.BufferedReader(_Prefix(owned, checked_bytes), _READ_BUFFER_BYTES)
            else:
                spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115
                try:
                    copying = io.BufferedReader(_Copying(stream, spool), _READ_BUFFER_BYTES)
                    for _ in cls(copying, strict=True, name=label):
                        pass
                    spool.seek(0)
                except BaseException:
                    spool.close()
                    raise
                if owned is not None:
                    owned.close()
                replay = cast("IO[bytes]", spool)
        except BaseException:
            if owned is not None:
                owned.close()
            raise
        result = cls(replay, strict=True, name=label)
        result._owned = replay
        return result

    def __enter__(self) -> JsonlEventSource:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the file this source opened (stdin and caller-owned streams stay open)."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def _report(self, line_number: int, reason: str) -> None:
        error = StreamLineError(line_number, reason, self.name)
        if self.strict:
            raise error
        self.error_count += 1
        if len(self.errors) < MAX_KEPT_ERRORS:
            self.errors.append(error)
        if self._on_error is not None:
            self._on_error(error)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._started:
            raise SourceError(f"{self.name}: a JSONL source can be iterated only once")
        self._started = True
        return self._lines()

    def _lines(self) -> Iterator[dict[str, Any]]:
        loads = orjson.loads
        stream = self._stream
        # A text stream decodes before orjson sees a line, and one bad byte would end the whole
        # read; decoded with surrogate escapes instead, the bad line reaches orjson, which refuses
        # it like the same bytes read from a path, and the rest of the stream still exports.
        restore_errors: str | None = None
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            try:
                stream.reconfigure(errors="surrogateescape")
                restore_errors = "strict"
            except (OSError, ValueError):
                pass
        lines = cast("Iterable[bytes | str]", stream)
        try:
            for line_number, line in enumerate(lines, start=1):
                self.lines_read = line_number
                try:
                    obj = loads(line)
                except orjson.JSONDecodeError as exc:
                    # Blank lines and a byte-order mark are rare: checked only once the parser
                    # refused the line.
                    if not line.strip():
                        continue
                    obj = _without_bom(line) if line_number == 1 else None
                    if obj is None:
                        # orjson's message carries positions only, never the offending text.
                        self._report(line_number, f"invalid JSON ({exc.msg})")
                        continue
                if type(obj) is not dict:
                    self._report(line_number, f"expected a JSON object, got {_type_name(obj)}")
                    continue
                event: dict[str, Any] = obj  # compiled, its reads below are direct dict lookups
                # check_envelope's fast path, inlined (a call per line is a measurable share of
                # the read); anything else takes the loop that decides and words the defect.
                if (
                    not (
                        type(event.get("runId")) is str
                        and type(event.get("seq")) is int
                        and type(event.get("ts")) is str
                        and type(event.get("spanId")) is str
                        and type(event.get("type")) is str
                        and ((parent := event.get("parentSpanId")) is None or type(parent) is str)
                        and ((replayed := event.get("replayed")) is None or type(replayed) is bool)
                    )
                    and (defect := _envelope_defect(event)) is not None
                ):
                    self._report(line_number, defect)
                    continue
                self.events_read += 1
                yield event
        except OSError as exc:
            raise SourceError(f"cannot read {self.name}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            # Only a text stream that could not take surrogate escapes gets here.
            raise SourceError(f"cannot read {self.name}: not UTF-8 text ({exc.reason})") from exc
        finally:
            if restore_errors is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.reconfigure(errors=restore_errors)  # type: ignore[union-attr]
            self.close()


def _seekable(stream: IO[bytes]) -> bool:
    try:
        return stream.seekable()
    except (OSError, ValueError):
        return False


# Python classes under mypyc: a compiled subclass of an ABC would share its base's ABC registry.
@mypyc_attr(native_class=False)
class _Prefix(io.RawIOBase):
    """The next ``limit`` bytes of ``stream`` and no more; closing it closes ``stream``."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        super().__init__()
        self._stream = stream
        self._left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        data = self._stream.read(min(len(buffer), self._left))
        count = len(data)
        buffer[:count] = data
        self._left -= count
        return count

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()


@mypyc_attr(native_class=False)
class _Copying(io.RawIOBase):
    """``stream`` read through, every byte also written to ``copy`` (``stream`` stays open)."""

    def __init__(self, stream: IO[bytes], copy: IO[bytes]) -> None:
        super().__init__()
        self._stream = stream
        self._copy = copy

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        read1 = getattr(self._stream, "read1", None)
        # read1 hands over what a pipe has now instead of waiting to fill the whole buffer.
        data = read1(len(buffer)) if read1 is not None else self._stream.read(len(buffer))
        count = len(data)
        buffer[:count] = data
        self._copy.write(data)
        return count


def _resolve(
    source: PathLike | IO[bytes] | IO[str], name: str | None
) -> tuple[IO[bytes] | IO[str], IO[bytes] | None, str]:
    """(the stream to read, the file opened here to close afterwards or None, its display name)."""
    if not isinstance(source, str | os.PathLike):
        return source, None, name or str(getattr(source, "name", "<stream>"))
    text = os.fspath(source)
    if text == STDIN:
        return sys.stdin.buffer, None, name or "<stdin>"
    owned = _open_path(text)
    return owned, owned, name or text


def _open_path(text: str) -> IO[bytes]:
    try:
        # Larger reads than the file's 4 KiB blocks: each read releases the GIL, and an export
        # thread waiting for it takes it (1,300 hand-offs for a 5 MB stream, a tenth of the
        # direct export's time in one process). 64 KiB rather than more: the SDK pipeline's export
        # thread still gets the GIL often enough to keep its queue short.
        return Path(text).open("rb", buffering=_READ_BUFFER_BYTES)
    except IsADirectoryError as exc:
        raise SourceError(f"cannot read {text}: it is a directory") from exc
    except FileNotFoundError as exc:
        raise SourceError(f"cannot read {text}: no such file") from exc
    except OSError as exc:
        raise SourceError(f"cannot read {text}: {exc.strerror or exc}") from exc


def _without_bom(line: bytes | str) -> object | None:
    """Line 1 parsed without its UTF-8 byte-order mark, or None when it has none or stays bad."""
    if isinstance(line, bytes):
        stripped: bytes | str | None = line[3:] if line.startswith(b"\xef\xbb\xbf") else None
    else:
        stripped = line[1:] if line.startswith("\ufeff") else None
    if stripped is None:
        return None
    try:
        value: object = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    return value


def open_jsonl(
    source: PathLike | IO[bytes] | IO[str],
    *,
    strict: bool = False,
    on_error: Callable[[StreamLineError], None] | None = None,
) -> JsonlEventSource:
    """Open a JSONL stream (a path, ``"-"`` for stdin, or a file object)."""
    return JsonlEventSource(source, strict=strict, on_error=on_error)


def read_jsonl_events(
    source: PathLike | IO[bytes] | IO[str], *, strict: bool = False
) -> tuple[list[dict[str, Any]], list[StreamLineError]]:
    """Read a whole stream: the events and the diagnostics of the skipped lines."""
    with JsonlEventSource(source, strict=strict) as src:
        events = list(src)
        return events, src.errors


def handle_from_jsonl(
    source: PathLike | IO[bytes] | IO[str] | JsonlEventSource,
    *,
    outcome: RunOutcome | Mapping[str, Any] | BaseException | None = None,
    strict: bool = False,
    on_error: Callable[[StreamLineError], None] | None = None,
) -> RecordedRunHandle:
    """A :class:`RunHandle` over a JSONL stream, read lazily as the consumer iterates.

    Without ``outcome`` the result is derived from the stream's last ``run:end``.
    """
    src = (
        source
        if isinstance(source, JsonlEventSource)
        else JsonlEventSource(source, strict=strict, on_error=on_error)
    )
    return handle_from_events(src, outcome)
