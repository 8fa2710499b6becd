r"""Pure rules of the curricula, shared by the offline plans (``curate.curriculum``), the online sampler
(``curate.curriculum.sampler``) and the replay simulator (``curate.curriculum.simulate``). Numpy and polars only;
no I/O.

Where each rule comes from (METHODS.md):

- FastCuRL (§3.2/§3.3): ``FASTCURL_PRESETS`` stage settings, [VERIFIED] from the released scripts (stage-5 steps
  derived from the README totals there).
- CoScale-RL (§2): ``effective_rollouts`` N̂(p) = N·(1 − p^N − (1−p)^N) (the paper's, via [MOON-zh]);
  ``assign_pool`` thresholds 5% / 70% (the paper's); ``rollouts_for_signal``, ``group_by_difficulty`` bins
  [0.05, 0.25, 0.5, 0.7] and ``RolloutLadder`` N ∈ {8, ..., 64}, patience 20, η/N constant (RECONSTRUCTED, §2.7).
- ScalingRL (§1.2): ``temperature_schedule``, ``mix_schedule``, ``des_scores`` (through ``curate.score.des``, the
  score stage's builders, with its time weight w_t = ``curate.score.des.time_weight``), ``select_by_des``. The paper's
  formulas are unknown; all of these are the RECONSTRUCTED defaults of §1.2.
- ScaleRL (§4.3): ``zero_variance_mask`` (drop all-equal groups) and ``PassRateTracker.retired``
  (no-positive-resampling, pass rate ≥ 0.9, the paper's rule; "latest" vs "cumulative" history is our choice).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import polars as pl

from curate import schema as S
from curate.config import ConfigError
from curate.score.des import DesConfig, time_weight


# --------------------------------------------------------------------------------------------------- FastCuRL
@dataclass(frozen=True)
class StageSpec:
    """One RL stage of a FastCuRL preset (METHODS §3.2/§3.3, [VERIFIED] scripts; stage-5 steps derived there)."""

    name: str
    split: str
    max_response_length: int
    n: int
    prompt_batch: int
    steps: int
    use_kl_loss: bool = True
    kl_loss_coef: float = 1e-3
    entropy_coef: float = 1e-3
    eval_every: int = 20
    lr: float = 1e-6
    temperature: float = 0.6
    max_prompt_length: int = 1024


_S1 = StageSpec("stage1", "L1", 8192, 8, 128, 160, eval_every=10)
_S2 = StageSpec("stage2", "L2", 16384, 8, 64, 590)
_S3 = StageSpec("stage3", "L3", 24576, 8, 64, 230)
_S4 = StageSpec("stage4", "L2", 16384, 16, 64, 580)
FASTCURL_PRESETS: dict[str, tuple[StageSpec, ...]] = {
    "preview": (_S1, _S2, _S3, _S4),
    "v2": (_S1, _S2, _S3, _S4, StageSpec("stage5", "L2", 16384, 16, 64, 1700, False, 0.0, 1e-6)),
    "v3": (_S1, _S2, _S3, _S4, StageSpec("stage5", "L2", 16384, 16, 64, 3520, False, 0.0, 0.0)),
}


# The released FastCuRL splits of DeepScaleR-Preview (40,315 prompts): the data the preset step counts were sized
# for. ``paper_epochs`` is what a preset stage does to its split; ``scaled_steps`` keeps that on another dataset.
FASTCURL_SPLIT_ROWS: dict[str, int] = {"L1": 24_976, "L2": 40_315, "L3": 15_339}
MAX_EPOCHS_PER_STAGE = 4.0  # a stage that goes over its data more often than this gets a warning


def paper_epochs(spec: StageSpec) -> float:
    """Passes over its split a preset stage makes on the released data: steps · prompt_batch / split rows.

    >>> round(paper_epochs(FASTCURL_PRESETS["preview"][0]), 3)  # stage 1: 160 steps of 128 prompts over 24,976
    0.82
    """
    return spec.steps * spec.prompt_batch / FASTCURL_SPLIT_ROWS[spec.split]


def scaled_steps(spec: StageSpec, rows: int) -> int:
    """The steps that give ``rows`` prompts the paper's passes per stage (at least 1 for a non-empty split).

    >>> scaled_steps(FASTCURL_PRESETS["preview"][0], 1500), scaled_steps(FASTCURL_PRESETS["preview"][0], 24_976)
    (10, 160)
    """
    return max(1, math.ceil(paper_epochs(spec) * rows / spec.prompt_batch - 1e-9)) if rows else 0


def epochs(steps: int, prompt_batch: int, rows: int) -> float:
    """Passes over ``rows`` prompts that ``steps`` steps of ``prompt_batch`` prompts make (0 without rows)."""
    return steps * prompt_batch / rows if rows else 0.0


def repeat_warnings(stages: Sequence[dict[str, Any]], limit: float = MAX_EPOCHS_PER_STAGE) -> list[str]:
    """One warning per stage that repeats its prompts more than ``limit`` times (``stage``, ``rows``, ``steps``,
    ``prompt_batch`` per stage): RL on a few prompts seen dozens of times overfits them.

    >>> repeat_warnings([{"stage": "s1", "rows": 500, "steps": 160, "prompt_batch": 128}])
    ['s1 goes over its 500 prompts 41.0 times (160 steps of 128 prompts); fewer steps or more data']
    """
    out = []
    for st in stages:
        passes = epochs(st["steps"], st["prompt_batch"], st["rows"])
        if passes > limit:
            out.append(
                f"{st['stage']} goes over its {st['rows']:,} prompts {passes:.1f} times ({st['steps']} steps of "
                f"{st['prompt_batch']} prompts); fewer steps or more data"
            )
    return out


def fastcurl_stages(variant: str = "preview") -> list[StageSpec]:
    """FastCuRL's stage list for ``preview``, ``v2`` or ``v3`` (METHODS §3.2)."""
    if variant not in FASTCURL_PRESETS:
        raise ConfigError(f"FastCuRL preset {variant!r} is not one of {tuple(FASTCURL_PRESETS)}")
    return list(FASTCURL_PRESETS[variant])


# --------------------------------------------------------------------------------------------------- CoScale-RL
def effective_rollouts(p: float | np.ndarray, n: int) -> float | np.ndarray:
    """CoScale-RL's effective rollouts N̂(p) = N·(1 − p^N − (1−p)^N): all-equal groups carry no advantage.

    >>> effective_rollouts(0.5, 2)
    1.0
    """
    p = np.asarray(p, dtype=float)
    out = n * (1.0 - p**n - (1.0 - p) ** n)
    return float(out) if out.ndim == 0 else out


def rollouts_for_signal(p: float | Sequence[float], min_effective_frac: float = 0.5, n_max: int = 256) -> int:
    """Smallest N whose mean effective fraction N̂(p)/N over ``p`` reaches ``min_effective_frac`` (else ``n_max``).

    >>> rollouts_for_signal(0.5), rollouts_for_signal(0.05)
    (2, 14)
    """
    p = np.atleast_1d(np.asarray(p, dtype=float))
    for n in range(2, n_max + 1):
        if float(np.mean(effective_rollouts(p, n))) / n >= min_effective_frac:
            return n
    return n_max


def efficiency(eta_over_n: float, mu_p: float, mu_n: float) -> float:
    """CoScale-RL's update efficiency E(x) = x·μ_p − x²·μ_n in x = η/N (METHODS §2.2): positive below μ_p/μ_n.

    >>> efficiency(0.5, 1.0, 1.0), efficiency(2.0, 1.0, 1.0)
    (0.25, -2.0)
    """
    return eta_over_n * mu_p - eta_over_n**2 * mu_n


def optimal_eta_over_n(mu_p: float, mu_n: float) -> float:
    """The η/N that maximizes ``efficiency``: x* = μ_p / (2·μ_n) (our derivation in METHODS §2.2)."""
    return mu_p / (2.0 * mu_n)


def assign_pool(pass_rate: float, lo: float = 0.05, hi: float = 0.70, budget_exhausted: bool = False) -> str:
    """CoScale-RL pool of a problem: ``unsolvable`` (< lo), ``solvable``, ``solved`` (> hi) or ``failed``.

    >>> assign_pool(0.01), assign_pool(0.05), assign_pool(0.7), assign_pool(0.71)
    ('unsolvable', 'solvable', 'solvable', 'solved')
    """
    if budget_exhausted:
        return "failed"
    if pass_rate < lo:
        return "unsolvable"
    return "solved" if pass_rate > hi else "solvable"


def band_name(lo: float, hi: float) -> str:
    """Name of a difficulty group: ``band_name(0.05, 0.25) == 'p0.05-0.25'``."""
    return f"p{lo:g}-{hi:g}"


def group_by_difficulty(
    problem_ids: Sequence[str], pass_rates: Sequence[float], bins: Sequence[float] = (0.05, 0.25, 0.5, 0.7)
) -> dict[str, list[str]]:
    """CoScale-RL difficulty groups for separate RL runs: [b0, b1), [b1, b2), ..., [b_{n-1}, b_n] (last closed).

    Problems outside [b0, b_n] (unsolvable, solved) belong to no group. Every group is a key, even if empty.

    >>> group_by_difficulty(["a", "b", "c", "d"], [0.01, 0.1, 0.5, 0.7])
    {'p0.05-0.25': ['b'], 'p0.25-0.5': [], 'p0.5-0.7': ['c', 'd']}
    """
    groups: dict[str, list[str]] = {band_name(lo, hi): [] for lo, hi in pairwise(bins)}
    names = list(groups)
    for pid, p in zip(problem_ids, pass_rates, strict=True):
        for i, (lo, hi) in enumerate(pairwise(bins)):
            last = i == len(names) - 1
            if lo <= p < hi or (last and p == hi):
                groups[names[i]].append(pid)
                break
    return groups


def zero_variance_mask(group_rewards: Sequence[Sequence[float]]) -> np.ndarray:
    """True for each group whose rewards are all equal (no gradient signal; ScaleRL drops it without refill).

    >>> zero_variance_mask([[1, 1, 1], [0, 1, 0], [0.0, 0.0]]).tolist()
    [True, False, True]
    """
    return np.array([len(g) == 0 or min(g) == max(g) for g in group_rewards], dtype=bool)


def temperature_schedule(t: float, t0: float = 1.0, gamma: float = 0.9, floor: float = 0.05) -> float:
    """Sampling temperature T_t = max(floor, T0·γ^t): explore first, then exploit high-DES prompts (RECONSTRUCTED).

    >>> round(temperature_schedule(2), 4), temperature_schedule(100)
    (0.81, 0.05)
    """
    return max(floor, t0 * gamma**t)


def mix_schedule(t: float, total: float, floor: float = 0.2) -> float:
    """Exploration fraction ρ_t = max(floor, 1 − w_t) of never-trained prompts in an epoch (RECONSTRUCTED)."""
    return max(floor, 1.0 - time_weight(t, total))


def des_scores(
    pass_rate: np.ndarray, cot_length: np.ndarray, zero_variance: np.ndarray, t: float, horizon: float, cfg: DesConfig
) -> np.ndarray:
    """ScalingRL's DES_t per prompt through the shared builders of ``curate.score.des`` (the same formulas
    ``curate score`` writes at t = 0; RECONSTRUCTED, METHODS §1.2), from the current pass rate p (d = 1 − p, r̄ = p),
    the CoT length and the zero-variance flag (R = 0). Unknown CoT lengths (NaN) take the mean; if none is known,
    λ_c is 0 and the other weights are renormalized (``des.without_input``). Pool statistics are taken over the
    arrays given.
    """
    from curate.score.des import des_exprs, pool_stats, without_input

    p = np.clip(np.asarray(pass_rate, dtype=float), 0.0, 1.0)
    ell = np.asarray(cot_length, dtype=float)
    known = ~np.isnan(ell)
    if known.any():
        ell = np.where(known, ell, ell[known].mean())
    else:
        ell, cfg = np.zeros_like(p), without_input(cfg, S.COT_LENGTH)
    frame = pl.DataFrame(
        {S.DIFFICULTY_SCORE: 1.0 - p, S.COT_LENGTH: ell, S.REWARD_EMA: p, S.ZERO_VARIANCE: zero_variance},
        schema={
            S.DIFFICULTY_SCORE: pl.Float64,
            S.COT_LENGTH: pl.Float64,
            S.REWARD_EMA: pl.Float64,
            S.ZERO_VARIANCE: pl.Boolean,
        },
    )
    exprs = des_exprs(cfg, t, horizon, pool_stats(frame, cfg.quantile), None)
    return frame.select(exprs[-1])[S.DES].to_numpy()


def select_by_des(
    ids: Sequence[str],
    des: np.ndarray,
    k: int,
    temperature: float,
    tau: float,
    rng: np.random.Generator,
    log_weight: np.ndarray | None = None,
) -> list[str]:
    """Draw ``k`` ids without replacement from P ∝ exp(DES/T)·weight among DES ≥ τ (Gumbel-top-k), then backfill
    from the highest remaining DES (ties by id). Order of the result is the draw order. ``ids`` must be sorted."""
    des = np.asarray(des, dtype=float)
    n = len(ids)
    if k <= 0 or n == 0:
        return []
    logits = des / max(temperature, 1e-9) + (0.0 if log_weight is None else log_weight)
    keys = logits + rng.gumbel(size=n)
    ok = (des >= tau) & np.isfinite(logits)
    chosen = [i for i in np.argsort(-keys, kind="stable") if ok[i]][:k]
    if len(chosen) < k:
        taken = set(chosen)
        rest = [i for i in np.lexsort((np.arange(n), -des)) if i not in taken and np.isfinite(logits[i])]
        chosen += rest[: k - len(chosen)]
    return [ids[i] for i in chosen]


# --------------------------------------------------------------------------------------------------- evidence
class PassRateTracker:
    """Per-prompt pass rates seen during training: latest group, EMA, cumulative, and the (step, rate) history.

    A reward counts as correct when it is above ``success_threshold`` (0.5 fits 0/1, ±1 and +1/−0.5/−1 rewards).
    """

    def __init__(self, success_threshold: float = 0.5, ema_alpha: float = 0.5) -> None:
        self.success_threshold = success_threshold
        self.ema_alpha = ema_alpha
        self._rec: dict[str, dict[str, Any]] = {}

    def update(self, problem_id: str, rewards: Sequence[float], step: int) -> float:
        """Record one group; returns its pass rate. The first group seeds the EMA (no pull toward a made-up 0.5)."""
        if len(rewards) == 0:
            raise ValueError(f"{problem_id}: empty reward group")
        k = sum(1 for r in rewards if r > self.success_threshold)
        rate = k / len(rewards)
        rec = self._rec.get(problem_id)
        if rec is None:
            rec = self._rec[problem_id] = {"n": 0, "k": 0, "ema": rate, "latest": rate, "hist": []}
        else:
            rec["ema"] = (1 - self.ema_alpha) * rec["ema"] + self.ema_alpha * rate
        rec["n"] += len(rewards)
        rec["k"] += k
        rec["latest"] = rate
        rec["hist"].append([int(step), rate])
        return rate

    def seen(self, problem_id: str) -> bool:
        return problem_id in self._rec

    def latest(self, problem_id: str) -> float | None:
        rec = self._rec.get(problem_id)
        return None if rec is None else rec["latest"]

    def ema(self, problem_id: str) -> float | None:
        rec = self._rec.get(problem_id)
        return None if rec is None else rec["ema"]

    def cumulative(self, problem_id: str) -> float | None:
        rec = self._rec.get(problem_id)
        return None if rec is None else rec["k"] / rec["n"]

    def history(self, problem_id: str) -> list[tuple[int, float]]:
        return [(s, r) for s, r in self._rec.get(problem_id, {}).get("hist", [])]

    def retired(self, problem_id: str, threshold: float = 0.9, rule: str = "latest") -> bool:
        """No-positive-resampling test: the latest (or cumulative) pass rate is ≥ ``threshold``. The caller applies
        it only at epoch boundaries from epoch 1 on (ScaleRL removes such prompts from subsequent epochs)."""
        rate = self.latest(problem_id) if rule == "latest" else self.cumulative(problem_id)
        return rate is not None and rate >= threshold

    def state_dict(self) -> dict[str, Any]:
        return {
            "success_threshold": self.success_threshold,
            "ema_alpha": self.ema_alpha,
            "records": json.loads(json.dumps(self._rec)),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.success_threshold = state["success_threshold"]
        self.ema_alpha = state["ema_alpha"]
        self._rec = json.loads(json.dumps(state["records"]))


class RolloutLadder:
    """CoScale-RL's rollout ladder per difficulty group (METHODS §2.7, RECONSTRUCTED): N ∈ {N0, 2·N0, ..., N_max}.

    ``observe`` records a group's validation reward; no improvement for ``patience`` steps, or a fall of more than
    ``collapse_drop`` below the peak, calls ``on_plateau``, which doubles N (capped). The learning rate keeps η/N
    constant: ``lr(group) = lr0 · N / N0``.
    """

    def __init__(
        self,
        n0: int = 8,
        factor: int = 2,
        n_max: int = 64,
        patience: int = 20,
        collapse_drop: float = 0.1,
        lr0: float = 1e-6,
    ) -> None:
        self.n0, self.factor, self.n_max, self.patience = n0, factor, n_max, patience
        self.collapse_drop, self.lr0 = collapse_drop, lr0
        self._groups: dict[str, dict[str, Any]] = {}

    def _group(self, group: str) -> dict[str, Any]:
        return self._groups.setdefault(group, {"n": self.n0, "peak": None, "since": None, "doublings": 0})

    def n(self, group: str) -> int:
        return self._group(group)["n"]

    def lr(self, group: str) -> float:
        return self.lr0 * self.n(group) / self.n0

    def on_plateau(self, group: str) -> int:
        """Scale the group's rollouts up one rung (no-op at N_max) and start a fresh segment.

        The new segment forgets the old peak as well as the patience window: keeping the peak made every later
        observation below it a "collapse" again, so N doubled at each step until the reward recovered
        (TRAINING.md, last section: 0.5, 0.6, 0.45, 0.46, 0.47 gave N = 8 -> 16 -> 32 -> 64).
        """
        g = self._group(group)
        if g["n"] < self.n_max:
            g["n"] = min(self.n_max, g["n"] * self.factor)
            g["doublings"] += 1
        g["peak"], g["since"] = None, None
        return g["n"]

    def observe(self, group: str, step: int, reward: float) -> int:
        """Record ``reward`` at ``step``; returns the group's N after any plateau/collapse action."""
        if self.check(group, step, reward) is not None:
            return self.on_plateau(group)
        return self.n(group)

    def check(self, group: str, step: int, reward: float) -> str | None:
        """Record ``reward`` at ``step`` and say which rule ends the group's segment, without acting on it:
        ``collapse`` (more than ``collapse_drop`` below the peak), ``plateau`` (no new peak for ``patience`` steps)
        or None (a new peak, or still within patience). ``observe`` acts on it; the trainer's rollout ladder
        (``training.ladder``) records it first, with the peak it was measured against."""
        g = self._group(group)
        if g["peak"] is None or reward > g["peak"]:
            g["peak"], g["since"] = reward, step
            return None
        if g["since"] is None:
            g["since"] = step
        if reward < g["peak"] - self.collapse_drop:
            return "collapse"
        return "plateau" if step - g["since"] >= self.patience else None

    def state_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._groups))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._groups = json.loads(json.dumps(state))
