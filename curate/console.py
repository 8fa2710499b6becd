"""How a command-line program of this project talks to its user and fails: the one error path of ``curate`` and
``training`` (``run_app``), so both print the same one line and exit code for the same mistake.

A user error (a ``CurateError``: bad config, missing input, lock timeout; a usage error; a file the OS could not
open) is one line on stderr and exit 2; Ctrl-C is "interrupted" and 130; anything else is a bug and keeps its
traceback. It lives below ``curate.cli`` so that ``training``'s CLI shares it without importing curate's verbs.
"""

from __future__ import annotations

import errno
import sys

import typer
from rich.markup import escape

from curate.errors import CurateError
from curate.progress import console, make_console, quiet_library_bars


out = make_console()


INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def run_app(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run a typer app and return its exit code instead of exiting (console scripts and tests both use it).

    Shared by ``curate`` and ``training``, so both fail the same way:

    - ``--version`` as the first argument prints ``<app> <version>`` and exits 0;
    - a usage error (unknown verb or option, missing or unparsable value) prints click's short usage message and
      exits 2. typer >= 0.29 vendors click as ``typer._click``, whose exceptions derive from
      ``typer.TyperException``, not from the ``click`` package's, so that is the class caught here;
    - a ``CurateError`` (``ConfigError``, ``InputError``, ``LockTimeout``, ...) prints one line and exits 2, and so
      does an ``OSError`` the machine raised for a named path (a file the user gave, no permission) or for the
      disk (full, read-only: ``os_error_line``);
    - Ctrl-C prints "interrupted" and exits 130;
    - anything else is a bug and keeps its traceback.

    Off a terminal, the libraries' own progress bars are turned off first (``curate.progress.quiet_library_bars``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    quiet_library_bars()
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
    except OSError as exc:
        line = os_error_line(exc)
        if line is None and disk_full(exc):  # an OSError raised while handling a full disk
            line = DISK_FULL
        if line is None:  # not the OS refusing a path or a disk: a bug, keep the traceback
            raise
        return error_line(line)
    except Exception as exc:  # a library's words for a full disk (torch's writer, safetensors, polars)
        if not disk_full(exc):
            raise
        return error_line(DISK_FULL)
    if rc == INTERRUPTED:  # typer turns KeyboardInterrupt into Exit(130) before we see it
        console.print("interrupted", highlight=False)
    return rc if isinstance(rc, int) else 0


# What the machine refused, not a bug: a full disk or quota, a read-only file system, no permission.
STORAGE = {errno.ENOSPC: "free some space, then run the command again: finished work is kept",
           errno.EDQUOT: "free some space, then run the command again: finished work is kept",
           errno.EROFS: "the workspace must be writable: every command that changes it takes a lock there",
           errno.EACCES: "", errno.EPERM: ""}  # fmt: skip


def os_error_line(exc: OSError) -> str | None:
    """The one line for an ``OSError`` the machine raised for a named path (a missing file the user gave, no
    permission) or for the disk (full, over quota, read-only, with or without a path); None for anything else."""
    if exc.errno not in STORAGE and not (isinstance(exc, FileNotFoundError) and exc.filename is not None):
        return None
    if exc.filename is None and exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return None
    hint = STORAGE.get(exc.errno) or ""
    where = f": {exc.filename}" if exc.filename is not None else ""
    return f"{exc.strerror or exc}{where}" + (f" ({hint})" if hint else "")


DISK_FULL = f"No space left on device ({STORAGE[errno.ENOSPC]})"
# How libraries say the disk is full when they do not raise OSError(ENOSPC): torch's zip writer (a short write,
# "[enforce fail at inline_container.cc:672] . unexpected pos 5242944 vs 5242832"), Rust's io errors (safetensors,
# polars: "No space left on device (os error 28)", "StorageFull"), and a quota.
_FULL_WORDS = ("No space left on device", "os error 28", "[Errno 28]", "StorageFull", "Disk quota exceeded")


def disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, says the disk (or quota) is full:
    ``OSError`` ENOSPC / EDQUOT, or a library's words for it (``disk_full_text``)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if disk_full_text(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def disk_full_text(text: str) -> bool:
    """Whether an error's text says the disk is full (``disk_full``; also a step's last traceback line)."""
    return any(word in text for word in _FULL_WORDS) or ("inline_container" in text and "unexpected pos" in text)


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


def _print_version(ctx: typer.Context, value: bool) -> None:
    """``--version``'s callback (``run_app`` answers it first when it leads; this lists it and answers it later)."""
    if value:
        out.print(f"{ctx.find_root().info_name or 'curate'} {version()}", highlight=False)
        raise typer.Exit()


VERSION_OPTION = typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")


def summary_line(doc: str | None) -> str | None:
    """A verb's summary on the app's screen: its docstring's first sentence, up to the first colon or semicolon
    outside parentheses (click cuts its own summary at about 45 columns with ``...``)."""
    text = " ".join((doc or "").split("\n\n")[0].split())
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        end = depth == 0 and text[i + 1 : i + 2] in (" ", "")
        if end and (ch in ":;" or (ch == "." and not text[max(0, i - 3) : i].endswith(("e.g", "i.e")))):
            return text[:i].rstrip(",") + "."
    return text or None


def whole_summaries(app: typer.Typer) -> None:
    """Give every verb of ``app`` without a ``short_help`` its ``summary_line``, so the top-level ``--help`` shows
    each summary whole (wrapped, never cut)."""
    for info in app.registered_commands:
        if info.short_help is None:
            info.short_help = summary_line(info.help or (info.callback.__doc__ if info.callback else None))
