r"""Offline curricula: a stage plan plus one training shard per stage (the ``curriculum`` stage).

Pipeline position: after ``select`` (or straight on a pool's train split). Three plans:

- ``fastcurl`` (METHODS §3, [VERIFIED] from the released data and scripts): split by prompt length, L1 = prompts at
  most the mean length, L2 = all, L3 = above the mean; stages L1 8K → L2 16K → L3 24K → L2 16K (n=16), plus stage 5
  for ``v2`` / ``v3``. Length is characters of the prompt the model sees, instruction suffix INCLUDED, which
  reproduces the released 24,976 / 40,315 / 15,339 split of DeepScaleR-40K (mean 317.24); ``tokens`` counts a local
  tokenizer's tokens instead (the obvious alternative, METHODS §3.7).
- ``bands`` (METHODS §2): CoScale-RL pools unsolvable (< 0.05) / solvable / solved (> 0.70) (the paper's), solvable
  problems in difficulty groups [0.05, 0.25), [0.25, 0.5), [0.5, 0.7] for separate RL runs, each with the smallest
  rung of the rollout ladder that gives enough effective rollouts and η/N kept constant (RECONSTRUCTED, §2.7).
- ``scalingrl`` (METHODS §1.2, RECONSTRUCTED): one shard per epoch of K_t DES-weighted prompts with the
  exploration/exploitation mix and decaying temperature of ``curate.curriculum.sampler.scalingrl_epoch``; offline,
  "trained" means chosen in an earlier epoch and the pass rate is the prior (the online sampler updates both).

Output (``ws.curriculum_dir(name)``): ``plan.json``, ``<stage>.parquet`` per stage (schema.CURRICULA columns, then
the verl/TRL columns ``prompt`` (chat list), ``data_source``, ``ability``, ``reward_model``, ``extra_info``, then
``difficulty_band``, ``cot_length``, ``zero_variance``), ``plan.png`` and ``manifest.json``; a ``scalingrl`` plan
also writes ``candidates.parquet`` (every train problem it drew from: what the online sampler runs over). Every
input row is kept in some stage or dropped with a counted reason: rows in = kept + dropped.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from curate import io, prompts
from curate import schema as S
from curate.config import ConfigError, Recipe, from_mapping
from curate.curriculum.inputs import input_paths, load_inputs, resolve_source, selection_instruction
from curate.curriculum.rules import (
    FASTCURL_PRESETS,
    MAX_EPOCHS_PER_STAGE,
    StageSpec,
    assign_pool,
    band_name,
    fastcurl_stages,
    group_by_difficulty,
    mix_schedule,
    paper_epochs,
    repeat_warnings,
    rollouts_for_signal,
    scaled_steps,
    temperature_schedule,
)
from curate.curriculum.sampler import SamplerConfig, scalingrl_epoch
from curate.errors import InputError
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped


PLANS = ("fastcurl", "bands", "scalingrl")
PLAN = "plan.json"  # a curriculum folder's plan: its stages (settings, shard, rows), source, sampler (``read_plan``)
UNITS = ("chars", "tokens")
PROMPT_LENGTH = "prompt_length"  # the split's length column: chars or tokens, per the plan's unit
DIFFICULTY_BAND = "difficulty_band"


# --------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class CurriculumConfig:
    """Settings of the ``curriculum`` stage (recipe key ``curriculum:``).

    name: output folder under ``curricula/`` (default: the recipe's name). selection: the input selection. pool:
    without a selection, the input (its train split); with one, where its evidence (scores, stats) lives (default:
    from the selection's manifest). In a recipe the input is decided when the recipe loads (``load_config``):
    the section's ``selection``, else its ``pool``, else the recipe's select stage output when ``select`` is one of
    the recipe's stages, else the recipe's pool; never by looking at which files happen to exist.
    plan: fastcurl | bands | scalingrl. preset: FastCuRL preview | v2 | v3. unit: chars | tokens (tokens needs
    ``tokenizer``, a local tokenizer folder). threshold: split length (default: the mean). include_suffix: measure
    the prompt with the instruction suffix (FastCuRL's data do). model / score_run: which stats model / scores run
    gives pass rates when a pool has several. pool_lo / pool_hi / bins / min_effective_frac / ladder_*: CoScale-RL
    settings (the rollout ladder's rule, written into each group's ``stop_rule``: the training reward, averaged over
    ``ladder_window`` steps, has not risen for ``ladder_patience`` steps or fell ``ladder_collapse_drop`` below its
    peak; ``training run`` follows it with ``plan_fields`` naming ``ladder``, ``training.ladder``).
    max_prompt_length, max_response_length, rollouts, prompt_batch, lr, temperature, steps: RL settings of the
    bands and scalingrl stages (FastCuRL stages use their preset). sampler: the online sampler's settings (its
    size / epochs / seed drive the scalingrl plan).
    fastcurl_steps: ``scaled`` (default) gives each FastCuRL stage the passes over its split that the paper's stage
    makes over the released 40K prompts (``rules.scaled_steps``); ``paper`` keeps the preset's step counts; a list
    fixes one step count per stage. max_epochs_per_stage: a stage that goes over its prompts more often than this
    gets a warning in the summary and plan.json (any plan).
    """

    name: str | None = None
    selection: str | None = None
    pool: str | None = None
    plan: str = "fastcurl"
    preset: str = "preview"
    unit: str = "chars"
    tokenizer: str | None = None
    threshold: float | None = None
    include_suffix: bool = True
    model: str | None = None
    score_run: str | None = None
    pool_lo: float = 0.05
    pool_hi: float = 0.70
    bins: tuple[float, ...] = (0.05, 0.25, 0.5, 0.7)
    min_effective_frac: float = 0.5
    ladder_n0: int = 8
    ladder_factor: int = 2
    ladder_n_max: int = 64
    ladder_patience: int = 20
    ladder_window: int = 1
    ladder_collapse_drop: float = 0.1
    max_prompt_length: int = 1024
    max_response_length: int = 8192
    rollouts: int = 8
    prompt_batch: int = 64
    lr: float = 1e-6
    temperature: float = 1.0
    steps: int = 200
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    fastcurl_steps: str | tuple[int, ...] = "scaled"
    max_epochs_per_stage: float = MAX_EPOCHS_PER_STAGE

    def __post_init__(self) -> None:
        if self.plan not in PLANS:
            raise ConfigError(f"curriculum.plan {self.plan!r} is not one of {PLANS}")
        if self.preset not in FASTCURL_PRESETS:
            raise ConfigError(f"curriculum.preset {self.preset!r} is not one of {tuple(FASTCURL_PRESETS)}")
        if self.unit not in UNITS:
            raise ConfigError(f"curriculum.unit {self.unit!r} is not one of {UNITS}")
        if self.unit == "tokens" and not self.tokenizer:
            raise ConfigError("curriculum.unit 'tokens' needs curriculum.tokenizer (a local tokenizer folder)")
        if list(self.bins) != sorted(self.bins) or len(self.bins) < 2 or not 0 <= self.bins[0] <= self.bins[-1] <= 1:
            raise ConfigError(f"curriculum.bins must be >= 2 increasing pass-rate edges in [0, 1], got {self.bins}")
        if self.ladder_factor < 2 or not 1 <= self.ladder_n0 <= self.ladder_n_max:
            raise ConfigError("curriculum ladder: factor >= 2 and 1 <= ladder_n0 <= ladder_n_max")
        if self.ladder_patience < 1 or self.ladder_window < 1 or self.ladder_collapse_drop <= 0:
            raise ConfigError("curriculum ladder: ladder_patience and ladder_window >= 1, ladder_collapse_drop > 0")
        if isinstance(self.fastcurl_steps, str) and self.fastcurl_steps not in ("scaled", "paper"):
            raise ConfigError(
                f"curriculum.fastcurl_steps {self.fastcurl_steps!r}: 'scaled', 'paper' or a list of steps per stage"
            )
        stages = len(FASTCURL_PRESETS[self.preset])
        if not isinstance(self.fastcurl_steps, str) and (
            len(self.fastcurl_steps) != stages or min(self.fastcurl_steps) < 1
        ):
            raise ConfigError(f"curriculum.fastcurl_steps needs {stages} step counts >= 1 (preset {self.preset})")


def load_config(recipe: Recipe) -> CurriculumConfig:
    """The recipe's ``curriculum`` section with its input resolved (see ``CurriculumConfig``), its name defaulting
    to the recipe's, and the sampler's seed to the recipe's ``seed``."""
    data = recipe.stage_config("curriculum")
    sampler = data.get("sampler")
    if sampler is None or isinstance(sampler, dict):
        data["sampler"] = {"seed": recipe.seed, **(sampler or {})}
    cfg = from_mapping(CurriculumConfig, data, "curriculum")
    selection, pool = cfg.selection, cfg.pool
    if selection is None and pool is None:
        if "select" in recipe.stages:
            from curate.select import stage as select_stage

            selection = select_stage.selection_name(select_stage.load_config(recipe), recipe)
        else:
            pool = recipe.pool
    return dataclasses.replace(cfg, name=cfg.name or recipe.name, selection=selection, pool=pool)


def stage_names(cfg: CurriculumConfig) -> list[str]:
    """The stage names a plan of ``cfg`` can hold, known before any data: the FastCuRL preset's stages, the
    difficulty groups of ``bins`` (a group left empty is not in the plan) or the ScalingRL epochs. A training
    recipe checks its ``stages.<name>`` and ``only_stages`` against them when it loads."""
    if cfg.plan == "fastcurl":
        return [spec.name for spec in fastcurl_stages(cfg.preset)]
    if cfg.plan == "bands":
        return [band_name(lo, hi) for lo, hi in pairwise(cfg.bins)]
    return [_epoch_name(t) for t in range(cfg.sampler.epochs)]


def _epoch_name(t: int) -> str:
    return f"epoch{t}"


# --------------------------------------------------------------------------------------------------- pure steps
def prompt_length(
    text: str,
    unit: str = "chars",
    tokenizer: Any = None,
    include_suffix: bool = True,
    instruction: str = prompts.INSTRUCTION,
) -> int:
    """Length of the prompt the model sees: ``prompts.user_message`` (the problem plus the instruction) by
    default, the bare problem with ``include_suffix=False``.

    >>> prompt_length("What is 2+3?")
    82
    """
    text = prompts.user_message(text, instruction) if include_suffix else text
    if unit == "chars":
        return len(text)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_lengths(
    problems: pl.Series,
    unit: str = "chars",
    tokenizer: Any = None,
    include_suffix: bool = True,
    progress: bool = False,
    instruction: str = prompts.INSTRUCTION,
) -> pl.Series:
    """``prompt_length`` over a column of problems (vectorized for chars, batched through the tokenizer for tokens)."""
    if include_suffix:
        texts = pl.DataFrame({S.PROBLEM: problems}).select(prompts.user_message_expr(instruction))[S.PROBLEM]
    else:
        texts = problems
    if unit == "chars":
        return texts.str.len_chars().cast(pl.Int64).alias(PROMPT_LENGTH)
    from curate.progress import bar

    values = texts.to_list()
    out: list[int] = []
    with bar(len(values), "tokenizing prompts", enabled=progress, unit="prompts") as advance:
        for i in range(0, len(values), 1024):
            out += [len(ids) for ids in tokenizer(values[i : i + 1024], add_special_tokens=False)["input_ids"]]
            advance(len(values[i : i + 1024]))
    return pl.Series(PROMPT_LENGTH, out, dtype=pl.Int64)


def split_by_prompt_length(
    df: pl.DataFrame, threshold: str | float = "mean", length_col: str = PROMPT_LENGTH
) -> tuple[dict[str, pl.DataFrame], float]:
    """FastCuRL's length split: L1 = length ≤ threshold, L2 = all, L3 = length > threshold (threshold default: mean).

    >>> parts, cut = split_by_prompt_length(pl.DataFrame({"prompt_length": [10, 20, 60]}))
    >>> cut, [parts[k].height for k in ("L1", "L2", "L3")]
    (30.0, [2, 3, 1])
    """
    cut = float(df[length_col].mean()) if threshold == "mean" else float(threshold)
    length = pl.col(length_col)
    return {"L1": df.filter(length <= cut), "L2": df, "L3": df.filter(length > cut)}, cut


def difficulty_band(pass_rate: float | None, lo: float, hi: float, bins: tuple[float, ...]) -> str:
    """One label per problem for the plan's difficulty mix: unknown, unsolvable, a group name, or solved."""
    if pass_rate is None or math.isnan(pass_rate):
        return "unknown"
    pool = assign_pool(pass_rate, lo, hi)
    if pool != "solvable":
        return pool
    groups = group_by_difficulty(["x"], [pass_rate], bins)
    return next((g for g, members in groups.items() if members), "solvable")


def band_order(bins: tuple[float, ...]) -> list[str]:
    return ["unsolvable", *(band_name(a, b) for a, b in pairwise(bins)), "solved", "unknown"]


def with_bands(df: pl.DataFrame, cfg: CurriculumConfig) -> pl.DataFrame:
    bands = [difficulty_band(p, cfg.pool_lo, cfg.pool_hi, cfg.bins) for p in df[S.PASS_RATE].to_list()]
    return df.with_columns(pl.Series(DIFFICULTY_BAND, bands, dtype=pl.String))


def pass_rate_warning(df: pl.DataFrame) -> str | None:
    """The warning a plan over pass rates that carry no information gets (in plan.json's ``warnings`` and on
    ``plan.png``): every problem has the same pass rate (a pool without rollouts or difficulty labels gets the
    prior everywhere), or none has one. None when the pass rates vary.

    >>> pass_rate_warning(pl.DataFrame({S.PASS_RATE: [0.5, 0.5]}))[:45]
    'every problem has the pass rate 0.50 (no roll'
    """
    rates = df[S.PASS_RATE].drop_nulls() if S.PASS_RATE in df.columns else pl.Series([], dtype=pl.Float64)
    if rates.n_unique() > 1:
        return None
    what = f"every problem has the pass rate {rates[0]:.2f}" if len(rates) else "no problem has a pass rate"
    return (
        f"{what} (no rollouts, no difficulty labels): the difficulty bands carry no information; run `curate "
        "rollout` (or `measure` in a training recipe) for real pass rates"
    )


def shard_frame(df: pl.DataFrame, stage: str, instruction: str = prompts.INSTRUCTION) -> pl.DataFrame:
    """A stage shard: schema.CURRICULA columns, then verl/TRL-ready columns, in the order of ``df``'s rows.

    ``prompt`` is ``curate.prompts.chat_prompt_expr(instruction)``: [{"role": "user", "content": problem +
    instruction}] (TRL's conversational layout, verl's ``prompt``), the same turn the selection's exports carry;
    ``data_source``, ``ability``, ``reward_model`` and ``extra_info`` (with the stage's name) are
    ``curate.prompts.verl_columns``, the layout of the selection's ``verl.parquet``.
    """
    out = df.with_row_index(prompts.ROW_INDEX).select(
        pl.lit(stage).alias(S.CURRICULUM_STAGE),
        S.PROBLEM_ID,
        S.PROBLEM,
        S.ANSWER,
        S.ANSWER_ALTERNATIVES,
        pl.col(S.PASS_RATE).cast(pl.Float64),
        pl.col(S.PROMPT_CHARS).cast(pl.Int32),
        *prompts.verl_columns(df, instruction, pl.col(S.SPLIT), pl.lit(stage).alias("stage")),
        DIFFICULTY_BAND,
        pl.col(S.COT_LENGTH).cast(pl.Float64),
        pl.col(S.ZERO_VARIANCE).cast(pl.Boolean),
    )
    S.validate(out, S.CURRICULA, table=stage)
    return out


def stage_entry(spec: dict[str, Any], shard: pl.DataFrame, bins_order: list[str]) -> dict[str, Any]:
    """The plan.json record of one stage: its settings plus shard path, size, length and difficulty mix."""
    rows = shard.height
    mix = Counter(shard[DIFFICULTY_BAND].to_list())
    return {
        **spec,
        "shard": f"{spec['stage']}.parquet",
        "rows": rows,
        "steps_per_epoch": math.ceil(rows / spec["prompt_batch"]) if rows else 0,
        "max_prompt_chars": int(shard[S.PROMPT_CHARS].max()) if rows else 0,
        "difficulty_mix": {b: mix.get(b, 0) for b in bins_order if mix.get(b, 0)},
    }


def fastcurl_plan(df: pl.DataFrame, cfg: CurriculumConfig) -> tuple[list[tuple[dict, pl.DataFrame]], dict]:
    """FastCuRL stages over ``df`` (with a ``prompt_length`` column); returns (stage, frame) pairs and split facts."""
    threshold = "mean" if cfg.threshold is None else cfg.threshold
    parts, cut = split_by_prompt_length(df, threshold)
    stages = []
    for i, spec in enumerate(fastcurl_stages(cfg.preset)):
        rows = parts[spec.split].height
        if cfg.fastcurl_steps == "scaled":
            steps = scaled_steps(spec, rows)
            how = f"scaled: the paper's {paper_epochs(spec):.2f} passes over the split"
        elif cfg.fastcurl_steps == "paper":
            steps, how = spec.steps, "the paper's (sized for the 40K-prompt DeepScaleR-Preview splits)"
        else:
            steps, how = int(cfg.fastcurl_steps[i]), "fixed by the recipe"
        entry = {
            "stage": spec.name,
            "split": spec.split,
            "max_prompt_length": spec.max_prompt_length,
            "max_response_length": spec.max_response_length,
            "n": spec.n,
            "prompt_batch": spec.prompt_batch,
            "steps": steps,
            "paper_steps": spec.steps,
            "epochs": round(steps * spec.prompt_batch / rows, 2) if rows else 0.0,
            "stop_rule": {
                "max_steps": steps,
                "eval_every": min(spec.eval_every, max(1, steps)),
                "metric": "aime24_avg@8",
                "patience_evals": 3,
                "source": f"RECONSTRUCTED (METHODS §3.7); steps {how}",
            },
            "lr": spec.lr,
            "temperature": spec.temperature,
            "kl": {"use_kl_loss": spec.use_kl_loss, "kl_loss_coef": spec.kl_loss_coef, "kl_loss_type": "low_var_kl"},
            "entropy_coef": spec.entropy_coef,
            "init_from": "base" if i == 0 else fastcurl_stages(cfg.preset)[i - 1].name,
            "sampler": cfg.sampler.to_dict(),
        }
        stages.append((entry, parts[spec.split].sort(S.PROBLEM_ID)))
    facts = {
        "unit": cfg.unit,
        "threshold": cut,
        "split_counts": {k: v.height for k, v in parts.items()},
        "steps": cfg.fastcurl_steps if isinstance(cfg.fastcurl_steps, str) else list(cfg.fastcurl_steps),
        "warnings": _repeat_warnings(stages, cfg),
    }
    return stages, facts


def _repeat_warnings(stages: list[tuple[dict, pl.DataFrame]], cfg: CurriculumConfig) -> list[str]:
    """``rules.repeat_warnings`` over a plan's (entry, frame) pairs."""
    runs = [{**entry, "rows": frame.height} for entry, frame in stages]
    return repeat_warnings(runs, cfg.max_epochs_per_stage)


def bands_plan(df: pl.DataFrame, cfg: CurriculumConfig) -> tuple[list[tuple[dict, pl.DataFrame]], dict]:
    """CoScale-RL groups over ``df``: one independent RL run per difficulty group with its own rollout count."""
    known = df.filter(pl.col(S.PASS_RATE).is_not_null() & pl.col(S.PASS_RATE).is_not_nan()).sort(S.PROBLEM_ID)
    groups = group_by_difficulty(known[S.PROBLEM_ID].to_list(), known[S.PASS_RATE].to_list(), cfg.bins)
    rungs = [cfg.ladder_n0]  # the rollout ladder N0, N0·factor, ... <= N_max
    while rungs[-1] * cfg.ladder_factor <= cfg.ladder_n_max:
        rungs.append(rungs[-1] * cfg.ladder_factor)
    stages = []
    for name, ids in groups.items():
        part = known.filter(pl.col(S.PROBLEM_ID).is_in(ids))
        if part.height == 0:
            continue
        need = rollouts_for_signal(part[S.PASS_RATE].to_numpy(), cfg.min_effective_frac, cfg.ladder_n_max)
        n = next((r for r in rungs if r >= need), rungs[-1])
        entry = {
            "stage": name,
            "split": name,
            "max_prompt_length": cfg.max_prompt_length,
            "max_response_length": cfg.max_response_length,
            "n": n,
            "prompt_batch": cfg.prompt_batch,
            "steps": cfg.steps,
            "stop_rule": {
                "max_steps": cfg.steps,
                "signal": "training reward of the group's prompts",
                "window": cfg.ladder_window,
                "plateau_patience": cfg.ladder_patience,
                "collapse_drop": cfg.ladder_collapse_drop,
                "on_plateau": "double n (RolloutLadder), keep lr/n",
                "source": "RECONSTRUCTED §2.7",
            },
            "lr": cfg.lr * n / cfg.ladder_n0,
            "temperature": cfg.temperature,
            "rollouts_needed": need,
            "ladder": {
                "n0": cfg.ladder_n0,
                "factor": cfg.ladder_factor,
                "n_max": cfg.ladder_n_max,
                "patience": cfg.ladder_patience,
                "lr0": cfg.lr,
            },
            "init_from": "base",
            "parallel": True,
            "sampler": cfg.sampler.to_dict(),
        }
        stages.append((entry, part))
    pools = Counter(
        "no_pass_rate" if p is None or math.isnan(p) else assign_pool(p, cfg.pool_lo, cfg.pool_hi)
        for p in df[S.PASS_RATE].to_list()
    )
    return stages, {"pools": dict(pools), "warnings": _repeat_warnings(stages, cfg)}


def scalingrl_plan(df: pl.DataFrame, cfg: CurriculumConfig) -> tuple[list[tuple[dict, pl.DataFrame]], dict]:
    """ScalingRL per-epoch selections (RECONSTRUCTED §1.2) from prior pass rates and CoT lengths."""
    scfg = dataclasses.replace(cfg.sampler, policy="scalingrl")
    df = df.sort(S.PROBLEM_ID)
    ids = df[S.PROBLEM_ID].to_list()
    p = df[S.PASS_RATE].fill_nan(None).to_numpy().astype(float)
    p = np.where(np.isnan(p), np.nanmean(p) if (~np.isnan(p)).any() else 0.5, p)
    cot = df[S.COT_LENGTH].fill_nan(None).to_numpy().astype(float)
    rng = np.random.Generator(np.random.PCG64(scfg.seed))
    extreme = df[S.ZERO_VARIANCE].fill_null(False).to_numpy() | (p == 0.0) | (p == 1.0)  # all-equal evidence: R = 0
    seen = np.zeros(len(ids), dtype=bool)
    pos = {pid: i for i, pid in enumerate(ids)}
    stages = []
    for t in range(scfg.epochs):
        order = scalingrl_epoch(ids, np.arange(len(ids)), p, cot, seen, extreme, t, scfg, rng)
        entry = {
            "stage": _epoch_name(t),
            "split": _epoch_name(t),
            "max_prompt_length": cfg.max_prompt_length,
            "max_response_length": cfg.max_response_length,
            "n": cfg.rollouts,
            "prompt_batch": cfg.prompt_batch,
            "steps": math.ceil(len(order) / cfg.prompt_batch),
            "stop_rule": {"epochs": 1},
            "lr": cfg.lr,
            "temperature": cfg.temperature,
            "explore_frac": round(mix_schedule(t, scfg.epochs, scfg.explore_floor), 4),
            "sampling_temperature": round(temperature_schedule(t, scfg.t0, scfg.gamma, scfg.t_floor), 4),
            "fresh": int(sum(not seen[pos[i]] for i in order)),
            "init_from": "base" if t == 0 else _epoch_name(t - 1),
            "sampler": SamplerConfig(seed=scfg.seed).to_dict(),
        }
        seen[[pos[i] for i in order]] = True
        frame = pl.DataFrame({S.PROBLEM_ID: order}).join(df, on=S.PROBLEM_ID, how="left", maintain_order="left")
        stages.append((entry, frame))
    return stages, {"size": scfg.size, "epochs": scfg.epochs, "provenance": "RECONSTRUCTED (METHODS §1.2)"}


# --------------------------------------------------------------------------------------------------- the stage
def build(
    ws: io.Workspace,
    cfg: CurriculumConfig,
    *,
    recipe: Recipe | None = None,
    force: bool = False,
    progress: bool = False,
) -> StageResult:
    """Write the plan, shards, figure and manifest for ``cfg`` through ``run_wrapped`` (skipped when inputs,
    config and code are unchanged). ``recipe`` only supplies a default name."""
    source = resolve_source(ws, cfg.selection, cfg.pool)
    name = cfg.name or (recipe.name if recipe is not None else None)
    if not name:
        raise ConfigError("give the curriculum a name (--name)")
    out_dir = ws.curriculum_dir(name)
    instruction = selection_instruction(ws, source["selection"]) if source["selection"] else prompts.INSTRUCTION
    paths = input_paths(ws, source) + ([cfg.tokenizer] if cfg.unit == "tokens" else [])
    config = {**dataclasses.asdict(cfg), "name": name, "source": source, "instruction": instruction}

    def work(_manifest) -> StageOutput:
        return _plan_folder(ws, cfg, source, name, instruction, progress)

    with ws.lock("curriculum", name):  # one writer of the folder at a time, from the skip check to its manifest
        return run_wrapped(ws, "curriculum", inputs=paths, config=config, outputs=[out_dir], fn=work, force=force)


def _plan_folder(
    ws: io.Workspace, cfg: CurriculumConfig, source: dict, name: str, instruction: str, progress: bool
) -> StageOutput:
    """The work of ``build``: plan over the input and write shards, plan.json and plan.png into a new folder that
    then replaces the old one whole (``io.replace_dir``: never absent, never half old and half new)."""
    from curate.curriculum.plots import plot_plan

    df = load_inputs(ws, source, score_run=cfg.score_run, model=cfg.model)
    rows_in = df.height
    drops: Counter[str] = Counter({"test_split": df.filter(pl.col(S.SPLIT) != "train").height})
    df = df.filter(pl.col(S.SPLIT) == "train").sort(S.PROBLEM_ID)
    tokenizer = None
    if cfg.unit == "tokens":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer)
    df = df.with_columns(
        prompt_lengths(df[S.PROBLEM], "chars", instruction=instruction).cast(pl.Int32).alias(S.PROMPT_CHARS),
        prompt_lengths(df[S.PROBLEM], cfg.unit, tokenizer, cfg.include_suffix, progress, instruction),
    )
    df = with_bands(df, cfg)
    plan_fn = {"fastcurl": fastcurl_plan, "bands": bands_plan, "scalingrl": scalingrl_plan}[cfg.plan]
    stages, facts = plan_fn(df, cfg)
    if not stages:
        raise InputError(
            f"the {cfg.plan} plan has no stage: none of the {df.height} train problems has a usable pass rate "
            "(bands needs evidence: run `curate rollout`/`curate score`, or plan over a selection)"
        )

    kept = set()
    for _, frame in stages:
        kept.update(frame[S.PROBLEM_ID].to_list())
    left = df.filter(~pl.col(S.PROBLEM_ID).is_in(list(kept)))
    if cfg.plan == "bands":
        reasons = [
            b if b in ("unsolvable", "solved") else "no_pass_rate" if b == "unknown" else "unbanded"
            for b in left[DIFFICULTY_BAND].to_list()
        ]
        drops.update(reasons)
    else:
        drops.update({"not_selected": left.height})
    drops = Counter({k: v for k, v in drops.items() if v})

    with io.building(ws.curriculum_dir(name)) as folder:  # swapped in whole once written (never absent)
        order = band_order(cfg.bins)
        entries = []
        for entry, frame in stages:
            shard = shard_frame(frame, entry["stage"], instruction)
            io.write_parquet(shard, folder / f"{entry['stage']}.parquet")
            entries.append(stage_entry(entry, shard, order))
        if cfg.plan == "scalingrl":  # the online sampler (and the simulator) draw their own epochs from all candidates
            io.write_parquet(shard_frame(df, "candidates", instruction), folder / "candidates.parquet")
            facts = {**facts, "candidates": {"shard": "candidates.parquet", "rows": df.height}}
        summary = {
            "name": name,
            "plan": cfg.plan,
            **({"preset": cfg.preset} if cfg.plan == "fastcurl" else {}),
            "source": source,
            "rows_in": rows_in,
            "kept": len(kept),
            "drops": dict(sorted(drops.items())),
            "stages": [
                {k: e[k] for k in ("stage", "rows", "n", "prompt_batch", "steps", "max_response_length")}
                for e in entries
            ],
            **facts,
        }
        if warning := pass_rate_warning(df):
            summary["warnings"] = [*summary.get("warnings", []), warning]
            summary["pass_rate_warning"] = warning  # drawn on plan.png (``curate.curriculum.plots.plot_plan``)
        shards = [folder / e["shard"] for e in entries]
        summary["reconciles"] = reconciles_on_disk(ws, source, shards, dict(drops))
        plan = {
            **summary,
            "instruction": instruction,
            "total_steps": sum(e["steps"] for e in entries if not e.get("parallel"))
            + max((e["steps"] for e in entries if e.get("parallel")), default=0),
            "sampler": cfg.sampler.to_dict(),
            "stages": entries,
        }
        io.write_json(folder / PLAN, plan)
        plot_plan(plan, folder / "plan.png", order)
    return StageOutput(summary, rows_in=rows_in, rows_out=len(kept), drops=dict(drops))


def read_plan(folder: str | Path) -> dict[str, Any] | None:
    """A curriculum folder's ``plan.json`` (``_plan_folder`` writes it; a run's pinned copy has the same shape):
    ``stages`` (each with its settings, ``shard``, ``rows``), ``source`` (pool, selection), ``kept``, ``sampler``.
    None when the folder has no plan (``curate curriculum`` has not run)."""
    path = Path(folder) / PLAN
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def reconciles_on_disk(ws: io.Workspace, source: dict, shards: list, drops: dict[str, int]) -> bool:
    """Read back from the files: the stage shards on disk hold only problems of the input table on disk, and the
    input's rows = the distinct problems in the shards + the rows dropped (counted by reason)."""
    if source["selection"]:
        table = ws.selection_dir(source["selection"]) / "selection.parquet"
    else:
        table = ws.table(source["pool"], "problems")
    ids = set(pl.read_parquet(table, columns=[S.PROBLEM_ID])[S.PROBLEM_ID].to_list())
    rows_in = pl.scan_parquet(table).select(pl.len()).collect().item()
    in_shards: set[str] = set()
    for path in shards:
        in_shards.update(pl.read_parquet(path, columns=[S.PROBLEM_ID])[S.PROBLEM_ID].to_list())
    return in_shards <= ids and rows_in == len(in_shards) + sum(drops.values())


def run_stage(ws: io.Workspace, recipe: Recipe, *, force: bool = False, progress: bool = False) -> StageResult:
    """The recipe's curriculum, over the input ``load_config`` resolved when the recipe loaded."""
    return build(ws, load_config(recipe), recipe=recipe, force=force, progress=progress)


__all__ = [
    "FASTCURL_PRESETS",
    "CurriculumConfig",
    "StageSpec",
    "bands_plan",
    "build",
    "difficulty_band",
    "fastcurl_plan",
    "fastcurl_stages",
    "load_config",
    "load_inputs",
    "prompt_length",
    "prompt_lengths",
    "run_stage",
    "scalingrl_plan",
    "shard_frame",
    "split_by_prompt_length",
    "stage_entry",
]
