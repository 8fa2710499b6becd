"""Helpers for the tests that kill processes (tests/training/test_chain.py, tests/flows/test_orphaned_server.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.is_file() and "State:\tZ" in status.read_text())


def wait_for(path: Path, seconds: float = 30.0) -> str:
    """The non-empty text of ``path`` once a process has written it; AssertionError after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")
