r"""Replay simulator: compare sampling policies on a curriculum in seconds on a CPU, before spending GPU hours.

Pipeline position: after ``curate curriculum``. Each problem of the plan gets a "true" pass rate: drawn from its
ledger posterior Beta(α, β) (``init="sample"``, or the posterior mean with ``init="mean"``) where the pool's stats
have the problem, else the plan's prior ``pass_rate`` (the selection's or the score's), else ``default_pass_rate``.
The plan's stages are then replayed: each step a ``CurriculumSampler`` proposes a batch, every prompt gets a group
of Bernoulli rewards from its true pass rate, the sampler is updated, and a prompt trained WITH signal (rewards not
all equal) learns: p ← p + lr·(1 − p). A zero-variance group teaches nothing and its rollouts are wasted. The
learning model is deliberately simple (no transfer between problems, no forgetting); it ranks policies by how much
of their rollout budget carries gradient signal, which is what the filters are for.

Policies are named ``base[+filter...]``: base ``uniform`` or ``des`` (ScalingRL's DES scheduler); filters ``zv``
(zero-variance back-off), ``npr`` (no-positive-resampling) or ``filters`` (both). Every policy sees the same true
pass rates and reward stream seed (common random numbers).

Example result row: ``{"signal_fraction": 0.93, "wasted_rollouts": 5760, "final_pass_rate": 0.61, ...}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from curate import io
from curate import schema as S
from curate.config import ConfigError, from_mapping
from curate.curriculum.inputs import stats_posterior
from curate.curriculum.sampler import CurriculumSampler, SamplerConfig
from curate.errors import MissingInput


BASES = {"uniform": "uniform", "des": "scalingrl", "scalingrl": "scalingrl"}
FILTERS = ("filters", "zv", "npr")


@dataclass(frozen=True)
class SimulateConfig:
    """policies: names as in the module docstring. steps: total training steps, shared out over the plan's stages
    in proportion to their planned steps. lr: per-problem learning rate of the model. init: ``sample`` | ``mean``
    (true pass rate from the ledger posterior). model / pool: whose ledger stats give the evidence (default: the
    plan's pool, its only model; ``*`` pools all models). default_pass_rate: for problems with no evidence at all.
    batch / rollouts: override the stages' prompts per step and rollouts per prompt. curve_points: pass-rate curve
    resolution."""

    policies: tuple[str, ...] = ("uniform", "des", "des+filters")
    steps: int = 200
    lr: float = 0.05
    seed: int = 0
    init: str = "sample"
    model: str | None = None
    pool: str | None = None
    default_pass_rate: float = 0.5
    batch: int | None = None
    rollouts: int | None = None
    curve_points: int = 50

    def __post_init__(self) -> None:
        if self.init not in ("sample", "mean"):
            raise ConfigError(f"simulate.init {self.init!r} must be 'sample' or 'mean'")
        if self.steps < 1 or not self.policies:
            raise ConfigError("simulate needs steps >= 1 and at least one policy")
        for name in self.policies:
            policy_config(name, SamplerConfig())


def policy_config(name: str, base: SamplerConfig) -> SamplerConfig:
    """The sampler settings of a policy name: ``des+filters`` -> scalingrl with both filters on, etc."""
    head, *extras = name.split("+")
    if head not in BASES or any(e not in FILTERS for e in extras):
        raise ConfigError(f"policy {name!r}: base one of {sorted(BASES)}, then +filters, +zv or +npr")
    zv = any(e in ("filters", "zv") for e in extras)
    npr = any(e in ("filters", "npr") for e in extras)
    return dataclasses.replace(base, policy=BASES[head], zero_variance_skip=zv, no_positive_resampling=npr)


def stage_steps(planned: list[int], total: int) -> list[int]:
    """Share ``total`` steps over stages in proportion to their planned steps (largest remainder, each >= 1).

    >>> stage_steps([160, 590, 230, 580], 100)
    [10, 38, 15, 37]
    """
    weights = np.asarray(planned, dtype=float)
    raw = total * weights / weights.sum()
    out = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - out), kind="stable")[: total - out.sum()]:
        out[i] += 1
    return [max(1, int(x)) for x in out]


def initial_pass_rates(
    problems: pl.DataFrame, stats: pl.DataFrame | None, cfg: SimulateConfig, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, int]]:
    """True starting pass rates for ``problems`` (sorted by problem_id), and how many came from each evidence kind.

    ``stats`` has one row per problem (problem_id, alpha, beta; ``stats_posterior``) or is None.
    """
    df = problems.select(S.PROBLEM_ID, S.PASS_RATE)
    if stats is not None:
        df = df.join(stats.select(S.PROBLEM_ID, S.ALPHA, S.BETA), on=S.PROBLEM_ID, how="left")
    else:
        df = df.with_columns(pl.lit(None, pl.Float64).alias(S.ALPHA), pl.lit(None, pl.Float64).alias(S.BETA))
    alpha = df[S.ALPHA].fill_null(np.nan).to_numpy().astype(float)
    beta = df[S.BETA].fill_null(np.nan).to_numpy().astype(float)
    prior = df[S.PASS_RATE].fill_nan(None).fill_null(np.nan).to_numpy().astype(float)
    ledger = ~np.isnan(alpha) & ~np.isnan(beta)
    draws = rng.beta(np.where(ledger, alpha, 1.0), np.where(ledger, beta, 1.0))
    post = draws if cfg.init == "sample" else np.where(ledger, alpha / (alpha + beta), np.nan)
    truth = np.where(ledger, post, np.where(np.isnan(prior), cfg.default_pass_rate, prior))
    counts = {
        "ledger": int(ledger.sum()),
        "prior": int((~ledger & ~np.isnan(prior)).sum()),
        "default": int((~ledger & np.isnan(prior)).sum()),
    }
    return np.clip(truth, 0.0, 1.0), counts


def simulate_policy(
    stages: list[tuple[dict[str, Any], pl.DataFrame]],
    truth: np.ndarray,
    pos: dict[str, int],
    sampler_cfg: SamplerConfig,
    cfg: SimulateConfig,
    steps: list[int],
    advance: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Replay ``stages`` (plan entry, shard) with one policy; returns its counts and pass-rate curve. Each stage gets
    a fresh sampler (a new training stage starts a new dataset); stages run one after another, also the parallel
    groups of a ``bands`` plan (which share nothing in this model anyway: no transfer between problems)."""
    p = truth.copy()
    rng = np.random.default_rng([cfg.seed, 1])
    every = max(1, sum(steps) // cfg.curve_points)
    curve = [(0, float(p.mean()))]
    totals = {
        "groups": 0,
        "zero_variance_groups": 0,
        "rollouts": 0,
        "wasted_rollouts": 0,
        "backoff_skips": 0,
        "retired": 0,
    }
    step, stopped_early = 0, False
    for (entry, shard), n_steps in zip(stages, steps, strict=True):
        sampler = CurriculumSampler.from_frame(shard, sampler_cfg)
        k, n = cfg.batch or entry["prompt_batch"], cfg.rollouts or entry["n"]
        for _ in range(n_steps):
            batch = sampler.next_batch(k)
            if not batch:
                stopped_early = True
                break
            idx = np.array([pos[pid] for pid in batch])
            rewards = (rng.random((len(batch), n)) < p[idx, None]).astype(float)
            for pid, i, r in zip(batch, idx, rewards, strict=True):
                sampler.update(pid, r, step)
                if r.min() != r.max():
                    p[i] += cfg.lr * (1.0 - p[i])
            step += 1
            if step % every == 0:
                curve.append((step, float(p.mean())))
            if advance is not None:
                advance()
        for key in totals:
            totals[key] += len(sampler.retired) if key == "retired" else sampler.counts[key]
    groups = max(1, totals["groups"])
    return {
        **totals,
        "signal_fraction": round(1.0 - totals["zero_variance_groups"] / groups, 4),
        "wasted_fraction": round(totals["wasted_rollouts"] / max(1, totals["rollouts"]), 4),
        "initial_pass_rate": round(float(truth.mean()), 4),
        "final_pass_rate": round(float(p.mean()), 4),
        "steps_run": step,
        "stopped_early": stopped_early,
        "curve": curve,
    }


def run_simulation(ws: io.Workspace, curriculum: str, cfg: SimulateConfig, *, progress: bool = False) -> dict:
    """Simulate every policy of ``cfg`` on curriculum ``curriculum``; writes ``simulation.json`` and
    ``simulation.png`` beside the plan and returns the result."""
    from curate.curriculum.plots import plot_simulation
    from curate.curriculum.stage import PLAN, read_plan
    from curate.progress import bar

    folder = ws.curriculum_dir(curriculum)
    plan = read_plan(folder)
    if plan is None:
        raise MissingInput(f"curriculum {curriculum!r} not found at {folder / PLAN}; run `curate curriculum` first")
    shards = [(e, io.read_parquet(folder / e["shard"])) for e in plan["stages"]]
    if "candidates" in plan:  # scalingrl: the policy under test draws its own epochs from all candidates
        entry = {**shards[0][0], "steps": sum(e["steps"] for e, _ in shards)}
        shards = [(entry, io.read_parquet(folder / plan["candidates"]["shard"]))]
    problems = pl.concat([s.select(S.PROBLEM_ID, S.PASS_RATE) for _, s in shards]).unique(S.PROBLEM_ID)
    problems = problems.sort(S.PROBLEM_ID)
    pos = {pid: i for i, pid in enumerate(problems[S.PROBLEM_ID].to_list())}

    pool = cfg.pool or plan["source"].get("pool")
    stats, model = None, cfg.model
    if pool and ws.table(pool, "stats").is_file():
        table = io.read_parquet(ws.table(pool, "stats"), S.STATS)
        models = sorted(set(table[S.MODEL].to_list()))
        model = model or (models[0] if len(models) == 1 else None)
        stats = stats_posterior(table, model, pool)
    truth, evidence = initial_pass_rates(problems, stats, cfg, np.random.default_rng([cfg.seed, 0]))

    steps = stage_steps([max(1, e["steps"]) for e, _ in shards], cfg.steps)
    base = from_mapping(SamplerConfig, {**plan["sampler"], "seed": cfg.seed}, "plan.sampler")
    results = {}
    for name in cfg.policies:
        with bar(sum(steps), f"simulating {name}", enabled=progress, unit="steps") as advance:
            results[name] = simulate_policy(shards, truth, pos, policy_config(name, base), cfg, steps, advance)
    result = {
        "curriculum": curriculum,
        "plan": plan["plan"],
        "problems": len(pos),
        "steps": cfg.steps,
        "seed": cfg.seed,
        "evidence": {"pool": pool, "model": model, **evidence},
        "config": dataclasses.asdict(cfg),
        "policies": results,
    }
    io.write_json(folder / "simulation.json", result)
    plot_simulation(result, folder / "simulation.png")
    return result


__all__ = ["SimulateConfig", "initial_pass_rates", "policy_config", "run_simulation", "simulate_policy", "stage_steps"]
