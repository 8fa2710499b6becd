"""``training run``: one recipe from a curated pool to a trained, evaluated model, with the scaling fit.

The chain, each step skipped when its output is already there (re-running the same command resumes):

1. curation (optional ``curate_recipe``): the ``curate run`` stages, skipped when up to date;
2. the starting model: ``tiny`` builds a small from-scratch model for the built-in task (``training.tiny``),
   anything else is a local folder or a hub name;
3. SFT (optional ``sft``) on verified solutions (``curate solutions``' ``sft.parquet``);
4. RL stages from the curriculum plan (``training.plan``), in order, each in a fresh process, each starting from
   the previous stage's final model; checkpoints every ``eval.every`` steps are evaluated after the stage;
5. re-distillation (optional ``redistill``): SFT of the starting model on the latest correct RL rollouts;
6. held-out evaluation after every step (pass@1 as mean@k with its standard error, ``split: test`` problems only);
7. the ScaleRL sigmoid fit over (compute, pass rate) of the RL steps, its advice and plots.

Run folder (``runs/<name>`` under the workspace unless ``--out``)::

    recipe.json   the resolved recipe          chain.json  every step: model folder, pass rate, wall time
    init/ sft/    models (``final/`` inside)   rl/NN-<stage>/  train_rl run folders (metrics, checkpoints, final)
    eval.parquet  RL eval curve (step, compute, pass_at_1, stderr)   fit.json, *.png   the fit and the figures

Training steps run in subprocesses (``python -m training.runner step SPEC``), so GPU memory and the verify
workers of one stage never leak into the next, and a crash points at one step. Keep scripts that import this
module under ``if __name__ == "__main__":`` (the answer checker's spawn workers re-import the main module).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from curate import io
from curate.config import from_mapping
from curate.errors import ConfigError, InputError
from training.plan import PLAN_FIELDS, PlanScale, StagePlan, rl_stages, single_stage


CHAIN = "chain.json"


# --------------------------------------------------------------------------------------------------- recipe
@dataclass(frozen=True)
class EvalSection:
    """Held-out evaluation (recipe key ``eval``): ``split`` problems of the pool, ``limit`` of them, k samples.

    every: evaluate RL checkpoints every this many steps (0: only each stage's final model). The other keys are
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
    threads: int = 0


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
    correct rollouts). fit: ``training.scaling.FitConfig`` mapping. seed: one seed for every step. launch: the
    command that starts each training step instead of ``python``, e.g. ``[accelerate, launch, --config_file,
    training/recipes/accelerate/zero2.yaml]`` for several GPUs (the step runs as ``<launch> -m training.runner``).
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
    launch: list[str] | None = None

    def __post_init__(self) -> None:
        if bool(self.curriculum) == bool(self.train):
            raise ConfigError("recipe: give exactly one of `curriculum` (a plan) or `train` (one prompt file)")


def load_recipe(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunRecipe:
    """Read and validate a training recipe; ``overrides`` are dotted ``key=value`` settings (``rl.max_steps``)."""
    from curate.config import apply_overrides

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"training recipe {path} not found")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: a training recipe is a YAML mapping")
    data = apply_overrides(dict(data), dict(overrides or {}))
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
    return recipe


def _sft_config(recipe: RunRecipe) -> tuple[Any, str]:
    from training.sft import load_config as sft_config

    section = dict(recipe.sft or {})
    data = section.pop("data", None)
    if not data:
        raise ConfigError("sft.data: the SFT rows (a `curate solutions` export's sft.parquet) are required")
    section.setdefault("seed", recipe.seed)
    return sft_config(section), str(data)


def _path(ws: io.Workspace, value: str) -> Path:
    """Recipe paths: absolute, else relative to the workspace root when it exists there, else to the cwd."""
    p = Path(value)
    if p.is_absolute():
        return p
    return ws.root / p if (ws.root / p).exists() else p


# --------------------------------------------------------------------------------------------------- chain state
class Chain:
    """``chain.json``: the steps done so far (resumable record), written atomically after each step."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / CHAIN
        self.steps: list[dict[str, Any]] = json.loads(self.path.read_text())["steps"] if self.path.is_file() else []

    def get(self, step: str) -> dict[str, Any] | None:
        return next((s for s in self.steps if s["step"] == step), None)

    def put(self, record: dict[str, Any]) -> None:
        self.steps = [s for s in self.steps if s["step"] != record["step"]] + [record]
        io.write_json(self.path, {"steps": self.steps})


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
    """The child side of ``run_step``: one SFT, RL or re-distillation run."""
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
        io.write_json(spec_path.with_name("step_result.json"), json.loads(json.dumps(result, default=str)))


# --------------------------------------------------------------------------------------------------- the chain
def _eval(model_dir: Path, heldout: Any, recipe: RunRecipe) -> dict[str, Any]:
    from training.evaluate import EvalConfig, evaluate

    sec = recipe.eval
    cfg = EvalConfig(
        k=sec.k, temperature=sec.temperature, top_p=sec.top_p, max_new_tokens=sec.max_new_tokens,
        batch_size=sec.batch_size, seed=recipe.seed, threads=sec.threads,
    )  # fmt: skip
    result = evaluate(model_dir, heldout, cfg)
    return {k: result[k] for k in ("pass_at_1", "stderr", "n_problems", "k", "warning") if k in result}


def _stages(recipe: RunRecipe, ws: io.Workspace) -> list[StagePlan]:
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


def run_chain(
    recipe: RunRecipe,
    *,
    home: str | Path | None = None,
    out: Path | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or resume) the whole chain of ``recipe``; returns the chain summary (also in ``chain.json``)."""
    from training.evaluate import append_eval, heldout_problems

    ws = io.Workspace.resolve(home, recipe.home)
    run_dir = Path(out) if out else ws.root / "runs" / recipe.name
    run_dir.mkdir(parents=True, exist_ok=True)
    io.write_json(run_dir / "recipe.json", dataclasses.asdict(recipe))
    chain = Chain(run_dir)
    t_run = time.perf_counter()

    def record(step: str, model_dir: Path, t0: float, **extra: Any) -> dict[str, Any]:
        ev = _eval(model_dir, heldout, recipe)
        rec = {"step": step, "model": str(model_dir), "wall_s": round(time.perf_counter() - t0, 1), **ev, **extra}
        chain.put(rec)
        echo(f"[chain] {step:<24} held-out pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f} "
             f"(n={ev['n_problems']}, k={ev['k']})  [{rec['wall_s']:.0f} s]")  # fmt: skip
        return rec

    # 1. curation
    if recipe.curate_recipe:
        from curate import config as curate_config
        from curate import pipeline

        t0 = time.perf_counter()
        results = pipeline.run_recipe(curate_config.load_recipe(Path(recipe.curate_recipe)), ws)
        ran = [r.stage for r in results if not r.skipped]
        echo(f"[chain] curation: {len(results)} stage(s), ran {ran or 'none (up to date)'} "
             f"[{time.perf_counter() - t0:.0f} s]")  # fmt: skip
    heldout = heldout_problems(ws, recipe.pool, split=recipe.eval.split, limit=recipe.eval.limit)
    stages = _stages(recipe, ws)  # validated before any model work

    # 2. the starting model
    t0 = time.perf_counter()
    if recipe.model == "tiny":
        from training.tiny import TinyConfig, init_tiny

        init_dir = run_dir / "init"
        if not (init_dir / "config.json").is_file():
            init_tiny(init_dir, from_mapping(TinyConfig, {"seed": recipe.seed, **recipe.tiny}, "tiny"))
        model: str | Path = init_dir
    else:
        model = _path(ws, recipe.model) if _path(ws, recipe.model).exists() else recipe.model
    initial = model
    if chain.get("init") is None and Path(str(model)).exists():
        record("init", Path(model), t0)

    # 3. SFT
    if recipe.sft is not None:
        cfg, data = _sft_config(recipe)
        sft_dir = run_dir / "sft"
        t0 = time.perf_counter()
        if chain.get("sft") is None:
            run_step({
                "kind": "sft", "out": str(sft_dir), "model": str(model), "data": str(_path(ws, data)),
                "config": dataclasses.asdict(cfg), "lineage": {"pool": recipe.pool, "recipe": recipe.name},
            }, recipe.launch)  # fmt: skip
            record("sft", sft_dir / "final", t0)
        model = sft_dir / "final"
        initial = model if recipe.redistill is None else initial

    # 4. RL stages
    offset_step, offset_compute = 0, 0.0
    last_stage_dir = None
    for stage in stages:
        stage_dir = run_dir / "rl" / stage.folder
        t0 = time.perf_counter()
        name = f"rl:{stage.name}"
        if chain.get(name) is None:
            cfg = dict(stage.rl)
            if recipe.eval.every:
                cfg.update(save_steps=recipe.eval.every, save_total_limit=None)
            run_step({
                "kind": "rl", "out": str(stage_dir), "model": str(model), "train": str(stage.shard),
                "config": cfg, "home": str(ws.root), "pool": recipe.pool,
            }, recipe.launch)  # fmt: skip
        compute = _stage_compute(stage_dir)
        steps = max(compute, default=0)
        if recipe.eval.every and chain.get(name) is None:
            for ckpt in sorted(stage_dir.glob("checkpoints/checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])):
                step = int(ckpt.name.split("-")[-1])
                if step >= steps:
                    continue
                ev = _eval(ckpt, heldout, recipe)
                append_eval(run_dir, offset_step + step, offset_compute + compute.get(step, step), ev)
                echo(f"[chain]   {name} step {step}: pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f}")
        if chain.get(name) is None:
            rec = record(name, stage_dir / "final", t0, rl_steps=steps, compute=offset_compute + compute.get(steps, 0))
            append_eval(run_dir, offset_step + steps, offset_compute + compute.get(steps, steps), rec)
        offset_step += steps
        offset_compute += compute.get(steps, float(steps))
        model, last_stage_dir = stage_dir / "final", stage_dir

    # 5. re-distillation of the starting model on the last stage's correct rollouts
    if recipe.redistill is not None and last_stage_dir is not None:
        rd_dir = run_dir / "redistill"
        t0 = time.perf_counter()
        if chain.get("redistill") is None:
            ledger_model = json.loads((last_stage_dir / "config.json").read_text()).get("ledger_model") or (
                last_stage_dir.name
            )
            run_step({
                "kind": "redistill", "out": str(rd_dir), "model": str(initial),
                "ledger": str(ws.ledger_dir(recipe.pool) / ledger_model), "problems": str(ws.table(recipe.pool,
                "problems")), "config": {"seed": recipe.seed, **recipe.redistill},
            }, recipe.launch)  # fmt: skip
            record("redistill", rd_dir / "final", t0)

    # 6. fit and figures
    summary: dict[str, Any] = {"run_dir": str(run_dir), "steps": chain.steps}
    if (run_dir / "eval.parquet").is_file():
        from training.plots import plot_run
        from training.scaling import FitConfig, fit_run

        try:
            fit = fit_run(run_dir, from_mapping(FitConfig, recipe.fit, "fit"))
            summary["fit"] = fit
            echo(f"[chain] fit: {json.dumps(fit.get('advice', fit), default=str)[:300]}")
        except (ValueError, RuntimeError) as exc:  # too few points for a fit: say so, keep the run
            summary["fit"] = {"error": str(exc)}
            echo(f"[chain] fit skipped: {exc}")
        summary["figures"] = [str(p) for p in plot_run(run_dir)]
    summary["wall_s"] = round(time.perf_counter() - t_run, 1)
    io.write_json(run_dir / "summary.json", json.loads(json.dumps(summary, default=str)))
    return summary


if __name__ == "__main__":
    _step_main(Path(sys.argv[1]))
