"""Journal-safe values: anything a workflow returns becomes JSON, and the completion facts it reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

__all__ = ["COMPLETION_LISTS", "completion_facts", "describe_failure", "jsonable"]

COMPLETIONS = ("complete", "partial", "rejected")
COMPLETION_LISTS = ("degradedReasons", "salvagedPartialChildren", "salvagedTerminalOutputChildren")


def jsonable(value: Any) -> Any:
    """``value`` as JSON-compatible data; a value pydantic cannot encode is journaled as its repr."""
    try:
        return to_jsonable_python(value)
    except Exception:  # noqa: BLE001 - a journal value must be JSON; fall back to its text
        return repr(value)


def completion_facts(source: Any) -> dict[str, Any]:
    """A valid ``completion`` literal plus its well-formed companions from a result, else nothing."""
    if not isinstance(source, Mapping) or source.get("completion") not in COMPLETIONS:
        return {}
    facts: dict[str, Any] = {"completion": source["completion"]}
    counts = source.get("childStatusCounts")
    if isinstance(counts, Mapping) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in counts.items()
    ):
        facts["childStatusCounts"] = dict(counts)
    for name in COMPLETION_LISTS:
        items = source.get(name)
        if isinstance(items, list) and all(isinstance(i, str) for i in items):
            facts[name] = list(items)
    return facts


def describe_failure(exc: BaseException) -> str:
    """``Type: message`` for an error's wire message, never echoing the input a validator saw."""
    if isinstance(exc, ValidationError):
        problems = [
            f"{'.'.join(str(part) for part in error['loc']) or 'value'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        return f"{type(exc).__name__}: {exc.error_count()} error(s): {'; '.join(problems[:5])}"
    return f"{type(exc).__name__}: {exc}"
