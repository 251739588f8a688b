"""Tools an agent can call, and the permission chain that decides each call.

A tool is a Python callable (sync or async) with keyword arguments; its argument schema is derived
from the signature with pydantic, so a model's malformed arguments become a tool ``error`` outcome,
never a crashed run. The permission chain decides ``allow``, ``deny`` or ``ask`` per call: deny
rules first, then ask rules, then allow rules, then the tool's own default.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from rulvar_otel.errors import ConfigError

__all__ = ["Decision", "Permissions", "Rule", "Tool", "tool"]

Verdict: TypeAlias = Literal["allow", "deny", "ask"]


class Tool:
    """A callable the model may invoke by ``name``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        risk: str | None = None,
        needs_approval: bool = False,
        max_calls: int | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        if not self.name:
            raise ConfigError("a tool needs a non-empty name")
        self.description = description or inspect.getdoc(fn) or ""
        self.risk = risk
        self.needs_approval = needs_approval
        if max_calls is not None and max_calls < 0:
            raise ConfigError(f"tool {self.name!r}: max_calls must be >= 0")
        self.max_calls = max_calls
        self._args_model = _args_model(fn, self.name)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments (what a provider's tool spec needs)."""
        return self._args_model.model_json_schema()

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments; raises ValueError naming the defect."""
        try:
            model = self._args_model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ValueError(
                f"invalid arguments for tool {self.name!r}: {exc.error_count()} error(s)"
            ) from exc
        return {name: getattr(model, name) for name in type(model).model_fields}

    async def invoke(self, arguments: Mapping[str, Any]) -> Any:
        result = self.fn(**self.validate(arguments))
        if inspect.isawaitable(result):
            result = await result
        return result


def _args_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except (NameError, TypeError):
        hints = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{name}_args", __config__=ConfigDict(extra="ignore"), **fields
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    risk: str | None = None,
    needs_approval: bool = False,
    max_calls: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    risk: str | None = None,
    needs_approval: bool = False,
    max_calls: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Define a tool: ``@tool`` or ``@tool(name=..., risk=..., needs_approval=..., max_calls=...)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            risk=risk,
            needs_approval=needs_approval,
            max_calls=max_calls,
        )

    return wrap(fn) if fn is not None else wrap


@dataclass(frozen=True)
class Rule:
    """Matches calls of ``tool`` (``"*"`` for any) whose arguments include every ``args`` item."""

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict[str, Any])

    def matches(self, name: str, arguments: Mapping[str, Any]) -> bool:
        if self.tool not in ("*", name):
            return False
        return all(arguments.get(k) == v for k, v in self.args.items())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool}
        if self.args:
            out["args"] = dict(self.args)
        return out


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    decided_by: str
    rule: Rule | None = None


RuleLike: TypeAlias = Rule | str


def _rules(items: Iterable[RuleLike]) -> tuple[Rule, ...]:
    out: list[Rule] = []
    for item in items:
        if isinstance(item, str):
            out.append(Rule(item))
        elif isinstance(item, Rule):
            out.append(item)
        else:
            raise ConfigError(f"a permission rule must be a tool name or a Rule, got {type(item).__name__}")
    return tuple(out)


class Permissions:
    """The permission chain: deny rules, then ask rules, then allow rules, then the default.

    The default is ``ask`` for tools declared ``needs_approval`` and ``allow`` otherwise (``decidedBy:
    default``). An approval (``ask``) suspends the call until ``handle.resolve_external`` answers.
    """

    def __init__(
        self,
        *,
        allow: Iterable[RuleLike] = (),
        deny: Iterable[RuleLike] = (),
        ask: Iterable[RuleLike] = (),
    ) -> None:
        self.allow = _rules(allow)
        self.deny = _rules(deny)
        self.ask = _rules(ask)

    def merged(self, other: Permissions | None) -> Permissions:
        """This chain with ``other``'s rules first (agent rules before engine rules)."""
        if other is None:
            return self
        merged = Permissions()
        merged.allow = other.allow + self.allow
        merged.deny = other.deny + self.deny
        merged.ask = other.ask + self.ask
        return merged

    def decide(self, tool_def: Tool, arguments: Mapping[str, Any]) -> Decision:
        for verdict, rules in (("deny", self.deny), ("ask", self.ask), ("allow", self.allow)):
            for rule in rules:
                if rule.matches(tool_def.name, arguments):
                    return Decision(verdict, f"{verdict}-rule", rule)  # type: ignore[arg-type]
        return Decision("ask" if tool_def.needs_approval else "allow", "default")


ToolFn: TypeAlias = Callable[..., Any] | Callable[..., Awaitable[Any]]
