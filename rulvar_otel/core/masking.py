"""Secret masking and terminal sanitizing: the one discipline for every string that leaves.

One :class:`SecretMasker` (the default credential set, then host patterns) offers two operations:

- :meth:`SecretMasker.clean` sanitizes, then masks (URL userinfo redacted too). Every output uses
  it: exported attributes and names, JSON-valued facts (strings cleaned before encoding), metric
  labels, terminal views, log records. A key glued to an escape sequence (``"\\x1b[31msk-..."``),
  split by an invisible character (``"sk-\\u200b..."``) or after a written-out ``\\n`` is found
  as a reader would see it.
- :meth:`SecretMasker.mask` keeps content byte for byte (journals, event streams) and replaces
  only what matches, searching the raw text and the views of it in :mod:`._text_views`.

Every pattern runs on RE2, compiled and applied on its own; one search is linear in its input.
Finding every match costs one search per match, so each value has a work budget (bytes handed to
the engine, :data:`WORK_PER_BYTE` times its length plus a floor); a value that exhausts it is
masked whole. Masking is therefore bounded for every input and every accepted pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import re2
from re2 import _re2  # type: ignore[attr-defined]  # the engine itself: spans without Match objects

from rulvar_otel.core._pattern_dialect import PatternDialectError, translate
from rulvar_otel.core._text_views import (
    C0_VIEWS,
    CONTROL_VIEWS,
    ESCAPE_VIEWS,
    has_special,
    map_back,
    sanitize_terminal_text,
    view,
)
from rulvar_otel.errors import ConfigError

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "MASKED_SECRET",
    "WORK_PER_BYTE",
    "SecretMasker",
    "compile_secret_masker",
    "default_masker",
    "map_strings",
    "mask_secrets",
    "mask_secrets_deep",
    "redact_url",
    "redact_userinfo",
    "sanitize_and_mask",
    "sanitize_terminal_text",
]

MASKED_SECRET: Final = "[masked-secret]"

# RE2 syntax (the collector's redaction processor mirrors them). A word boundary before each
# shape, none after: a key followed by "_" or more characters is still masked. Only a private
# key's search can read past its match (to find the END line); a key cut short (a truncated
# value) is still masked from its BEGIN line on.
DEFAULT_SECRET_PATTERNS: Final[tuple[str, ...]] = (
    r"\bsk-[A-Za-z0-9_-]{16,}",
    r"\bAKIA[0-9A-Z]{16}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bxox[baprs]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\bBearer\s+[A-Za-z0-9._~+/=-]{20,}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|(?:[A-Za-z0-9+/=\r\n,.-]|: ?)*)",
)

# The shortest string any default pattern can match: "xoxb-" plus 10 characters.
_SHORTEST_DEFAULT_MATCH: Final = 15
# Bound on the memo of already-masked strings; ids and names repeat a lot in one stream.
_CACHE_LIMIT: Final = 8192
# Work budget per value: bytes handed to the engine, at most WORK_PER_BYTE * len + _WORK_FLOOR.
WORK_PER_BYTE: Final = 64
_WORK_FLOOR: Final = 1 << 20

_T = TypeVar("_T")


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print the pattern itself on stderr
    options.never_capture = True  # only whole-match spans are needed: the fastest engine path
    return options


_OPTIONS: Final = _options()
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED
_ANCHOR_BOTH: Final = _re2.RE2.Anchor.ANCHOR_BOTH
# What RE2's zero-width assertions can see at a position: the character before (none, newline,
# word, other) and after. An empty match possible anywhere is possible in one of these 16 cases.
_EMPTY_PROBES: Final = tuple(
    ((before + after).encode(), len(before))
    for before in ("", "\n", "a", " ")
    for after in ("", "\n", "a", " ")
)


def _program(source: str) -> Any:
    program = _re2.RE2(source.encode("utf-8", "surrogatepass"), _OPTIONS)
    if not program.ok():
        error = program.error()
        raise ValueError(error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error))
    return program


def _matches_empty(program: Any) -> bool:
    return any(program.Match(_ANCHOR_BOTH, data, k, k)[0][0] >= 0 for data, k in _EMPTY_PROBES)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    out = [spans[0]]
    for start, end in spans[1:]:
        last_start, last_end = out[-1]
        if start < last_end:
            out[-1] = (last_start, max(end, last_end))
        else:
            out.append((start, end))
    return out


class SecretMasker:
    """An immutable, compiled masking policy: the default set, then host patterns.

    ``work`` counts the bytes handed to the engine so far (it only grows); tests use it to prove
    the bound without timing anything.
    """

    __slots__ = ("_cache", "_min_length", "_prefilter", "_programs", "patterns", "work")

    def __init__(self, programs: Sequence[Any], patterns: tuple[str, ...], prefilter: Any = None) -> None:
        self._programs = tuple(programs)
        self.patterns = patterns
        self._prefilter = prefilter
        self._cache: dict[str, str | None] = {}
        self.work = 0
        # No default credential shape is shorter than this, so shorter strings (most ids, names
        # and statuses) skip the scan; a host pattern can match anything, so it disables the cut.
        self._min_length = _SHORTEST_DEFAULT_MATCH if not patterns else 1

    # --- the two operations -----------------------------------------------------------------

    def clean(self, text: str) -> str:
        """Sanitize, then mask: the form of ``text`` every output (export, terminal, log) uses.

        URL userinfo (``http://user:pass@host``) is redacted too.
        """
        if not text.isprintable():
            # Masked before sanitizing too: a sequence can swallow a key's first character
            # ("\x9b ghp_..." is CSI "\x9b g"), leaving the rest on screen.
            text = sanitize_terminal_text(self.mask(text))
        if "://" in text:
            text = redact_userinfo(text)
        return self.mask(text)

    mask_flat = clean

    def mask(self, text: str) -> str:
        """``text`` with every match replaced by :data:`MASKED_SECRET`, everything else kept."""
        if len(text) < self._min_length:
            return text
        cached = self._cache.get(text, text)
        if cached is not text:
            # None marks a clean string: hand back the caller's own object (identity matters).
            return text if cached is None else cached
        masked = self._mask_uncached(text)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[text] = None if masked == text else masked
        return text if masked == text else masked

    __call__ = mask

    def mask_deep(self, value: _T) -> _T:
        """:meth:`mask` every string (keys included) of a JSON-like tree; ``value`` itself when
        nothing matched."""
        return map_strings(value, self.mask)

    def clean_deep(self, value: _T) -> _T:
        """:meth:`clean` every string (keys included) of a JSON-like tree, e.g. before encoding it."""
        return map_strings(value, self.clean)

    # --- the engine -------------------------------------------------------------------------

    def _mask_uncached(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        spans = self._spans(data)
        if spans is None:
            return MASKED_SECRET
        views = () if text.isprintable() else CONTROL_VIEWS if has_special(text) else C0_VIEWS
        if "\\" in text:
            views += ESCAPE_VIEWS
        extra: list[tuple[int, int]] = []
        for steps in views:
            shown = view(text, steps)
            shown_data = shown.encode("utf-8", "surrogatepass")
            shown_spans = self._spans(shown_data)
            if shown_spans is None:
                return MASKED_SECRET
            if not shown_spans:
                continue
            if len(shown_data) != len(shown):
                shown_spans = _byte_to_char_spans(shown_data, shown_spans)
            mapped = map_back(text, steps, shown_spans)
            if mapped is None:
                return MASKED_SECRET
            extra.extend(mapped)
        if not extra:
            return _replace(data, spans) if spans else text
        char_spans = _byte_to_char_spans(data, spans) if len(data) != len(text) else spans
        char_spans = _merge(char_spans + extra)
        pieces: list[str] = []
        last = 0
        for start, end in char_spans:
            pieces.append(text[last:start])
            pieces.append(MASKED_SECRET)
            last = end
        pieces.append(text[last:])
        return "".join(pieces)

    def _spans(self, data: bytes) -> list[tuple[int, int]] | None:
        """Byte spans of every match of every pattern, merged; ``None`` when over budget."""
        n = len(data)
        work = n
        budget = WORK_PER_BYTE * n + _WORK_FLOOR
        if self._prefilter is not None and self._prefilter.Match(_UNANCHORED, data, 0, n)[0][0] < 0:
            self.work += work
            return []
        spans: list[tuple[int, int]] = []
        for program in self._programs:
            pos = 0
            while pos < n:
                work += n - pos
                if work > budget:
                    self.work += work
                    return None
                start, end = program.Match(_UNANCHORED, data, pos, n)[0]
                if start < 0 or end <= start:  # empty matches are refused when compiling
                    break
                spans.append((start, end))
                pos = end
        self.work += work
        return _merge(spans) if spans else spans


def _replace(data: bytes, spans: list[tuple[int, int]]) -> str:
    marker = MASKED_SECRET.encode()
    pieces: list[bytes] = []
    last = 0
    for start, end in spans:
        pieces.append(data[last:start])
        pieces.append(marker)
        last = end
    pieces.append(data[last:])
    return b"".join(pieces).decode("utf-8", "surrogatepass")


def _byte_to_char_spans(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte offsets (on character boundaries) to character offsets, in one pass over ``data``."""
    offsets = sorted({offset for span in spans for offset in span})
    chars: dict[int, int] = {}
    last_byte = last_char = 0
    for offset in offsets:
        last_char += len(data[last_byte:offset].decode("utf-8", "surrogatepass"))
        chars[offset] = last_char
        last_byte = offset
    return [(chars[start], chars[end]) for start, end in spans]


# --- compiling ----------------------------------------------------------------------------------


def _host_program(index: int, pattern: object) -> tuple[str, Any]:
    if not isinstance(pattern, str):
        raise ConfigError(f"patterns[{index}] must be a string, got {type(pattern).__name__}")
    if pattern == "":
        raise ConfigError(f"patterns[{index}] is empty: it would match everywhere")
    try:
        source = translate(pattern)
    except PatternDialectError as exc:
        raise ConfigError(f"patterns[{index}] ({pattern!r}) is refused: {exc}") from None
    try:
        program = _program(source)
    except ValueError as exc:
        raise ConfigError(
            f"patterns[{index}] is not a valid pattern: {exc} (pattern {pattern!r}; the dialect is "
            "RE2 syntax plus (?x), \\Z and (?#...): see docs/masking.md)"
        ) from None
    if _matches_empty(program):
        raise ConfigError(
            f"patterns[{index}] can match the empty string (pattern {pattern!r}): it would splice "
            "the marker between characters; make it consume at least one character everywhere"
        )
    return source, program


def compile_secret_masker(patterns: Iterable[str] | None = None) -> SecretMasker:
    """Compile the default credential set plus host ``patterns`` (each compiled on its own).

    Raises :class:`ConfigError` naming the pattern for an empty pattern, one that does not
    compile, one that uses a construct RE2 cannot run (backreferences, lookaround, atomic groups,
    possessive quantifiers: the message names it), duplicate group names, and one that can match
    the empty string anywhere (``a*``, ``\\b``, ``^``).
    """
    sources = list(_DEFAULT_SOURCES)
    programs = list(_DEFAULT_PROGRAMS)
    host: list[str] = []
    if patterns is not None:
        if isinstance(patterns, str):
            raise ConfigError("patterns must be a list of regular expressions, not one string")
        for index, pattern in enumerate(patterns):
            source, program = _host_program(index, pattern)
            host.append(pattern)
            sources.append(source)
            programs.append(program)
    return SecretMasker(programs, tuple(host), _prefilter(sources))


def _prefilter(sources: Sequence[str]) -> Any:
    """One program answering "could anything match?" in a single scan; most strings are clean.

    Exact because RE2 has no backreferences (group numbers carry no meaning across patterns)
    and an inline flag inside ``(?:...)`` ends with the group.
    """
    try:
        return _program("|".join(f"(?:{source})" for source in sources))
    except ValueError:  # too large for the engine's memory budget: scan pattern by pattern
        return None


_DEFAULT_SOURCES: Final = tuple(translate(p) for p in DEFAULT_SECRET_PATTERNS)
_DEFAULT_PROGRAMS: Final = tuple(_program(s) for s in _DEFAULT_SOURCES)
_DEFAULT: Final = compile_secret_masker()


def default_masker() -> SecretMasker:
    """The shared masker with the default credential set only."""
    return _DEFAULT


def mask_secrets(text: str) -> str:
    """Mask credential-shaped substrings of ``text`` with the default set (content kept)."""
    return _DEFAULT.mask(text)


def mask_secrets_deep(value: _T) -> _T:
    """Mask every string in a JSON-like tree; the very same object comes back when nothing matched."""
    return map_strings(value, _DEFAULT.mask)


def sanitize_and_mask(text: str, masker: SecretMasker | None = None) -> str:
    """Sanitize, then mask (``masker`` or the default set): the form every output uses."""
    return (masker or _DEFAULT).clean(text)


# A URL's userinfo: scheme, "://", then everything up to "@" that cannot be part of a host.
# Both runs are bounded, so each start costs a bounded scan: linear in the text.
_USERINFO: Final = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^/?#\s@\[\]]{1,512}@")
REDACTED_USERINFO: Final = "[redacted]"


def redact_userinfo(text: str) -> str:
    """Replace the userinfo of every URL in ``text`` (``user:pass@``) with ``[redacted]@``."""
    if "://" not in text:
        return text
    return _USERINFO.sub(rf"\1{REDACTED_USERINFO}@", text)


def redact_url(url: str, masker: SecretMasker | None = None) -> str:
    """An endpoint as it may be printed: userinfo redacted, then sanitized and masked."""
    return (masker or _DEFAULT).clean(redact_userinfo(url))


def map_strings(value: _T, fn: Callable[[str], str]) -> _T:
    """Apply ``fn`` to every string of a JSON-like tree, mapping keys included.

    Returns ``value`` itself when ``fn`` changed nothing; never modifies the input.
    """
    if isinstance(value, str):
        return fn(value)  # type: ignore[return-value]
    if isinstance(value, Mapping):
        items: Mapping[object, object] = value  # type: ignore[assignment]
        changed = False
        out: dict[object, object] = {}
        for key, item in items.items():
            new_key = fn(key) if isinstance(key, str) else key
            new_item = map_strings(item, fn)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value  # type: ignore[return-value]
    if isinstance(value, list | tuple):
        seq: Sequence[object] = value  # type: ignore[assignment]
        new_items = [map_strings(item, fn) for item in seq]
        if all(a is b for a, b in zip(new_items, seq, strict=True)):
            return value
        return tuple(new_items) if isinstance(value, tuple) else new_items  # type: ignore[return-value]
    return value
