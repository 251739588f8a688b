"""Terminal sanitizing, and the views of a text the masker searches besides the text itself.

A key can hide from a word boundary behind what a reader never sees: an escape sequence, a
zero-width character, a C1 control whose sequence swallows the key's first letter, or a JSON/repr
escape (``\\n``, ``\\u001b[31m``) written out as text. Each :data:`VIEWS` entry is a chain of
substitutions; :func:`view` computes one quickly (C-level ``re.sub``), and only when the masker
finds something there does :func:`map_back` rebuild it piece by piece to carry the match back to
the original text's offsets. All expressions here are linear: each alternative starts with its own
lead character and nothing follows a loop, so the engine never backtracks.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Any, Final, TypeAlias

import re2
from re2 import _re2  # type: ignore[attr-defined]

__all__ = [
    "C0_VIEWS",
    "CONTROL_VIEWS",
    "ESCAPE_VIEWS",
    "MAX_VIEW_PIECES",
    "View",
    "has_special",
    "map_back",
    "sanitize_terminal_text",
    "view",
]

# ESC-initiated sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC (ESC ] P X ^ _ ... ST or BEL),
# other two-byte escapes; their 8-bit C1 forms; bare C0/DEL/C1 controls; line and paragraph
# separators.
_CONTROL: Final = (
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x1f\x7f-\x9f\u2028\u2029]"
)
# Invisible format characters: bidi embeddings, overrides and isolates, zero-width characters,
# the soft hyphen, the BOM, interlinear annotations and tag characters (invisible ASCII). They are
# removed, not replaced, so text split by one reads (and is masked) as it displays.
_INVISIBLE: Final = (
    "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000e0001\U000e0020-\U000e007f"
)
_INVISIBLE_RUN: Final = re.compile(f"[{_INVISIBLE}]+")
# The escape sequences of _CONTROL alone (no bare control character): a terminal shows them as
# nothing, while a newline or a tab still separates what is around it.
_SEQUENCE_RUN: Final = re.compile(
    r"(?:\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?)+"
)
_CONTROL_RUN: Final = re.compile(f"(?:{_CONTROL})+")
# One CSI or two-byte escape, or one control character: string payloads (OSC, DCS, ...) stay text.
_CONTROL_ONE: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?|\x1b[ -/]*[0-~]?|[\x00-\x1f\x7f-\x9f\u2028\u2029]"
)
_CONTROL_CHAR: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Escapes written out as text: an ESC (with the CSI it starts), a newline, any \xHH or \uHHHH.
_ESCAPED: Final = re.compile(
    r"\\(?:x1[bB]|u001[bB]|033|e)(?:\[[0-?]*[ -/]*[@-~]?)?"
    r"|\\(?:[nrtfvab0]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})"
)
# A written-out ESC and the CSI it starts: shown as nothing once the text is decoded and printed.
_ESCAPED_SEQUENCE: Final = re.compile(r"\\(?:x1[bB]|u001[bB]|033|e)(?:\[[0-?]*[ -/]*[@-~]?)?")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# Multi-line text usually holds only C0 controls (newlines, tabs): no sequence, nothing invisible.
# For such text every view above reduces to this one, so the others are skipped.
_C0_RUN: Final = re.compile("[\x00-\x1a\x1c-\x1f\x7f]+")


def _special_program() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    # ESC, C1, U+2028/9 and the invisible characters above, in RE2's spelling.
    cls = (
        r"\x{1b}\x{80}-\x{9f}\x{2028}\x{2029}\x{ad}\x{61c}\x{180e}\x{200b}-\x{200f}\x{202a}-\x{202e}"
        r"\x{2060}-\x{2064}\x{2066}-\x{206f}\x{feff}\x{fff9}-\x{fffb}\x{e0001}\x{e0020}-\x{e007f}"
    )
    program = _re2.RE2(f"[{cls}]".encode(), options)
    assert program.ok(), program.error()
    return program


_SPECIAL: Final = _special_program()
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED


def has_special(text: str) -> bool:
    """Whether ``text`` holds anything beyond printable characters and C0 controls other than ESC:
    an escape, a C1 control, a line separator, an invisible character or a lone surrogate."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return True
    return bool(_SPECIAL.Match(_UNANCHORED, data, 0, len(data))[0][0] >= 0)


View: TypeAlias = tuple[tuple[re.Pattern[str], str], ...]
# A text with more pieces than this in one view is masked whole rather than mapped back.
MAX_VIEW_PIECES: Final = 100_000

_SANITIZED: Final[View] = ((_INVISIBLE_RUN, ""), (_CONTROL_RUN, " "))
# What a reader sees; the same with escape sequences removed, as a terminal shows them (a password
# split by "\x1b[0m" reads whole, and a space would end a URL's userinfo); then each control
# sequence blanked on its own (an OSC payload, hidden from the reader, is still text that must not
# keep a key); then each control character blanked (a CSI's final byte can be a key's first
# letter: "\x9b ghp_..." is CSI "\x9b g").
CONTROL_VIEWS: Final[tuple[View, ...]] = (
    _SANITIZED,
    ((_INVISIBLE_RUN, ""), (_SEQUENCE_RUN, ""), (_CONTROL_RUN, " ")),
    ((_INVISIBLE_RUN, ""), (_CONTROL_ONE, " ")),
    ((_INVISIBLE_RUN, ""), (_CONTROL_CHAR, " ")),
)
C0_VIEWS: Final[tuple[View, ...]] = (((_C0_RUN, " "),),)
# Escapes written out as text blanked; and with written-out escape sequences removed (as decoding
# the JSON and printing it shows them), the other escapes blanked.
ESCAPE_VIEWS: Final[tuple[View, ...]] = (((_ESCAPED, " "),), ((_ESCAPED_SEQUENCE, ""), (_ESCAPED, " ")))


def sanitize_terminal_text(text: str) -> str:
    """Make an untrusted value safe to print on a terminal or export as one line.

    The result has no C0 control, DEL, C1 character, ESC-initiated sequence, line or paragraph
    separator (each run of those becomes one space), no bidi control or other invisible format
    character (removed), and no lone surrogate (U+FFFD instead).
    """
    if text.isprintable():
        return text
    if not has_special(text):
        return _C0_RUN.sub(" ", text)
    return _SURROGATE.sub("\ufffd", view(text, _SANITIZED))


def view(text: str, steps: View) -> str:
    """``text`` through ``steps`` (each: every match of the expression becomes the string)."""
    for expression, replacement in steps:
        text = expression.sub(replacement, text)
    return text


_Table: TypeAlias = list[tuple[int, int, int, bool]]  # (view start, text start, text end, replaced)


def _pieces(text: str, expression: re.Pattern[str], replacement: str) -> tuple[str, _Table]:
    pieces: list[str] = []
    table: _Table = []
    view_pos = last = 0
    for match in expression.finditer(text):
        start, end = match.span()
        if start > last:
            table.append((view_pos, last, start, False))
            pieces.append(text[last:start])
            view_pos += start - last
        if replacement:
            table.append((view_pos, start, end, True))
            pieces.append(replacement)
            view_pos += len(replacement)
        last = end
    if last < len(text):
        table.append((view_pos, last, len(text), False))
        pieces.append(text[last:])
    return "".join(pieces), table


def _map(table: _Table, starts: list[int], start: int, end: int) -> tuple[int, int]:
    def locate(pos: int) -> tuple[int, int, int, bool]:
        return table[max(bisect_right(starts, pos) - 1, 0)]

    view_start, text_start, _, replaced = locate(start)
    mapped_start = text_start if replaced else text_start + (start - view_start)
    view_start, text_start, text_end, replaced = locate(end - 1)
    mapped_end = text_end if replaced else text_start + (end - 1 - view_start) + 1
    return mapped_start, mapped_end


def map_back(text: str, steps: View, spans: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Character spans of ``view(text, steps)`` as spans of ``text`` (a replaced piece is taken
    whole); ``None`` when the view has more than :data:`MAX_VIEW_PIECES` pieces."""
    tables: list[tuple[_Table, list[int]]] = []
    current = text
    for expression, replacement in steps:
        current, table = _pieces(current, expression, replacement)
        if len(table) > MAX_VIEW_PIECES:
            return None
        if table:
            tables.append((table, [row[0] for row in table]))
    out: list[tuple[int, int]] = []
    for start, end in spans:
        for table, starts in reversed(tables):
            start, end = _map(table, starts, start, end)
        out.append((start, end))
    return out
