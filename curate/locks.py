"""File locks: one writer at a time per pool, selection folder, curriculum folder and model ledger.

A lock is a file ``<root>/locks/<kind>-<name>.lock`` (``Workspace.lock_path``) held with ``flock``, so the kernel
releases it when its holder dies, SIGKILL included. Its holder writes who it is beside it (``<lock>.owner``: pid,
host, since, command) so that a waiting writer can say whom it waits for, and gives up after ``lock_timeout()``
seconds with ``LockTimeout``. ``Workspace.lock`` (curate.io) is the one way stages take these locks; it adds the
repair of what a killed writer left (``Workspace.tidy``) on top of ``hold``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from curate.errors import ConfigError, LockTimeout


ENV_LOCK_TIMEOUT = "CURATE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0
LOCK_KINDS = ("pool", "selection", "curriculum", "ledger")


def lock_timeout(value: float | None = None) -> float:
    """Seconds a writer waits for a lock another process holds: ``value``, else ``$CURATE_LOCK_TIMEOUT``, else
    600. A negative value waits as long as it takes."""
    if value is None:
        env = os.environ.get(ENV_LOCK_TIMEOUT, "").strip()
        if not env:
            return DEFAULT_LOCK_TIMEOUT
        try:
            value = float(env)
        except ValueError:
            raise ConfigError(f"${ENV_LOCK_TIMEOUT}={env!r} is not a number of seconds") from None
    return float(value)


def _owner_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".owner")


def lock_owner(lock: str | os.PathLike) -> str:
    """Who holds (or last held) a lock, from the record its holder wrote beside it."""
    try:
        rec = json.loads(_owner_file(Path(lock)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "another process (no owner record)"
    return f"pid {rec.get('pid')} on {rec.get('host')} since {rec.get('since')} ({rec.get('command')})"


_HELD: dict[tuple[str, int], list[Any]] = {}  # (lock file, thread) -> [depth, pid]: re-entry within a thread


@contextlib.contextmanager
def hold(
    path: str | os.PathLike,
    *,
    what: str,
    timeout: float | None = None,
    on_acquire: Callable[[], Any] | None = None,
) -> Iterator[Path]:
    """Hold the file lock ``path`` (``filelock.FileLock``: an ``flock``, so the kernel releases it when its holder
    dies, SIGKILL included: a killed writer never blocks the next one).

    A second writer waits with a message on stderr naming the holder, and raises ``LockTimeout`` after
    ``lock_timeout(timeout)`` seconds. Holding is re-entrant within a thread (a stage that calls another stage's
    entry point on the same pool does not wait for itself); other threads and processes (a forked child too)
    wait. ``on_acquire`` runs once the lock is taken (outermost hold only): the place to repair what a killed
    writer left.
    """
    from filelock import FileLock, Timeout

    path = Path(path).absolute()
    key = (str(path), threading.get_ident())
    held = _HELD.get(key)
    if held is not None and held[1] == os.getpid():
        held[0] += 1
        try:
            yield path
        finally:
            held[0] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(blocking=False)
    except Timeout:
        from curate.progress import log

        limit = lock_timeout(timeout)
        wait = f"up to {limit:g} s" if limit >= 0 else "without a time limit"
        log(
            f"waiting for the {what} lock, held by {lock_owner(path)} ({wait}; --lock-timeout or "
            f"${ENV_LOCK_TIMEOUT} changes this)"
        )
        try:
            lock.acquire(timeout=limit if limit >= 0 else -1)
        except Timeout:
            raise LockTimeout(
                f"the {what} is locked by {lock_owner(path)}; gave up after {limit:g} s (lock file {path}). "
                f"Wait for that process to finish, or raise --lock-timeout / ${ENV_LOCK_TIMEOUT}."
            ) from None
    _HELD[key] = [1, os.getpid()]
    try:
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200] if sys.argv else "python",
        }
        _owner_file(path).write_text(json.dumps(record), encoding="utf-8")
        if on_acquire is not None:
            on_acquire()
        yield path
    finally:
        del _HELD[key]
        _owner_file(path).unlink(missing_ok=True)
        lock.release()
