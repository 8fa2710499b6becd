"""``training run``: one recipe from a curated pool to a trained, evaluated model, with the scaling fit.

The chain, one public function per step, each skipped when its output is already there (re-running resumes):

1. ``curation`` (optional ``curate_recipe``): the ``curate run`` stages, skipped when up to date (manifests), and
   not run again once the run has started training (``curation_pinned``: the run's data stays what it trained on);
2. ``init_model``: ``tiny`` builds a small from-scratch model for the built-in task (``training.tiny``), anything
   else is a local folder or a hub name;
3. ``sft`` (optional ``sft``) on verified solutions (``curate solutions``' ``sft.parquet``);
4. ``rl_stage`` for each RL stage of the curriculum plan (``training.plan``), in order, each starting from the
   previous stage's final model; checkpoints every ``eval.every`` steps are evaluated after the stage;
5. ``evaluate_model`` after every training step (pass@1 as mean@k with its standard error, ``split: test`` only);
6. ``decide`` after every RL stage when the recipe has ``decide`` (below);
7. ``redistill`` (optional ``redistill``): SFT of the starting model on the last stage's correct RL rollouts;
8. ``fit_and_plot``: the ScaleRL sigmoid fit over (compute, pass rate) of the RL steps, its advice and figures;
9. ``write_summary``: ``summary.json``.

Every step takes ``(run, state)``: a ``Run`` (recipe, workspace, run folder) and the ``ChainState`` the previous step
returned (the current model, RL step and compute offsets, the model waiting for its evaluation), and returns the
next state. ``run_chain`` calls them in order through a ``call(name, fn, *args)`` hook: by default a plain call;
the Prefect flow (``flows/training.py``) passes one that runs each call as a task, so the CLI and the flow run the
same steps and the same control flow. What is done is read back from the run folder (``chain.json``, each training
step's own completion file), never from the caller, so a re-run after a failure resumes at the failed step (an RL
stage from its last checkpoint, ``training.rl``).

The decision (recipe key ``decide``, ``DecideSection``): after each RL stage's evaluation the sigmoid is fitted to
the eval curve so far (every RL evaluation of the run, cumulative compute). The chain **stops** the current pass
when the fitted asymptote A is pinned down (it has an error band, which takes at least four points, and the band
does not reach the grid edge) and lies within ``stop_margin``
of the pass rate just measured: more compute on the same data buys almost nothing. Otherwise (no fit yet, A not
pinned down, or A above the current pass rate by more than the margin) it **continues** with the next stage. When
a pass ends (all stages, or a stop), a **CoScale iteration** follows while ``coscale_iterations`` allows
(CoScale-RL §2.2, one iteration = re-measure, scale data, RL again):

a. ``coscale_measure``: ``curate rollout`` of the current model (``decide.rollout`` settings; ``hf`` backend by
   default) over the pool's training problems, so the pass rates are the trained model's own;
b. ``coscale_solutions``: ``curate solutions`` with that model as the student (the curate recipe's ``solutions``
   section, overridden by ``decide.solutions``): the CoScale pools are re-read (unsolvable < 5%, solvable,
   solved > 70%) and, with a teacher configured, solutions are added for the unsolvable problems; the pools table
   is copied into the run folder (``coscale/itN/``) so the iteration reads a fixed snapshot;
c. ``coscale_sft`` (when the recipe has ``sft``): SFT of the current model on the solutions of the unsolvable
   problems (data scaling makes them solvable);
d. the RL stages again, each shard restricted to the solvable problems (CoScale: only Solvable problems enter RL;
   a stage left empty is skipped), in ``rl/itN-<stage>`` folders, each evaluated and decided on as above.

Run folder (``runs/<name>`` under the workspace unless ``--out``)::

    recipe.json   the resolved recipe          chain.json  every step: model folder, pass rate, wall time;
    init/ sft/    models (``final/`` inside)               decisions, CoScale notes, the lineage
    rl/NN-<stage>/  train_rl run folders       coscale/itN/  pools snapshot, restricted shards, SFT rows, sft/
    eval.parquet  RL eval curve (step, compute, pass_at_1, stderr)   metrics.parquet  RL metrics of every stage
    fit.json, training.png, eval.png, fit.png  the fit and the figures      summary.json  the run's summary
    evals/<step>.parquet  per-problem held-out results of each step; summary.json's ``gain_over_sft`` pairs
                  the last RL model with the SFT model on them (gain, paired SE, z)

Lineage: every model folder the chain trains (SFT, RL stages, re-distillation) gets the chain's lineage in its card
and ``lineage.json`` (``chain_lineage``: pool, selection, curriculum, solutions table, resolved recipe, run folder;
the card adds the code version). ``training show RUN`` prints the chain.

Training steps run in subprocesses (``python -m training.runner SPEC``), so GPU memory and the verify workers of
one stage never leak into the next, and a crash points at one step. Keep scripts that import this module under
``if __name__ == "__main__":`` (the answer checker's spawn workers re-import the main module).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curate import io
from curate import schema as S
from curate.config import from_mapping
from curate.errors import ConfigError, InputError
from training.plan import PLAN_FIELDS, PlanScale, StagePlan, rl_stages, single_stage


CHAIN = "chain.json"
SUMMARY = "summary.json"
EVALS = "evals"  # per-problem held-out results of every chain step (<step>.parquet)
STOP, CONTINUE = "stop", "continue"


# --------------------------------------------------------------------------------------------------- recipe
@dataclass(frozen=True)
class EvalSection:
    """Held-out evaluation (recipe key ``eval``): ``split`` problems of the pool, ``limit`` of them, k samples.

    every: evaluate RL checkpoints every this many steps (0: only each stage's final model). init_limit: at most
    this many problems for the starting model (None: ``limit``); a model built from scratch scores 0 and samples
    to ``max_new_tokens`` every time, so confirming that on a few problems saves minutes. The other keys are
    ``training.evaluate.EvalConfig``'s.
    """

    split: str = "test"
    every: int = 0
    k: int = 4
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int = 1024
    batch_size: int = 64
    limit: int | None = None
    init_limit: int | None = None
    threads: int = 0


@dataclass(frozen=True)
class DecideSection:
    """What the chain decides after each RL stage (recipe key ``decide``; without it every stage runs, once).

    stop_margin: stop the pass when the fitted asymptote A is pinned down and within this of the measured pass rate.
    coscale_iterations: CoScale iterations after the first pass (re-measure, solutions, SFT, RL on solvable).
    rollout: ``curate rollout`` settings for re-measuring (``model`` is set to the current model; ``backend``
    defaults to ``hf``). solutions: ``curate solutions`` settings over the curate recipe's section (``student``
    and ``name`` are set per iteration; ``selection`` defaults to the curriculum's).
    """

    stop_margin: float = 0.02
    coscale_iterations: int = 0
    rollout: dict[str, Any] = field(default_factory=dict)
    solutions: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stop_margin < 0 or self.coscale_iterations < 0:
            raise ConfigError("decide.stop_margin and decide.coscale_iterations must be >= 0")
        if "model" in self.rollout or "student" in self.solutions:
            raise ConfigError("decide.rollout.model / decide.solutions.student are set by the chain (current model)")


@dataclass(frozen=True)
class RunRecipe:
    """A training recipe (``training/recipes/<model>/<method>.yaml``). Unknown keys fail at load time.

    name: run name (folder ``runs/<name>``). pool: the workspace pool (held-out problems, ledger of training
    rollouts). model: ``tiny`` (built from scratch, ``tiny`` section = ``training.tiny.TinyConfig``), a local
    folder or a hub name. curate_recipe: a curation recipe run first (skip-if-done). curriculum: a curriculum
    folder name (``curate curriculum --name``); or train: one prompt file for a single RL stage. sft: an
    ``SFTRunConfig`` mapping plus ``data`` (path to ``sft.parquet``, relative paths from the workspace root).
    rl: ``RLConfig`` defaults for every stage; plan_fields / scale / stages: how the plan's settings apply
    (``training.plan``). redistill: ``RedistillConfig`` mapping (re-distil the starting model on the last stage's
    correct rollouts). fit: ``training.scaling.FitConfig`` mapping. decide: stop / CoScale decisions
    (``DecideSection``). seed: one seed for every step. launch: the command that starts each training step
    instead of ``python``, e.g. ``[accelerate, launch, --config_file, training/recipes/accelerate/zero2.yaml]`` for
    several GPUs (the step runs as ``<launch> -m training.runner``).
    """

    name: str
    pool: str
    model: str = "tiny"
    home: str | None = None
    seed: int = 0
    curate_recipe: str | None = None
    curriculum: str | None = None
    train: str | None = None
    tiny: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] | None = None
    rl: dict[str, Any] = field(default_factory=dict)
    plan_fields: list[str] = field(default_factory=lambda: list(PLAN_FIELDS))
    scale: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    only_stages: list[str] | None = None
    eval: EvalSection = field(default_factory=EvalSection)
    redistill: dict[str, Any] | None = None
    fit: dict[str, Any] = field(default_factory=dict)
    decide: DecideSection | None = None
    launch: list[str] | None = None

    def __post_init__(self) -> None:
        if bool(self.curriculum) == bool(self.train):
            raise ConfigError("recipe: give exactly one of `curriculum` (a plan) or `train` (one prompt file)")


def load_recipe(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunRecipe:
    """Read and validate a training recipe; ``overrides`` are dotted ``key=value`` settings (``rl.max_steps``)."""
    from curate.config import apply_overrides, read_yaml

    data = apply_overrides(read_yaml(path, "training recipe"), dict(overrides or {}))
    recipe = from_mapping(RunRecipe, data, "recipe")
    # Validate every section now, so a typo fails before any model is built.
    from_mapping(PlanScale, recipe.scale, "scale")
    if recipe.sft is not None:
        _sft_config(recipe)
    if recipe.redistill is not None:
        from training.redistill import load_config as redistill_config

        redistill_config({k: v for k, v in recipe.redistill.items()})
    from training.scaling import FitConfig

    from_mapping(FitConfig, recipe.fit, "fit")
    if recipe.model == "tiny":
        from training.tiny import TinyConfig

        from_mapping(TinyConfig, recipe.tiny, "tiny")
    if recipe.decide is not None:
        _validate_decide(recipe)
    return recipe


def _sft_config(recipe: RunRecipe) -> tuple[Any, str]:
    from training.sft import load_config as sft_config

    section = dict(recipe.sft or {})
    data = section.pop("data", None)
    if not data:
        raise ConfigError("sft.data: the SFT rows (a `curate solutions` export's sft.parquet) are required")
    section.setdefault("seed", recipe.seed)
    return sft_config(section), str(data)


def _validate_decide(recipe: RunRecipe) -> None:
    """The CoScale rollout and solutions sections as curate would read them (placeholder model), so a typo fails
    at load time rather than after the first pass."""
    from curate.rollout import stage as rollout_stage
    from curate.solutions import stage as solutions_stage

    rollout_stage.load_config(_curate_recipe(recipe, "rollout", _rollout_section(recipe, "<model>")))
    solutions_stage.load_config(_curate_recipe(recipe, "solutions", _solutions_section(recipe, "<model>", 1, None)))


def _path(ws: io.Workspace, value: str) -> Path:
    """Recipe paths: absolute, else relative to the workspace root when it exists there, else to the cwd."""
    p = Path(value)
    if p.is_absolute():
        return p
    return ws.root / p if (ws.root / p).exists() else p


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

    def _write(self) -> None:
        payload: dict[str, Any] = {"steps": self.steps}
        if self.notes:
            payload["notes"] = self.notes
        if self.lineage is not None:
            payload["lineage"] = self.lineage
        io.write_json(self.path, json.loads(json.dumps(payload, default=str)))


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
    """Resolve the workspace and the run folder, create it and write ``recipe.json``."""
    ws = io.Workspace.resolve(home, recipe.home)
    run_dir = Path(out) if out else ws.root / "runs" / recipe.name
    run_dir.mkdir(parents=True, exist_ok=True)
    io.write_json(run_dir / "recipe.json", dataclasses.asdict(recipe))
    return Run(recipe, ws, run_dir.resolve(), echo)


def run_step(spec: Mapping[str, Any], launch: list[str] | None = None) -> dict[str, Any]:
    """Run one training step in a fresh process (``python -m training.runner SPEC``, or ``<launch> -m ...`` such as
    ``accelerate launch`` for several GPUs); returns the JSON it writes. Raises on failure."""
    spec_path = Path(spec["out"]) / "step_spec.json"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    io.write_json(spec_path, dict(spec))
    result_path = spec_path.with_name("step_result.json")
    result_path.unlink(missing_ok=True)
    cmd = [*(launch or [sys.executable]), "-m", "training.runner", str(spec_path)]
    proc = subprocess.run(cmd, env=os.environ.copy(), check=False)
    if proc.returncode != 0 or not result_path.is_file():
        raise RuntimeError(f"training step {spec['kind']} ({spec['out']}) failed with exit code {proc.returncode}")
    return json.loads(result_path.read_text())


def _step_main(spec_path: Path) -> None:
    """The child side of ``run_step``: one SFT, RL or re-distillation run (then its lineage on the final model)."""
    spec = json.loads(spec_path.read_text())
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
            home=spec.get("home"), pool=spec.get("pool"),
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
        io.write_json(spec_path.with_name("step_result.json"), json.loads(json.dumps(result, default=str)))


# --------------------------------------------------------------------------------------------------- lineage
def chain_lineage(run: Run, iteration: int = 0) -> dict[str, Any]:
    """What every model of the run came from: pool, selection, curriculum (or train file), solutions table,
    the resolved recipe and the run folder (the model card adds the code version). In CoScale iteration N the
    solutions table is that iteration's export and its CoScale pools snapshot is named too."""
    recipe, ws = run.recipe, run.ws
    out: dict[str, Any] = {"pool": recipe.pool}
    if recipe.curriculum:
        folder = ws.curriculum_dir(recipe.curriculum)
        plan_path = folder / "plan.json"
        source = json.loads(plan_path.read_text()).get("source") or {} if plan_path.is_file() else {}
        if source.get("selection"):
            out["selection"] = str(ws.selection_dir(source["selection"]) / "selection.parquet")
        out["curriculum"] = str(folder)
    else:
        out["train"] = str(_path(ws, str(recipe.train)))
    if recipe.sft is not None:
        out["solutions"] = str(_path(ws, _sft_config(recipe)[1]))
    elif ws.table(recipe.pool, "solutions").is_file():
        out["solutions"] = str(ws.table(recipe.pool, "solutions"))
    note = run.chain().note("coscale", f"it{iteration}:solutions") if iteration else None
    if note is not None:
        from curate.solutions import export as solutions_export

        out["solutions"] = str(Path(note["export"]) / solutions_export.SFT_FILE)
        out["solution_pools"] = str(coscale_dir(run, iteration) / "solution_pools.parquet")
        out["coscale_iteration"] = iteration
    out["recipe"] = str(run.run_dir / "recipe.json")
    out["recipe_name"] = recipe.name
    if recipe.curate_recipe:
        out["curate_recipe"] = str(Path(recipe.curate_recipe).resolve())
    out["run"] = str(run.run_dir)
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
        metrics=have.get("metrics") or {}, parents=sources[1:],
    )  # fmt: skip
    return True


# --------------------------------------------------------------------------------------------------- helpers
def _eval(model_dir: Path, run: Run, save_as: str | None = None) -> dict[str, Any]:
    """Held-out eval of one model with the recipe's settings; ``save_as`` keeps its per-problem table in
    ``<run>/evals/<save_as>.parquet`` (what ``gain_over_sft`` pairs up)."""
    from training.evaluate import EvalConfig, evaluate, heldout_problems

    recipe, sec = run.recipe, run.recipe.eval
    limit = sec.init_limit if save_as == "init" and sec.init_limit is not None else sec.limit
    heldout = heldout_problems(run.ws, recipe.pool, split=sec.split, limit=limit)
    cfg = EvalConfig(
        k=sec.k, temperature=sec.temperature, top_p=sec.top_p, max_new_tokens=sec.max_new_tokens,
        batch_size=sec.batch_size, seed=recipe.seed, threads=sec.threads,
    )  # fmt: skip
    result = evaluate(model_dir, heldout, cfg)
    if save_as is not None:
        io.write_parquet(result["per_problem"], run.run_dir / EVALS / f"{S.slug(save_as)}.parquet")
    return {k: result[k] for k in ("pass_at_1", "stderr", "n_problems", "k", "warning") if k in result}


def gain_over_sft(run: Run) -> dict[str, Any] | None:
    """The last RL model against the SFT model on the same held-out problems (``evaluate.paired_gain``): the
    figure a user asks of the chain, "did RL beat SFT, by how many standard errors?". None without both."""
    import polars as pl

    from training.evaluate import paired_gain

    folder = run.run_dir / EVALS
    rl = [r["step"] for r in run.chain().steps if "rl_steps" in r]
    rl = [step for step in rl if (folder / f"{S.slug(step)}.parquet").is_file()]
    if not rl or not (folder / "sft.parquet").is_file():
        return None
    out = paired_gain(pl.read_parquet(folder / f"{S.slug(rl[-1])}.parquet"), pl.read_parquet(folder / "sft.parquet"))
    return {"after": rl[-1], "before": "sft", **out}


def plan_stages(recipe: RunRecipe, ws: io.Workspace) -> list[StagePlan]:
    """The RL stages of the recipe (curriculum plan, or one stage over ``train``), validated."""
    base = {"seed": recipe.seed, **recipe.rl}
    if recipe.train:
        return single_stage(_path(ws, recipe.train), base)
    plan_path = ws.curriculum_dir(recipe.curriculum) / "plan.json"
    if not plan_path.is_file():
        raise InputError(f"curriculum {recipe.curriculum!r} has no plan.json at {plan_path}: run `curate curriculum`")
    plan = json.loads(plan_path.read_text())
    scale = from_mapping(PlanScale, recipe.scale, "scale")
    return rl_stages(
        plan, plan_path.parent, base, fields=recipe.plan_fields, scale=scale, per_stage=recipe.stages,
        only=recipe.only_stages,
    )  # fmt: skip


def _stage_compute(stage_dir: Path) -> dict[int, float]:
    """Cumulative tokens per step of one RL stage (the compute axis), from its metrics.parquet."""
    import polars as pl

    path = stage_dir / "metrics.parquet"
    if not path.is_file():
        return {}
    df = pl.read_parquet(path)
    col = "tokens" if "tokens" in df.columns else None
    if col is None:
        return {int(s): float(s) for s in df["step"].to_list()}
    return dict(zip(df["step"].cast(int).to_list(), df[col].fill_null(strategy="forward").to_list(), strict=True))


def _sft_done(out_dir: Path) -> bool:
    from training.sft import METRICS

    return (out_dir / METRICS).is_file() and (out_dir / "final" / "config.json").is_file()


def _prefix(iteration: int) -> str:
    return f"it{iteration}:" if iteration else ""


def rl_step_name(stage: StagePlan, iteration: int = 0) -> str:
    """``rl:<stage>`` in the first pass, ``itN:rl:<stage>`` in CoScale iteration N."""
    return f"{_prefix(iteration)}rl:{stage.name}"


def stage_dir(run: Run, stage: StagePlan, iteration: int = 0) -> Path:
    """``rl/NN-<stage>`` in the first pass, ``rl/itN-NN-<stage>`` in CoScale iteration N."""
    return run.run_dir / "rl" / (f"it{iteration}-{stage.folder}" if iteration else stage.folder)


# --------------------------------------------------------------------------------------------------- steps
def curation_pinned(run: Run) -> bool:
    """Whether the run's curated data is pinned: once training has started (``init_model`` recorded the lineage),
    curation is not run again for this run. Training writes its rollouts into the pool's ledger, which changes the
    scores, the selection and the curriculum shards a re-run of curation would produce, and an RL stage resumed
    on a different shard is refused (``training.rl``); a new run (another ``name``) curates afresh."""
    return run.chain().lineage is not None


def curation(run: Run) -> list[dict[str, Any]]:
    """The curate recipe's stages (``curate.pipeline.run_recipe``), each skipped when its manifest is up to date;
    nothing once the run's curation is pinned (``curation_pinned``)."""
    from curate import config as curate_config
    from curate import pipeline

    if not run.recipe.curate_recipe:
        return []
    if curation_pinned(run):
        run.echo("[chain] curation: pinned (this run has started training; a run with a new name re-curates)")
        return []
    t0 = time.perf_counter()
    results = pipeline.run_recipe(curate_config.load_recipe(Path(run.recipe.curate_recipe)), run.ws)
    ran = [r.stage for r in results if not r.skipped]
    run.echo(f"[chain] curation: {len(results)} stage(s), ran {ran or 'none (up to date)'} "
             f"[{time.perf_counter() - t0:.0f} s]")  # fmt: skip
    return [json.loads(json.dumps(r.to_dict(), default=str)) for r in results]


def init_model(run: Run) -> ChainState:
    """The starting model: built (``tiny``, skipped when its card exists) or resolved (folder / hub name)."""
    recipe = run.recipe
    run.chain().set_lineage(chain_lineage(run))
    t0 = time.perf_counter()
    if recipe.model == "tiny":
        from training.card import CARD
        from training.tiny import TinyConfig, init_tiny

        init_dir = run.run_dir / "init"
        if not (init_dir / CARD).is_file():
            init_tiny(init_dir, from_mapping(TinyConfig, {"seed": recipe.seed, **recipe.tiny}, "tiny"))
        model = str(init_dir)
    else:
        local = _path(run.ws, recipe.model)
        model = str(local) if local.exists() else recipe.model
    pending = None
    if Path(model).exists():  # a hub model is not evaluated before training
        pending = {"step": "init", "model": model, "wall_s": time.perf_counter() - t0}
    return ChainState(model=model, initial=model, pending=pending)


def _sft_step(run: Run, state: ChainState, name: str, out_dir: Path, data: Path) -> ChainState:
    cfg, _ = _sft_config(run.recipe)
    t0 = time.perf_counter()
    if not _sft_done(out_dir):
        run_step({
            "kind": "sft", "out": str(out_dir), "model": state.model, "data": str(data),
            "config": dataclasses.asdict(cfg), "lineage": chain_lineage(run, state.iteration),
        }, run.recipe.launch)  # fmt: skip
    final = str(out_dir / "final")
    pending = {"step": name, "model": final, "wall_s": time.perf_counter() - t0}
    return dataclasses.replace(state, model=final, pending=pending)


def sft(run: Run, state: ChainState) -> ChainState:
    """SFT of the current model on the recipe's ``sft.data`` (skipped when ``sft/`` holds a finished run)."""
    if run.recipe.sft is None:
        return state
    _, data = _sft_config(run.recipe)
    return _sft_step(run, state, "sft", run.run_dir / "sft", _path(run.ws, data))


def rl_stage(run: Run, state: ChainState, stage: StagePlan) -> ChainState:
    """One RL stage from the current model (skipped when its ``summary.json`` exists; resumes from its last
    checkpoint otherwise); its final model gets the chain's lineage."""
    recipe = run.recipe
    folder = stage_dir(run, stage, state.iteration)
    t0 = time.perf_counter()
    lineage = chain_lineage(run, state.iteration)
    if not (folder / "summary.json").is_file():
        cfg = dict(stage.rl)
        if recipe.eval.every:
            cfg.update(save_steps=recipe.eval.every, save_total_limit=None)
        run_step({
            "kind": "rl", "out": str(folder), "model": state.model, "train": str(stage.shard), "config": cfg,
            "home": str(run.ws.root), "pool": recipe.pool, "lineage": lineage,
        }, recipe.launch)  # fmt: skip
    stamp_lineage(folder / "final", lineage)  # no-op when the step wrote it
    compute = _stage_compute(folder)
    steps = max(compute, default=0)
    pending = {
        "step": rl_step_name(stage, state.iteration), "model": str(folder / "final"), "kind": "rl",
        "stage_dir": str(folder), "wall_s": time.perf_counter() - t0, "rl_steps": steps,
        "offset_step": state.offset_step, "offset_compute": state.offset_compute,
        "compute": state.offset_compute + compute.get(steps, 0),
        "eval_compute": state.offset_compute + compute.get(steps, steps),
    }  # fmt: skip
    return dataclasses.replace(
        state, model=str(folder / "final"), last_stage=str(folder), pending=pending,
        offset_step=state.offset_step + steps, offset_compute=state.offset_compute + compute.get(steps, float(steps)),
    )  # fmt: skip


def redistill(run: Run, state: ChainState) -> ChainState:
    """Re-distillation of the starting model on the last RL stage's correct rollouts (``redistill`` recipe key)."""
    recipe = run.recipe
    if recipe.redistill is None or state.last_stage is None:
        return state
    rd_dir = run.run_dir / "redistill"
    t0 = time.perf_counter()
    lineage = chain_lineage(run, state.iteration)
    if not _sft_done(rd_dir):
        last = Path(state.last_stage)
        ledger_model = json.loads((last / "config.json").read_text()).get("ledger_model") or last.name
        run_step({
            "kind": "redistill", "out": str(rd_dir), "model": state.initial,
            "ledger": str(run.ws.ledger_dir(recipe.pool) / ledger_model),
            "problems": str(run.ws.table(recipe.pool, "problems")),
            "config": {"seed": recipe.seed, **recipe.redistill}, "lineage": lineage,
        }, recipe.launch)  # fmt: skip
    stamp_lineage(rd_dir / "final", lineage)
    pending = {"step": "redistill", "model": str(rd_dir / "final"), "wall_s": time.perf_counter() - t0}
    return dataclasses.replace(state, pending=pending)  # the policy stays the RL model; this one is a by-product


def evaluate_model(run: Run, state: ChainState) -> ChainState:
    """Held-out pass@1 of the model the previous step trained (and of an RL stage's checkpoints, ``eval.every``);
    one ``chain.json`` record; skipped when the record exists."""
    from training.evaluate import append_eval

    p = state.pending
    if p is None:
        return state
    state = dataclasses.replace(state, pending=None)
    chain = run.chain()
    if chain.get(p["step"]) is not None:
        return state
    t0 = time.perf_counter()
    rl = p.get("kind") == "rl"
    if rl and run.recipe.eval.every:
        folder = Path(p["stage_dir"])
        compute = _stage_compute(folder)
        for ckpt in sorted(folder.glob("checkpoints/checkpoint-*"), key=lambda c: int(c.name.split("-")[-1])):
            step = int(ckpt.name.split("-")[-1])
            if step >= p["rl_steps"]:
                continue
            ev = _eval(ckpt, run)
            append_eval(run.run_dir, p["offset_step"] + step, p["offset_compute"] + compute.get(step, step), ev)
            run.echo(f"[chain]   {p['step']} step {step}: pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f}")
    ev = _eval(Path(p["model"]), run, save_as=p["step"])
    extra = {k: p[k] for k in ("rl_steps", "compute", "stage_dir", "offset_step", "offset_compute") if k in p}
    rec = {"step": p["step"], "model": p["model"], "wall_s": round(p["wall_s"] + time.perf_counter() - t0, 1),
           **ev, **extra}  # fmt: skip
    chain.put(rec)
    if rl:
        append_eval(run.run_dir, p["offset_step"] + p["rl_steps"], p["eval_compute"], rec)
    run.echo(f"[chain] {p['step']:<24} held-out pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f} "
             f"(n={ev['n_problems']}, k={ev['k']})  [{rec['wall_s']:.0f} s]")  # fmt: skip
    return state


def decision(fit: Mapping[str, Any] | None, pass_now: float, margin: float) -> dict[str, Any]:
    """The stop/continue rule (pure; see the module docstring). ``fit`` is ``Fit.to_dict()`` or None (no fit)."""
    if not fit:
        return {"action": CONTINUE, "reason": "no sigmoid fit yet (too few evaluations)", "pass_at_1": pass_now}
    a = float(fit["A"])
    gap = a - pass_now
    out = {"A": a, "pass_at_1": pass_now, "gap": gap, "margin": margin}
    if not fit.get("band") or "A" in (fit.get("band_at_edge") or []):  # no band: 3 points, the curve hits them all
        return {**out, "action": CONTINUE, "reason": f"A={a:.3f} is not pinned down (no band, or it reaches the edge)"}
    if gap <= margin:
        return {**out, "action": STOP, "reason": f"A={a:.3f} is within {margin:g} of the pass rate {pass_now:.3f}"}
    return {**out, "action": CONTINUE, "reason": f"A={a:.3f} is {gap:.3f} above the pass rate {pass_now:.3f}"}


def decide(run: Run, state: ChainState, after: str) -> dict[str, Any]:
    """Fit the eval curve up to the current step and apply ``decision``; recorded in ``chain.json`` (a re-run reads
    the recorded decision, so a resumed chain takes the same path)."""
    import polars as pl

    from training.evaluate import read_eval
    from training.scaling import FitConfig, fit_sigmoid

    chain = run.chain()
    done = chain.note("decisions", after)
    if done is not None:
        return done
    margin = run.recipe.decide.stop_margin if run.recipe.decide else 0.0
    curve = read_eval(run.run_dir).filter(pl.col("step") <= state.offset_step)
    pass_now = float(chain.get(after)["pass_at_1"])
    try:
        cfg = from_mapping(FitConfig, run.recipe.fit, "fit")
        fit = fit_sigmoid(curve["compute"], curve["pass_at_1"], cfg).to_dict()
        fit = {k: fit[k] for k in ("A", "B", "C_mid", "R0", "band", "band_at_edge", "n_fit", "warnings")}
    except (ValueError, RuntimeError) as exc:
        fit = None
        run.echo(f"[chain] decide after {after}: no fit ({exc})")
    rec = chain.note("decisions", after, {**decision(fit, pass_now, margin), "after": after, "points": curve.height,
                                          "fit": fit})  # fmt: skip
    run.echo(f"[chain] decide after {after}: {rec['action']} ({rec['reason']})")
    return rec


# --------------------------------------------------------------------------------------------------- CoScale
def _curate_recipe(recipe: RunRecipe, stage: str, section: Mapping[str, Any]) -> Any:
    """A curate recipe that runs one stage on the run's pool: the curate recipe's (verify, seed, other sections)
    with ``stage``'s section replaced."""
    from curate import config as curate_config

    if recipe.curate_recipe:
        base = curate_config.load_recipe(Path(recipe.curate_recipe))
        configs = {**base.stage_configs, stage: dict(section)}
        return dataclasses.replace(base, pool=recipe.pool, stages=(stage,), stage_configs=configs)
    data = {"name": f"{recipe.name}-coscale", "pool": recipe.pool, "seed": recipe.seed, "stages": [stage],
            stage: dict(section)}  # fmt: skip
    return curate_config.recipe_from_mapping(data)


def _rollout_section(recipe: RunRecipe, model: str) -> dict[str, Any]:
    section = {"backend": "hf", **(recipe.decide.rollout if recipe.decide else {})}
    return {**section, "model": model}


def _solutions_section(recipe: RunRecipe, model: str, iteration: int, selection: str | None) -> dict[str, Any]:
    base: dict[str, Any] = {}
    if recipe.curate_recipe:
        from curate import config as curate_config

        base = curate_config.load_recipe(Path(recipe.curate_recipe)).stage_config("solutions")
    section = {**base, **(recipe.decide.solutions if recipe.decide else {})}
    if selection and not section.get("selection"):
        section["selection"] = selection
    section.pop("export", None)
    return {**section, "student": model, "name": f"{recipe.name}-it{iteration}"}


def coscale_dir(run: Run, iteration: int) -> Path:
    return run.run_dir / "coscale" / f"it{iteration}"


def coscale_measure(run: Run, state: ChainState) -> ChainState:
    """Start CoScale iteration N+1: ``curate rollout`` of the current model over the pool's training problems
    (resumable, skipped once recorded); returns the state with the new iteration number."""
    from curate import pipeline

    state = dataclasses.replace(state, iteration=state.iteration + 1)
    name = f"it{state.iteration}:measure"
    chain = run.chain()
    if chain.note("coscale", name) is None:
        crecipe = _curate_recipe(run.recipe, "rollout", _rollout_section(run.recipe, state.model))
        result = pipeline.run_stage("rollout", run.ws, crecipe).to_dict()
        chain.note("coscale", name, {"model": state.model, "wall_s": result["wall_s"], "summary": result["summary"]})
        run.echo(f"[chain] {name}: rollouts of {state.model} [{result['wall_s']:.0f} s]")
    return state


def coscale_solutions(run: Run, state: ChainState) -> ChainState:
    """``curate solutions`` with the current model as the student (pools re-read, a teacher fills the unsolvable
    problems when configured); snapshots the pools table and writes the iteration's shards restricted to the
    solvable problems and the SFT rows of the unsolvable ones into ``coscale/itN/``."""
    import polars as pl

    from curate import pipeline
    from curate import schema as S
    from curate.solutions import export as solutions_export
    from curate.solutions import stage as solutions_stage

    name = f"it{state.iteration}:solutions"
    chain = run.chain()
    if chain.note("coscale", name) is not None:
        return state
    folder = coscale_dir(run, state.iteration)
    lineage = chain.lineage or chain_lineage(run)
    selection = Path(lineage["selection"]).parent.name if lineage.get("selection") else None
    section = _solutions_section(run.recipe, state.model, state.iteration, selection)
    crecipe = _curate_recipe(run.recipe, "solutions", section)
    result = pipeline.run_stage("solutions", run.ws, crecipe).to_dict()
    pools = pl.read_parquet(run.ws.table(run.recipe.pool, "solution_pools"))
    io.write_parquet(pools, folder / "solution_pools.parquet")
    solvable = pools.filter(pl.col(S.COSCALE_POOL) == "solvable").select(S.PROBLEM_ID)
    unsolvable = pools.filter(pl.col(S.COSCALE_POOL) == "unsolvable").select(S.PROBLEM_ID)
    for stage in plan_stages(run.recipe, run.ws):
        shard = pl.read_parquet(stage.shard).join(solvable, on=S.PROBLEM_ID, how="semi")
        io.write_parquet(shard, folder / f"{stage.name}.parquet")
    export = solutions_stage.export_dir(run.ws, run.recipe.pool, solutions_stage.load_config(crecipe))
    rows = pl.read_parquet(export / solutions_export.SFT_FILE).join(unsolvable, on=S.PROBLEM_ID, how="semi")
    io.write_parquet(rows, folder / "sft_unsolvable.parquet")
    counts = dict(pools.group_by(S.COSCALE_POOL).len().iter_rows())
    chain.note("coscale", name, {"model": state.model, "pools": counts, "export": str(export),
                                 "sft_rows": rows.height, "wall_s": result["wall_s"]})  # fmt: skip
    run.echo(f"[chain] {name}: pools {counts}; {rows.height} SFT rows for unsolvable problems")
    return state


def coscale_sft(run: Run, state: ChainState) -> ChainState:
    """SFT of the current model on the unsolvable problems' solutions of this iteration (when the recipe has
    ``sft`` and there are any)."""
    import polars as pl

    folder = coscale_dir(run, state.iteration)
    data = folder / "sft_unsolvable.parquet"
    if run.recipe.sft is None or pl.scan_parquet(data).select(pl.len()).collect().item() == 0:
        return state
    return _sft_step(run, state, f"it{state.iteration}:sft", folder / "sft", data)


def coscale_stages(run: Run, state: ChainState) -> list[StagePlan]:
    """The RL stages of CoScale iteration N: the recipe's stages over the shards restricted to solvable problems
    (written by ``coscale_solutions``); stages left without problems are dropped."""
    import polars as pl

    folder = coscale_dir(run, state.iteration)
    out = []
    for stage in plan_stages(run.recipe, run.ws):
        shard = folder / f"{stage.name}.parquet"
        rows = pl.scan_parquet(shard).select(pl.len()).collect().item()
        if rows:
            out.append(dataclasses.replace(stage, shard=shard, rows=rows))
    return out


# --------------------------------------------------------------------------------------------------- fit + summary
def _chain_metrics(run: Run) -> Path | None:
    """Every RL stage's metrics.parquet on one step (and token) axis, offset by the stages before, with a ``stage``
    column: ``<run>/metrics.parquet``, the learning curves of the whole chain."""
    import polars as pl

    frames = []
    for rec in sorted((s for s in run.chain().steps if "stage_dir" in s), key=lambda s: s["offset_step"]):
        path = Path(rec["stage_dir"]) / "metrics.parquet"
        if path.is_file():
            df = pl.read_parquet(path)
            df = df.with_columns(pl.col("step") + rec["offset_step"], pl.lit(rec["step"]).alias("stage"))
            if "tokens" in df.columns:  # cumulative over the run, as the eval curve's compute axis
                df = df.with_columns(pl.col("tokens") + rec.get("offset_compute", 0.0))
            frames.append(df)
    if not frames:
        return None
    return io.write_parquet(pl.concat(frames, how="diagonal_relaxed").sort("step"), run.run_dir / "metrics.parquet")


def fit_and_plot(run: Run, state: ChainState) -> dict[str, Any]:
    """The sigmoid fit of the whole eval curve (``fit.json``, ``fit.png`` with its extrapolation), the learning
    curves of every RL stage (``training.png``) and the eval curve (``eval.png``). Recomputed on every call (about
    a second): its inputs grow with the run."""
    from training.plots import plot_eval, plot_training
    from training.scaling import FitConfig, fit_run

    out: dict[str, Any] = {}
    _chain_metrics(run)
    figures = [p for p in (plot_training(run.run_dir), plot_eval(run.run_dir)) if p is not None]
    if (run.run_dir / "eval.parquet").is_file():
        try:
            fit = fit_run(run.run_dir, from_mapping(FitConfig, run.recipe.fit, "fit"))
            out["fit"] = fit
            figures.append(Path(fit["plot"]))
            run.echo(f"[chain] fit: {json.dumps(fit.get('advice', fit), default=str)[:300]}")
        except (ValueError, RuntimeError) as exc:  # too few points for a fit: say so, keep the run
            out["fit"] = {"error": str(exc)}
            run.echo(f"[chain] fit skipped: {exc}")
    out["figures"] = [str(p) for p in figures]
    return out


def write_summary(
    run: Run,
    state: ChainState | None = None,
    fit: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``summary.json``: the run folder, every step, the lineage, decisions, fit, figures (and ``extra``)."""
    chain = run.chain()
    summary: dict[str, Any] = {
        "run_dir": str(run.run_dir),
        "name": run.recipe.name,
        "pool": run.recipe.pool,
        "home": str(run.ws.root),
        "steps": chain.steps,
        "lineage": chain.lineage or chain_lineage(run),
        "decisions": chain.notes.get("decisions", []),
        "coscale": chain.notes.get("coscale", []),
        "final_model": state.model if state is not None else None,
        **dict(fit or {}),
        **dict(extra or {}),
    }
    summary = json.loads(json.dumps(summary, default=str))
    io.write_json(run.run_dir / SUMMARY, summary)
    return summary


# --------------------------------------------------------------------------------------------------- the chain
Call = Callable[..., Any]


def direct(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """The default ``call`` of ``run_chain``: run the step here."""
    return fn(*args)


def run_chain(
    recipe: RunRecipe,
    *,
    home: str | Path | None = None,
    out: Path | None = None,
    echo: Callable[[str], None] = print,
    call: Call = direct,
    curate: bool = True,
) -> dict[str, Any]:
    """Run (or resume) the whole chain of ``recipe``; returns the summary (also in ``summary.json``).

    call: ``call(name, fn, *args)`` runs one step (default: here; the Prefect flow makes it a task). curate: run
    the curation step (the flow runs it as its own subflow and passes False). ``timings`` in the summary: per step,
    ``wall_s`` inside the step function and ``call_s`` around ``call`` (the difference is the caller's overhead).
    """
    run = open_run(recipe, home, out, echo)
    t_run = time.perf_counter()
    timings: list[dict[str, Any]] = []

    def step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        inner: dict[str, float] = {}

        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                inner["wall_s"] = time.perf_counter() - t

        t0 = time.perf_counter()
        result = call(name, timed, *args)
        timings.append({"step": name, "wall_s": round(inner.get("wall_s", 0.0), 3),
                        "call_s": round(time.perf_counter() - t0, 3)})  # fmt: skip
        return result

    # 1. curation
    if curate and recipe.curate_recipe:
        step("curation", curation, run)
    from training.evaluate import heldout_problems

    heldout_problems(run.ws, recipe.pool, split=recipe.eval.split, limit=recipe.eval.limit)  # fails before training
    stages = plan_stages(recipe, run.ws)  # validated before any model work

    # 2. the starting model, 3. SFT
    state = step("init", init_model, run)
    state = step("eval init", evaluate_model, run, state)
    if recipe.sft is not None:
        state = step("sft", sft, run, state)
        state = step("eval sft", evaluate_model, run, state)

    # 4. RL stages, each evaluated and (with ``decide``) decided on; then CoScale iterations
    while True:
        for stage in stages if state.iteration == 0 else coscale_stages(run, state):
            name = rl_step_name(stage, state.iteration)
            state = step(name, rl_stage, run, state, stage)
            state = step(f"eval {name}", evaluate_model, run, state)
            if recipe.decide is not None and step(f"decide {name}", decide, run, state, name)["action"] == STOP:
                break
        if recipe.decide is None or state.iteration >= recipe.decide.coscale_iterations:
            break
        state = step(f"it{state.iteration + 1}:measure", coscale_measure, run, state)
        state = step(f"it{state.iteration}:solutions", coscale_solutions, run, state)
        state = step(f"it{state.iteration}:sft", coscale_sft, run, state)
        state = step(f"eval it{state.iteration}:sft", evaluate_model, run, state)

    # 5. re-distillation of the starting model on the last stage's correct rollouts
    if recipe.redistill is not None:
        state = step("redistill", redistill, run, state)
        state = step("eval redistill", evaluate_model, run, state)

    # 6. fit and figures, 7. summary
    fit = step("fit", fit_and_plot, run, state)
    gain = gain_over_sft(run)
    if gain is not None:
        run.echo(f"[chain] {gain['after']} vs sft on the same {gain['n_problems']} held-out problems: "
                 f"{gain['gain']:+.3f} ± {gain['stderr']:.3f} (paired SE), z = {gain['z']:.1f}")  # fmt: skip
    wall = round(time.perf_counter() - t_run, 1)
    extra = {"wall_s": wall, "timings": timings, "gain_over_sft": gain}
    return step("summary", write_summary, run, state, fit, extra)


if __name__ == "__main__":
    _step_main(Path(sys.argv[1]))
