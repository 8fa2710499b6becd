"""A training run's state: ``chain.json``, the run folder, one fresh process per training step, and lineage.

``Run`` is where a chain runs (recipe, workspace, run folder); ``Chain`` is ``chain.json``, the record of what is
done (read back from disk, never from the caller, so a rerun after a failure resumes at the failed step);
``ChainState`` is what one step hands the next. ``run_step`` runs one SFT, RL or re-distillation step in a fresh
process (``python -m training.chain SPEC``, or ``<launch> -m training.chain SPEC`` such as ``accelerate launch``
for several GPUs), so GPU memory and the answer checker's workers of one step never leak into the next, and a
crash points at one step. ``chain_lineage`` / ``stamp_lineage``: what every model of the run came from, in its card.

Keep scripts that import this module under ``if __name__ == "__main__":`` (the answer checker's spawn workers
re-import the main module).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate import io
from curate.config import placement_keys
from curate.errors import ConfigError, CurateError, InputError
from curate.manifest import file_hash
from curate.progress import set_status
from training import run_folder
from training.plan import StagePlan, plan_stages
from training.recipe import RunRecipe, resolve_path


CHAIN = "chain.json"
DATA = "data"  # the run's own copy of what it trains on (``pin_data``)
PINNED = {"curriculum": "curriculum", "train": "train.parquet", "sft": "sft.parquet"}
PINNED_RECORD = "pinned.json"  # what was copied from where, with content hashes
STEP_LOG = "step.log"  # a training step's output, beside its run folder's files
STEP_LINE = re.compile(r"\b(?:sft|rl) step (\d+)/(\d+)")  # a training step's progress line (training.sft, .rl)
LOCK = "run.lock"  # one writer per run folder (``run_lock``)
RECIPE = "recipe.json"  # the resolved recipe the run was made with
RUNNING = "running.json"  # what a live run is doing, how far (curate.progress.status_file; ``training show``)
# Recipe keys that change speed or placement, not results (the fields marked ``curate.config.placement``): a rerun
# may change them on an existing run folder.
HARMLESS = placement_keys(RunRecipe)
COSCALE = "coscale"  # run-folder subfolder of the CoScale iterations (coscale/itN/)


# --------------------------------------------------------------------------------------------------- run + state
class Chain:
    """``chain.json``: the steps done so far (resumable record), written atomically after each change.

    ``steps``: one record per trained-and-evaluated model (step, model, pass rate, wall time). ``notes``: the other
    steps' records by kind (``decisions``, ``coscale``), each a list in the order they were made, every record
    with its ``name``. ``lineage``: ``chain_lineage`` of the run.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / CHAIN
        data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.steps: list[dict[str, Any]] = data.get("steps", [])
        self.notes: dict[str, list[dict[str, Any]]] = data.get("notes", {})
        self.lineage: dict[str, Any] | None = data.get("lineage")

    def get(self, step: str) -> dict[str, Any] | None:
        return next((s for s in self.steps if s["step"] == step), None)

    def put(self, record: dict[str, Any]) -> None:
        self.steps = [s for s in self.steps if s["step"] != record["step"]] + [record]
        self._write()

    def note(self, kind: str, name: str, record: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Read (``record`` None) or write the note ``name`` of ``kind``."""
        if record is None:
            return next((r for r in self.notes.get(kind, []) if r["name"] == name), None)
        record = {"name": name, **record}
        self.notes[kind] = [r for r in self.notes.get(kind, []) if r["name"] != name] + [record]
        self._write()
        return record

    def set_lineage(self, lineage: dict[str, Any]) -> None:
        self.lineage = lineage
        self._write()

    def to_dict(self) -> dict[str, Any]:
        """What ``chain.json`` holds: ``steps``, and ``notes`` and ``lineage`` once there are any."""
        payload: dict[str, Any] = {"steps": self.steps}
        if self.notes:
            payload["notes"] = self.notes
        if self.lineage is not None:
            payload["lineage"] = self.lineage
        return payload

    def _write(self) -> None:
        io.write_json(self.path, io.jsonable(self.to_dict()))


@dataclass(frozen=True)
class Run:
    """Where a chain runs: its recipe, workspace and run folder (the first argument of every step)."""

    recipe: RunRecipe
    ws: io.Workspace
    run_dir: Path
    echo: Callable[[str], None] = print

    def chain(self) -> Chain:
        """The run's ``chain.json`` as it is now (read fresh: a step may have run in another process)."""
        return Chain(self.run_dir)

    @property
    def tag(self) -> str:
        """``<run folder name>-<hash of its path>``: names this run's own things in the shared workspace (ledger
        models of its RL stages, the selection and curriculum ``measure`` builds), so two runs never share them."""
        return f"{self.run_dir.name}-{hashlib.sha256(str(self.run_dir).encode()).hexdigest()[:8]}"

    def measured_model(self, model: str) -> str:
        """The name ``measure`` and CoScale's re-measure give ``model`` in the pool's ledger, stats and scores:
        its path relative to the workspace (``Workspace.model_name``: ``runs/<run>/sft/final``), so a moved workspace
        keeps writing and reading the same ledger folder; a model whose ledger folder exists under its absolute
        path (a measure begun before this rule) keeps that name."""
        if self.ws.ledger_dir(self.recipe.pool, model).is_dir():
            return model
        return self.ws.model_name(model)

    def ledger_model(self, stage_dir: Path) -> str:
        """The ledger model name of an RL stage of this run (``<run>-<hash>-<stage>``)."""
        return f"{self.tag}-{Path(stage_dir).name}"

    def pinned(self, what: str) -> Path | None:
        """The run's own copy of its data (``pin_data``): ``curriculum`` (folder), ``train`` or ``sft`` (files);
        None before training started or when the recipe has no such input."""
        path = self.run_dir / DATA / PINNED[what]
        return path if path.exists() and (path.is_file() or (path / "plan.json").is_file()) else None

    def stages(self) -> list[StagePlan]:
        """The recipe's RL stages over the run's pinned curriculum (or train file) once training started; none in
        an SFT-only recipe."""
        if not (self.recipe.curriculum or self.recipe.train):
            return []
        return plan_stages(self.recipe, self.ws, self.pinned("curriculum" if self.recipe.curriculum else "train"))

    def coscale_dir(self, iteration: int) -> Path:
        """``coscale/itN/``: CoScale iteration N's pools snapshot, restricted shards, SFT rows and SFT run."""
        return self.run_dir / COSCALE / f"it{iteration}"


@dataclass(frozen=True)
class ChainState:
    """What one step hands the next: JSON-simple, so a flow can show and pass it.

    model: the current policy (the next training step starts from it). initial: the starting model (before SFT;
    re-distillation fine-tunes it). offset_step / offset_compute: RL steps and compute so far (the eval curve's
    axes). last_stage: the last RL stage folder (re-distillation reads its rollouts). iteration: the CoScale
    iteration (0: the first pass). pending: the model the previous training step produced, waiting for
    ``evaluate_model`` (its step name, folder, training wall time, RL offsets).
    """

    model: str
    initial: str
    offset_step: int = 0
    offset_compute: float = 0.0
    last_stage: str | None = None
    iteration: int = 0
    pending: dict[str, Any] | None = None


def open_run(
    recipe: RunRecipe,
    home: str | Path | None = None,
    out: str | Path | None = None,
    echo: Callable[[str], None] = print,
) -> Run:
    """Resolve the workspace and the run folder, create it and write ``recipe.json``.

    A run folder belongs to one recipe: opening it with a recipe that differs in anything that changes results
    (``--set seed=1`` on a finished run, an edited learning rate) raises ``InputError`` naming the differences and
    ``--out``, and the folder's records are never rewritten. Settings that only change speed or placement
    (``HARMLESS``) may differ; the folder keeps the recipe it was made with.
    """
    ws = io.Workspace.resolve(home, recipe.home)
    run_dir = Path(out) if out else ws.root / "runs" / recipe.name
    path = run_dir / RECIPE
    new = recipe.to_dict()
    if path.is_file():
        changed = recipe_changes(read_recipe(run_dir) or {}, new)
        if changed:
            shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
            raise InputError(
                f"{run_dir} holds a run of another recipe (differs in {shown}); give the changed run its own "
                "folder with --out (or a new `name`), or delete the folder to start over"
            )
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        io.write_json(path, new)
    return Run(recipe, ws, run_dir.resolve(), echo)


def read_recipe(run_dir: str | Path) -> dict[str, Any] | None:
    """The resolved recipe a run folder was made with (``recipe.json``, written once by ``open_run``), as a
    mapping (``RunRecipe.to_dict``); None for a folder without one."""
    path = Path(run_dir) / RECIPE
    return json.loads(path.read_text()) if path.is_file() else None


def check_launch(recipe: RunRecipe) -> None:
    """What the recipe's ``launch`` needs, checked before any work: the launcher on PATH and, for an accelerate
    config with ``distributed_type: DEEPSPEED``, DeepSpeed installed (one line naming the extra to install instead of
    two stacked tracebacks after curation)."""
    import importlib.util

    import yaml

    if not recipe.launch:
        return
    if shutil.which(recipe.launch[0]) is None:
        raise ConfigError(f"launch: {recipe.launch[0]!r} is not on PATH (the recipe starts each step with it)")
    args = list(recipe.launch)
    config = args[args.index("--config_file") + 1] if "--config_file" in args[:-1] else None
    if config is None:
        return
    if not Path(config).is_file():
        raise ConfigError(f"launch: accelerate config {config} not found (paths are relative to where you run)")
    settings = yaml.safe_load(Path(config).read_text()) or {}
    if settings.get("distributed_type") == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            f"launch: {config} runs DeepSpeed ZeRO, which is not installed: pip install -e '.[gpu,multigpu]' "
            "(scripts/setup gpu does it on a box with several GPUs), or drop `launch` to train on one GPU"
        )


@contextlib.contextmanager
def run_lock(run: Run, timeout: float | None = None) -> Iterator[None]:
    """Hold the run folder's lock (``run.lock``) while a chain writes it: a second ``training run`` on the same
    folder waits, naming the holder, and gives up after the lock timeout (``$CURATE_LOCK_TIMEOUT``, default 600 s)
    with one line. The kernel releases it when the holder dies (SIGKILL too)."""
    from curate.locks import hold

    with hold(run.run_dir / LOCK, what=f"run folder {run.run_dir}", timeout=timeout):
        yield


def recipe_changes(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved recipes, ``HARMLESS`` keys left out."""
    out = []
    for key in sorted(set(old) | set(new)):
        dotted = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if dotted in HARMLESS or a == b:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += recipe_changes(a, b, f"{dotted}.")
        else:
            out.append(dotted)
    return out


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
    """Run one training step in a fresh process (``python -m training.chain SPEC``, or ``<launch> -m ...`` such as
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
    spec_path = out / "step_spec.json"
    out.mkdir(parents=True, exist_ok=True)
    io.remove_temp(out)
    io.write_json(spec_path, dict(spec))
    result_path = spec_path.with_name("step_result.json")
    result_path.unlink(missing_ok=True)
    cmd = [*(launch or [sys.executable]), "-m", "training.chain", str(spec_path)]
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
    """A step's output on the parent's stderr, line by line, without its tracebacks (issue 38.7: a full disk during
    a step echoed its two tracebacks, 38-44 lines, above the one line that says what happened). ``run_step`` writes
    every byte to ``step.log`` first, so a traceback stays there; ``error`` keeps its last line (the exception, as
    ``OSError: [Errno 28] No space left on device``) for that one line. A traceback runs from ``Traceback (most
    recent call last):`` through its indented frames, the exception line and any indented continuation; chained
    ones (``During handling of the above exception ...``) belong to it. Progress bars' ``\\r`` ends a line too."""

    _CHAINED = ("During handling of the above exception", "The above exception was the direct cause")

    def __init__(self) -> None:
        self.pending = ""
        self.state = "echo"  # "echo", "frames" (inside a traceback) or "raised" (after its exception line)
        self.error: str | None = None

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
    """The child side of ``run_step`` (``python -m training.chain SPEC``): one SFT, RL or re-distillation run,
    then the chain's lineage on its final model and ``step_result.json``."""
    spec = step_record(spec_path)
    kind, out = spec["kind"], Path(spec["out"])
    if kind == "sft":
        from training.sft import load_config, train_sft

        result = train_sft(
            load_config(spec["config"]), model=spec["model"], data=Path(spec["data"]), out_dir=out,
            lineage=spec.get("lineage"),
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
            stamp_lineage(out / "final", spec["lineage"])
        io.write_json(spec_path.with_name("step_result.json"), io.jsonable(result))


def sft_step(run: Run, state: ChainState, name: str, out_dir: Path, data: Path) -> ChainState:
    """SFT of the current model on ``data`` into ``out_dir`` in a fresh process (skipped when that folder holds a
    finished run); the state's model becomes its ``final/``, waiting for its evaluation as step ``name``."""
    from training.sft import METRICS

    cfg = run.recipe.sft.run_config()
    t0 = time.perf_counter()
    if run_folder.finished(out_dir, METRICS) is None:
        run_step({
            "kind": "sft", "out": str(out_dir), "model": state.model, "data": str(data),
            "config": dataclasses.asdict(cfg), "lineage": chain_lineage(run, state.iteration),
        }, run.recipe.launch)  # fmt: skip
    final = str(out_dir / "final")
    pending = {"step": name, "model": final, "wall_s": time.perf_counter() - t0}
    return dataclasses.replace(state, model=final, pending=pending)


# --------------------------------------------------------------------------------------------------- data
def pin_data(run: Run, parts: tuple[str, ...] = ("sft", "curriculum", "train")) -> dict[str, Any]:
    """Copy what the run trains on into ``<run>/data/``: the SFT rows when training starts, the curriculum
    (plan.json and its shards) or the train file then too, or after ``measure`` built it. From then on the run
    reads only its copies, so another run that re-curates the shared workspace (the same selection or curriculum
    name) cannot change this run's data, and its model cards keep pointing at files whose content and hash do not
    change. Returns the record (sources and sha256 of every copy); idempotent."""
    from curate.curriculum.stage import PLAN, read_plan

    recipe, ws, data = run.recipe, run.ws, run.run_dir / DATA
    curriculum = measured_name(run) if recipe.measure is not None else recipe.curriculum
    if "curriculum" in parts and recipe.curriculum and run.pinned("curriculum") is None:
        source = ws.curriculum_dir(curriculum)
        plan = read_plan(source)
        if plan is None:
            raise InputError(
                f"curriculum {recipe.curriculum!r} has no plan.json at {source / PLAN}: run `curate curriculum`"
            )
        for entry in plan.get("stages") or []:
            if entry.get("shard"):
                _copy(source / entry["shard"], data / PINNED["curriculum"] / entry["shard"])
        _copy(source / PLAN, data / PINNED["curriculum"] / PLAN)  # last: a copy with its plan is whole
    if "train" in parts and recipe.train and run.pinned("train") is None:
        _copy(resolve_path(ws, recipe.train), data / PINNED["train"])
    if "sft" in parts and recipe.sft is not None and run.pinned("sft") is None:
        source = resolve_path(ws, recipe.sft.data)
        if not source.is_file():
            raise InputError(f"sft.data {source} not found: run the curation (`curate solutions`) first")
        _copy(check_sft_data(source, "sft.data"), data / PINNED["sft"])
    record = read_pinned(run.run_dir)
    if record is None or set(record["sha256"]) != _copies(data):
        hashes = {name: file_hash(data / name) for name in sorted(_copies(data))}
        sources = {"curriculum": str(ws.curriculum_dir(curriculum)) if recipe.curriculum else None,
                   "train": str(resolve_path(ws, recipe.train)) if recipe.train else None,
                   "sft": str(resolve_path(ws, recipe.sft.data)) if recipe.sft is not None else None}  # fmt: skip
        io.write_json(data / PINNED_RECORD, {"sha256": hashes, "sources": {k: v for k, v in sources.items() if v}})
    return read_pinned(run.run_dir)


def read_pinned(run_dir: str | Path) -> dict[str, Any] | None:
    """``data/pinned.json`` of a run folder (``pin_data`` writes it): ``sha256`` of every copy, by its path under
    ``data/``, and the ``sources`` they were copied from; None before the run pinned anything."""
    path = Path(run_dir) / DATA / PINNED_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def measured_name(run: Run) -> str:
    """The selection and curriculum the ``measure`` step builds for this run: ``<curriculum>.<run tag>``."""
    return f"{run.recipe.curriculum}.{run.tag}"


def _copies(data: Path) -> set[str]:
    return {str(p.relative_to(data)) for p in data.rglob("*") if p.is_file() and p.name != PINNED_RECORD}


def check_sft_data(path: Path, what: str = "SFT data") -> Path:
    """``path`` if the SFT trainer (``training.sft``) can train on it: a Parquet file with ``prompt`` and
    ``completion`` columns (conversational rows, as ``curate solutions`` writes them) and at least one row. Reads
    the file's footer only, so a run finds bad data when it pins it (before the starting model is built), not
    minutes later inside the SFT step (issue 38.6). One ``InputError`` line otherwise."""
    import polars as pl

    if not path.is_file():
        raise InputError(f"{what} {path} not found")
    try:
        columns = list(pl.read_parquet_schema(path))
        rows = pl.scan_parquet(path).select(pl.len()).collect().item()
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{what} {path} is not a Parquet file ({first})") from None
    missing = [c for c in ("prompt", "completion") if c not in columns]
    if missing:
        raise InputError(
            f"{what} {path} has no {' and no '.join(missing)} column (it has {columns}): SFT trains on "
            "conversational prompt/completion rows, as `curate solutions` writes them"
        )
    if rows == 0:
        raise InputError(f"{what} {path} has no rows")
    return path


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise InputError(f"{source} not found")
    io.copy_file(source, target)


# --------------------------------------------------------------------------------------------------- lineage
def solution_set_tables(recipe: RunRecipe, ws: io.Workspace) -> tuple[Path, Path, Path] | None:
    """The tables of the solution set the curate recipe writes (``curate.solutions.stage.set_tables``: each set has
    its own, so the raw recipe's never stand in for the curated one's), when that set was written."""
    if recipe.curate is None or "solutions" not in recipe.curate.stages:
        return None
    from curate.solutions import stage as solutions_stage

    tables = solutions_stage.set_tables(ws, recipe.pool, solutions_stage.load_config(recipe.curate))
    return tables if tables[2].is_file() else None


def chain_lineage(run: Run, iteration: int = 0) -> dict[str, Any]:
    """What every model of the run came from: pool, selection, curriculum (or train file), solutions table,
    the resolved recipe and the run folder (the model card adds the code version). In CoScale iteration N the
    solutions table is that iteration's export and its CoScale pools snapshot is named too."""
    from curate.curriculum.stage import read_plan

    recipe, ws = run.recipe, run.ws
    out: dict[str, Any] = {"pool": recipe.pool}
    if recipe.curriculum:
        folder = run.pinned("curriculum") or ws.curriculum_dir(recipe.curriculum)
        source = (read_plan(folder) or {}).get("source") or {}
        if source.get("selection"):
            out["selection"] = str(ws.selection_dir(source["selection"]) / "selection.parquet")
        out["curriculum"] = str(folder)
    else:
        out["train"] = str(run.pinned("train") or resolve_path(ws, str(recipe.train)))
    tables = solution_set_tables(recipe, ws)
    if recipe.sft is not None:
        out["solutions"] = str(run.pinned("sft") or resolve_path(ws, recipe.sft.data))
    elif tables is not None:
        out["solutions"] = str(tables[0])
    if tables is not None:
        out["solution_pools"] = str(tables[2])
    note = run.chain().note("coscale", f"it{iteration}:solutions") if iteration else None
    if note is not None:
        from curate.solutions import export as solutions_export

        out["solutions"] = str(Path(note["export"]) / solutions_export.SFT_FILE)
        out["solution_pools"] = str(run.coscale_dir(iteration) / "solution_pools.parquet")
        out["coscale_iteration"] = iteration
    out["recipe"] = str(run.run_dir / RECIPE)
    out["recipe_name"] = recipe.name
    if recipe.curate_recipe:
        out["curate_recipe"] = str(Path(recipe.curate_recipe).resolve())
    out["run"] = str(run.run_dir)
    pinned = read_pinned(run.run_dir)
    if pinned is not None:  # the run's own copies: where they came from and their content hashes
        out["data"] = pinned
    return out


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


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's (``run_step``): it stops this step
    step_main(Path(sys.argv[1]))
