"""Server-Sent Events from raw bytes: lines, then frames and comments, each bounded in size."""

from __future__ import annotations

import re
from typing import Final, NamedTuple

__all__ = ["FrameDecoder", "LineSplitter", "OversizeLineError", "SseItem"]

_LINE_END: Final = re.compile(rb"\r\n|\r|\n")


class OversizeLineError(Exception):
    """One SSE line or frame passed :attr:`ReconnectPolicy.max_frame_bytes`."""


class LineSplitter:
    """SSE lines from raw bytes (LF, CRLF or CR ends a line), each at most ``limit`` bytes.

    Decoded as UTF-8 with replacement, as the SSE specification says. A partial line longer
    than the limit raises :class:`OversizeLineError` before it can grow further.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._partial = bytearray()
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        position = 0
        if self._after_cr and chunk[:1] == b"\n":
            position = 1  # the LF of a CRLF split across two chunks
        self._after_cr = False
        partial = self._partial
        for match in _LINE_END.finditer(chunk, position):
            partial += chunk[position : match.start()]
            if len(partial) > self._limit:
                raise OversizeLineError
            lines.append(partial.decode("utf-8", "replace"))
            partial.clear()
            position = match.end()
            if match.group() == b"\r" and position == len(chunk):
                self._after_cr = True
        partial += chunk[position:]
        if len(partial) > self._limit:
            raise OversizeLineError
        return lines


class SseItem(NamedTuple):
    """One dispatched frame's data (``comment`` False) or one comment line's text (True)."""

    comment: bool
    text: str


class FrameDecoder:
    """SSE frames and comments from raw bytes, one frame's data at most ``limit`` bytes.

    A blank line dispatches the frame's joined ``data`` lines; a blank line with no data
    dispatches nothing (so a comment's blank line is no frame). ``id``, ``event`` and ``retry``
    fields are skipped: the seq inside the data is the cursor. A partial trailing frame (a
    connection cut mid-frame) is simply never dispatched.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._lines = LineSplitter(limit)
        self._data: list[str] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[SseItem]:
        items: list[SseItem] = []
        data = self._data
        for line in self._lines.feed(chunk):
            if not line:
                if data:
                    items.append(SseItem(False, "\n".join(data)))
                    data.clear()
                    self._size = 0
                continue
            if line.startswith(":"):
                items.append(SseItem(True, line[1:]))
                continue
            name, _, value = line.partition(":")
            if name == "data":
                value = value.removeprefix(" ")
                self._size += len(value) + 1
                if self._size > self._limit:
                    raise OversizeLineError
                data.append(value)
        return items
