"""A training run's state: ``chain.json``, the run folder, one fresh process per training step, and lineage.

``Run`` is where a chain runs (recipe, workspace, run folder); ``Chain`` is ``chain.json``, the record of what is
done (read back from disk, never from the caller, so a rerun after a failure resumes at the failed step);
``ChainState`` is what one step hands the next. Each SFT, RL or re-distillation step runs in a fresh process
(``training.step.run_step``). ``chain_lineage``: what every model of the run came from, in its card
(``training.step.stamp_lineage`` writes it into a step's model).

Keep scripts that import this module under ``if __name__ == "__main__":`` (the answer checker's spawn workers
re-import the main module).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate import io
from curate.config import placement_keys
from curate.errors import ConfigError, InputError
from curate.manifest import file_hash
from training import layout, plateau, run_folder
from training.plan import StagePlan, plan_stages
from training.recipe import RunRecipe, resolve_path
from training.step import run_step


# the run folder's records (``training.layout``): chain.json; data/, the run's own copy of what it trains on
# (``pin_data``) and pinned.json, what was copied from where, with content hashes; run.lock, one writer per run
# folder (``run_lock``); recipe.json, the resolved recipe the run was made with
CHAIN, DATA, PINNED, PINNED_RECORD = layout.CHAIN, layout.DATA, layout.PINNED, layout.PINNED_RECORD
LOCK, RECIPE = layout.LOCK, layout.RECIPE
# Recipe keys that change speed or placement, not results (the fields marked ``curate.config.placement``): a rerun
# may change them on an existing run folder.
HARMLESS = placement_keys(RunRecipe)
COSCALE = layout.COSCALE  # run-folder subfolder of the CoScale iterations (coscale/itN/)


# --------------------------------------------------------------------------------------------------- run + state
class Chain:
    """``chain.json``: the steps done so far (resumable record), written atomically after each change.

    ``steps``: one record per trained-and-evaluated model (step, model, pass rate, wall time). ``notes``: the other
    steps' records by kind (``decisions``, ``coscale``), each a list in the order they were made, every record
    with its ``name``. ``lineage``: ``chain_lineage`` of the run.
    """

    def __init__(self, run_dir: Path, root: Path | None = None) -> None:
        self.path = Path(run_dir) / CHAIN
        self.roots = [Path(run_dir), *((Path(root), Path(root).resolve()) if root is not None else ())]
        data = _from_run_folder(json.loads(self.path.read_text()), Path(run_dir)) if self.path.is_file() else {}
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
        io.write_json(self.path, _to_run_folder(io.jsonable(self.to_dict()), self.path.parent, self.roots))


def _to_run_folder(obj: Any, run_dir: Path, roots: list[Path]) -> Any:
    """``chain.json`` as written: every absolute path that exists in the run folder or the workspace (``roots``)
    relative to the run folder, as ``./sft/best`` or ``../../curricula/tiny-rl``, so a copied workspace names its
    own folders; ``_from_run_folder`` reads them back. Other strings (names, ledger models, hub ids,
    files of the checkout) are kept as they are."""
    if isinstance(obj, dict):
        return {k: _to_run_folder(v, run_dir, roots) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_run_folder(v, run_dir, roots) for v in obj]
    if isinstance(obj, str) and obj.startswith("/") and any(Path(obj).is_relative_to(r) for r in roots):
        rel = os.path.relpath(obj, run_dir) if os.path.exists(obj) else None
        return obj if rel is None else rel if rel.startswith("../") else f"./{rel}"
    return obj


def _from_run_folder(obj: Any, run_dir: Path) -> Any:
    """The paths ``_to_run_folder`` wrote, absolute again under the run folder as it is now; a record of the old
    code (absolute paths) reads as it is."""
    if isinstance(obj, dict):
        return {k: _from_run_folder(v, run_dir) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_run_folder(v, run_dir) for v in obj]
    if isinstance(obj, str) and obj.startswith(("./", "../")):
        return os.path.normpath(run_dir / obj)
    return obj


@dataclass(frozen=True)
class Run:
    """Where a chain runs: its recipe, workspace and run folder (the first argument of every step)."""

    recipe: RunRecipe
    ws: io.Workspace
    run_dir: Path
    echo: Callable[[str], None] = print

    def chain(self) -> Chain:
        """The run's ``chain.json`` as it is now (read fresh: a step may have run in another process)."""
        return Chain(self.run_dir, self.ws.root)

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
        from curate.curriculum.stage import PLAN

        path = layout.pinned_path(self.run_dir, what)
        return path if path.exists() and (path.is_file() or (path / PLAN).is_file()) else None

    def stages(self) -> list[StagePlan]:
        """The recipe's RL stages over the run's pinned curriculum (or train file) once training started; none in
        an SFT-only recipe."""
        if not (self.recipe.curriculum or self.recipe.train):
            return []
        return plan_stages(self.recipe, self.ws, self.pinned("curriculum" if self.recipe.curriculum else "train"))

    def coscale_dir(self, iteration: int) -> Path:
        """``coscale/itN/``: CoScale iteration N's pools snapshot, restricted shards, SFT rows and SFT run."""
        return layout.coscale_dir(self.run_dir, iteration)


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
    run_dir = Path(out) if out else layout.run_dir(ws.root, recipe.name)
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


def sft_step(run: Run, state: ChainState, name: str, out_dir: Path, data: Path, early_stop: bool = False
             ) -> ChainState:  # fmt: skip
    """SFT of the current model on ``data`` into ``out_dir`` in a fresh process (skipped when that folder holds a
    finished run); the state's model becomes its ``final/``, waiting for its evaluation as step ``name``.
    early_stop: with ``sft.validation.patience``, the step takes validation points as it trains and stops at the
    plateau (``early_stop_spec``: the chain's own SFT, whose best checkpoint ``training.choose`` keeps, and CoScale's
    iterations)."""
    from training.sft import METRICS

    cfg = run.recipe.sft.run_config()
    t0 = time.perf_counter()
    if run_folder.finished(out_dir, METRICS) is None:
        early = early_stop_spec(run, out_dir) if early_stop else None
        run_step({
            "kind": "sft", "out": str(out_dir), "model": state.model, "data": str(data),
            "config": dataclasses.asdict(cfg), "lineage": chain_lineage(run, state.iteration),
            **({"validation": early.to_spec()} if early is not None else {}),
        }, run.recipe.launch)  # fmt: skip
    final = str(layout.final(out_dir))
    pending = {"step": name, "model": final, "wall_s": time.perf_counter() - t0}
    return dataclasses.replace(state, model=final, pending=pending)


def early_stop_spec(run: Run, out_dir: Path) -> plateau.EarlyStop | None:
    """What the SFT step needs to stop at its plateau (``training.plateau.EarlyStop``), None without
    ``sft.validation.patience``. The validation problems (``limit`` of ``split``, the first by problem_id) are
    written into ``out_dir`` once, when the run starts: a resumed run scores the problems its first points were
    scored on, whatever happens to the pool meanwhile. Each point is sampled as ``training.choose`` samples a
    checkpoint: the ``eval`` section's settings with ``sft.validation``'s ``k``."""
    from training.evaluate import heldout_problems

    sec = run.recipe.sft.validation
    if sec is None or sec.patience is None:
        return None
    problems = Path(out_dir) / plateau.PROBLEMS
    if not problems.is_file():
        io.write_parquet(heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=sec.limit,
                                          sources=run.recipe.eval.sources), problems)  # fmt: skip
    cfg = dataclasses.replace(run.recipe.eval.config(sec.limit), k=sec.k)
    return plateau.EarlyStop(problems=str(problems), eval=cfg, patience=sec.patience, min_delta=sec.min_delta,
                             split=sec.split)  # fmt: skip


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
        if not source.is_file() and not source.is_dir():
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
    minutes later inside the SFT step. One ``InputError`` line otherwise."""
    import polars as pl

    if path.is_dir():  # a folder is not "not found": say what to give
        raise InputError(f"{what} {path} is a folder: give its Parquet file of prompt/completion rows (`curate "
                         "solutions` writes solutions/<set>/sft.parquet)")  # fmt: skip
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
    note = run.chain().note(COSCALE, layout.in_iteration(layout.SOLUTIONS, iteration)) if iteration else None
    if note is not None:
        from curate.solutions import export as solutions_export

        out["solutions"] = str(Path(note["export"]) / solutions_export.SFT_FILE)
        out["solution_pools"] = str(run.coscale_dir(iteration) / layout.SOLUTION_POOLS)
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
