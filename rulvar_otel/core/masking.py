"""Secret masking for telemetry and terminal sanitizing for renderers.

Masking replaces credential-shaped substrings with :data:`MASKED_SECRET`. It targets key shapes,
not control bytes: that is :func:`sanitize_terminal_text`'s job, and renderers apply both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeVar

from rulvar_otel.errors import ConfigError

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "MASKED_SECRET",
    "SecretMasker",
    "compile_secret_masker",
    "default_masker",
    "mask_secrets",
    "mask_secrets_deep",
    "sanitize_terminal_text",
]

MASKED_SECRET: Final = "[masked-secret]"

# Applied in this order; each replaces every match.
DEFAULT_SECRET_PATTERNS: Final[tuple[str, ...]] = (
    r"\bsk-[A-Za-z0-9_-]{16,}\b",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}\b",
    r"\bxox[baprs]-[A-Za-z0-9-]{10,}\b",
    r"\bAIza[0-9A-Za-z_-]{35}\b",
    r"\bBearer\s+[A-Za-z0-9._~+/=-]{20,}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
)

# The shortest string any default pattern can match: "xoxb-" plus 10 characters.
_SHORTEST_DEFAULT_MATCH: Final = 15
# Bound on the memo of already-masked strings; ids and names repeat a lot in one stream.
_CACHE_LIMIT: Final = 8192

_T = TypeVar("_T")


class SecretMasker:
    """An immutable, compiled masking policy: the default set, then host patterns in order."""

    __slots__ = ("_cache", "_min_length", "_prefilter", "_regexes", "patterns")

    def __init__(self, regexes: Sequence[re.Pattern[str]], patterns: tuple[str, ...]) -> None:
        self._regexes = tuple(regexes)
        self.patterns = patterns
        # One alternation answers "could anything match?" in a single scan; most strings are clean.
        self._prefilter = re.compile("|".join(f"(?:{r.pattern})" for r in self._regexes))
        self._cache: dict[str, str | None] = {}
        # No default credential shape is shorter than this, so shorter strings (most ids, names
        # and statuses) skip the scan; a host pattern can match anything, so it disables the cut.
        self._min_length = _SHORTEST_DEFAULT_MATCH if not patterns else 0

    def mask(self, text: str) -> str:
        """Return ``text`` with every match replaced by :data:`MASKED_SECRET`."""
        if len(text) < self._min_length:
            return text
        if text in self._cache:
            # None marks a clean string: hand back the caller's own object (identity matters).
            cached = self._cache[text]
            return text if cached is None else cached
        masked: str | None = None
        if self._prefilter.search(text) is not None:
            out = text
            for regex in self._regexes:
                out = regex.sub(MASKED_SECRET, out)
            masked = out if out != text else None
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[text] = masked
        return text if masked is None else masked

    __call__ = mask

    def mask_flat(self, text: str) -> str:
        """Mask for a one-line sink (exported attributes, span names, terminals).

        Control bytes and escape sequences become spaces first (as :func:`sanitize_terminal_text`
        does), so a key glued to an escape sequence (``"\x1b[2Jghp_..."``, no word boundary
        before ``ghp_``) is still found.
        """
        if text.isprintable():
            return self.mask(text)
        return self.mask(sanitize_terminal_text(text))

    def mask_deep(self, value: _T) -> _T:
        """Mask every string in a JSON-like tree; returns ``value`` itself when nothing matched."""
        return _mask_deep(self, value)


def _mask_deep(masker: SecretMasker, value: _T) -> _T:
    if isinstance(value, str):
        return masker.mask(value)  # type: ignore[return-value]
    if isinstance(value, Mapping):
        items: Mapping[object, object] = value  # type: ignore[assignment]
        changed = False
        out: dict[object, object] = {}
        for key, item in items.items():
            new_key = masker.mask(key) if isinstance(key, str) else key
            new_item = _mask_deep(masker, item)
            changed = changed or new_key is not key or new_item is not item
            out[new_key] = new_item
        return out if changed else value  # type: ignore[return-value]
    if isinstance(value, list | tuple):
        seq: Sequence[object] = value  # type: ignore[assignment]
        new_items = [_mask_deep(masker, item) for item in seq]
        if all(a is b for a, b in zip(new_items, seq, strict=True)):
            return value
        return tuple(new_items) if isinstance(value, tuple) else new_items  # type: ignore[return-value]
    return value


def compile_secret_masker(patterns: Iterable[str] | None = None) -> SecretMasker:
    """Compile the default credential set plus host ``patterns`` (Python ``re`` syntax).

    Raises :class:`ConfigError` naming the pattern for an empty pattern, one that does not compile
    (JavaScript-only syntax such as ``(?<name>...)`` or ``\\p{L}`` included) or one that matches the
    empty string (it would splice the marker between every character).
    """
    host: list[str] = []
    compiled = [re.compile(p) for p in DEFAULT_SECRET_PATTERNS]
    if patterns is not None:
        if isinstance(patterns, str):
            raise ConfigError("patterns must be a list of regular expressions, not one string")
        for index, pattern in enumerate(patterns):
            if not isinstance(pattern, str):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigError(f"patterns[{index}] must be a string, got {type(pattern).__name__}")
            if pattern == "":
                raise ConfigError(f"patterns[{index}] is empty: it would match everywhere")
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"patterns[{index}] is not a valid Python regular expression: {exc} "
                    f"(pattern {pattern!r}; JavaScript-only syntax such as (?<name>...) or \\p{{L}} "
                    "must be rewritten)"
                ) from exc
            if regex.fullmatch("") is not None:
                raise ConfigError(f"patterns[{index}] matches the empty string (pattern {pattern!r})")
            host.append(pattern)
            compiled.append(regex)
    return SecretMasker(compiled, tuple(host))


_DEFAULT: Final = compile_secret_masker()


def default_masker() -> SecretMasker:
    """The shared masker with the default credential set only."""
    return _DEFAULT


def mask_secrets(text: str) -> str:
    """Mask credential-shaped substrings of ``text`` with the default set."""
    return _DEFAULT.mask(text)


def mask_secrets_deep(value: _T) -> _T:
    """Mask every string in a JSON-like tree; the very same object comes back when nothing matched."""
    return _mask_deep(_DEFAULT, value)


# ESC-initiated sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC (ESC ] P X ^ _ ... ST or BEL),
# other two-byte escapes; and their 8-bit C1 forms. Any run of these or of bare C0/DEL/C1 controls
# collapses to one space, so one value can never become two lines or restyle the terminal.
_TERMINAL_CONTROL = re.compile(
    r"(?:"
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x1f\x7f-\x9f]"
    r")+"
)


def sanitize_terminal_text(text: str) -> str:
    """Make an untrusted value safe to print on a terminal.

    The result has no C0 control, no DEL, no C1 character, and no ESC-initiated CSI/OSC/DCS
    sequence; every run of such bytes becomes a single space.
    """
    if text.isprintable():
        return text
    return _TERMINAL_CONTROL.sub(" ", text)
