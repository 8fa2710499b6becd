r"""The online curriculum: a sampler a trainer drives step by step (its pure rules live in
``curate.curriculum.rules``).

Pipeline position: after ``curate curriculum`` wrote a plan (or straight on a selection). A trainer asks
``next_batch(k)`` for prompt ids, generates a group of rollouts per prompt, and reports the group's rewards with
``update(problem_id, rewards, step)``. ``state_dict()`` is plain JSON (RNG state included), so a resumed run
continues the same curriculum. The trainer writes every rollout to the ledger itself, with its completion
(``training.rl_records.LedgerWriter``). Pure Python + numpy: no torch, no TRL.

Policies (``SamplerConfig.policy``), each with the same optional filters:

- ``uniform``: every epoch is a random permutation of the eligible prompts (the baseline).
- ``scalingrl``: ScalingRL's scheduler (METHODS §1.2). The paper's formulas are unknown; everything below is the
  RECONSTRUCTED default of §1.2: per epoch t, K_t prompts drawn without replacement from
  P(x) ∝ exp(DES_t(x) / T_t), T_t = T0·γ^t (floor), DES from Gaussian scores whose centres move with w_t = t/T,
  kept only where DES ≥ τ (backfilled by score), split into a fraction ρ_t = max(0.2, 1 − w_t) of never-trained
  prompts and 1 − ρ_t of replayed prompts whose recent reward is not extreme.
- filters: zero-variance skip (a prompt whose last group had all-equal rewards sits out its next 1, 2, 4, ...
  epochs, capped, then is retried: GRESO-like exponential back-off, never forgotten; prior evidence of all-equal
  rewards, ``prior_zero_variance``, counts as such a group, so it sits out epoch 0); no-positive-resampling
  (ScaleRL §4.3: pass rate ≥ 0.9 retires a prompt from the NEXT epoch on, never during epoch 0; rule ``latest``
  = the last group, ``cumulative`` = all groups); CoScale band weights (METHODS §2: a sampling weight per pool
  unsolvable / solvable / solved of the current pass-rate estimate; weight 0 excludes the band).

Example::

    sampler = CurriculumSampler.from_frame(selection_df, SamplerConfig(policy="scalingrl", seed=0))
    ids = sampler.next_batch(64)
    sampler.update(ids[0], [1.0, 0.0, 1.0, 1.0], step=0)
    json.dumps(sampler.state_dict())
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from curate import schema as S
from curate.config import ConfigError
from curate.curriculum.rules import (
    PassRateTracker,
    assign_pool,
    des_scores,
    mix_schedule,
    select_by_des,
    temperature_schedule,
    zero_variance_mask,
)
from curate.score.des import DesConfig


POLICIES = ("uniform", "scalingrl")
BANDS = ("unsolvable", "solvable", "solved", "failed")
STATE_VERSION = 1


# --------------------------------------------------------------------------------------------------- sampler
@dataclass(frozen=True)
class SamplerConfig:
    """Settings of ``CurriculumSampler`` (recipe key ``curriculum.sampler``; also written into each plan stage).

    policy: ``uniform`` or ``scalingrl``. zero_variance_skip: back off prompts whose last group was all-equal for
    min(backoff_max, backoff_base·2^(k−1)) epochs after k such groups in a row. no_positive_resampling: retire
    prompts with pass rate ≥ npr_threshold by ``npr_rule`` (``latest`` | ``cumulative``) from the next epoch on.
    band_weights: CoScale pool -> sampling weight (missing pools weigh 1; bounds band_lo/band_hi).
    size/epochs/t0/gamma/t_floor/tau/explore_floor: ScalingRL K_t, T_ramp, T0, γ, temperature floor, τ and ρ floor;
    des: the DES constants (``curate.score.des.DesConfig``, shared with ``curate score``). All RECONSTRUCTED defaults.
    """

    policy: str = "uniform"
    seed: int = 0
    zero_variance_skip: bool = False
    backoff_base: int = 1
    backoff_max: int = 8
    no_positive_resampling: bool = False
    npr_threshold: float = 0.9
    npr_rule: str = "latest"
    band_weights: dict[str, float] = field(default_factory=dict)
    band_lo: float = 0.05
    band_hi: float = 0.70
    success_threshold: float = 0.5
    ema_alpha: float = 0.5
    size: int = 1500
    epochs: int = 10
    t0: float = 1.0
    gamma: float = 0.9
    t_floor: float = 0.05
    tau: float = 0.3
    explore_floor: float = 0.2
    des: DesConfig = field(default_factory=DesConfig)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"sampler.policy {self.policy!r} is not one of {POLICIES}")
        if self.npr_rule not in ("latest", "cumulative"):
            raise ConfigError(f"sampler.npr_rule {self.npr_rule!r} must be 'latest' or 'cumulative'")
        unknown = sorted(set(self.band_weights) - set(BANDS))
        if unknown or any(w < 0 for w in self.band_weights.values()):
            raise ConfigError(f"sampler.band_weights: pools {BANDS} with weights >= 0; got {self.band_weights}")
        if self.backoff_base < 1 or self.backoff_max < 1 or self.size < 1:
            raise ConfigError("sampler: backoff_base, backoff_max and size must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))


class CurriculumSampler:
    """Online curriculum over a fixed set of prompts; see the module docstring for the policies and filters.

    ``prior_pass_rate`` (NaN = unknown), ``cot_length`` (NaN = unknown) and ``prior_zero_variance`` (evidence with
    all-equal rewards: R = 0) feed the DES before a prompt has been trained on; afterwards its EMA pass rate and last
    group do. A batch never holds the same prompt twice: it may cross into the next epoch, and comes back short only
    when no more distinct eligible prompts exist (empty when all are retired).
    """

    def __init__(
        self,
        problem_ids: Sequence[str],
        cfg: SamplerConfig | None = None,
        *,
        prior_pass_rate: Sequence[float | None] | None = None,
        cot_length: Sequence[float | None] | None = None,
        prior_zero_variance: Sequence[bool | None] | None = None,
    ) -> None:
        self.cfg = cfg or SamplerConfig()
        order = sorted(range(len(problem_ids)), key=lambda i: problem_ids[i])  # never rely on input order
        self.ids: list[str] = [problem_ids[i] for i in order]
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("problem ids must be unique")
        self._pos = {pid: i for i, pid in enumerate(self.ids)}

        def column(values):
            if values is None:
                return np.full(len(self.ids), np.nan)
            arr = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
            return arr[order]

        self.prior = column(prior_pass_rate)
        self.cot = column(cot_length)
        zeros = prior_zero_variance if prior_zero_variance is not None else [False] * len(order)
        self.prior_zero = np.array([bool(zeros[i]) for i in order], dtype=bool)
        self.tracker = PassRateTracker(self.cfg.success_threshold, self.cfg.ema_alpha)
        self.rng = np.random.Generator(np.random.PCG64(self.cfg.seed))
        self.epoch = -1
        self.queue: deque[str] = deque()
        self.backoff: dict[str, list[int]] = {}  # pid -> [zero-variance groups in a row, epochs left to sit out]
        if self.cfg.zero_variance_skip:  # ledger evidence of all-equal rewards counts as the prompt's last group
            first = [1, self.cfg.backoff_base]
            self.backoff = {pid: list(first) for pid, z in zip(self.ids, self.prior_zero, strict=True) if z}
        self.retired: set[str] = set()
        self.counts = {
            "served": 0,
            "groups": 0,
            "zero_variance_groups": 0,
            "rollouts": 0,
            "wasted_rollouts": 0,
            "backoff_skips": 0,
        }

    @classmethod
    def from_frame(cls, df: pl.DataFrame, cfg: SamplerConfig | None = None) -> CurriculumSampler:
        """From a selection, stage shard or scores frame: ``problem_id``; optional ``pass_rate``, ``cot_length``,
        ``zero_variance``."""

        def col(name):
            return df[name].to_list() if name in df.columns else None

        return cls(
            df[S.PROBLEM_ID].to_list(),
            cfg,
            prior_pass_rate=col(S.PASS_RATE),
            cot_length=col(S.COT_LENGTH),
            prior_zero_variance=col(S.ZERO_VARIANCE),
        )

    # ------------------------------------------------------------------ the trainer's API
    def next_batch(self, k: int) -> list[str]:
        """The next ``k`` distinct prompt ids. A batch that crosses into the next epoch skips prompts it already
        holds (they stay first in line for the next batch); it is short only when the pool cannot supply ``k``."""
        batch: list[str] = []
        chosen: set[str] = set()
        idle_epochs = 0
        while len(batch) < k:
            if not self.queue:
                if len(self.retired) == len(self.ids) or idle_epochs > self.cfg.backoff_max + 1:
                    break
                idle_epochs = 0 if self._new_epoch() else idle_epochs + 1
                continue
            skipped: list[str] = []
            while self.queue and len(batch) < k:
                pid = self.queue.popleft()
                if pid in chosen:
                    skipped.append(pid)
                else:
                    batch.append(pid)
                    chosen.add(pid)
            self.queue.extendleft(reversed(skipped))
            if skipped and len(batch) < k:  # what is left of this epoch is already in the batch
                break
        self.counts["served"] += len(batch)
        return batch

    def update(self, problem_id: str, rewards: Sequence[float], step: int) -> None:
        """Report one prompt's group of rewards at training ``step`` (the trainer writes the ledger rows itself, with
        the completions: ``training.rl_records.LedgerWriter``)."""
        if problem_id not in self._pos:
            raise KeyError(f"unknown problem_id {problem_id!r}")
        rewards = [float(r) for r in rewards]
        self.tracker.update(problem_id, rewards, step)
        zero = bool(zero_variance_mask([rewards])[0])
        self.counts["groups"] += 1
        self.counts["rollouts"] += len(rewards)
        if zero:
            self.counts["zero_variance_groups"] += 1
            self.counts["wasted_rollouts"] += len(rewards)
            run = self.backoff.get(problem_id, [0, 0])[0] + 1
            self.backoff[problem_id] = [run, min(self.cfg.backoff_max, self.cfg.backoff_base * 2 ** (run - 1))]
        else:
            self.backoff.pop(problem_id, None)

    def estimate(self) -> np.ndarray:
        """Current pass-rate estimate per prompt (sorted ids): EMA where trained, else the prior, else the mean."""
        est = np.array([self.tracker.ema(pid) if self.tracker.seen(pid) else np.nan for pid in self.ids])
        est = np.where(np.isnan(est), self.prior, est)
        fill = float(np.nanmean(est)) if (~np.isnan(est)).any() else 0.5
        return np.where(np.isnan(est), fill, est)

    # ------------------------------------------------------------------ epochs
    def _new_epoch(self) -> int:
        self.epoch += 1
        cfg = self.cfg
        if cfg.no_positive_resampling and self.epoch >= 1:
            self.retired.update(pid for pid in self.ids if self.tracker.retired(pid, cfg.npr_threshold, cfg.npr_rule))
        eligible = np.zeros(len(self.ids), dtype=bool)
        for i, pid in enumerate(self.ids):
            if pid in self.retired:
                continue
            state = self.backoff.get(pid)
            if cfg.zero_variance_skip and state and state[1] > 0:
                state[1] -= 1
                self.counts["backoff_skips"] += 1
                continue
            eligible[i] = True
        est = self.estimate()
        log_w = np.zeros(len(self.ids))
        if cfg.band_weights:
            weights = [cfg.band_weights.get(assign_pool(p, cfg.band_lo, cfg.band_hi), 1.0) for p in est]
            with np.errstate(divide="ignore"):
                log_w = np.log(np.asarray(weights, dtype=float))
        eligible &= np.isfinite(log_w)
        idx = np.flatnonzero(eligible)
        if cfg.policy == "uniform":
            keys = log_w[idx] + self.rng.gumbel(size=idx.size)
            order = [self.ids[i] for i in idx[np.argsort(-keys, kind="stable")]]
        else:
            seen = np.array([self.tracker.seen(pid) for pid in self.ids], dtype=bool)
            zero = np.array([self.backoff.get(pid, [0])[0] > 0 for pid in self.ids], dtype=bool)
            zero |= ~seen & (self.prior_zero | (est == 0.0) | (est == 1.0))
            order = scalingrl_epoch(self.ids, idx, est, self.cot, seen, zero, self.epoch, cfg, self.rng, log_w)
        self.queue = deque(order)
        return len(order)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue identically, as JSON-serializable data (the RNG state included)."""
        return {
            "version": STATE_VERSION,
            "config": self.cfg.to_dict(),
            "ids_sha256": _ids_hash(self.ids),
            "epoch": self.epoch,
            "queue": list(self.queue),
            "backoff": {k: list(v) for k, v in self.backoff.items()},
            "retired": sorted(self.retired),
            "counts": dict(self.counts),
            "tracker": self.tracker.state_dict(),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` output; refuses a state made for other prompts or another config."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"sampler state version {state.get('version')} != {STATE_VERSION}")
        if state["ids_sha256"] != _ids_hash(self.ids):
            raise ValueError("sampler state was made for a different set of prompts")
        if state["config"] != self.cfg.to_dict():
            raise ValueError("sampler state was made with a different SamplerConfig")
        self.epoch = state["epoch"]
        self.queue = deque(state["queue"])
        self.backoff = {k: list(v) for k, v in state["backoff"].items()}
        self.retired = set(state["retired"])
        self.counts = dict(state["counts"])
        self.tracker.load_state_dict(state["tracker"])
        self.rng = np.random.Generator(np.random.PCG64())
        self.rng.bit_generator.state = state["rng"]


def scalingrl_epoch(
    ids: Sequence[str],
    eligible: np.ndarray,
    pass_rate: np.ndarray,
    cot_length: np.ndarray,
    seen: np.ndarray,
    zero_variance: np.ndarray,
    t: int,
    cfg: SamplerConfig,
    rng: np.random.Generator,
    log_weight: np.ndarray | None = None,
) -> list[str]:
    """One ScalingRL epoch (METHODS §1.2, RECONSTRUCTED): K_t = min(size, eligible) prompts, a fraction ρ_t of them
    never trained on (``seen`` False) and the rest replayed prompts whose pass rate is strictly inside (0, 1), each
    part drawn by ``select_by_des`` at temperature T_t; short parts are backfilled from the other, then from the
    extremes. DES pool statistics are taken over all ``ids`` (sorted), returned order is shuffled.
    """
    temp = temperature_schedule(t, cfg.t0, cfg.gamma, cfg.t_floor)
    des = des_scores(pass_rate, cot_length, zero_variance, t, cfg.epochs, cfg.des)
    log_weight = np.zeros(len(ids)) if log_weight is None else log_weight
    k = min(cfg.size, eligible.size)
    p = pass_rate[eligible]
    fresh = eligible[~seen[eligible]]
    replay = eligible[seen[eligible] & (p > 0.0) & (p < 1.0)]
    n_fresh = min(round(mix_schedule(t, cfg.epochs, cfg.explore_floor) * k), fresh.size)
    n_replay = min(k - n_fresh, replay.size)
    n_fresh = min(k - n_replay, fresh.size)  # backfill exploration if replay is short

    def draw(sub: np.ndarray, n: int) -> list[str]:
        return select_by_des([ids[i] for i in sub], des[sub], n, temp, cfg.tau, rng, log_weight[sub])

    picked = draw(fresh, n_fresh) + draw(replay, n_replay)
    if len(picked) < k:  # seen prompts at the extremes (pass rate 0 or 1) only come back as backfill
        taken = set(picked)
        picked += draw(np.array([i for i in eligible if ids[i] not in taken], dtype=int), k - len(picked))
    return [picked[i] for i in rng.permutation(len(picked))]


def _ids_hash(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()
