"""How ``--help`` reads: one metavar style, no type tags, and ``--version``.

Typer prints a type tag beside every parameter (``<bool>`` on each flag, ``<str>`` beside an
argument already named by its metavar). Here a flag shows no value column, an argument shows
its name only (bare in the usage line when required, not in braces), and an option shows its
metavar, or the upper-case name of its type when it declares none, so every value reads ``URL``,
``FILE``, ``N``, never ``<int>``.

Help reads whole at any width, piped or not: the app renders it as plain text (no boxed tables
that squeeze a column and cut ``--prometheus-linger`` to ``--prometheus-lin…``), paragraphs of a
docstring are re-flowed to the width, and the wrapper never splits a word: not at a hyphen (a
value such as ``./rulvar-traces.otlp.jsonl`` stays whole, so ``--help | grep`` finds it) and not
when it is longer than the column (it takes a line of its own instead).
"""

from __future__ import annotations

import contextlib
import importlib
import textwrap
from typing import Any, Final

import typer
from typer.core import TyperArgument, TyperOption

__all__ = ["install_help_style", "package_version", "version_option_callback"]

_DISTRIBUTION: Final = "rulvar-otel"


def package_version() -> str:
    """The installed distribution's version (``unknown`` in a bare source tree)."""
    # Only --version reads the distribution's metadata: every other command skips the import.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def version_option_callback(value: bool) -> None:
    """Eager ``--version``: print ``rulvar-otel <version> (<build>)`` and exit 0."""
    if value:
        from rulvar_otel._build import build_label

        print(f"{_DISTRIBUTION} {package_version()} ({build_label()})")
        raise typer.Exit(0)


def _option_type(self: TyperOption, ctx: object) -> str | None:
    if self.metavar is not None:
        return self.metavar
    if self.is_flag or self.count:
        return None
    name = getattr(getattr(self, "type", None), "name", None)
    label = name.upper() if isinstance(name, str) else "VALUE"
    return label + ("..." if self.nargs != 1 else "")


def _argument_type(self: TyperArgument, ctx: object) -> str | None:
    return None  # the argument's column already shows its metavar


def _argument_usage(self: TyperArgument, ctx: object = None) -> list[str]:
    # A required argument reads as its bare metavar (``STREAM.jsonl|-``), an optional one in
    # brackets, as in every other usage line; braces would read as a set of choices.
    label = self.metavar if self.metavar is not None else (self.name or "")
    name = label if self.required else f"[{label}]"
    return [name + ("..." if self.nargs != 1 else "")]


def _install_whole_word_wrapping() -> None:
    """Make the help formatter's text wrapper keep every word whole (an option name, a value, a
    path or URL): no split at a hyphen, and a word longer than the column moves to its own line."""
    module: Any = None
    for name in ("typer._click._textwrap", "click._textwrap"):  # click vendored in newer Typer
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            break
    if module is None or getattr(module.TextWrapper, "keeps_words_whole", False):
        return
    base: Any = module.TextWrapper

    class WholeWordWrapper(base):  # type: ignore[misc, valid-type]
        keeps_words_whole = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("break_on_hyphens", False)
            kwargs.setdefault("break_long_words", False)
            super().__init__(*args, **kwargs)

        def _handle_long_word(self, chunks: list[str], line: list[str], length: int, width: int) -> None:
            # The standard library's handling: with break_long_words off, a long word moves whole.
            textwrap.TextWrapper._handle_long_word(self, chunks, line, length, width)

    module.TextWrapper = WholeWordWrapper  # the formatter looks it up at each call


_installed = False


def install_help_style() -> None:
    """Apply the help style to every Typer parameter (idempotent)."""
    global _installed
    if _installed:
        return
    option_cls: Any = TyperOption
    argument_cls: Any = TyperArgument
    option_cls.display_type_rich = _option_type
    argument_cls.display_type_rich = _argument_type
    argument_cls.get_usage_pieces = _argument_usage
    _install_whole_word_wrapping()
    _installed = True
