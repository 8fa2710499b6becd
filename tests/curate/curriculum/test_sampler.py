"""The online curriculum sampler and the pure rules it is built from (in-memory, no network).

Covers METHODS §6's suggested checks: effective rollouts, no-positive-resampling never during epoch 0, zero-variance
back-off that retries, the rollout ladder, state round-trips (also through JSON), determinism by seed, and the
write-back of what the sampler saw to the rollout ledger.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from curate import schema as S
from curate.config import ConfigError, from_mapping
from curate.curriculum.rules import (
    PassRateTracker,
    RolloutLadder,
    assign_pool,
    des_scores,
    effective_rollouts,
    group_by_difficulty,
    mix_schedule,
    rollouts_for_signal,
    select_by_des,
    temperature_schedule,
    zero_variance_mask,
)
from curate.curriculum.sampler import CurriculumSampler, SamplerConfig
from curate.score.des import DesConfig


IDS = [f"p{i:02d}" for i in range(12)]


def drive(sampler: CurriculumSampler, truth: dict[str, float], steps: int, k: int, seed: int = 0) -> list[list[str]]:
    """Run ``steps`` batches with Bernoulli rewards of 4 rollouts from ``truth``; returns the batches."""
    rng = np.random.default_rng(seed)
    batches = []
    for step in range(steps):
        batch = sampler.next_batch(k)
        batches.append(batch)
        for pid in batch:
            sampler.update(pid, (rng.random(4) < truth[pid]).astype(float).tolist(), step)
    return batches


# --------------------------------------------------------------------------------------------------- pure rules
def test_effective_rollouts_formula():
    assert effective_rollouts(0.5, 2) == 1.0
    assert effective_rollouts(0.0, 8) == 0.0 and effective_rollouts(1.0, 8) == 0.0
    assert effective_rollouts(0.25, 4) == pytest.approx(4 * (1 - 0.25**4 - 0.75**4))
    np.testing.assert_allclose(effective_rollouts(np.array([0.5, 0.0]), 2), [1.0, 0.0])


def test_rollouts_for_signal_grows_for_hard_problems():
    assert rollouts_for_signal(0.5, 0.5) == 2
    assert rollouts_for_signal(0.1, 0.5) == 7  # 1 - 0.1^7 - 0.9^7 = 0.522 >= 0.5; N=6 gives 0.469
    assert rollouts_for_signal(0.05, 0.5) == 14
    assert rollouts_for_signal(0.0, 0.5, n_max=64) == 64  # never any signal: the cap
    assert rollouts_for_signal([0.5, 0.05], 0.5) > rollouts_for_signal(0.5, 0.5)


def test_eta_over_n_efficiency_peaks_at_the_optimum():
    from curate.curriculum.rules import efficiency, optimal_eta_over_n

    x = optimal_eta_over_n(1.0, 2.0)
    assert x == 0.25 and efficiency(x, 1.0, 2.0) == 0.125
    assert efficiency(x * 0.9, 1.0, 2.0) < 0.125 > efficiency(x * 1.1, 1.0, 2.0)
    assert efficiency(0.6, 1.0, 2.0) < 0  # past μ_p/μ_n the update hurts


def test_pools_and_difficulty_groups():
    assert [assign_pool(p) for p in (0.0, 0.049, 0.05, 0.7, 0.71)] == [
        "unsolvable", "unsolvable", "solvable", "solvable", "solved",
    ]  # fmt: skip
    assert assign_pool(0.5, budget_exhausted=True) == "failed"
    groups = group_by_difficulty(["a", "b", "c", "d", "e"], [0.04, 0.05, 0.25, 0.7, 0.9])
    assert groups == {"p0.05-0.25": ["b"], "p0.25-0.5": ["c"], "p0.5-0.7": ["d"]}


def test_zero_variance_mask_and_schedules():
    assert zero_variance_mask([[1.0, 1.0], [0.0, 1.0], [-1.0, -1.0, -1.0]]).tolist() == [True, False, True]
    assert temperature_schedule(0) == 1.0
    assert temperature_schedule(1, t0=2.0, gamma=0.5) == 1.0
    assert temperature_schedule(50) == 0.05  # the floor
    assert mix_schedule(0, 10) == 1.0 and mix_schedule(5, 10) == 0.5 and mix_schedule(9, 10) == pytest.approx(0.2)


def test_des_scores_zero_for_zero_variance_and_without_cot():
    p = np.array([0.2, 0.5, 0.8, 1.0])
    des = des_scores(p, np.full(4, np.nan), np.array([False, False, False, True]), 0, 10, DesConfig())
    assert des.shape == (4,) and np.all(np.isfinite(des))
    # without CoT lengths λ_c = 0: DES = (D + R) / 2, and R = 0 for the zero-variance prompt -> DES = D / 2 <= 0.5
    assert des[3] <= 0.5 + 1e-9
    assert des[1] > des[3]


def test_select_by_des_respects_tau_then_backfills():
    rng = np.random.default_rng(0)
    ids = ["a", "b", "c", "d"]
    des = np.array([0.9, 0.1, 0.8, 0.2])
    assert sorted(select_by_des(ids, des, 2, 1.0, 0.5, rng)) == ["a", "c"]
    picked = select_by_des(ids, des, 3, 1.0, 0.5, rng)
    assert sorted(picked[:2]) == ["a", "c"] and picked[2] == "d"  # backfill by highest remaining DES


# --------------------------------------------------------------------------------------------------- evidence
def test_pass_rate_tracker():
    t = PassRateTracker(success_threshold=0.5, ema_alpha=0.5)
    assert t.latest("x") is None and not t.retired("x")
    t.update("x", [1, 1, 0, 0], step=0)
    t.update("x", [1, 1, 1, 1], step=3)
    assert t.latest("x") == 1.0 and t.ema("x") == 0.75 and t.cumulative("x") == 0.75
    assert t.history("x") == [(0, 0.5), (3, 1.0)]
    assert t.retired("x", 0.9, "latest") and not t.retired("x", 0.9, "cumulative")
    t.update("y", [1.0, -1.0, -0.5], step=1)  # ±1 and ScalingRL rewards: only +1 counts as correct
    assert t.latest("y") == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        t.update("x", [], step=4)


def test_ladder_doubles_on_plateau_and_collapse():
    ladder = RolloutLadder(n0=8, factor=2, n_max=32, patience=3, collapse_drop=0.1, lr0=1e-6)
    assert ladder.n("g") == 8
    assert [ladder.observe("g", s, r) for s, r in enumerate([0.30, 0.35, 0.34, 0.34])] == [8, 8, 8, 8]
    assert ladder.observe("g", 4, 0.35) == 16  # no improvement for 3 steps since step 1 -> plateau
    assert ladder.lr("g") / ladder.n("g") == pytest.approx(1e-6 / 8)  # η/N constant
    assert ladder.observe("g", 5, 0.40) == 16  # the new segment's first reward is its peak
    assert ladder.observe("g", 6, 0.25) == 32  # a fall of 0.15 below the segment's peak: collapse
    assert ladder.on_plateau("g") == 32  # capped at N_max
    assert ladder.n("other") == 8
    clone = RolloutLadder(n0=8, factor=2, n_max=32, patience=3)
    clone.load_state_dict(json.loads(json.dumps(ladder.state_dict())))
    assert clone.n("g") == 32


def test_ladder_doubles_once_per_collapse_not_at_every_later_step():
    """Regression (TRAINING.md): the peak of the old segment made every later step a collapse (8->16->32->64)."""
    ladder = RolloutLadder(n0=8, factor=2, n_max=64, patience=20, collapse_drop=0.1)
    ns = [ladder.observe("g", step, r) for step, r in enumerate([0.5, 0.6, 0.45, 0.46, 0.47])]
    assert ns == [8, 8, 16, 16, 16]
    assert ladder.state_dict()["g"]["doublings"] == 1


# --------------------------------------------------------------------------------------------------- sampler
def test_no_positive_resampling_never_retires_during_epoch_0():
    cfg = SamplerConfig(no_positive_resampling=True, seed=1)
    sampler = CurriculumSampler(IDS, cfg)
    served = []
    for step in range(4):  # 12 prompts, batches of 3: exactly epoch 0, every group all correct
        batch = sampler.next_batch(3)
        served += batch
        for pid in batch:
            sampler.update(pid, [1.0] * 4, step)
        assert sampler.epoch == 0 and not sampler.retired
    assert sorted(served) == IDS  # nothing was removed while epoch 0 ran, although every prompt was solved
    assert sampler.next_batch(3) == []  # from epoch 1 on all are retired
    assert sampler.retired == set(IDS)


def test_no_positive_resampling_latest_vs_cumulative():
    for rule, expected in (("latest", {"p00"}), ("cumulative", set())):
        sampler = CurriculumSampler(["p00", "p01"], SamplerConfig(no_positive_resampling=True, npr_rule=rule))
        for step in range(2):  # epochs 0 and 1: p00 goes 0/4 then 4/4; p01 always 2/4
            for pid in sampler.next_batch(2):
                sampler.update(pid, [float(step)] * 4 if pid == "p00" else [1.0, 1.0, 0.0, 0.0], step)
        sampler.next_batch(2)  # starts epoch 2
        assert sampler.retired == expected, rule


def test_zero_variance_backoff_retries_exponentially_and_never_forgets():
    cfg = SamplerConfig(zero_variance_skip=True, backoff_base=1, backoff_max=4, seed=0)
    sampler = CurriculumSampler(["a", "b", "c"], cfg)
    epochs_with_a = []
    for step in range(60):
        batch = sampler.next_batch(1)
        for pid in batch:
            if pid == "a":
                epochs_with_a.append(sampler.epoch)
            sampler.update(pid, [0.0] * 4 if pid == "a" else [1.0, 0.0, 1.0, 0.0], step)
    # a sits out 1, 2, 4, then 4 (capped) epochs after each all-equal group, and always comes back
    gaps = np.diff(epochs_with_a).tolist()
    assert gaps[:4] == [2, 3, 5, 5], epochs_with_a
    assert sampler.counts["backoff_skips"] > 0 and "a" not in sampler.retired
    # one group with signal resets the back-off
    sampler.update("a", [1.0, 0.0, 0.0, 0.0], 61)
    assert "a" not in sampler.backoff


def test_batches_are_distinct_and_short_only_when_pool_is():
    sampler = CurriculumSampler(IDS[:5], SamplerConfig(seed=2))
    for _ in range(6):
        batch = sampler.next_batch(4)
        assert len(batch) == len(set(batch))
    assert len(CurriculumSampler(IDS[:3], SamplerConfig()).next_batch(8)) == 3
    with pytest.raises(KeyError):
        sampler.update("nope", [1.0], 0)


@pytest.mark.parametrize("policy", ["uniform", "scalingrl"])
def test_state_round_trip_through_json_gives_identical_batches(policy):
    rng = np.random.default_rng(5)
    truth = dict(zip(IDS, rng.uniform(0, 1, len(IDS)), strict=True))
    cfg = SamplerConfig(policy=policy, size=8, epochs=4, zero_variance_skip=True, no_positive_resampling=True, seed=7)
    prior = [truth[i] for i in IDS]
    a = CurriculumSampler(IDS, cfg, prior_pass_rate=prior)
    drive(a, truth, steps=7, k=3, seed=1)
    state = json.loads(json.dumps(a.state_dict()))
    b = CurriculumSampler(list(reversed(IDS)), cfg, prior_pass_rate=list(reversed(prior)))  # order must not matter
    b.load_state_dict(state)
    assert drive(a, truth, steps=10, k=3, seed=2) == drive(b, truth, steps=10, k=3, seed=2)
    assert a.state_dict() == b.state_dict()


def test_load_state_refuses_other_prompts_or_config():
    state = CurriculumSampler(IDS, SamplerConfig()).state_dict()
    with pytest.raises(ValueError, match="different set"):
        CurriculumSampler(IDS[:-1], SamplerConfig()).load_state_dict(state)
    with pytest.raises(ValueError, match="different SamplerConfig"):
        CurriculumSampler(IDS, SamplerConfig(seed=1)).load_state_dict(state)


@pytest.mark.parametrize("policy", ["uniform", "scalingrl"])
def test_deterministic_by_seed(policy):
    truth = {pid: (i % 5) / 4 for i, pid in enumerate(IDS)}

    def run(seed):
        cfg = SamplerConfig(policy=policy, size=6, seed=seed, zero_variance_skip=True)
        return drive(CurriculumSampler(IDS, cfg, prior_pass_rate=list(truth.values())), truth, 8, 3)

    assert run(0) == run(0)
    assert run(0) != run(1)


def test_scalingrl_mixes_fresh_and_replayed_prompts():
    ids = [f"q{i:03d}" for i in range(40)]
    prior = np.linspace(0.05, 0.95, 40)
    cfg = SamplerConfig(policy="scalingrl", size=10, epochs=4, seed=0)
    sampler = CurriculumSampler(ids, cfg, prior_pass_rate=prior)
    first = sampler.next_batch(10)
    assert sampler.epoch == 0 and len(set(first)) == 10
    for pid in first:
        sampler.update(pid, [1.0, 0.0, 0.0, 1.0], 0)  # replayable: pass rate strictly inside (0, 1)
    second = sampler.next_batch(10)
    assert sampler.epoch == 1
    replayed = len(set(second) & set(first))
    # ρ_1 = max(0.2, 1 - 1/4) = 0.75: 8 fresh prompts, 2 replayed
    assert replayed == 2


def test_band_weights_exclude_a_pool():
    prior = [0.9 if i % 2 else 0.3 for i in range(len(IDS))]
    cfg = SamplerConfig(band_weights={"solved": 0.0}, seed=0)
    batch = CurriculumSampler(IDS, cfg, prior_pass_rate=prior).next_batch(12)
    assert sorted(batch) == IDS[::2]
    with pytest.raises(ConfigError):
        SamplerConfig(band_weights={"easy": 1.0})
    with pytest.raises(ConfigError):
        SamplerConfig(policy="greedy")


def test_config_loads_from_a_recipe_mapping():
    cfg = from_mapping(SamplerConfig, {"policy": "scalingrl", "des": {"phi": [0, 1, 0]}, "band_weights": {}})
    assert cfg.des.phi == (0.0, 1.0, 0.0)
    assert from_mapping(SamplerConfig, cfg.to_dict()) == cfg


def test_prior_zero_variance_evidence_sits_out_epoch_0_then_returns():
    df = pl.DataFrame({S.PROBLEM_ID: ["a", "b", "c"], S.ZERO_VARIANCE: [True, None, False]})
    sampler = CurriculumSampler.from_frame(df, SamplerConfig(zero_variance_skip=True))
    assert sorted(sampler.next_batch(2)) == ["b", "c"] and sampler.epoch == 0
    assert "a" in sampler.next_batch(3) and sampler.epoch == 1
    plain = CurriculumSampler.from_frame(df, SamplerConfig())  # without the filter the evidence changes nothing
    assert sorted(plain.next_batch(3)) == ["a", "b", "c"]
