"""The core event model, the terminal-envelope gate, masking and terminal sanitizing."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rulvar_otel.core import (
    MASKED_SECRET,
    compile_secret_masker,
    mask_secrets,
    mask_secrets_deep,
    parse_event,
    parse_terminal_envelope,
    sanitize_terminal_text,
)
from rulvar_otel.core.events import (
    AgentEnd,
    RunEnd,
    ToolEnd,
    UnknownEvent,
    event_to_wire,
)
from rulvar_otel.errors import ConfigError, EventError
from tests import _support as fx

# --- events ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", fx.stream_names())
def test_every_fixture_event_parses_and_round_trips(name: str) -> None:
    for raw in fx.events(name):
        event = parse_event(raw)
        assert event_to_wire(event) == raw
        assert parse_event(json.dumps(raw)) == event


def test_typed_fields_and_frozen_models() -> None:
    tool = parse_event(fx.events("tools")[7])
    assert isinstance(tool, ToolEnd)
    assert (tool.tool_name, tool.tool_call_id, tool.outcome, tool.duration_ms) == (
        "search",
        "id-0-0",
        "ok",
        42,
    )
    with pytest.raises(Exception, match="frozen"):
        tool.outcome = "error"  # type: ignore[misc]
    end = parse_event(fx.events("tools")[-1])
    assert isinstance(end, RunEnd) and end.envelope is not None and end.status == "ok"


def test_unknown_type_and_unknown_fields_are_kept() -> None:
    raw = {
        "runId": "r",
        "seq": 1,
        "ts": "2026-01-01T00:00:00.000Z",
        "spanId": "s",
        "type": "new:thing",
        "x": [1],
    }
    event = parse_event(raw)
    assert isinstance(event, UnknownEvent)
    assert event.model_extra == {"x": [1]}
    assert event_to_wire(event) == raw
    agent = parse_event({**raw, "type": "agent:end", "agentType": "a", "status": "ok", "future": {"k": 1}})
    assert isinstance(agent, AgentEnd) and agent.model_extra == {"x": [1], "future": {"k": 1}}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ({"seq": 1, "ts": "t", "spanId": "s", "type": "log"}, "runId: Field required"),
        ({"runId": "r", "seq": "x", "ts": "t", "spanId": "s", "type": "zzz"}, "seq"),
        ({"runId": "r", "seq": 1, "ts": "t", "spanId": "s", "type": "tool:end"}, "toolName: Field required"),
    ],
)
def test_bad_events_name_the_defect(value: Any, message: str) -> None:
    with pytest.raises(EventError, match=re.escape(message)):
        parse_event(value)


# --- the terminal envelope gate ------------------------------------------------------------


def _envelope() -> dict[str, Any]:
    return dict(fx.outcome("tools").envelope)  # type: ignore[union-attr, arg-type]


def test_envelope_gate_accepts_real_envelopes_and_keeps_unknown_fields() -> None:
    env = parse_terminal_envelope({**_envelope(), "tomorrowsField": {"a": 1}})
    assert env.totalUsd == 0.00042 and env.agentsSpawned == 3
    assert env.model_extra == {"tomorrowsField": {"a": 1}}
    for name in fx.stream_names():
        for event in fx.events(name):
            if event["type"] == "run:end" and "envelope" in event and event["envelope"].get("settled", True):
                parse_terminal_envelope(event["envelope"])


@pytest.mark.parametrize(
    ("patch", "field", "defect"),
    [
        ({"status": "green"}, "status", "must be one of"),
        ({"completion": "done"}, "completion", "must be one of"),
        ({"totalUsd": math.nan}, "totalUsd", "finite"),
        ({"grossUsd": math.inf}, "grossUsd", "finite"),
        ({"totalUsd": -1}, "totalUsd", "nonnegative"),
        ({"totalUsd": "1"}, "totalUsd", "must be a number"),
        ({"totalUsd": 5, "grossUsd": 1}, "totalUsd", "must not exceed grossUsd"),
        ({"agentsSpawned": -2}, "agentsSpawned", "nonnegative"),
        ({"agentsSpawned": 1.5}, "agentsSpawned", "integer"),
        ({"wireRequests": True}, "wireRequests", "integer"),
        (
            {"usage": {"inputTokens": -1, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0}},
            "usage.inputTokens",
            "nonnegative",
        ),
        ({"settledReason": "superseded"}, "settledReason", "only allowed beside settled: false"),
        ({"settled": False, "settledReason": "other"}, "settledReason", "must be one of"),
        ({"costBasis": "invoice"}, "costBasis", "must be one of"),
        ({"provenance": "memory"}, "provenance", "must be one of"),
        ({"error": {"code": "E", "message": 1, "retryable": False}}, "error.message", "must be a str"),
        ({"error": "boom"}, "error", "typed wire error"),
        ({"costByModel": {"m": -1}}, "m", "nonnegative"),
    ],
)
def test_envelope_gate_names_field_and_defect(patch: dict[str, Any], field: str, defect: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_terminal_envelope({**_envelope(), **patch})
    assert repr(field) in str(info.value) and defect in str(info.value)


def test_envelope_gate_missing_fields_and_non_objects() -> None:
    env = _envelope()
    del env["usage"]
    with pytest.raises(ConfigError, match="'usage'"):
        parse_terminal_envelope(env)
    with pytest.raises(ConfigError, match="must be an object"):
        parse_terminal_envelope([])  # type: ignore[arg-type]
    ok = parse_terminal_envelope({**_envelope(), "settled": False, "settledReason": "superseded"})
    assert ok.settledReason == "superseded"


# --- masking -------------------------------------------------------------------------------

KEYS = [
    "sk-" + "A1b2" * 5,
    "sk-ant-api03-" + "x" * 20,
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "ghp_" + "a" * 36,
    "github_pat_" + "b" * 30,
    "xoxb-" + "1" * 12,
    "AIza" + "c" * 35,
    "Bearer " + "d" * 24,
    "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----",
]


@pytest.mark.parametrize("key", KEYS)
def test_default_set_masks_each_credential_shape(key: str) -> None:
    assert mask_secrets(f"use {key} now") == f"use {MASKED_SECRET} now"


def test_clean_text_and_near_misses_are_untouched() -> None:
    for clean in ("sk-short", "task-force", "AKIA123", "hello world", "Bearer x"):
        assert mask_secrets(clean) == clean


@settings(max_examples=200)
@given(st.text(), st.sampled_from(KEYS), st.text())
def test_planted_key_never_survives(prefix: str, key: str, suffix: str) -> None:
    masked = mask_secrets(f"{prefix} {key} {suffix}")
    assert key not in masked


@settings(max_examples=200)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet="abc xyz", max_size=10),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(alphabet="abc", max_size=3), inner, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_mask_deep_returns_the_same_object_when_nothing_matched(value: Any) -> None:
    assert mask_secrets_deep(value) is value


def test_mask_deep_masks_keys_and_nested_values_without_touching_the_input() -> None:
    value = {"ok": [1, {"k": KEYS[0]}], KEYS[2]: "v", "t": (KEYS[3],)}
    masked = mask_secrets_deep(value)
    assert masked == {"ok": [1, {"k": MASKED_SECRET}], MASKED_SECRET: "v", "t": (MASKED_SECRET,)}
    assert value["ok"][1] == {"k": KEYS[0]}  # type: ignore[index]
    clean_branch: list[Any] = [1, 2]
    assert mask_secrets_deep({"a": clean_branch, "b": KEYS[0]})["a"] is clean_branch


def test_host_patterns_apply_after_defaults_in_order() -> None:
    masker = compile_secret_masker([r"\b\d{3}-\d{2}-\d{4}\b", r"[\w.]+@example\.com"])
    assert masker.mask("ssn 123-45-6789 mail a.b@example.com key " + KEYS[0]) == (
        f"ssn {MASKED_SECRET} mail {MASKED_SECRET} key {MASKED_SECRET}"
    )
    assert masker.patterns == (r"\b\d{3}-\d{2}-\d{4}\b", r"[\w.]+@example\.com")


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        (["("], r"patterns\[0\] is not a valid pattern"),
        (["ok", ""], r"patterns\[1\] is empty"),
        ([r"(?<=x)y"], r"patterns\[0\].*lookbehind"),
        ([r"(a)\1"], r"patterns\[0\].*backreference"),
        (["a*"], r"patterns\[0\] can match the empty string"),
        ("abc", "not one string"),
        ([3], r"patterns\[0\] must be a string"),
    ],
)
def test_bad_patterns_are_config_errors(patterns: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compile_secret_masker(patterns)


# --- terminal safety -------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain text", "plain text"),
        ("a\x1b[31mred\x1b[0m", "a red "),
        ("title\x1b]0;pwned\x07 next", "title  next"),
        ("line1\nline2\r\n\tline3", "line1 line2 line3"),
        ("dcs\x1bPq#0;2;0;0;0\x1b\\end", "dcs end"),
        ("c1\x9b2Jcsi \x9d8;;http://x\x9c", "c1 csi  "),
        ("nul\x00\x7fdel", "nul del"),
        ("é ü 日本", "é ü 日本"),
    ],
)
def test_sanitize_terminal_text(raw: str, clean: str) -> None:
    assert sanitize_terminal_text(raw) == clean


@settings(max_examples=500)
@given(
    st.text(
        alphabet=st.characters(codec="utf-8") | st.sampled_from(["\x1b", "[", "]", "\x07", "\x9b", "\n", "P"])
    )
)
def test_sanitized_text_has_no_controls_and_one_line(raw: str) -> None:
    out = sanitize_terminal_text(raw)
    assert _CONTROL.search(out) is None
    assert "\n" not in out and "\r" not in out


def test_shortest_default_match_bound_holds() -> None:
    # The masker skips strings shorter than the shortest default match: prove the bound is real.
    from rulvar_otel.core.masking import _SHORTEST_DEFAULT_MATCH

    assert mask_secrets("pwd=x") == f"pwd={MASKED_SECRET}"
    assert len("pwd=x") == _SHORTEST_DEFAULT_MATCH
    assert mask_secrets("pwd=") == "pwd="
    # Below the shortest shape without "=", only a "name=value" credential can match.
    assert mask_secrets("xoxb-" + "1" * 10) == MASKED_SECRET
    assert mask_secrets("xoxb-" + "1" * 9) == "xoxb-" + "1" * 9
    for key in KEYS:
        assert len(key) >= _SHORTEST_DEFAULT_MATCH
    host = compile_secret_masker([r"\d{3}"])
    assert host.mask("a 123") == f"a {MASKED_SECRET}"
