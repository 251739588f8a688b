"""Opening an output path: a regular file is replaced atomically, anything else is written in place.

A regular file (or a new one) is written under a temporary name beside it and renamed over it only
once the export succeeded, so a failed export leaves earlier output as it was. A symbolic link to
a regular file keeps the link: the file it names is the one replaced. Anything else (a device, a
FIFO, a descriptor link such as ``/dev/stdout`` or ``/dev/fd/1``) is opened and written in place,
never renamed over: a FIFO no process reads, this process's own piped stdin, a directory or a
socket is refused with :class:`~rulvar_otel.errors.ConfigError` naming the path and why.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import weakref
from pathlib import Path
from typing import IO, Final

from rulvar_otel.errors import ConfigError

__all__ = ["OpenedOutput", "open_output"]

# Symbolic links followed before giving up (the kernel's own limit is 40).
_MAX_LINKS: Final = 40


class OpenedOutput:
    """An open output: ``stream`` to write, and where the temporary file goes once it is complete."""

    __slots__ = ("__weakref__", "_leftover", "replace_at", "stream")

    def __init__(self, stream: IO[bytes], temp: Path | None = None, replace_at: Path | None = None) -> None:
        self.stream = stream
        self.replace_at = replace_at
        # A temporary file neither committed nor discarded (a second Ctrl-C abandons the export
        # mid-flush) is removed at exit at the latest: it never outlives the process. The list
        # is shared with the finalizer, which must not hold this object.
        self._leftover: list[Path | None] = [temp]
        if temp is not None:
            weakref.finalize(self, _remove_quietly, self._leftover)

    @property
    def temp(self) -> Path | None:
        """The temporary file still to commit or discard (None: written in place, or done)."""
        return self._leftover[0]

    @temp.setter
    def temp(self, value: Path | None) -> None:
        self._leftover[0] = value

    def commit(self) -> None:
        """Rename the temporary file over its target (nothing for an output written in place)."""
        if self.temp is not None and self.replace_at is not None:
            os.replace(self.temp, self.replace_at)
            self.temp = None


def _remove_quietly(leftover: list[Path | None]) -> None:
    path = leftover[0]
    if path is None:
        return  # committed or discarded
    try:
        path.unlink()
    except OSError:
        pass  # its directory is gone, say


def open_output(path: Path, *, atomic: bool) -> OpenedOutput:
    """Open ``path`` for writing; :class:`ConfigError` when it cannot or must not be written."""
    try:
        regular = _regular_target(path)
        if regular is None:
            return OpenedOutput(_open_in_place(path))
        if not atomic:
            return OpenedOutput(regular.open("wb"))
        stream, temp = _open_temp_beside(regular)
        return OpenedOutput(stream, temp, regular)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {_why(exc)}") from exc


def _regular_target(path: Path) -> Path | None:
    """The regular file (existing or not) that ``path`` names through its links, else None."""
    current = path
    for _ in range(_MAX_LINKS):
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return current  # a new file (a dangling link's target included)
        if stat.S_ISREG(mode):
            return current
        if not stat.S_ISLNK(mode):
            return None
        # /proc/self/fd/N and the links into it name an open descriptor, not a file to replace.
        if Path(os.path.realpath(current.parent)).is_relative_to("/proc"):
            return None
        current = current.parent / os.readlink(current)
    return None


def _open_in_place(path: Path) -> IO[bytes]:
    # Non-blocking open: a FIFO with no reader fails at once (ENXIO) instead of hanging; append,
    # never truncate: a descriptor link to a file another process writes keeps what it holds.
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if stat.S_ISFIFO(info.st_mode) and _is_own_stdin(info):
            raise ConfigError(f"cannot write {path}: it is this process's own standard input")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def _is_own_stdin(info: os.stat_result) -> bool:
    try:
        stdin = os.fstat(0)
    except OSError:
        return False
    return (stdin.st_dev, stdin.st_ino) == (info.st_dev, info.st_ino)


def _open_temp_beside(path: Path) -> tuple[IO[bytes], Path]:
    directory = path.parent if str(path.parent) else Path(".")
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    # mkstemp creates 0600; the finished file gets the mode a plain create would give it.
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return os.fdopen(fd, "wb"), Path(name)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENXIO:
        return "no process is reading it (a FIFO or socket is written only while one is)"
    return exc.strerror or str(exc)
