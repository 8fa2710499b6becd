"""``flows.curation.exit_on_sigterm``: one ``kill PID`` stops a flow run even when the signal lands in a finalizer.

A signal handler's exception raised while the main thread runs a ``__del__`` is dropped by the interpreter
("Exception ignored in ..."). In CI, under load, Prefect's ``TerminationSignal`` landed in an asyncio transport's
``__del__`` and the killed run went on to finish. The block must re-send such a dropped SIGTERM.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from prefect.exceptions import TerminationSignal

from flows.curation import exit_on_sigterm


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # dropped on purpose


class _KilledInFinalizer:
    """Sends SIGTERM to this process from its ``__del__`` and stays there, so the handler runs inside it."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes: the handler runs at one of them, here
            pass


def _wait(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_a_sigterm_dropped_in_a_finalizer_is_sent_again_to_prefects_handler():
    def prefects(signum, frame):  # what prefect.utilities.engine installs during a flow run
        raise TerminationSignal(signal=signum)

    with pytest.raises(TerminationSignal), exit_on_sigterm():
        signal.signal(signal.SIGTERM, prefects)
        _KilledInFinalizer()  # dropped at once: the exception is "ignored" inside __del__
        _wait(5)  # without the re-send the block ends normally here


def test_a_sigterm_dropped_in_a_finalizer_still_exits_with_143():
    with pytest.raises(SystemExit) as exc, exit_on_sigterm():
        _KilledInFinalizer()
        _wait(5)
    assert exc.value.code == 128 + signal.SIGTERM


def test_the_block_restores_the_handler_and_the_unraisable_hook():
    import sys

    before, hook = signal.getsignal(signal.SIGTERM), sys.unraisablehook
    with exit_on_sigterm():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before and sys.unraisablehook is hook
