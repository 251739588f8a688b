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
A pattern with a group named ``secret`` masks only that group (``password=`` stays).
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

# RE2 syntax (the collector's redaction processor mirrors them). Where a shape's match must
# include context that is not secret (the character before it, the name in "password=..."), the
# secret itself is the group named "secret" and only that group is masked; the collector masks
# the whole match. Nothing is required after a shape: a key followed by "_" is still masked.
#
# Before a shape: distinctive prefixes ("ghp_", "AKIA", "glpat-") match anywhere, glued to any
# word characters ("token_ghp_...", "idAKIA..."); prefixes that also end ordinary words ("sk-" in
# "task-", "sk_test_" in "risk_test_") must not follow a letter, but may follow a digit, "_",
# "-" or anything else ("key_sk-proj-..."). Only a private key's search can read past its match
# (to find the END line); a key cut short (a truncated value) is still masked from BEGIN on.
_NOT_AFTER_LETTER: Final = r"(?:^|[^A-Za-z])"
_USERINFO_PATTERN: Final = r"[A-Za-z][A-Za-z0-9+.-]{0,31}://(?P<secret>[^/?#\s\[\]]*)@"
DEFAULT_SECRET_PATTERNS: Final[tuple[str, ...]] = (
    # OpenAI, Anthropic and compatible API keys (sk-..., sk-proj-..., sk-ant-...).
    _NOT_AFTER_LETTER + r"(?P<secret>sk-[A-Za-z0-9_-]{16,})",
    # Stripe secret and restricted keys, live and test.
    _NOT_AFTER_LETTER + r"(?P<secret>[rs]k_(?:live|test)_[A-Za-z0-9]{10,})",
    # AWS access key ids and the other unique-id prefixes AWS uses (users, roles, groups, ...).
    r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"xox[a-z]-[A-Za-z0-9-]{10,}",
    r"xapp-[0-9]+-[A-Za-z0-9-]{10,}",
    r"hf_[A-Za-z0-9]{30,}",
    r"npm_[A-Za-z0-9]{30,}",
    r"pypi-AgE[A-Za-z0-9_-]{20,}",
    r"AIza[0-9A-Za-z_-]{35}",
    r"ya29\.[0-9A-Za-z_-]{20,}",
    r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{20,}",
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    # An Authorization header's value, any scheme (Basic, Bearer, Digest, a bare token), as a
    # header line, a "--header" argument or a JSON member (escaped quotes included).
    r"(?i)authorization[\\\"']*\s*[:=]\s*[\\\"']*(?P<secret>[^\s\\\"',;]+(?:[ \t]+[^\s\\\"',;]+)?)",
    # Credentials in URL queries, connection strings and key=value text: the name is kept.
    r"(?i)(?:api[_-]?key|apikey|token|password|passwd|pwd|secret|accountkey|sharedaccesskey|sig)="
    r"(?P<secret>[^\s&;\\\"'<>]+)",
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|(?:[A-Za-z0-9+/=\\\r\n\t ,.:_-])*)",
    # A URL's userinfo (user:password), up to the last "@" before the host; the scheme is kept.
    # A run of the characters a host may follow ("/", "?", "#", whitespace, brackets) ends it, as
    # redact_userinfo's does, so its "[redacted]" is never masked again. Searched only in text
    # holding an "@".
    _USERINFO_PATTERN,
)

# The shortest string any default pattern can match: "pwd=" plus one character. Only the
# "name=value" and userinfo patterns match below _SHORTEST_WITHOUT_EQUALS ("xoxb-" plus 10
# characters), and only with an "=" or an "@", so shorter strings without either (most ids, names,
# statuses) skip the scan.
_SHORTEST_DEFAULT_MATCH: Final = 5
_SHORTEST_WITHOUT_EQUALS: Final = 15
# The group a pattern names to mask only part of its match.
_SECRET_GROUP: Final = "secret"
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


def _capturing_options() -> re2.Options:
    options = _options()
    options.never_capture = False
    return options


_CAPTURING: Final = _capturing_options()


def _program(source: str, *, capture: bool = False) -> Any:
    program = _re2.RE2(source.encode("utf-8", "surrogatepass"), _CAPTURING if capture else _OPTIONS)
    if not program.ok():
        error = program.error()
        raise ValueError(error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error))
    return program


def _secret_group(source: str) -> int:
    """The number of the group named ``secret`` in ``source`` (0: the whole match is masked)."""
    program = _program(source, capture=True)
    for name, number in program.NamedCapturingGroups():
        if name == _SECRET_GROUP.encode():
            return int(number)
    return 0


def _compiled(source: str) -> tuple[Any, int]:
    """The program to run and the group it masks: captures cost only where a group is masked."""
    group = _secret_group(source)
    return (_program(source, capture=True) if group else _program(source)), group


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

    __slots__ = (
        "_cache",
        "_min_length",
        "_prefilter",
        "_prefilter_no_at",
        "_programs",
        "patterns",
        "plain_below",
        "work",
    )

    def __init__(
        self,
        programs: Sequence[tuple[Any, int]],
        patterns: tuple[str, ...],
        prefilter: Any = None,
        prefilter_no_at: Any = None,
    ) -> None:
        self._programs = tuple(programs)
        self.patterns = patterns
        self._prefilter = prefilter
        # The same without the userinfo pattern, for text without an "@" (most text): a URL
        # scheme can start at any letter, which slows the combined scan.
        self._prefilter_no_at = prefilter_no_at if prefilter_no_at is not None else prefilter
        self._cache: dict[str, str | None] = {}
        self.work = 0
        # No default credential shape is shorter than this, so shorter strings (most ids, names
        # and statuses) skip the scan; a host pattern can match anything, so it disables the cut.
        self._min_length = _SHORTEST_DEFAULT_MATCH if not patterns else 1
        # A printable string shorter than this, holding none of "=", "@" and "://", is one that
        # clean() hands back unchanged (no credential shape fits in it): a caller with many short
        # unique strings (call ids) may skip the call. 0 with host patterns: they match anything.
        self.plain_below = _SHORTEST_WITHOUT_EQUALS if not patterns else 0

    # --- the two operations -----------------------------------------------------------------

    def clean(self, text: str) -> str:
        """Sanitize, then mask: the form of ``text`` every output (export, terminal, log) uses.

        URL userinfo (``http://user:pass@host``) is redacted too (``[redacted]``; masked, as
        every credential, in text that needed sanitizing).
        """
        if not text.isprintable():
            # Masked before sanitizing too: a sequence can swallow a key's first character
            # ("\x9b ghp_..." is CSI "\x9b g"), leaving the rest on screen, and a sequence inside
            # URL userinfo must not end it early (the masker's views read it whole; its marker
            # then stands for the userinfo, not "[redacted]").
            text = sanitize_terminal_text(self.mask(text))
        if "://" in text:
            text = redact_userinfo(text)
        return self.mask(text)

    mask_flat = clean

    def mask(self, text: str) -> str:
        """``text`` with every match replaced by :data:`MASKED_SECRET`, everything else kept."""
        if len(text) < self._min_length:
            return text
        if len(text) < _SHORTEST_WITHOUT_EQUALS and not self.patterns and "=" not in text and "@" not in text:
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
        no_at = b"@" not in data
        prefilter = self._prefilter_no_at if no_at else self._prefilter
        if prefilter is not None and prefilter.Match(_UNANCHORED, data, 0, n)[0][0] < 0:
            self.work += work
            return []
        spans: list[tuple[int, int]] = []
        for index, (program, group) in enumerate(self._programs):
            if index == _USERINFO_INDEX and no_at:
                continue  # userinfo always ends with "@"
            pos = 0
            while pos < n:
                work += n - pos
                if work > budget:
                    self.work += work
                    return None
                found = program.Match(_UNANCHORED, data, pos, n)
                start, end = found[0]
                if start < 0 or end <= start:  # empty matches are refused when compiling
                    break
                secret_start, secret_end = found[group]
                if secret_end > secret_start:
                    spans.append((secret_start, secret_end))
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


def _host_program(index: int, pattern: object) -> tuple[str, tuple[Any, int]]:
    if not isinstance(pattern, str):
        raise ConfigError(f"patterns[{index}] must be a string, got {type(pattern).__name__}")
    if pattern == "":
        raise ConfigError(f"patterns[{index}] is empty: it would match everywhere")
    try:
        source = translate(pattern)
    except PatternDialectError as exc:
        raise ConfigError(f"patterns[{index}] ({pattern!r}) is refused: {exc}") from None
    try:
        program, group = _compiled(source)
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
    return source, (program, group)


def compile_secret_masker(patterns: Iterable[str] | None = None) -> SecretMasker:
    """Compile the default credential set plus host ``patterns`` (each compiled on its own).

    Raises :class:`ConfigError` naming the pattern for an empty pattern, one that does not
    compile, one that uses a construct RE2 cannot run (backreferences, lookaround, atomic groups,
    possessive quantifiers: the message names it), duplicate group names, and one that can match
    the empty string anywhere (``a*``, ``\\b``, ``^``). Without host patterns it is the shared
    :func:`default_masker` (compiled once; a masker holds nothing but its programs and a memo).
    """
    if patterns is None or (isinstance(patterns, tuple | list) and not patterns):
        return _DEFAULT
    return _compile(patterns)


def _compile(patterns: Iterable[str] | None) -> SecretMasker:
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
    without_userinfo = sources[:_USERINFO_INDEX] + sources[_USERINFO_INDEX + 1 :]
    return SecretMasker(programs, tuple(host), _prefilter(sources), _prefilter(without_userinfo))


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
_USERINFO_INDEX: Final = DEFAULT_SECRET_PATTERNS.index(_USERINFO_PATTERN)
_DEFAULT_PROGRAMS: Final = tuple(_compiled(s) for s in _DEFAULT_SOURCES)
_DEFAULT: Final = _compile(None)


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


# A URL's userinfo: scheme, "://", then everything up to the last "@" before the host (a
# password may hold "@"), of any length. The run stops at "/", "?", "#", whitespace or a bracket,
# so the runs after two "://" never overlap and each is scanned a bounded number of times: linear.
# No boundary before the scheme: "key_postgres://..." is a URL glued to a word.
_USERINFO: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^/?#\s\[\]]*@")
# A URL's query and fragment: their values are the host's business, never shown.
_QUERY: Final = re.compile(r"[?#]\S*")
REDACTED_USERINFO: Final = "[redacted]"


def redact_userinfo(text: str) -> str:
    """Replace the userinfo of every URL in ``text`` (``user:pass@``) with ``[redacted]@``."""
    if "://" not in text:
        return text
    return _USERINFO.sub(rf"\1{REDACTED_USERINFO}@", text)


def redact_url(url: str, masker: SecretMasker | None = None) -> str:
    """An endpoint as it may be printed: userinfo and query redacted, then sanitized and masked."""
    shown = _QUERY.sub(f"?{REDACTED_USERINFO}", redact_userinfo(url), count=1)
    return (masker or _DEFAULT).clean(shown)


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
