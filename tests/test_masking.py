"""The masker itself: the pattern dialect, sanitize-then-mask, bounded work, URLs and log records."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rulvar_otel.masking as public
from rulvar_otel.errors import ConfigError
from rulvar_otel.masking import (
    MASKED_SECRET,
    WORK_PER_BYTE,
    MaskingLogFilter,
    compile_secret_masker,
    default_masker,
    mask_secrets,
    masked_logging,
    redact_url,
    sanitize_and_mask,
    sanitize_terminal_text,
    set_output_masker,
)
from rulvar_otel.otel._mapper_helpers import MaskMemo

KEY = "ghp_" + "Planted7" * 5  # a GitHub token shape, 44 characters
# What a reader sees glued, split or hidden, in every way a producer can write it.
GLUED = {
    "plain": f"use {KEY} now",
    "newline": f"line\n{KEY}\n",
    "crlf": f"a\r\n{KEY}",
    "esc-csi": f"\x1b[31m{KEY}\x1b[0m",
    "esc-osc": f"\x1b]0;title\x07{KEY}",
    "c1-csi": f"\x9b2J{KEY}",
    "bell": f"\x07{KEY}\x07",
    "nul": f"\x00{KEY}",
    "bidi-override": f"\u202e{KEY}\u202c",
    "bidi-isolate": f"\u2066{KEY}\u2069",
    "line-separator": f"x\u2028{KEY}\u2029y",
    "zero-width-split": f"{KEY[:10]}\u200b{KEY[10:]}",
    "soft-hyphen-split": f"{KEY[:20]}\u00ad{KEY[20:]}",
    "bom": f"\ufeff{KEY}",
    "tag-chars": f"\U000e0041{KEY}",
}
# Characters no cleaned string may contain.
_FORBIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200b-\u200f\ufeff\ud800-\udfff]"
)


def test_the_public_facade_is_pinned() -> None:
    assert sorted(public.__all__) == sorted(
        [
            "DEFAULT_SECRET_PATTERNS",
            "MASKED_SECRET",
            "WORK_PER_BYTE",
            "MaskingLogFilter",
            "SecretMasker",
            "compile_secret_masker",
            "default_masker",
            "mask_secrets",
            "mask_secrets_deep",
            "masked_logging",
            "output_masker",
            "redact_url",
            "redact_userinfo",
            "sanitize_and_mask",
            "sanitize_terminal_text",
            "set_output_masker",
        ]
    )
    assert all(getattr(public, name) is not None for name in public.__all__)


# --- sanitize, then mask -------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(GLUED))
def test_clean_finds_a_key_however_it_is_glued(variant: str) -> None:
    out = default_masker().clean(GLUED[variant])
    assert "Planted7" not in out and MASKED_SECRET in out
    assert _FORBIDDEN.search(out) is None


@pytest.mark.parametrize("variant", sorted(GLUED))
def test_mask_keeps_content_but_finds_the_same_keys(variant: str) -> None:
    text = GLUED[variant]
    out = mask_secrets(text)
    assert "Planted7" not in out and MASKED_SECRET in out
    # Only the key's range changed: what surrounds it is kept byte for byte.
    start = text.index(KEY[:4])
    assert out.startswith(text[:start])


def test_clean_strips_bidi_and_separators_and_keeps_ordinary_text() -> None:
    assert sanitize_terminal_text("a\u202eb\u2066c\u2069d") == "abcd"
    assert sanitize_terminal_text("one\u2028two\u2029three") == "one two three"
    assert sanitize_terminal_text("é ü 日本 \u00a0x") == "é ü 日本 \u00a0x"
    assert sanitize_terminal_text("lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert sanitize_and_mask("ok") == "ok"


@settings(max_examples=500, deadline=None)
@given(
    st.text(
        alphabet=st.characters(codec="utf-8")
        | st.sampled_from(list("\x1b[]\x07\x9b\x9c\x9d\x90\x98\x9e\x9fP\n\u202e\u200b\\"))
    ),
    st.sampled_from(sorted(GLUED)),
    st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(list("\x1b[\n\u2028"))),
)
def test_a_planted_key_never_survives_clean_or_mask(prefix: str, variant: str, suffix: str) -> None:
    text = f"{prefix} {GLUED[variant]} {suffix}"
    cleaned = default_masker().clean(text)
    assert "Planted7" not in cleaned
    assert _FORBIDDEN.search(cleaned) is None
    assert "Planted7" not in mask_secrets(text)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_mask_is_the_identity_on_text_without_a_key(text: str) -> None:
    assert mask_secrets(text) is text or MASKED_SECRET in mask_secrets(text)


def test_clean_deep_cleans_keys_and_values_before_any_encoding() -> None:
    value = {f"\n{KEY}": [f"\x1b[1m{KEY}", 3], "ok": {"k": f"\u202e{KEY}"}}
    out = default_masker().clean_deep(value)
    assert out == {f" {MASKED_SECRET}": [f" {MASKED_SECRET}", 3], "ok": {"k": MASKED_SECRET}}


# --- the pattern dialect -----------------------------------------------------------------------


def test_patterns_with_groups_backreference_rewrites_and_inline_flags_work_side_by_side() -> None:
    masker = compile_secret_masker(
        [
            r"(prod|staging)-db-([0-9]+)",  # numbered groups
            r"'tok_[^']*'|" + r'"tok_[^"]*"',  # a backreference rewritten as an alternation
            r"(?i)password=\S+",  # inline flag
            r"(?x) corp _ [a-z]{6}  # verbose: spaces and comments removed",
            r"(?P<env>dev)-key-\d{4}",  # the same group name in two patterns is fine
            r"(?P<env>qa)-key-\d{4}",
            r"(?i:secret)_X\d",  # scoped flag: only 'secret' folds case
            r"end-marker\Z",  # Python's end of text
        ]
    )
    text = (
        "a prod-db-12 'tok_abc' \"tok_def\" PASSWORD=hunter2 corp_abcdef dev-key-1234 qa-key-5678 "
        "SECRET_X1 secret_x1 end-marker"
    )
    assert masker.clean(text) == (
        f"a {MASKED_SECRET} {MASKED_SECRET} {MASKED_SECRET} {MASKED_SECRET} {MASKED_SECRET} "
        f"{MASKED_SECRET} {MASKED_SECRET} {MASKED_SECRET} secret_x1 {MASKED_SECRET}"
    )
    # A later pattern's group numbers do not depend on an earlier one's.
    assert masker.clean("staging-db-7 and 'tok_z'") == f"{MASKED_SECRET} and {MASKED_SECRET}"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(['\"])tok_.*?\1", r"backreference \\1.*RE2"),
        (r"(?P<q>x)(?P=q)", "named backreference"),
        (r"(?=x)x", "lookahead"),
        (r"(?<!a)b", "lookbehind"),
        (r"(?>ab)", "atomic group"),
        (r"a++", "possessive"),
        (r"(a)?(?(1)b|c)", "conditional"),
        (r"\C", "one byte"),
        (r"(?P<a>x)|(?P<a>y)", "group name 'a' is used twice"),
        (r"(?L)x", "locale"),
        (r"\N{DASH}", "N"),
        ("(", "not a valid pattern"),
        ("a{1001}", "not a valid pattern"),
        ("", "empty"),
    ],
)
def test_refused_patterns_are_config_errors_naming_the_construct(pattern: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        compile_secret_masker(["fine", pattern])
    assert "patterns[1]" in str(info.value)


@pytest.mark.parametrize(
    "pattern", ["a*", r"\b", r"\B", "^", "$", "(?m)^", r"x?", "(?:)", r"\A", r"a|\b", "(a*)*"]
)
def test_a_pattern_that_can_match_the_empty_string_anywhere_is_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match="can match the empty string"):
        compile_secret_masker([pattern])


@pytest.mark.parametrize("pattern", [r"x\b", r"\bkey\b", r"^x", r"(?m)^id=\d+$", "a+"])
def test_anchored_patterns_that_always_consume_are_accepted(pattern: str) -> None:
    compile_secret_masker([pattern])


def test_the_engine_never_prints_on_stderr_for_a_bad_pattern(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError):
        compile_secret_masker(["(unclosed"])
    assert capfd.readouterr().err == ""


# --- bounded work -------------------------------------------------------------------------------


def _bounded(masker: Any, text: str) -> str:
    """Clean ``text`` and prove the engine's work bounded: counted in bytes, not timed (one RE2
    search is linear in what it reads; the rest is a fixed number of linear passes)."""
    before = masker.work
    out = masker.clean(text)
    size = len(text.encode("utf-8", "surrogatepass"))
    # clean() masks the raw text and each of its views, then the sanitized text: at most six
    # budgets of WORK_PER_BYTE * size + 1 MiB.
    assert masker.work - before <= 6 * ((WORK_PER_BYTE + 1) * size + (1 << 20))
    return str(out)


@pytest.mark.parametrize(
    "hostile",
    [
        "-----BEGIN PRIVATE KEY-----" * 8000,  # 216 KB of unterminated PEM headers
        "-eyJ" * 250_000,  # 1 MB of JWT starts
        ("sk-" + "a" * 13 + " ") * 60_000,  # 1 MB of near-miss API keys
        "Bearer " * 150_000,
        "\x1b[" * 500_000,  # 1 MB of unterminated escape sequences
        "\x1b]" + "x" * 1_000_000,  # an OSC that never ends
        "\u202e" * 300_000 + KEY,
    ],
)
def test_default_set_masks_a_megabyte_of_hostile_text_in_bounded_work(hostile: str) -> None:
    masker = compile_secret_masker()
    out = _bounded(masker, hostile)
    assert "Planted7" not in out
    if hostile.startswith("-----BEGIN"):
        assert "PRIVATE KEY" not in out


def test_a_catastrophic_host_pattern_runs_in_linear_time() -> None:
    masker = compile_secret_masker([r"(a+)+$"])
    assert _bounded(masker, "a" * 40 + "!") == "a" * 40 + "!"
    assert _bounded(masker, "a" * 1_000_000 + "!").endswith("a!")
    assert _bounded(masker, "b" + "a" * 1_000_000) == f"b{MASKED_SECRET}"


def test_a_pattern_that_rescans_to_the_end_is_cut_off_by_the_budget_and_fails_closed() -> None:
    # Each match of `a[^b]*b|a` is one "a", found only after reading to the end: quadratic
    # without the budget. The value is masked whole instead.
    masker = compile_secret_masker([r"a[^b]*b|a"])
    assert _bounded(masker, "a" * 1_000_000) == MASKED_SECRET
    assert masker.clean("xa ya") == f"x{MASKED_SECRET} y{MASKED_SECRET}"


def test_many_keys_in_one_short_value_are_each_masked() -> None:
    text = " ".join(f"ghp_{i:04d}" + "x" * 30 for i in range(200))
    out = default_masker().clean(text)
    assert out == " ".join([MASKED_SECRET] * 200)


# --- URLs and log records ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pa55@collector:4318/v1/traces", "http://[redacted]@collector:4318/v1/traces"),
        ("https://token@collector", "https://[redacted]@collector"),
        ("http://collector:4317", "http://collector:4317"),
        ("http://[::1]:4317", "http://[::1]:4317"),
    ],
)
def test_redact_url_hides_userinfo(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_clean_redacts_userinfo_inside_any_text() -> None:
    text = "exporting to postgres://admin:hunter2@db:5432/x failed\x1b[2J"
    # Text that needs sanitizing is masked first: its userinfo reads as a masked credential.
    assert default_masker().clean(text) == f"exporting to postgres://{MASKED_SECRET}@db:5432/x failed "
    assert default_masker().clean(text[:-4]) == "exporting to postgres://[redacted]@db:5432/x failed"


def test_the_log_filter_cleans_bounds_and_folds_exceptions() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("rulvar_otel.tests.masking")
    with masked_logging(stream=stream):
        logger.warning("bad header %r", f"x-key\x1b[2J{KEY}")
        try:
            raise ValueError(f"boom\n{KEY}")
        except ValueError:
            logger.exception("failed for http://u:p@host")
        logger.warning("%s", "y" * 10_000)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    text = stream.getvalue()
    assert "Planted7" not in text and "\x1b" not in text and "u:p@" not in text
    assert "ValueError" in lines[1] and f"http://{MASKED_SECRET}@host" in lines[1]
    assert len(lines[2]) < 2200 and "more characters" in lines[2]


def test_the_log_filter_uses_the_commands_host_patterns() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("rulvar_otel.tests.masking")
    try:
        set_output_masker(compile_secret_masker([r"hunter-\d{4}"]))
        with masked_logging(stream=stream):
            logger.warning("leaked hunter-1234")
    finally:
        set_output_masker(None)
    assert "hunter-1234" not in stream.getvalue() and MASKED_SECRET in stream.getvalue()


def test_opentelemetrys_own_warning_about_a_malformed_header_is_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"\x1b[31m{KEY}\x1b[0m,ok=1")
    stream = io.StringIO()
    with masked_logging(stream=stream):
        OTLPSpanExporter(endpoint="http://127.0.0.1:1/v1/traces").shutdown()
    text = stream.getvalue()
    assert "opentelemetry" in text  # the library did warn, and the warning went through the filter
    assert "Planted7" not in text and "\x1b" not in text


def test_a_record_with_unformattable_arguments_is_kept() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "%d items", ("many",), None)
    assert MaskingLogFilter().filter(record)
    assert "unformattable" in record.getMessage()


def test_a_repeated_log_line_is_shown_once_and_summarised() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("rulvar_otel.tests.masking")
    with masked_logging(stream=stream):
        for _ in range(50):
            logger.warning("Queue full, dropping %s", f"\x1b[2J{KEY}")
        logger.warning("another")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].endswith(f"Queue full, dropping  {MASKED_SECRET}")
    assert lines[2].endswith("(repeated 49 more times)") and "Planted7" not in stream.getvalue()


# --- the CLI -------------------------------------------------------------------------------------


def _cli_export(tmp_path: Path, *patterns: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from rulvar_otel.cli import app

    stream = tmp_path / "s.jsonl"
    stream.write_text(
        '{"runId":"r","seq":0,"ts":"2026-01-01T00:00:00Z","spanId":"s0","type":"run:start",'
        '"workflow":"login PASSWORD=hunter2 prod-db-7"}\n'
        '{"runId":"r","seq":1,"ts":"2026-01-01T00:00:01Z","spanId":"s0","type":"run:end","status":"ok"}\n',
        encoding="utf-8",
    )
    args = ["export", str(stream), "--out", str(tmp_path / "o.jsonl"), "--tree", "--progress", "lines"]
    for pattern in patterns:
        args += ["--pattern", pattern]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    return result.exit_code, result.stdout + result.stderr


def test_cli_accepts_inline_flags_and_verbose_patterns(tmp_path: Path) -> None:
    code, output = _cli_export(tmp_path, r"(?i)password=\S+", r"(?x) (prod|staging) -db- [0-9]+  # db")
    assert code == 0, output
    assert "hunter2" not in output and "prod-db-7" not in output and MASKED_SECRET in output
    assert "hunter2" not in (tmp_path / "o.jsonl").read_text()


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(?<=x)y", "lookbehind"), (r"(a)\1", "backreference"), (r"\b", "empty string"), ("(", "not a valid")],
)
def test_cli_refuses_a_bad_pattern_with_exit_2(tmp_path: Path, pattern: str, reason: str) -> None:
    code, output = _cli_export(tmp_path, pattern)
    assert code == 2
    assert reason in output and "Traceback" not in output
    assert not (tmp_path / "o.jsonl").exists()


def test_the_examples_in_docs_masking_md_hold() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "masking.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert blocks
    checked = 0
    for block in blocks:
        lines = []
        for line in block.splitlines():
            expression, _, expected = line.partition("  # ")
            if expected.startswith("'"):
                line = f"assert ({expression}) == {expected}, {line!r}"
                checked += 1
            lines.append(line)
        handlers = logging.getLogger().handlers
        filters = [list(handler.filters) for handler in handlers]
        try:
            exec("\n".join(lines), {})
        finally:  # the logging example installs filters on the root's handlers
            for handler, kept in zip(handlers, filters, strict=True):
                handler.filters[:] = kept
    assert checked >= 1


@pytest.mark.parametrize(
    "option",
    [["--endpoint", "ftp://admin:s3cretpw@collector:4317"], ["--metrics-endpoint", "x://admin:s3cretpw@c"]],
)
def test_a_refused_endpoint_is_named_without_its_userinfo(tmp_path: Path, option: list[str]) -> None:
    from typer.testing import CliRunner

    from rulvar_otel.cli import app

    stream = tmp_path / "s.jsonl"
    stream.write_text('{"runId":"r","seq":0,"ts":"2026-01-01T00:00:00Z","type":"run:start"}\n')
    args = ["export", str(stream), *option, "--progress", "off"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2
    assert "s3cretpw" not in result.stderr and "[redacted]@" in result.stderr


def test_a_key_followed_by_a_word_character_is_still_masked() -> None:
    out = mask_secrets(f"{KEY}_suffix and AKIA{'B' * 16}XYZ")
    assert out == f"{MASKED_SECRET}_suffix and {MASKED_SECRET}XYZ"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F) | st.sampled_from(["é", "日"])))
def test_the_plain_control_shortcut_agrees_with_the_general_sanitizer(text: str) -> None:
    from rulvar_otel.core import _text_views as tv

    general = tv._SURROGATE.sub("\ufffd", tv.view(text, tv._SANITIZED))
    assert sanitize_terminal_text(text) == general


# Short strings of every kind the shortcut must judge: credential prefixes, "=", "@", "://", controls.
_PIECES = [*"ab=@:/x-_0\x1b\x9b\n\\", "ghp_", "pwd", "sk-", "://"]
_SHORT = st.lists(st.sampled_from(_PIECES), max_size=16).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=_SHORT, patterns=st.sampled_from([(), (r"ab",), (r"x-_0",)]))
def test_a_short_plain_string_is_one_clean_hands_back_unchanged(text: str, patterns: tuple[str, ...]) -> None:
    masker = compile_secret_masker(list(patterns))
    plain = (
        len(text) < masker.plain_below
        and "=" not in text
        and "@" not in text
        and "://" not in text
        and text.isprintable()
    )
    if plain:
        assert masker.clean(text) == text
    # The span mapper's memo, which takes the shortcut, answers as clean() does for every string.
    assert MaskMemo(masker.mask_flat, masker.plain_below)[text] == masker.clean(text)
