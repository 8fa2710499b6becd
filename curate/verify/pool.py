"""A small persistent process pool with a deadline per item, for the answer checker (``curate.verify``).

Why not ``concurrent.futures.ProcessPoolExecutor``: one worker that dies breaks the whole executor (every pending
future fails), and a hung task cannot be killed alone. Here each worker gets a chunk of items and answers them one
message per item, so the parent always knows which item a worker is on: when a worker dies, or stays on one item past
``item_timeout_s``, that item alone is marked (``error`` / ``timeout``), the worker is killed and replaced, and the
rest of its chunk is re-queued. The time an item takes is wall time less the time its worker waited for a CPU
(Linux's ``/proc/<pid>/schedstat``; plain wall time elsewhere), so a busy machine does not turn an answer into a
``timeout``, while a worker that hangs, spinning or blocked, is still killed. Workers are ``spawn``-ed (each gets a
real main thread, where the checker's ``SIGPROF`` CPU-time limits work, whatever thread the caller is on) and
optionally capped in address space.

The pool knows nothing about math: ``Pool(n, init, handle)`` calls ``state = init()`` once per worker and then
``handle(state, cfg, item)`` per item. Both must be importable module-level functions (spawn pickles them by name).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any


START_TIMEOUT_S = 120.0  # a fresh worker imports its libraries first (sympy: seconds on a busy machine)
GUARD_HINT = (
    "a script that checks answers (curate verify, a training reward) must put its work under `if __name__ == "
    '"__main__":`, because every worker process re-imports the main script (multiprocessing "spawn")'
)
_GUARD = re.compile(r"""^\s*if\s+(?:__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__)\s*:""", re.M)
_warned: set[str] = set()


def unguarded_main(path: str | os.PathLike | None) -> bool:
    """Whether the script at ``path`` (the ``__main__`` module's file) has no ``if __name__ == "__main__":``.

    Spawned workers import the main script again: without the guard they re-run it, and the run dies with
    multiprocessing's "bootstrapping phase" error. ``None`` (an interactive session, ``python -c``) is fine.
    """
    if not path or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            source = fh.read(2_000_000)
    except OSError:
        return False
    return _GUARD.search(source) is None


def warn_unguarded_main() -> None:
    """Warn once per script when the main module has no ``__main__`` guard (see ``unguarded_main``)."""
    import sys
    import warnings

    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if path and path not in _warned and unguarded_main(path):
        _warned.add(path)
        message = f'{path} has no `if __name__ == "__main__":` guard: {GUARD_HINT}'
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def cpu_wait_s(pid: int) -> float:
    """Seconds process ``pid`` has been runnable but waiting for a CPU (the second field of Linux's
    ``/proc/<pid>/schedstat``, in ns); 0.0 where the kernel does not say (another OS, the process gone)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _worker_main(conn: Any, init: Callable[[], Any], handle: Callable, memory_mb: int) -> None:
    """Body of a worker process: handle items from the pipe, one result message per item, until ``None``.

    Ctrl-C reaches every process of the terminal's group: a worker ignores it (else each prints a
    ``KeyboardInterrupt`` traceback of its own), and the parent, interrupted, stops its workers (``Pool.close``;
    daemon workers also go at its exit)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_mb > 0:
        try:
            import resource

            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
    state = init()
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        cfg, items = msg
        for tid, item in items:
            conn.send((tid, handle(state, cfg, item)))


class _Worker:
    """One spawned worker process and the items it has been sent but not yet answered."""

    def __init__(self, ctx: Any, init: Callable, handle: Callable, memory_mb: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, init, handle, memory_mb), daemon=True, name="curate-verify"
        )
        self.proc.start()
        child.close()
        self.ready = False
        self.pending: deque[int] = deque()
        self.deadline = 0.0
        self.waited = 0.0  # its CPU wait (``cpu_wait_s``) when ``deadline`` was last set or moved

    def start_clock(self, seconds: float) -> None:
        """Give the current item ``seconds`` from now."""
        self.deadline = time.monotonic() + seconds
        self.waited = cpu_wait_s(self.proc.pid)

    def overran(self, now: float) -> bool:
        """Whether the current item is past its deadline, once the deadline has moved by the time the worker
        spent waiting for a CPU since the clock started (that is the machine's load, not the item's cost)."""
        waited = cpu_wait_s(self.proc.pid)
        self.deadline += max(0.0, waited - self.waited)
        self.waited = max(waited, self.waited)
        return now > self.deadline

    def stop(self, graceful: bool = True) -> None:
        try:
            if graceful:
                self.conn.send(None)
                self.proc.join(1.0)
        except (OSError, ValueError):
            pass
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)
        self.conn.close()


class Pool:
    """``n`` spawn workers fed in chunks; ``run`` returns one result per item, whatever happens to the workers.

    Not thread-safe: callers serialize ``run`` (``curate.verify`` holds a lock around it).
    """

    def __init__(self, n: int, init: Callable[[], Any], handle: Callable, memory_mb: int = 0) -> None:
        import multiprocessing

        if getattr(multiprocessing.current_process(), "_inheriting", False):  # a worker re-importing the script
            raise RuntimeError(f"a verify worker is re-running the main script: {GUARD_HINT}")
        warn_unguarded_main()
        self.ctx = multiprocessing.get_context("spawn")
        self.init, self.handle, self.memory_mb = init, handle, memory_mb
        self.pid = os.getpid()
        self.workers = [self._new() for _ in range(n)]

    def _new(self) -> _Worker:
        return _Worker(self.ctx, self.init, self.handle, self.memory_mb)

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def run(
        self,
        items: list,
        cfg: Any,
        *,
        item_timeout_s: float,
        chunk_size: int = 64,
        on_done: Callable[[int], None] = lambda tid: None,
    ) -> list[Any]:
        """Handle every item; an item whose worker died is ``("error", "worker died")``, one that overran
        ``item_timeout_s`` is ``("timeout", "killed after ...")``. ``on_done(index)`` is called as items finish."""
        from multiprocessing.connection import wait

        results: list[Any] = [None] * len(items)
        # Small chunks (about 8 per worker): items differ in cost by 100x, and one worker left alone with the last
        # big chunk would set the wall time. A message per item is cheap next to a math-verify call.
        size = max(1, min(chunk_size, math.ceil(len(items) / (8 * len(self.workers)))))
        queue = deque(list(range(i, min(i + size, len(items)))) for i in range(0, len(items), size))
        left = len(items)

        def finish(tid: int, result: Any) -> None:
            nonlocal left
            results[tid] = result
            left -= 1
            on_done(tid)

        def fail(w: _Worker, result: tuple[str, str]) -> None:
            if not w.ready:
                raise RuntimeError(f"a verify worker failed to start ({result[1]}); see its stderr. {GUARD_HINT}")
            finish(w.pending.popleft(), result)
            if w.pending:
                queue.appendleft(list(w.pending))
            w.stop(graceful=False)
            self.workers[self.workers.index(w)] = self._new()

        while left:
            now = time.monotonic()
            for k, w in enumerate(self.workers):
                if not w.pending and queue:
                    chunk = queue.popleft()
                    try:
                        if not w.proc.is_alive():
                            raise BrokenPipeError
                        w.conn.send((cfg, [(i, items[i]) for i in chunk]))
                    except OSError:  # it died while idle (killed from outside, OOM killer): replace, retry
                        queue.appendleft(chunk)
                        w.stop(graceful=False)
                        self.workers[k] = self._new()
                        continue
                    w.pending.extend(chunk)
                    w.start_clock(item_timeout_s + (0 if w.ready else START_TIMEOUT_S))
            busy = {w.conn: w for w in self.workers if w.pending}
            if not busy:
                continue
            for conn in wait(list(busy), timeout=max(0.0, min(w.deadline for w in busy.values()) - now)):
                w = busy[conn]
                try:
                    while conn.poll():
                        msg = conn.recv()
                        w.start_clock(item_timeout_s)
                        if msg[0] == "ready":
                            w.ready = True
                        else:
                            w.pending.remove(msg[0])
                            finish(msg[0], msg[1])
                except (EOFError, OSError):
                    fail(w, ("error", "worker died"))
            now = time.monotonic()
            for w in busy.values():
                if w in self.workers and w.pending and now > w.deadline and w.overran(now):
                    fail(w, ("timeout", f"killed after {item_timeout_s:g}s"))
        return results
