"""Host secret patterns: the accepted dialect, checked and translated for RE2.

Patterns run on RE2, a linear-time engine, so no pattern can make masking slow. The dialect is
RE2's syntax plus the Python spellings people bring from ``re``: the verbose flag ``(?x)`` (global
or scoped: its whitespace and ``#`` comments are removed here), ``(?#...)`` comments, ``\\Z`` for
the end of the text, ``\\uXXXX``/``\\UXXXXXXXX`` escapes, and the no-op flags ``(?u)``/``(?a)``.
Constructs that need backtracking (backreferences, lookaround, atomic groups, possessive
quantifiers, conditionals) and ``\\C`` (one byte, which can split a character) are refused with a
message naming the construct; so are duplicate group names, as in Python.

:func:`translate` is pure text work; compiling, and refusing patterns that can match the empty
string, happen in :mod:`rulvar_otel.core.masking`.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["PatternDialectError", "translate"]

_WHY: Final = "patterns run on RE2, a linear-time engine, which cannot run it"
# Python's inline flag letters; RE2 knows i, m, s (and U); x is removed here; a, u are no-ops.
_PYTHON_FLAGS: Final = frozenset("aiLmsux")
_FLAG_GROUP: Final = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_GROUP_NAME: Final = re.compile(r"\(\?P?<([^>=!]*)>")
_VERBOSE_SPACE: Final = frozenset(" \t\n\r\f\v")


class PatternDialectError(ValueError):
    """The pattern uses a construct the dialect refuses; the message names it."""


def _refuse(construct: str, index: int) -> PatternDialectError:
    return PatternDialectError(f"{construct} at offset {index}: {_WHY}")


def _flags(on: str, off: str, index: int) -> tuple[str, str]:
    for letter in on + off:
        if letter not in _PYTHON_FLAGS:
            raise PatternDialectError(f"unknown inline flag {letter!r} at offset {index}")
        if letter == "L":
            raise PatternDialectError(f"the locale flag (?L) at offset {index} is not supported")
    keep_on = "".join(c for c in on if c in "ims")
    keep_off = "".join(c for c in off if c in "ims")
    return keep_on, keep_off


def translate(pattern: str) -> str:
    """The RE2 form of ``pattern``; raises :class:`PatternDialectError` naming what is refused."""
    out: list[str] = []
    verbose = [False]  # the verbose flag of each open group, innermost last
    names: set[str] = set()
    n = len(pattern)
    i = 0
    while i < n:
        c = pattern[i]
        if c == "\\":
            i = _escape(pattern, i, out, in_class=False)
            continue
        if c == "[":
            i = _char_class(pattern, i, out)
            continue
        if verbose[-1] and c in _VERBOSE_SPACE:
            i += 1
            continue
        if verbose[-1] and c == "#":
            newline = pattern.find("\n", i)
            i = n if newline < 0 else newline + 1
            continue
        if c == "(":
            i = _group(pattern, i, out, verbose, names)
            continue
        if c == ")":
            if len(verbose) > 1:
                verbose.pop()
            out.append(c)
            i += 1
            continue
        if c in "*+?" and i + 1 < n and pattern[i + 1] == "+":
            raise _refuse(f"the possessive quantifier {c}+", i)
        out.append(c)
        i += 1
    return "".join(out)


def _group(pattern: str, i: int, out: list[str], verbose: list[bool], names: set[str]) -> int:
    if not pattern.startswith("(?", i):
        verbose.append(verbose[-1])
        out.append("(")
        return i + 1
    rest = pattern[i + 2 : i + 4]
    if rest.startswith("#"):
        close = pattern.find(")", i)
        if close < 0:
            raise PatternDialectError(f"unterminated (?#...) comment at offset {i}")
        return close + 1
    if rest.startswith(("=", "!")):
        raise _refuse("a lookahead (?=...)/(?!...)", i)
    if rest.startswith(("<=", "<!")):
        raise _refuse("a lookbehind (?<=...)/(?<!...)", i)
    if rest.startswith(">"):
        raise _refuse("an atomic group (?>...)", i)
    if rest.startswith("("):
        raise _refuse("a conditional (?(...)...)", i)
    if rest.startswith("P="):
        raise _refuse("a named backreference (?P=...)", i)
    named = _GROUP_NAME.match(pattern, i)
    if named is not None:
        name = named.group(1)
        if name in names:
            raise PatternDialectError(f"group name {name!r} is used twice (offset {i})")
        names.add(name)
        verbose.append(verbose[-1])
        out.append(f"(?P<{name}>")
        return named.end()
    flags = _FLAG_GROUP.match(pattern, i)
    if flags is None:
        # Let RE2 name the defect (e.g. "(?" at the very end).
        verbose.append(verbose[-1])
        out.append("(?")
        return i + 2
    on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
    keep_on, keep_off = _flags(on, off, i)
    if end == ")":
        if off:
            raise PatternDialectError(f"(?-{off}) at offset {i}: flags can only be turned off in (?-x:...)")
        if "x" in on:
            verbose[-1] = True
        if keep_on:
            out.append(f"(?{keep_on})")
        return flags.end()
    if "x" in on:
        verbose.append(True)
    elif "x" in off:
        verbose.append(False)
    else:
        verbose.append(verbose[-1])
    out.append(f"(?{keep_on}-{keep_off}:" if keep_off else f"(?{keep_on}:")
    return flags.end()


def _escape(pattern: str, i: int, out: list[str], *, in_class: bool) -> int:
    if i + 1 >= len(pattern):
        raise PatternDialectError("the pattern ends with a lone backslash")
    d = pattern[i + 1]
    if d in "123456789" and not in_class:
        raise _refuse(f"a backreference \\{d}", i)
    if d == "g" and pattern.startswith("<", i + 2):
        raise _refuse("a backreference \\g<...>", i)
    if d == "C":
        raise _refuse("\\C (one byte, which can split a character)", i)
    if d == "N":
        raise PatternDialectError(f"\\N{{...}} at offset {i} is not supported: write the character itself")
    if d == "Z" and not in_class:
        out.append("\\z")
        return i + 2
    if d in "uU":
        width = 4 if d == "u" else 8
        digits = pattern[i + 2 : i + 2 + width]
        if len(digits) != width or any(h not in "0123456789abcdefABCDEF" for h in digits):
            raise PatternDialectError(f"\\{d} at offset {i} needs {width} hex digits")
        out.append(f"\\x{{{digits}}}")
        return i + 2 + width
    if d == "Q" and not in_class:
        end = pattern.find("\\E", i + 2)
        stop = len(pattern) if end < 0 else end + 2
        out.append(pattern[i:stop])
        return stop
    if d == " ":
        out.append("\\x20")
        return i + 2
    out.append(pattern[i : i + 2])
    return i + 2


def _char_class(pattern: str, i: int, out: list[str]) -> int:
    """Copy one ``[...]`` class (whitespace and ``#`` are literal inside, even in verbose mode)."""
    n = len(pattern)
    out.append("[")
    i += 1
    if i < n and pattern[i] == "^":
        out.append("^")
        i += 1
    if i < n and pattern[i] == "]":
        out.append("\\]")
        i += 1
    while i < n:
        c = pattern[i]
        if c == "\\":
            i = _escape(pattern, i, out, in_class=True)
            continue
        if c == "[" and pattern.startswith("[:", i):
            close = pattern.find(":]", i + 2)
            if close > 0:
                out.append(pattern[i : close + 2])
                i = close + 2
                continue
        out.append(c)
        i += 1
        if c == "]":
            return i
    return i  # unterminated: RE2 reports "missing ]"
