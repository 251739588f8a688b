"""Which build of the package runs: the mypyc-compiled hot path or the pure-Python sources.

A regular wheel built where a C compiler works ships the mapping modules compiled with mypyc
beside their sources (the import system prefers the extension module); an editable install, or a
wheel built without a compiler, runs the sources. Nothing is imported to tell: the mapper module
is located the way ``import`` would find it.
"""

from __future__ import annotations

import sys
from importlib.machinery import EXTENSION_SUFFIXES, PathFinder
from pathlib import Path

__all__ = ["build_label", "is_compiled"]

_MAPPER = "rulvar_otel.otel._mapper"


def is_compiled() -> bool:
    """Whether the span mapper loads (or loaded) from a compiled extension module."""
    module = sys.modules.get(_MAPPER)
    origin = getattr(module, "__file__", None)
    if origin is None:
        spec = PathFinder.find_spec(_MAPPER, [str(Path(__file__).parent / "otel")])
        origin = spec.origin if spec is not None else None
    return origin is not None and origin.endswith(tuple(EXTENSION_SUFFIXES))


def build_label() -> str:
    """``compiled with mypyc`` or ``pure Python``, as ``--version`` prints it."""
    return "compiled with mypyc" if is_compiled() else "pure Python"
