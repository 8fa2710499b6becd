"""`curate` verbs of the answer checker. Filled in by the stage's issue; `register` adds them to the app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's verbs to the `curate` app."""
