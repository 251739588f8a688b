"""Lazy facade attributes (PEP 562), in a module that imports only the standard library.

A public package lists each name it exports beside the module that defines it; the module is
imported on the first access of one of its names, so importing a facade costs only what is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any

__all__ = ["lazy_facade"]


def lazy_facade(
    package: str, table: Mapping[str, str], namespace: dict[str, Any], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``table`` maps a name to its module."""

    def facade_getattr(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value  # later accesses are plain module attributes
        return value

    def facade_dir() -> list[str]:
        return sorted(public)

    return facade_getattr, facade_dir
