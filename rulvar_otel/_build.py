"""Which build of the mapping hot path this install runs: mypyc-compiled or pure Python.

Read from the files next to the mapper, without importing it (``--version`` stays instant): the
import system prefers an extension module over the source beside it.
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__all__ = ["build_kind"]


def build_kind() -> str:
    """``compiled: mypyc`` when the mapper is an extension module, else ``pure Python``."""
    otel = Path(__file__).resolve().parent / "otel"
    if any((otel / f"_mapper{suffix}").is_file() for suffix in EXTENSION_SUFFIXES):
        return "compiled: mypyc"
    return "pure Python"
