"""Progress and status output shared by every stage: one stderr console, one bar helper.

A bar shows done/total, the rate and the time left on a terminal. When stderr is not a terminal (Prefect logs,
CI, ``nohup``, a redirected file) the same helper prints a plain line every ``log_every_s`` seconds instead (done,
total, rate, time left), and one at the end, so long work such as embedding a large pool is visible in logs too.
Library code calls these; only the CLI decides whether ``progress`` is on.

``advance(n, description=None, **counters)``: ``n`` more units done; ``description`` replaces the label (a step
name); each extra counter (e.g. ``tokens=412``) is summed and shown as a rate (``tokens/s``).

``log_to(sink)``: while a block runs, every ``log`` line and the plain progress lines go to ``sink`` (a function of one
line) instead of stderr, whatever stderr is: the Prefect flows hand in their run logger, so a stage's progress shows
in the worker's log and the UI (``flows.curation``; without it a worker was silent 6.4 minutes while a flow's
``decontaminate`` embedded 2,977 problems).

``status_file(path, **fields)``: while a block runs, ``path`` (JSON) says what the process is doing: the fields (a
training run's step), its pid, and the done/total, rate and time left of the bar running inside the block, so
another process can tell how far a long step is (``training show`` on a running run). ``set_status(**fields)``
adds fields (the log of a step's subprocess).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape


PIPE_WIDTH = 1000  # off a terminal: tables and lines keep their natural width up to this


LIBRARY_BARS = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")  # transformers reads the hub's


def quiet_library_bars() -> None:
    """Off a terminal (a log file, a pipe, a Prefect worker), turn off the tqdm bars of huggingface_hub,
    transformers and datasets ("Loading weights", "Writing model shards", "Tokenizing train dataset", ...): in a log
    each is a line of carriage returns, and they were most of the demo's log. Through the
    environment, so the training steps' own processes inherit it; before those libraries are imported (they read it
    then); a value the user set is kept. This project's own progress lines are unchanged (``bar``)."""
    if not sys.stderr.isatty():
        for name in LIBRARY_BARS:
            os.environ.setdefault(name, "1")


def make_console(stderr: bool = False) -> Console:
    """A rich console. On a terminal it takes the terminal's width; off one (a pipe, a log file, CI) rich assumes 80
    columns and cuts every wider table into wrapped cells, so without ``$COLUMNS`` it gets ``PIPE_WIDTH`` instead:
    a table keeps its natural width, as ``--json`` output keeps its content. Both CLIs' consoles come from here."""
    import os

    term = Console(stderr=stderr)
    if term.is_terminal or os.environ.get("COLUMNS"):
        return term
    return Console(stderr=stderr, width=PIPE_WIDTH)


console = make_console(stderr=True)


_SINK: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("progress_sink", default=None)


@contextlib.contextmanager
def log_to(sink: Callable[[str], None]) -> Iterator[None]:
    """While the block runs (in this thread or task), ``log`` and ``bar`` write their lines to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def log(message: str, enabled: bool = True) -> None:
    """One dim status line on stderr, or to the ``log_to`` sink (nothing when ``enabled`` is False)."""
    if not enabled:
        return
    sink = _SINK.get()
    if sink is not None:
        sink(message)
    else:
        console.print(f"[dim]{escape(message)}[/]", highlight=False, soft_wrap=True)  # one line each, in logs too


class Advance(Protocol):
    def __call__(self, n: int = 1, description: str | None = None, **counters: int) -> None: ...


def _noop(n: int = 1, description: str | None = None, **counters: int) -> None:
    return None


_STATUS: dict[str, Any] = {"path": None, "fields": {}, "written": 0.0}  # one status file per process at a time
STATUS_EVERY_S = 2.0  # a bar rewrites the status file at most this often


@contextlib.contextmanager
def status_file(path: str | os.PathLike, **fields: Any) -> Iterator[None]:
    """While the block runs, ``path`` holds ``fields``, this process's pid, the start time and the running bar's
    progress (module docstring); removed when the block ends, so a file left behind names work that was killed."""
    previous = dict(_STATUS)
    here = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time()}
    _STATUS.update(path=Path(path), fields={**fields, **here}, written=0.0)
    _write_status(None)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            Path(path).unlink()
        _STATUS.clear()
        _STATUS.update(previous)


def set_status(**fields: Any) -> None:
    """Add ``fields`` to the status file of the enclosing ``status_file`` block (nothing outside one)."""
    if _STATUS["path"] is not None:
        _STATUS["fields"].update(fields)
        _write_status(None)


def read_status(path: str | os.PathLike) -> dict[str, Any] | None:
    """A status file's content, None when absent or unreadable (being replaced, or damaged)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_status(bar_state: dict[str, Any] | None, force: bool = True) -> None:
    path = _STATUS["path"]
    now = time.time()
    if path is None or (not force and now - _STATUS["written"] < STATUS_EVERY_S):
        return
    _STATUS["written"] = now
    payload = {**_STATUS["fields"], "updated_at": now, **({"bar": bar_state} if bar_state else {})}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):  # a status the run cannot write (a full disk) must not stop the run
        tmp.write_text(json.dumps(payload, default=str), encoding="utf-8")
        os.replace(tmp, path)


def _bar_state(description: str, done: int, total: int | None, unit: str, elapsed: float) -> dict[str, Any]:
    """A bar as the status file holds it; ``status_line`` prints it as ``plain_line`` does."""
    return {"description": description, "done": done, "total": total, "unit": unit, "elapsed_s": elapsed}


def status_line(bar_state: dict[str, Any]) -> str:
    """A status file's bar as a progress line: ``eval sft: 480/1,200 samples (3.2/s, ~3 min 45 s left)``.

    >>> status_line({"description": "eval sft", "done": 480, "total": 1200, "unit": "samples", "elapsed_s": 150.0})
    'eval sft: 480/1,200 samples (3.2/s, ~3 min 45 s left)'
    """
    b = bar_state
    return plain_line(b["description"], b["done"], b.get("total"), b.get("unit", "items"), b.get("elapsed_s", 0), {})


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def plain_line(description: str, done: int, total: int | None, unit: str, elapsed: float, counters: dict) -> str:
    """The non-TTY progress line: ``embedding: 2048/9000 problems (88.1/s, ~1 min 19 s left; 5,120 tokens/s)``.

    >>> plain_line("embedding", 50, 100, "problems", 10.0, {})
    'embedding: 50/100 problems (5.0/s, ~10 s left)'
    """
    rate = done / elapsed if elapsed > 0 else 0.0
    parts = [f"{rate:,.1f}/s"]
    if total and rate > 0:
        parts[0] += f", ~{duration((total - done) / rate)} left"
    parts += [f"{v / elapsed:,.0f} {k}/s" for k, v in counters.items() if elapsed > 0]
    count = f"{done:,}/{total:,}" if total else f"{done:,}"
    return f"{description}: {count} {unit} ({'; '.join(parts)})"


@contextlib.contextmanager
def bar(
    total: int | None,
    description: str,
    *,
    enabled: bool = True,
    unit: str = "items",
    log_every_s: float = 30.0,
    transient: bool = True,
) -> Iterator[Advance]:
    """A progress bar over ``total`` units; yields ``advance`` (module docstring). Silent when ``enabled`` is False.

    >>> with bar(3, "demo", enabled=False) as advance:
    ...     advance(3)
    """
    if not enabled:
        yield _noop
        return
    t0 = time.monotonic()
    counters: dict[str, int] = {}
    if not sys.stderr.isatty() or _SINK.get() is not None:
        state = {"done": 0, "last": t0, "description": description}
        _write_status(_bar_state(description, 0, total, unit, 0.0))

        def advance_plain(n: int = 1, description: str | None = None, **more: int) -> None:
            state["done"] += n
            if description:
                state["description"] = description
            for k, v in more.items():
                counters[k] = counters.get(k, 0) + v
            now = time.monotonic()
            _write_status(_bar_state(state["description"], state["done"], total, unit, now - t0), force=False)
            if now - state["last"] >= log_every_s:
                state["last"] = now
                log(plain_line(state["description"], state["done"], total, unit, now - t0, counters))

        yield advance_plain
        elapsed = time.monotonic() - t0
        _write_status(None)
        log(f"{state['description']}: {state['done']:,} {unit} in {duration(elapsed)}")
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=transient) as progress:
        task = progress.add_task(description, total=total, rate="")

        def advance_rich(n: int = 1, description: str | None = None, **more: int) -> None:
            for k, v in more.items():
                counters[k] = counters.get(k, 0) + v
            elapsed = max(time.monotonic() - t0, 1e-9)
            done = progress.tasks[0].completed + n
            rates = [f"{done / elapsed:,.1f}/s"] + [f"{v / elapsed:,.0f} {k}/s" for k, v in counters.items()]
            fields = {"rate": ", ".join(rates)}
            if description:
                fields["description"] = description
            progress.update(task, advance=n, **fields)
            _write_status(_bar_state(progress.tasks[0].description, done, total, unit, elapsed), force=False)

        yield advance_rich
    _write_status(None)
