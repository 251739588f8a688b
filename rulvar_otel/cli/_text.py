"""The CLI's text leaf: exit codes, and the one way every dynamic string reaches a terminal.

:func:`terminal_safe` masks (URL userinfo redacted), strips terminal controls and bounds a string
after it is composed; :func:`say` prints one ``rulvar-otel: ...`` line on stderr through it and
:func:`echo` one line on stdout; :func:`plural` words every printed count. The ``--progress`` modes,
a word list every command shares, live here too. This module imports no
other CLI module, so every command and printer can use it.

Exit codes, one table for every command (docs/cli.md lists them):

======  ==============================================================================
code    meaning
======  ==============================================================================
0       done: every span reached every destination, or the command did what it said
1       export failed: a destination refused or was unreachable, or stdout refused a write
2       usage or input error: a bad option, pattern, header, URL or input
3       ``assets write`` refused: a file on disk differs from the shipped one (``--force``)
130     interrupted (Ctrl-C): what was read was exported
======  ==============================================================================
"""

from __future__ import annotations

import contextlib
import sys
from typing import Final, Literal, TextIO, get_args

from rulvar_otel.masking import SecretMasker, output_masker

__all__ = [
    "EXIT_CONFLICT",
    "EXIT_EXPORT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "MAX_PRINTED_CHARS",
    "PROGRESS_MODES",
    "ProgressMode",
    "echo",
    "plural",
    "say",
    "terminal_safe",
]

EXIT_OK: Final = 0
EXIT_EXPORT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFLICT: Final = 3
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it

ProgressMode = Literal["auto", "tty", "lines", "off"]
PROGRESS_MODES: Final[tuple[str, ...]] = get_args(ProgressMode)

# A printed message keeps at most this many characters (a span name can be megabytes).
MAX_PRINTED_CHARS: Final = 1000


def terminal_safe(text: str, masker: SecretMasker | None = None) -> str:
    """Sanitize, mask (URL userinfo redacted) and bound: the discipline for every printed dynamic string.

    Without ``masker``, the command's own (``--pattern`` included) once its options are parsed.
    """
    if len(text) > 4 * MAX_PRINTED_CHARS:
        text = text[: 4 * MAX_PRINTED_CHARS]
    cleaned = (masker or output_masker()).clean(text)
    return cleaned if len(cleaned) <= MAX_PRINTED_CHARS else cleaned[: MAX_PRINTED_CHARS - 1] + "…"


def say(text: str, masker: SecretMasker | None = None, *, stream: TextIO | None = None) -> None:
    """One ``rulvar-otel: ...`` line on stderr, masked after composition (a closed stderr is not
    worth a traceback)."""
    err = stream if stream is not None else sys.stderr
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"rulvar-otel: {terminal_safe(text, masker)}", file=err, flush=True)


def echo(text: str, masker: SecretMasker | None = None) -> None:
    """One line of a command's own output on stdout, masked after composition."""
    print(terminal_safe(text, masker))


def plural(count: int, word: str) -> str:
    """``1 span``, ``2 spans``: a count and its noun, for every line the CLI prints."""
    return f"{count} {word}{'' if count == 1 else 's'}"
