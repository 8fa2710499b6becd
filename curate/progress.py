"""Progress and status output shared by every stage: one stderr console, one bar helper.

Bars show done/total, rate and time left on a terminal; when stderr is not a terminal (Prefect logs, CI, ``nohup``)
the same helper prints a plain line every ``log_every_s`` seconds instead, so long work is visible in logs too.
Library code calls these; only the CLI decides whether ``progress`` is on.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import Console


console = Console(stderr=True)


def log(message: str, enabled: bool = True) -> None:
    """One dim status line on stderr (nothing when ``enabled`` is False)."""
    if enabled:
        console.print(f"[dim]{message}[/]")


@contextlib.contextmanager
def bar(
    total: int | None, description: str, *, enabled: bool = True, unit: str = "items", log_every_s: float = 30.0
) -> Iterator[Callable[[int], None]]:
    """A progress bar over ``total`` units; yields ``advance(n)``. Silent when ``enabled`` is False.

    >>> with bar(3, "demo", enabled=False) as advance:
    ...     advance(3)
    """
    if not enabled:
        yield lambda n=1: None
        return
    if not sys.stderr.isatty():
        state = {"done": 0, "last": time.monotonic(), "t0": time.monotonic()}

        def advance_plain(n: int = 1) -> None:
            state["done"] += n
            now = time.monotonic()
            if now - state["last"] >= log_every_s:
                state["last"] = now
                rate = state["done"] / max(now - state["t0"], 1e-9)
                left = f", ~{(total - state['done']) / rate:.0f} s left" if total and rate > 0 else ""
                log(f"{description}: {state['done']}/{total or '?'} {unit} ({rate:.1f}/s{left})")

        yield advance_plain
        elapsed = time.monotonic() - state["t0"]
        log(f"{description}: {state['done']} {unit} in {elapsed:.1f} s")
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)
