"""Shared pieces of the ``curate`` CLI: common options, output in text or JSON, clear failures.

Every verb module (``curate/cli/*.py``) builds on these so all verbs take ``--home`` and ``--json`` the same way
and fail the same way (``curate.console.run_app``): a one-line message on stderr and exit code 2 for a user error (a
``CurateError``, a usage error), a traceback for a bug, "interrupted" and 130 for Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from curate.console import error_line, out
from curate.errors import CurateError
from curate.io import Workspace
from curate.progress import console


Home = Annotated[
    str | None,
    typer.Option("--home", envvar="CURATE_HOME", help="Workspace root (default ./workspace).", show_default=False),
]
Json = Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for scripts).")]
Force = Annotated[bool, typer.Option("--force", help="Redo the work even if the outputs are up to date.")]
Workers = Annotated[int | None, typer.Option(help="Answer-checking processes (default: one per core).")]
LockWait = Annotated[
    float | None,
    typer.Option(
        "--lock-timeout",
        envvar="CURATE_LOCK_TIMEOUT",
        help="Seconds to wait while another process writes the same pool, selection or curriculum (default 600; "
        "negative: no limit).",
        show_default=False,
    ),
]


def workspace(home: str | None, lock_timeout: float | None = None, recipe_home: str | None = None) -> Workspace:
    """The workspace of ``--home``, else ``$CURATE_HOME``, else the recipe's ``home:`` (``curate run``), else
    ``./workspace`` (``Workspace.resolve``), with the verb's ``--lock-timeout`` if given."""
    ws = Workspace.resolve(home, recipe_home=recipe_home)
    return ws if lock_timeout is None else dataclasses.replace(ws, lock_timeout=lock_timeout)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` and exit with ``code`` (2: a user error)."""
    raise typer.Exit(error_line(message, code))


def emit(payload: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``payload`` as JSON on stdout, or hand it to ``render`` for a human-readable view."""
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        render(payload)


# What a verb turns into one line + exit 2 (``run_app`` does the same for whatever a verb lets through). Only
# user errors: a KeyError or ValueError from a bug keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (CurateError,)  # LockTimeout included


def _shown(value: Any) -> str:
    """A value as the summary prints it: ``-`` for an unset one (never Python's ``None``)."""
    return "-" if value is None else str(value)


def _pairs(value: dict) -> str:
    """A mapping on one line: ``k=v, ...``; a zero-variance forecast (``curate.score.forecast``) in words, which
    say why it is unset (no rollouts yet) instead of ``share=None``."""
    if {"share", "rollouts", "prompts"} <= set(value):
        from curate.score.forecast import describe

        return describe(value)
    return ", ".join(f"{k}={_shown(v)}" for k, v in value.items()) or "-"


def _mapping_rows(key: str, value: dict) -> list[tuple[str, str]]:
    """A mapping as ``k=v, ...`` on one row, or one row per entry (``key.k  v``) when that row would be wider
    than the console (``curate show``'s table paths); a mapping of mappings as one row per part (``key.part``,
    e.g. ``zero_variance_forecast.pool`` and ``.selection``)."""
    if value and all(isinstance(v, dict) for v in value.values()):
        return [(f"{key}.{part}", escape(_pairs(inner))) for part, inner in value.items()]
    line = _pairs(value)
    if len(key) + len(line) + 2 > out.width and not {"share", "rollouts", "prompts"} <= set(value):
        return [(f"{key}.{k}", escape(_shown(v))) for k, v in value.items()]
    return [(key, escape(line))]


def render_summary(summary: dict) -> None:
    """Render a nested summary dict: scalars as ``key  value`` lines (keys aligned), lists of rows as tables, and
    ``warnings`` (a list of text) as ``warning:`` lines on stderr.

    The scalars are lines, not a table: a table cut long values (the paths ``curate show`` exists to show) to its
    column at 80 columns, and padded every piped line to the longest one (505 characters). A long line
    now wraps where the terminal wraps it and is whole in a pipe or a log."""
    if not summary:
        return
    scalars: list[tuple[str, str]] = []
    nested, warnings = [], []
    for key, value in summary.items():
        if key == "warnings" and isinstance(value, list):
            warnings += [str(w) for w in value]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            nested.append((key, value))
        else:
            scalars += _mapping_rows(key, value) if isinstance(value, dict) else [(key, escape(_shown(value)))]
    width = max((len(label) for label, _ in scalars), default=0)
    for label, text in scalars:
        out.print(f"[bold]{escape(label)}[/]{' ' * (width - len(label) + 2)}{text}", highlight=False, soft_wrap=True)
    for key, rows in nested:
        table = Table(title=key)
        cols = list(rows[0])
        for col in cols:
            table.add_column(col)
        for row in rows:
            table.add_row(
                *(
                    escape(_pairs(row.get(c))) if isinstance(row.get(c), dict) else escape(_shown(row.get(c, "")))
                    for c in cols
                )
            )
        out.print(table)
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
