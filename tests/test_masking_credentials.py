"""Every credential shape of the corpus, in every placement, never reaches an output.

Placements: the text itself, glued to word characters before and after, JSON-escaped (once and
twice), as a mapping key, in a span name, in resource attributes (OTLP on both pipelines and
Prometheus ``target_info``) and in the CLI's messages. Header names and values are refused
when parsed, without being quoted, and gRPC's core never writes them to file descriptor 2.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rulvar_otel.errors import ConfigError, InvalidHeaderError
from rulvar_otel.export import ExportOptions, StreamedRun, build_metrics_delivery, export_run, parse_header
from rulvar_otel.masking import (
    MASKED_SECRET,
    compile_secret_masker,
    default_masker,
    mask_secrets,
    redact_url,
    redact_userinfo,
)
from tests._support import (
    CREDENTIALS,
    MARK,
    agent_end,
    agent_start,
    closed_port,
    credential,
    credential_kinds,
    export,
    run_cli,
    run_stream,
    write_stream,
)

# Word characters a producer glues before a credential ("key_sk-...", "token_ghp_...").
_GLUE_BEFORE = ("key_", "token_", "x9", "__", "-", "=", "/", '"')
_GLUE_AFTER = ("_suffix", "xyz", "9", "-", "__", '"', "\n")


def _clean(text: str) -> str:
    return default_masker().clean(text)


@pytest.mark.parametrize("kind", credential_kinds())
def test_a_credential_is_masked_plain_and_glued_to_word_characters(kind: str) -> None:
    sample = credential(kind).sample
    glues = _GLUE_BEFORE + (("abc", "Z") if credential(kind).after_letter else ())
    for before in ("", *glues):
        for after in ("", *_GLUE_AFTER):
            text = f"see {before}{sample}{after} now"
            assert MARK not in _clean(text), (before, after)
            if not kind.startswith("url-"):  # userinfo is redacted by clean; mask keeps URLs
                assert MARK not in mask_secrets(text), (before, after)


@pytest.mark.parametrize("kind", credential_kinds())
def test_a_credential_is_masked_json_escaped_and_as_a_key(kind: str) -> None:
    sample = credential(kind).sample
    once = json.dumps({"v": f"x {sample} y", "k": sample})
    twice = json.dumps(once)
    assert MARK not in _clean(once) and MARK not in _clean(twice)
    deep = default_masker().clean_deep({sample: [sample, {f"key_{sample}": 1}]})
    assert MARK not in json.dumps(deep)


@pytest.mark.parametrize(
    "text",
    [
        "task-force-abcdefghijklmnopq",  # "sk-" inside a word is not an API key
        "risk_test_abcdefghijklmnop",
        "desk-management-service-v2",
        "basic configuration",
        "the bearer of bad news",
    ],
)
def test_prefixes_inside_ordinary_words_are_left_alone(text: str) -> None:
    assert mask_secrets(text) == text


def test_only_the_value_of_a_named_credential_is_masked() -> None:
    assert _clean("GET /v1?api_key=abc123&page=2") == f"GET /v1?api_key={MASKED_SECRET}&page=2"
    assert _clean("Password=hunter2;Host=db") == f"Password={MASKED_SECRET};Host=db"
    assert _clean("key_sk-proj-abcdefghijklmnopqr x") == f"key_{MASKED_SECRET} x"


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40),
    st.sampled_from(credential_kinds()),
    st.sampled_from(("", *_GLUE_BEFORE)),
    st.sampled_from(("", *_GLUE_AFTER)),
    st.text(max_size=40),
)
def test_a_planted_credential_never_survives_whatever_surrounds_it(
    prefix: str, kind: str, before: str, after: str, suffix: str
) -> None:
    text = f"{prefix} {before}{credential(kind).sample}{after}{suffix}"
    assert MARK not in _clean(text)
    assert MARK not in _clean(json.dumps(text))
    assert MARK not in mask_secrets(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(list("@:/?#"))))
def test_userinfo_redaction_keeps_text_without_a_url_and_is_idempotent(text: str) -> None:
    once = redact_userinfo(text)
    assert redact_userinfo(once) == once
    if "://" not in text:
        assert once is text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:p@ss@collector:4318/x", "http://[redacted]@collector:4318/x"),
        ("https://u:" + "p" * 5000 + "@collector", "https://[redacted]@collector"),
        ("http://collector:4318/v1/traces?api_key=abc&x=1", "http://collector:4318/v1/traces?[redacted]"),
        ("http://collector:4318/v1#frag", "http://collector:4318/v1?[redacted]"),
    ],
)
def test_a_printed_endpoint_loses_userinfo_up_to_the_last_at_and_its_query(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# A password of capitals (and "@": userinfo runs to the last one); everything else planted is
# lower case, so a capital in the output is a piece of the password that escaped.
_PASSWORD = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ@", min_size=1, max_size=30).filter(
    lambda p: p.strip("@")
)
_LOWER = st.text(alphabet="abcdefghijkmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12)
# What may split a password: nothing, an escape a terminal shows as nothing, an OSC title, a C1
# sequence, an invisible character.
_SPLITTERS = ("", "\x1b[0m", "\x1b[31;1m", "\x1b]0;x\x07", "\x9b0m", "\u200b", "\u202e")


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(("http", "https", "postgres", "redis", "mongodb+srv", "amqp")),
    _LOWER,
    _PASSWORD,
    st.sampled_from(_SPLITTERS),
    st.integers(min_value=0, max_value=30),
    _LOWER,
    st.sampled_from(("", "see ", "x\n", "key_", '"url": "')),
)
def test_masking_planted_userinfo_never_leaves_the_password(
    scheme: str, user: str, password: str, splitter: str, cut: int, host: str, before: str
) -> None:
    """``mask`` (content kept byte for byte) and ``clean`` alike: no piece of the password stays,
    wherever a control sequence splits it."""
    cut = min(cut, len(password))
    text = f"{before}{scheme}://{user}:{password[:cut]}{splitter}{password[cut:]}@{host}/path?q=1"
    forms = [mask_secrets(text), _clean(text)]
    if "]" not in splitter:  # JSON-escaped, an OSC's "]" stays text, and a bracket ends userinfo
        forms.append(default_masker().mask(json.dumps(text)))
    for shown in forms:
        assert not re.search("[A-Z]", shown), (text, shown)
        assert f"{scheme}://" in shown and host in shown


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(("http", "https", "postgres")),
    _LOWER,
    st.lists(_LOWER, max_size=3).map("/".join),
    st.sampled_from(("", "mail bob@example.org ", "a@b ", "@")),
)
def test_masking_leaves_urls_without_userinfo_and_bare_at_signs_unchanged(
    scheme: str, host: str, path: str, words: str
) -> None:
    text = f"{words}{scheme}://{host}/{path}"
    assert mask_secrets(text) == text and _clean(text) == text
    assert mask_secrets(words) == words


def test_userinfo_masking_keeps_the_scheme_and_host_and_never_remasks_a_redaction() -> None:
    assert mask_secrets("postgres://admin:pw@db:5432/x") == f"postgres://{MASKED_SECRET}@db:5432/x"
    assert mask_secrets("a://b@") == f"a://{MASKED_SECRET}@"  # shorter than the short-value cut
    assert _clean("postgres://admin:pw@db:5432/x") == "postgres://[redacted]@db:5432/x"
    assert mask_secrets("postgres://[redacted]@db") == "postgres://[redacted]@db"


def test_userinfo_redaction_is_linear_in_the_text() -> None:
    masker = default_masker()
    for hostile in ("h://" + "@" * 200_000, ("a" * 31 + "://" + "b" * 50) * 4000, "x://" + "a:" * 100_000):
        cleaned = masker.clean(hostile)
        assert len(cleaned) <= len(hostile) + len(MASKED_SECRET)


# --- composed outputs ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", credential_kinds())
def test_a_credential_in_an_agent_type_never_reaches_a_span_name_or_attribute(kind: str) -> None:
    sample = credential(kind).sample
    events = run_stream(agent_start(1, "a1", "s0", agent_type=sample), agent_end(2, "a1"))
    found = export(events)
    assert found.spans
    for span in found.ended:
        assert MARK not in span.name
        assert MARK not in json.dumps(dict(span.attributes or {}), default=str)


def _resource_env() -> dict[str, str]:
    safe = [c.sample for c in CREDENTIALS if c.resource_safe and "\n" not in c.sample]
    pairs = [f"k{i}={sample}" for i, sample in enumerate(safe)]
    pairs += [f"{sample}=v{i}" for i, sample in enumerate(safe) if " " not in sample]
    return {"OTEL_RESOURCE_ATTRIBUTES": ",".join(pairs), "OTEL_SERVICE_NAME": credential("openai").sample}


@pytest.mark.parametrize("pipeline", ["direct", "sdk"])
@pytest.mark.parametrize("named", [True, False])
def test_the_resource_is_masked_in_otlp_on_both_pipelines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipeline: str, named: bool
) -> None:
    for name, value in _resource_env().items():
        monkeypatch.setenv(name, value)
    stream = write_stream(tmp_path / "s.jsonl", run_stream(agent_start(1, "a1", "s0"), agent_end(2, "a1")))
    out = tmp_path / "out.otlp.jsonl"
    every = " ".join(c.sample for c in CREDENTIALS)
    options = ExportOptions(
        out=out,
        pipeline=pipeline,
        service_name=every if named else None,
        project=f"proj {every}" if named else None,
    )
    from rulvar_otel.sources import open_jsonl

    report = export_run(StreamedRun(open_jsonl(str(stream))), options)
    assert report.ok, report.failures
    written = out.read_text(encoding="utf-8")
    assert "service.name" in written and MASKED_SECRET in written
    assert MARK not in written


def test_the_resource_is_masked_in_prometheus_target_info(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in _resource_env().items():
        monkeypatch.setenv(name, value)
    every = " ".join(c.sample for c in CREDENTIALS)
    pipeline = build_metrics_delivery(ExportOptions(prometheus_port=0), service_name=every)
    assert pipeline is not None
    try:
        pipeline.meter.create_counter("probe").add(1)
        scrape = httpx.get(f"http://127.0.0.1:{pipeline.prometheus_port}/metrics", timeout=5).text
    finally:
        pipeline.shutdown()
    assert "target_info" in scrape and MASKED_SECRET in scrape
    assert MARK not in scrape


# --- CLI messages and headers ------------------------------------------------------------------


@pytest.mark.parametrize("kind", credential_kinds())
def test_a_cli_error_never_echoes_a_credential(tmp_path: Path, kind: str) -> None:
    stream = write_stream(tmp_path / "s.jsonl", run_stream())
    sample = credential(kind).sample
    for args in (["--protocol", sample], ["--pipeline", sample], ["--endpoint", f"ftp://{sample}"]):
        code, out, err = run_cli("export", str(stream), "--progress", "off", *args)
        assert code == 2, err
        assert MARK not in out + err


@pytest.mark.parametrize(
    ("header", "shown"),
    [
        (f"authorization: Bearer sk-{MARK}abcdefghijklmnop=1", "'authorization'"),
        (f"x-api-key: {MARK}", "no '='"),
        (f"x-token {MARK}=v", "'x-token'"),
        (f"x-ok=va\x01lue {MARK}", "'x-ok'"),
        (f"x-ok=line\r\nx-injected: {MARK}", "'x-ok'"),
    ],
)
def test_a_bad_header_is_refused_at_parse_time_without_its_value(
    tmp_path: Path, header: str, shown: str
) -> None:
    with pytest.raises(InvalidHeaderError) as raised:
        parse_header(header)
    assert isinstance(raised.value, ConfigError) and MARK not in str(raised.value)
    stream = write_stream(tmp_path / "s.jsonl", run_stream())
    code, out, err = run_cli(
        "export", str(stream), "--progress", "off", "--endpoint", "http://127.0.0.1:9", "--header", header
    )
    assert code == 2, err
    assert shown in err and MARK not in out + err


def test_a_bad_header_name_passed_to_export_options_is_a_typed_error() -> None:
    with pytest.raises(InvalidHeaderError) as raised:
        ExportOptions(headers={f"bad name {MARK}": "v"})
    assert raised.value.name == "bad" and MARK not in str(raised.value)


def test_a_header_in_the_environment_that_cannot_be_sent_exits_2_without_quoting_it(tmp_path: Path) -> None:
    stream = write_stream(tmp_path / "s.jsonl", run_stream())
    # URL-encoded, as the specification asks: decoded, the value holds a control character.
    env = {**os.environ, "OTEL_EXPORTER_OTLP_HEADERS": f"x-ok=1,x-key=va%01lue{MARK}"}
    done = _cli_subprocess(
        ["export", str(stream), "--progress", "off", "--endpoint", f"http://127.0.0.1:{closed_port()}"], env
    )
    assert done.returncode == 2, done.stderr
    assert b"OTEL_EXPORTER_OTLP_HEADERS" in done.stderr and b"'x-key'" in done.stderr
    assert MARK.encode() not in done.stderr + done.stdout


def _cli_subprocess(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    code = "import sys; from rulvar_otel.cli import main; sys.argv[0] = 'rulvar-otel'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, env=env, timeout=120, check=False
    )


def test_grpc_core_never_writes_a_header_to_stderr(tmp_path: Path) -> None:
    stream = write_stream(tmp_path / "s.jsonl", run_stream(agent_start(1, "a1", "s0"), agent_end(2, "a1")))
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    args = ["export", str(stream), "--progress", "off", "--protocol", "grpc", "--export-timeout", "2"]
    args += ["--endpoint", f"http://127.0.0.1:{closed_port()}"]
    args += ["--header", f"authorization: bearer sk-{MARK}abcdefghijklmnop=1"]
    done = _cli_subprocess(args, env)
    assert done.returncode == 2, done.stderr
    assert MARK.encode() not in (done.stderr + done.stdout).upper()  # the core lowercases keys
    assert b"Metadata key" not in done.stderr


_GRPC_PROBE = """
import sys
if sys.argv[1] == "cli":
    import rulvar_otel.cli  # noqa: F401
import grpc
channel = grpc.insecure_channel("127.0.0.1:9")
try:
    channel.unary_unary("/probe/Probe")(b"", metadata=(("bad key MARK", "v"),), timeout=1)
except Exception:
    pass
"""


def test_the_cli_keeps_grpc_core_logging_off_file_descriptor_2() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    probe = _GRPC_PROBE.replace("MARK", MARK)
    bare = subprocess.run([sys.executable, "-c", probe, "bare"], capture_output=True, env=env, timeout=60)
    assert MARK.encode() in bare.stderr.upper()  # the core does write it without the CLI's setting
    cli = subprocess.run([sys.executable, "-c", probe, "cli"], capture_output=True, env=env, timeout=60)
    assert MARK.encode() not in cli.stderr.upper(), cli.stderr


def test_every_shape_docs_masking_md_lists_is_masked_as_shown() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "masking.md").read_text(encoding="utf-8")
    section = doc.split("## What the default set masks", 1)[1].split("The named credentials", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 18
    for row in rows:
        cells = row.split(" | ")
        example = re.findall(r"`([^`]+)`", cells[1])[0]
        shown = re.findall(r"`([^`]+)`", cells[2])[0]
        assert _clean(example) == shown, row


def test_assets_write_names_its_directory_masked(tmp_path: Path) -> None:
    directory = tmp_path / f"token_{credential('github-classic').sample}"
    code, out, err = run_cli("assets", "write", str(directory), "--only", "alerts")
    assert code == 0, err
    assert "wrote" in out and MASKED_SECRET in out
    assert MARK not in out + err


def test_a_host_pattern_can_mask_only_its_secret_group() -> None:
    masker = compile_secret_masker([r"(?i)x-team-token:\s*(?P<secret>\S+)", r"tok_(?P<secret>x*)"])
    assert masker.clean("x-team-token: abc123 ok") == f"x-team-token: {MASKED_SECRET} ok"
    assert masker.clean("tok_ and tok_xx") == f"tok_ and tok_{MASKED_SECRET}"  # an empty group masks nothing


_SHORT_PIECES = [
    "://",
    "@",
    "a://b:c@",
    "sk-",
    "sk_live_",
    "AKIA",
    "ghp_",
    "xoxb-",
    "xapp-1-",
    "hf_",
    "npm_",
    "ya29.",
    "eyJ",
    "AIza",
]
_SHORT_PIECES += [
    "bearer ",
    "authorization:",
    "-----BEGIN ",
    "PRIVATE KEY-----",
    "a",
    "0",
    "_",
    "-",
    ".",
    " ",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_SHORT_PIECES), max_size=6).map("".join).filter(lambda s: len(s) < 15))
def test_skipping_short_values_without_an_equals_sign_never_skips_a_match(text: str) -> None:
    masker = default_masker()
    assert masker.mask(text) == masker._mask_uncached(text)


def test_the_secrets_a_command_was_given_never_appear_in_its_messages(tmp_path: Path) -> None:
    # Not credential-shaped at all: only knowing they were configured can hide them.
    query_value, header_value = "plainquery4242", "plainheader4242"
    stream = write_stream(tmp_path / "s.jsonl", run_stream(agent_start(1, "a1", "s0"), agent_end(2, "a1")))
    endpoint = f"http://127.0.0.1:{closed_port()}/v1/traces?code={query_value}"
    args = [
        "export",
        str(stream),
        "--progress",
        "off",
        "--protocol",
        "http/protobuf",
        "--export-timeout",
        "2",
    ]
    done = _cli_subprocess(
        [*args, "--endpoint", endpoint, "--header", f"x-team=Team {header_value}"], dict(os.environ)
    )
    assert done.returncode == 1, done.stderr
    assert b"not delivered" in done.stderr
    assert query_value.encode() not in done.stderr and header_value.encode() not in done.stderr
