"""Shared pieces of the ``curate`` CLI: common options, output in text or JSON, clear failures.

Every verb module (``cli.py``, ``cli_rollout.py``, ...) builds on these so all verbs take ``--home`` and
``--json`` the same way and fail the same way: a one-line message on stderr and exit code 2, never a traceback
for a user error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from curate.io import Workspace
from curate.progress import console


out = Console()

Home = Annotated[
    str | None,
    typer.Option("--home", envvar="CURATE_HOME", help="Workspace root (default ./workspace).", show_default=False),
]
Json = Annotated[bool, typer.Option("--json", help="Print the summary as JSON (for scripts).")]
Force = Annotated[bool, typer.Option("--force", help="Redo the work even if the outputs are up to date.")]


def workspace(home: str | None) -> Workspace:
    return Workspace.resolve(home)


def fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def emit(payload: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``payload`` as JSON on stdout, or hand it to ``render`` for a human-readable view."""
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        render(payload)


def run_app(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run a typer app and return its exit code instead of exiting (console scripts and tests both use it)."""
    import click

    try:
        rc = app(args=argv, standalone_mode=False)  # click returns a typer.Exit's code instead of raising it
    except typer.Exit as exc:
        return exc.exit_code or 0
    except SystemExit as exc:
        return int(exc.code or 0)
    except click.ClickException as exc:  # usage errors: print click's message, no traceback
        exc.show()
        return exc.exit_code
    return rc if isinstance(rc, int) else 0


USER_ERRORS: tuple[type[BaseException], ...] = (FileNotFoundError, ValueError, KeyError, PermissionError)


def render_summary(summary: dict) -> None:
    """Render a nested summary dict: scalars as a key/value table, lists of rows as their own tables."""
    if not summary:
        return
    scalars = Table(show_header=False, box=None, pad_edge=False)
    scalars.add_column(style="bold")
    scalars.add_column()
    nested = []
    for key, value in summary.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            nested.append((key, value))
        elif isinstance(value, dict):
            scalars.add_row(key, escape(", ".join(f"{k}={v}" for k, v in value.items()) or "-"))
        else:
            scalars.add_row(key, escape(str(value)))
    out.print(scalars)
    for key, rows in nested:
        table = Table(title=key)
        cols = list(rows[0])
        for col in cols:
            table.add_column(col)
        for row in rows:
            table.add_row(
                *(
                    escape(", ".join(f"{k}={v}" for k, v in row.get(c).items()) or "-")
                    if isinstance(row.get(c), dict)
                    else escape(str(row.get(c, "")))
                    for c in cols
                )
            )
        out.print(table)
