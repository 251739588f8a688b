"""Log messages name what happened; the logger's name says where, so no message repeats it."""

from __future__ import annotations

import ast
import io
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rulvar_otel.core.drain import FanOut
from rulvar_otel.core.log_masking import masked_logging

PACKAGE = Path(__file__).resolve().parent.parent / "rulvar_otel"
_LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


class _FailingSink:
    def feed(self, event: Mapping[str, Any]) -> None:
        raise RuntimeError("boom")

    def finish(self, outcome: object) -> None:
        raise RuntimeError("boom")


def test_a_logged_line_names_the_logger_once(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with (
        caplog.at_level(logging.DEBUG, logger="rulvar_otel"),
        masked_logging(stream=out, level=logging.DEBUG),
    ):
        sinks = FanOut([_FailingSink()])
        sinks.feed({"type": "log"})
        sinks.finish(None)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("rulvar-otel: ")]
    assert lines == [
        "rulvar-otel: rulvar_otel: a sink failed on an event (RuntimeError: boom)",
        "rulvar-otel: rulvar_otel: _FailingSink failed to finish (RuntimeError: boom)",
    ]


def _log_messages(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _LEVELS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"_log", "log", "logger", "_logger"}
        ):
            args = node.args[1:] if node.func.attr == "log" else node.args
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                found.append((node.lineno, args[0].value))
    return found


def test_no_log_message_in_the_package_opens_with_a_name_prefix() -> None:
    checked = 0
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, message in _log_messages(ast.parse(path.read_text(encoding="utf-8"))):
            checked += 1
            if message.lower().startswith(("rulvar_otel:", "rulvar-otel:", "rulvar_otel ", "rulvar-otel ")):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {message!r}")
    assert checked > 20  # the scan sees the package's log calls
    assert offenders == []
