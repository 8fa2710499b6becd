"""One training step in a fresh process, and what ``training show`` says while it runs.

``run_step`` runs one SFT, RL or re-distillation step as ``python -m training.step SPEC`` (or ``<launch> -m
training.step SPEC``, such as ``accelerate launch`` for several GPUs), so GPU memory and the answer checker's workers
of one step never leak into the next, and a crash points at one step. Its output goes to ``step.log`` byte for byte
and to the parent's stderr without tracebacks (``StepEcho``); its ``step N/M`` lines keep the run's status file
current (``_StepProgress``), which ``running_line`` reads for ``training show``. ``step_main`` is the child side;
``stamp_lineage`` puts the chain's lineage into the model a step made.

Keep scripts that import this module under ``if __name__ == "__main__":`` (the answer checker's spawn workers
re-import the main module).
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from curate import io
from curate.console import STORAGE, disk_full_text
from curate.errors import CurateError
from curate.progress import set_status
from training import layout


STEP_LOG = layout.STEP_LOG  # a training step's output, beside its run folder's files
STEP_LINE = re.compile(r"\b(?:sft|rl) step (\d+)/(\d+)")  # a training step's progress line (training.sft, .rl)
RUNNING = layout.RUNNING  # what a live run is doing, how far (curate.progress.status_file; ``training show``)
FULL_HINT = STORAGE[errno.ENOSPC]  # "free some space, then run the command again: finished work is kept"
FULL_MARK = "curate-rl step: disk full: "  # the line a step's process prints for a full disk (``child_main``)


def running_line(run_dir: Path) -> str | None:
    """What ``training show`` says about a run folder's live run (``RUNNING``, written by ``curate.progress.
    status_file`` around each step): the step, how long it has run and how far it is: an evaluation's or a
    measure's progress line (done/total, rate, time left), or a training step's last ``step N/M`` line in its
    ``step.log``, with the time left when the run's status has it (``_StepProgress``). A file whose process is
    gone names the step a killed run stopped in. None when nothing runs."""
    import socket

    from curate.progress import duration, read_status, status_line

    status = read_status(Path(run_dir) / RUNNING)
    if not status or "step" not in status:
        return None
    pid, host = status.get("pid"), status.get("host")
    if host in (None, socket.gethostname()) and isinstance(pid, int) and not _alive(pid):
        return f"not running: the last run stopped during {status['step']} (pid {pid} is gone)"
    where = f" on {host}" if host and host != socket.gethostname() else ""
    line = f"running{where} (pid {pid}): {status['step']} for {duration(time.time() - status.get('started_at', 0))}"
    if status.get("bar"):
        return f"{line}; {status_line(status['bar'])}"
    log = Path(status["log"]) if status.get("log") else None
    if log is None or not log.is_file():
        return line
    train = status.get("train") or {}
    if train.get("total"):
        done, total = train["done"], train["total"]
    else:  # no progress recorded yet: the log's last progress line
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            found = STEP_LINE.findall(f.read().decode("utf-8", errors="replace"))
        if not found:
            return line
        done, total = found[-1]
    left = train.get("left_s")
    if left is not None:  # counted down from when it was written
        left = f", ~{duration(max(0.0, left - (time.time() - status.get('updated_at', time.time()))))} left"
    return f"{line}; training step {int(done):,} of {int(total):,}{left or ''} ({log.name}: {log})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


# ------------------------------------------------------------------------------------------------------ one step
def run_step(spec: Mapping[str, Any], launch: list[str] | None = None) -> dict[str, Any]:
    """Run one training step in a fresh process (``python -m training.step SPEC``, or ``<launch> -m ...`` such as
    ``accelerate launch`` for several GPUs); returns the JSON it writes.

    The step's output goes to stderr (stdout stays the caller's: ``training run --json`` prints only JSON) and to
    ``<out>/step.log``. The step dies with its parent: killing ``training run`` (SIGKILL or SIGTERM) sends the
    step SIGTERM through the kernel's parent-death signal (Linux), so no orphan keeps writing the run folder.
    Ctrl-C is the parent's to handle: the step ignores SIGINT (``step_main``) and is stopped by the parent, which
    prints one line and exits 130 (a step that died of SIGINT anyway counts as interrupted, not as failed).
    Temp files a killed step left in ``<out>`` (``.step_result.json.<hex>.tmp``) are removed first: the run
    folder's lock (``run_lock``) makes this the only writer there. Raises ``StepFailed`` (one line: the step, its
    exit code or signal, its error: a traceback's last line, the traceback staying in the log, ``StepEcho``; its
    log) when it fails.
    """
    out = Path(spec["out"])
    spec_path = out / layout.STEP_SPEC
    out.mkdir(parents=True, exist_ok=True)
    io.remove_temp(out)
    io.write_json(spec_path, dict(spec))
    result_path = spec_path.with_name(layout.STEP_RESULT)
    result_path.unlink(missing_ok=True)
    cmd = [*(launch or [sys.executable]), "-m", "training.step", str(spec_path)]
    log = out / STEP_LOG
    with log.open("ab", buffering=0) as sink:  # unbuffered: each chunk is in the log as it arrives
        proc = subprocess.Popen(
            cmd, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent(os.getpid()),
        )  # fmt: skip
        set_status(log=str(log))  # ``training show`` reads the step's progress lines there
        decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
        progress, echo = _StepProgress(), StepEcho()
        try:
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                sink.write(chunk)
                text = decode.decode(chunk)
                echo.feed(text)
                progress.feed(text)
        finally:
            if proc.poll() is None:  # we are being interrupted: the step goes too
                proc.terminate()
            rc = proc.wait()
            echo.feed(decode.decode(b"", final=True), final=True)
    if rc in (-signal.SIGINT, 128 + signal.SIGINT):  # Ctrl-C reached the step first: the user's interrupt
        raise KeyboardInterrupt
    if rc != 0 and (echo.full or (echo.error and disk_full_text(echo.error))):
        raise DiskFull(f"No space left on device: training step {spec['kind']} could not write {out} ({FULL_HINT}); "
                       f"its log: {log}")  # fmt: skip
    if rc != 0 or not result_path.is_file():
        how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
        why = f" ({echo.error})" if echo.error else ""
        raise StepFailed(f"training step {spec['kind']} ({out}) {how}{why}; its log: {log}")
    if echo.error:
        print(f"note: training step {spec['kind']} printed a traceback and went on ({echo.error}); its log: {log}",
              file=sys.stderr, flush=True)  # fmt: skip
    return step_record(result_path)


def step_record(path: Path) -> dict[str, Any]:
    """A step's ``step_spec.json`` (``run_step`` writes it for the step's process) or ``step_result.json``
    (``step_main`` writes it for the parent)."""
    return json.loads(Path(path).read_text())


class _StepProgress:
    """Follows a step's ``sft step N/M`` / ``rl step N/M`` lines as ``run_step`` copies them and puts the step,
    the total and the time left into the run's status file (``RUNNING``, ``training show``). The rate is taken
    from the lines this process saw, so a step resumed at N counts only the steps it trains."""

    def __init__(self) -> None:
        self.partial = ""
        self.first: tuple[int, float] | None = None

    def feed(self, text: str) -> None:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()[-4096:]  # a line still being written (a progress bar's \r updates: its tail)
        found = [m for line in lines if (m := STEP_LINE.search(line))]
        if not found:
            return
        done, total, now = int(found[-1][1]), int(found[-1][2]), time.time()
        if self.first is None or done < self.first[0]:
            self.first = (done, now)
        start, since = self.first
        left = (total - done) * (now - since) / (done - start) if done > start else None
        set_status(train={"done": done, "total": total, "left_s": left})


class StepEcho:
    """A step's output on the parent's stderr, line by line, without its tracebacks (a full disk during a step would
    echo its two tracebacks, 38-44 lines, above the one line that says what happened). ``run_step`` writes every byte
    to ``step.log`` first, so a traceback stays there; ``error`` keeps its last line (the exception, as ``OSError:
    [Errno 28] No space left on device``) for that one line. A traceback runs from ``Traceback (most recent call
    last):`` through its indented frames, the exception line and any indented continuation; chained ones (``During
    handling of the above exception ...``) belong to it. Progress bars' ``\\r`` ends a line too."""

    _CHAINED = ("During handling of the above exception", "The above exception was the direct cause")

    def __init__(self) -> None:
        self.pending = ""
        self.state = "echo"  # "echo", "frames" (inside a traceback) or "raised" (after its exception line)
        self.error: str | None = None
        self.full: str | None = None  # the step's ``FULL_MARK`` line: the disk is full (``child_main``)

    def feed(self, text: str, final: bool = False) -> None:
        """Echo the complete lines of ``text`` (and, when ``final``, the rest)."""
        import re

        *lines, self.pending = re.split(r"(?<=[\r\n])", self.pending + text)
        if final and self.pending:
            lines, self.pending = [*lines, self.pending], ""
        shown = [line for line in lines if self._shown(line)]
        if shown:
            sys.stderr.write("".join(shown))
            sys.stderr.flush()

    def _shown(self, line: str) -> bool:
        body = line.rstrip("\r\n")
        if body.startswith(FULL_MARK):
            self.full = body.removeprefix(FULL_MARK)
            return False
        if body.startswith(self._CHAINED):  # a link between chained tracebacks, never a step's own line
            self.state = "frames"
            return False
        if body.startswith("Traceback (most recent call last):"):
            self.state = "frames"
            return False
        if self.state == "echo":
            return True
        indented, blank = body[:1].isspace(), not body.strip()
        if blank or body.startswith(self._CHAINED) or indented:
            return False  # a frame, the gap and link between chained tracebacks, an exception's continuation
        if self.state == "frames":
            self.state, self.error = "raised", body.strip()
            return False
        self.state = "echo"  # after the exception line, a line of the step's own: the step went on
        return True


class DiskFull(CurateError):
    """A training step found the disk full: one line, exit 2 (the machine's state, not a bug)."""

    exit_code = 2


class StepFailed(CurateError):
    """A training step's process failed: the CLI prints this one line and exits 1 (not a user error)."""

    exit_code = 1


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """``preexec_fn`` that asks Linux to send the child SIGTERM when its parent dies (``PR_SET_PDEATHSIG``);
    None elsewhere (macOS has no such call: there an orphaned step must be stopped by hand)."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call: nothing will signal us
            os._exit(1)

    return arm


def step_main(spec_path: Path) -> None:
    """The child side of ``run_step`` (``python -m training.step SPEC``): one SFT, RL or re-distillation run,
    then the chain's lineage on its final model and ``step_result.json``."""
    spec = step_record(spec_path)
    kind, out = spec["kind"], Path(spec["out"])
    if kind == "sft":
        from training.plateau import EarlyStop
        from training.sft import load_config, train_sft

        early = EarlyStop.from_spec(spec["validation"]) if spec.get("validation") else None
        result = train_sft(
            load_config(spec["config"]), model=spec["model"], data=Path(spec["data"]), out_dir=out,
            kind=spec.get("card", "sft"), lineage=spec.get("lineage"), validation=early,
        )  # fmt: skip
    elif kind == "rl":
        from training.rl import load_rl_config, train_rl

        result = train_rl(
            load_rl_config(spec["config"]), model=spec["model"], train=Path(spec["train"]), out_dir=out,
            home=spec.get("home"), pool=spec.get("pool"), optimizer_from=spec.get("optimizer_from"),
            continue_from=spec.get("continue_from"),
        )  # fmt: skip
    elif kind == "redistill":
        from training.redistill import load_config, redistill

        result = redistill(
            load_config(spec["config"]), initial=spec["model"], ledger=spec["ledger"],
            problems=Path(spec["problems"]), out_dir=out,
        )  # fmt: skip
    else:
        raise ValueError(f"unknown step kind {kind!r}")
    from accelerate import PartialState

    if PartialState().is_main_process:
        if spec.get("lineage") and kind != "sft":  # train_sft writes it itself; the others get it added here
            stamp_lineage(layout.final(out), spec["lineage"])
        io.write_json(spec_path.with_name(layout.STEP_RESULT), io.jsonable(result))


def stamp_lineage(model_dir: str | Path, lineage: Mapping[str, Any]) -> bool:
    """Add the chain's lineage to a model folder's ``lineage.json`` and card (kept data wins no key: a clashing
    key of the step's own is kept as ``<kind>_<key>``). Returns False when it was there already."""
    from training.card import read_lineage, write_model_card

    have = read_lineage(model_dir)
    data = dict(have.get("data") or {})
    if all(data.get(k) == v for k, v in lineage.items()):
        return False
    merged = dict(lineage)
    for key, value in data.items():
        if key not in merged:
            merged[key] = value
        elif merged[key] != value:
            merged[f"{have['kind']}_{key}"] = value
    sources = list(have.get("sources") or [])
    write_model_card(
        model_dir, kind=have["kind"], base_model=have.get("base_model"), data=merged, recipe=have.get("recipe") or {},
        metrics=have.get("metrics") or {}, parents=sources[1:], evaluation=have.get("evaluation"),
    )  # fmt: skip
    return True


def child_main(spec_path: Path, main: Callable[[Path], None] = step_main) -> None:
    """A step's process: ``main(spec_path)``; a full disk (``curate.console.disk_full``: ``OSError`` ENOSPC, torch's
    "unexpected pos", ...) is not a bug: its traceback goes to ``step.log`` only (when the disk still takes it)
    and the parent gets one ``FULL_MARK`` line and exit code 2, so the terminal shows one line and nothing above
    it (not torch's words with exit 1, nor ``OSError`` and ``During handling`` lines)."""
    import traceback

    from curate.console import disk_full

    try:
        main(spec_path)
    except Exception as exc:
        if not disk_full(exc):
            raise
        try:
            with (spec_path.parent / STEP_LOG).open("a") as log:
                traceback.print_exc(file=log)
        except OSError:
            pass  # the disk is full: the line below says what happened
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.stderr.write(f"{FULL_MARK}{type(exc).__name__}: {first}\n")
        sys.stderr.flush()
        sys.exit(2)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's (``run_step``): it stops this step
    child_main(Path(sys.argv[1]))
