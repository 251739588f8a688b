"""Server-Sent Events lines from raw bytes, each bounded in size."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["LineSplitter", "OversizeLineError"]

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
