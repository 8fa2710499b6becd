"""How a command-line program of this project talks to its user and fails: the one error path of ``curate`` and
``training`` (``run_app``), so both print the same one line and exit code for the same mistake.

A user error (a ``CurateError``: bad config, missing input, lock timeout; a usage error; a file the OS could not
open) is one line on stderr and exit 2; Ctrl-C is "interrupted" and 130; anything else is a bug and keeps its
traceback. It lives below ``curate.cli`` so that ``training``'s CLI shares it without importing curate's verbs.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from curate.errors import CurateError
from curate.progress import console


out = Console()


INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def run_app(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run a typer app and return its exit code instead of exiting (console scripts and tests both use it).

    Shared by ``curate`` and ``training``, so both fail the same way:

    - ``--version`` as the first argument prints ``<app> <version>`` and exits 0;
    - a usage error (unknown verb or option, missing or unparsable value) prints click's short usage message and
      exits 2. typer >= 0.29 vendors click as ``typer._click``, whose exceptions derive from
      ``typer.TyperException``, not from the ``click`` package's, so that is the class caught here;
    - a ``CurateError`` (``ConfigError``, ``InputError``, ``LockTimeout``, ...) prints one line and exits 2, and so
      does a ``FileNotFoundError`` / ``PermissionError`` the OS raised for a named path (a file the user gave);
    - Ctrl-C prints "interrupted" and exits 130;
    - anything else is a bug and keeps its traceback.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--version"]:
        out.print(f"{app.info.name or 'curate'} {version()}", highlight=False)
        return 0
    try:
        rc = app(args=args, standalone_mode=False)  # click returns a typer.Exit's code instead of raising it
    except typer.Exit as exc:
        rc = exc.exit_code or 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except typer.TyperException as exc:  # click's usage errors, as typer vendors them
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            console.print(f"Error: {exc.format_message()}", highlight=False, markup=False)
        return exc.exit_code
    except typer.Abort:
        console.print("Aborted!", highlight=False)
        return 1
    except KeyboardInterrupt:
        rc = INTERRUPTED
    except CurateError as exc:
        return error_line(str(exc), getattr(exc, "exit_code", 2))
    except (FileNotFoundError, PermissionError) as exc:
        if exc.filename is None:  # not the OS naming a path: a bug, keep the traceback
            raise
        return error_line(f"{exc.strerror or exc}: {exc.filename}")
    if rc == INTERRUPTED:  # typer turns KeyboardInterrupt into Exit(130) before we see it
        console.print("interrupted", highlight=False)
    return rc if isinstance(rc, int) else 0


def error_line(message: str, code: int = 2) -> int:
    """Print ``error: message`` on stderr (one line, no markup) and return ``code``."""
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return code


def version() -> str:
    """The installed ``curate-rl`` version."""
    from importlib import metadata

    try:
        return metadata.version("curate-rl")
    except metadata.PackageNotFoundError:
        return "unknown"
