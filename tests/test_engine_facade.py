"""``rulvar_otel.engine`` is the engine's public facade: every exported name resolves, its usage
example runs as written, and names users imported from the engine keep working."""

from __future__ import annotations

import textwrap

import pytest

import rulvar_otel.engine as engine
from rulvar_otel import errors
from rulvar_otel.engine import AgentOptions, Tool, tool
from rulvar_otel.errors import ConfigError


def test_every_exported_name_resolves() -> None:
    assert sorted(engine.__all__) == sorted(set(engine.__all__))
    assert [name for name in engine.__all__ if getattr(engine, name, None) is None] == []


def test_the_docstring_example_runs_as_written() -> None:
    doc = engine.__doc__ or ""
    block = doc.split("Example::", 1)[1].split("\n\n``ctx.agent``", 1)[0]
    exec(compile(textwrap.dedent(block), "<rulvar_otel.engine example>", "exec"), {})


def test_the_engine_error_family_lives_in_errors_and_is_re_exported() -> None:
    for name in (
        "WorkflowError",
        "BudgetExhaustedError",
        "AgentFailedError",
        "JournalError",
        "ReplayMissError",
    ):
        assert getattr(engine, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), errors.RulvarOtelError)
    assert issubclass(errors.ExposureDrainedError, errors.BudgetExhaustedError)
    assert issubclass(errors.JournalError, errors.SourceError)


@tool
def lookup(term: str) -> str:
    return term


def test_agent_options_are_frozen_validated_and_overridable_by_name() -> None:
    base = AgentOptions(agent_type="reader", tools=[lookup], tool_caps={"lookup": 2})
    assert isinstance(base.tools, tuple) and isinstance(base.tools[0], Tool)
    with pytest.raises(AttributeError):
        base.role = "plan"  # type: ignore[misc]
    with pytest.raises(TypeError):
        base.tool_caps["lookup"] = 5  # type: ignore[index]
    derived = base.with_overrides({"role": "plan", "label": "r1"})
    assert (derived.role, derived.label, derived.agent_type) == ("plan", "r1", "reader")
    assert base.role == "loop"
    with pytest.raises(ConfigError, match="unknown agent option"):
        base.with_overrides({"max_turn": 3})
    with pytest.raises(ConfigError, match="two tools share a name"):
        AgentOptions(tools=[lookup, lookup])
    with pytest.raises(ConfigError, match="max_turns"):
        AgentOptions(max_turns=0)


def test_ctx_agent_takes_a_shared_options_object_and_keyword_overrides() -> None:
    import asyncio

    from rulvar_otel.core.events import event_to_wire
    from rulvar_otel.engine import Reply, ScriptedAdapter, create_engine, workflow

    shared = AgentOptions(agent_type="reader", label="shared")

    @workflow("shared-options")
    async def body(ctx: object, args: object) -> object:
        first = await ctx.agent("one", shared)  # type: ignore[attr-defined]
        second = await ctx.agent("two", shared, role="plan", label="second")  # type: ignore[attr-defined]
        return [first, second]

    async def scenario() -> list[dict[str, object]]:
        adapter = ScriptedAdapter("fake", script=[Reply("a"), Reply("b")])
        handle = create_engine([adapter]).run(body)
        assert (await handle.result).value == ["a", "b"]
        return [event_to_wire(e) async for e in handle.events]

    starts = [e for e in asyncio.run(scenario()) if e["type"] == "agent:start"]
    assert [(e["agentType"], e["label"], e["role"]) for e in starts] == [
        ("reader", "shared", "loop"),
        ("reader", "second", "plan"),
    ]
