"""The forecast share of zero-variance groups (``curate.score.forecast``, issue 28): exact on a small pool, right on a
simulated one, and printed by ``curate score`` / ``curate select``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from curate.score import forecast


def _exact_chance(a: float, b: float, n: int) -> float:
    """E[p^n + (1-p)^n] under Beta(a, b) by the Beta function, independently of the product formula."""
    from scipy.special import betaln

    return math.exp(betaln(a + n, b) - betaln(a, b)) + math.exp(betaln(a, b + n) - betaln(a, b))


@pytest.mark.parametrize(("a", "b", "n"), [(1.0, 1.0, 1), (1.0, 1.0, 8), (0.3, 0.7, 8), (5.5, 2.5, 16), (40, 2, 4)])
def test_the_chance_of_an_all_equal_group_is_the_exact_posterior_mean(a, b, n):
    assert forecast.zero_variance_chance(a, b, n) == pytest.approx(_exact_chance(a, b, n), rel=1e-12)
    assert forecast.zero_variance_chance(1.0, 1.0, 1) == 1.0  # one rollout is always all-equal


def test_a_small_pool_exactly():
    """Three prompts, 8 rollouts each: the share is the mean of each prompt's exact chance under the fitted pool
    prior, and the SE is the Bernoulli sum's."""
    samples, correct = [8, 8, 8, 0], [0, 8, 4, 0]
    fc = forecast.forecast(samples, correct, 8)
    a0, b0 = forecast.pool_prior(samples, correct)
    chances = [_exact_chance(a0 + c, b0 + s - c, 8) for s, c in zip(samples, correct, strict=True)]
    assert fc["share"] == pytest.approx(sum(chances) / 4, abs=1e-4)
    assert fc["stderr"] == pytest.approx(math.sqrt(sum(q * (1 - q) for q in chances)) / 4, abs=1e-4)
    assert fc["prompts"] == 4 and fc["measured"] == 3
    assert forecast.forecast([0, 0], [0, 0], 8)["share"] is None  # nothing measured: no forecast


def test_on_a_pool_whose_pass_rates_pile_at_0_and_1_the_forecast_matches_what_new_groups_show():
    """Pass rates from a U-shaped Beta (real pools); 8 measured rollouts each; the forecast for fresh groups of 8
    lands within 3 SE of the share a simulation observes, where a flat prior would under-forecast."""
    rng = np.random.default_rng(0)
    p = rng.beta(0.3, 0.3, size=2000)
    correct = rng.binomial(8, p)
    fc = forecast.forecast([8] * 2000, correct.tolist(), 8)
    fresh = rng.binomial(8, p)
    observed = float(np.mean((fresh == 0) | (fresh == 8)))
    assert abs(fc["share"] - observed) < 3 * fc["stderr"] + 0.01
    a0, b0 = fc["prior"]
    assert a0 < 1 and b0 < 1  # the fitted prior is U-shaped, as the pool is
    flat = np.mean([forecast.zero_variance_chance(1 + c, 1 + 8 - c, 8) for c in correct])
    assert flat < observed - 0.05  # why the prior is the pool's own


def test_score_and_select_print_the_forecast_for_the_pool_and_the_selection(tmp_path):
    import polars as pl

    from curate import config, io, pipeline
    from curate import schema as S
    from curate.rollout import ledger

    ws = io.Workspace(tmp_path / "ws")
    recipe = config.recipe_from_mapping({
        "name": "t", "pool": "p", "stages": ["ingest", "score", "select"],
        "ingest": {"sources": [{"path": "gen://arith?n=40&seed=0&max_level=1&min_ops=1&max_ops=3", "name": "a"}]},
        "score": {"use_embeddings": False, "rollouts": 4, "evidence": {"model": "m"}},
        "select": {"size": 10, "plots": False, "rollouts": 4, "drop_solved": False, "drop_zero_variance": False},
    })  # fmt: skip
    pipeline.run_stage("ingest", ws, recipe)
    ids = pl.read_parquet(ws.table("p", "problems"))[S.PROBLEM_ID].to_list()
    pids = [pid for pid in ids for _ in range(4)]  # 4 rollouts each; problem i right 0, 2 or 4 times of 4
    verdicts = ["correct" if k < 2 * (i % 3) else "wrong" for i in range(len(ids)) for k in range(4)]
    rows = ledger.build_rows("m", pids, {S.VERDICT: verdicts, S.COMPLETION: "x"}, backend="hf", run_id="r")
    ledger.append(ws, "p", "m", rows, part=ledger.part_name("r", "test"))
    score = pipeline.run_stage("score", ws, recipe).summary["zero_variance_forecast"]
    assert score["rollouts"] == 4 and score["measured"] == len(ids)
    assert 0.5 < score["share"] < 0.9  # two thirds of the prompts are all-equal in their 4, one third half right
    select = pipeline.run_stage("select", ws, recipe).summary["zero_variance_forecast"]
    assert select["pool"]["prompts"] == len(ids) and select["selection"]["prompts"] == 10
