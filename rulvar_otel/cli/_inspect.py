"""Placeholder: this command's module registers nothing yet."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's command to ``app``."""
    del app
