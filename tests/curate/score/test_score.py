"""Scoring: DES expressions, the pass-rate posterior, ledger evidence, flags, the score stage (in-memory, no network).

Every score function is checked against rows computed by hand; the stage is checked end to end on a small pool
with a hand-built ledger, random embeddings standing in for the encoder.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from curate import schema as S
from curate.manifest import read_manifest
from curate.score import des
from curate.score import stage as score
from curate.score.des import DesConfig, PoolStats
from curate.score.evidence import EvidenceConfig, ledger_evidence, target_model


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def problems_frame(n: int = 40, test_every: int = 10) -> pl.DataFrame:
    rows = []
    for i in range(n):
        text = f"Problem {i}: compute ${i} \\times {i + 3}$ and add {i * 7}." + " More words." * (i % 6)
        rows.append(
            {
                S.PROBLEM_ID: S.problem_id(text),
                S.PROBLEM: text,
                S.ANSWER: str(i * (i + 3) + i * 7),
                S.ANSWER_ALTERNATIVES: [str(i * (i + 3) + i * 7)],
                S.ANSWER_RAW: str(i),
                S.SOLUTION: ("We multiply. " * (1 + i % 9)) if i % 2 == 0 else None,
                S.LEVEL: (i % 5) + 1 if i % 4 != 3 else None,
                S.DIFFICULTY: float((i % 5) + 1) if i % 4 != 3 else None,
                S.SUBJECT: None,
                S.SPLIT: "test" if i % test_every == 0 else "train",
                S.SOURCE: "toy",
                S.SOURCE_ROW: i,
                S.SOURCES: [f"toy#{i}"],
                S.META: "{}",
            }
        )
    return S.validate(pl.DataFrame(rows, schema_overrides={S.LEVEL: pl.Int32, S.SUBJECT: pl.String}), S.PROBLEMS)


def ledger_rows(pid: str, model: str, rewards: list[float], *, start: int = 0, step: int | None = None) -> list[dict]:
    return [
        {
            S.PROBLEM_ID: pid,
            S.MODEL: model,
            S.SAMPLE_IDX: j,
            S.COMPLETION_TOKENS: 100 + 10 * j,
            S.CORRECT: r > 0.5,
            S.REWARD: r,
            S.STEP: step,
            S.CREATED_AT: T0 + dt.timedelta(minutes=start + j),
            S.BACKEND: "hf",
        }
        for j, r in enumerate(rewards)
    ]


def ledger_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={c: S.ROLLOUTS[c] for c in rows[0]})


# --------------------------------------------------------------------------------------------------- DES
def test_gaussian_score_matches_hand_values():
    out = pl.DataFrame({"x": [1.0, 2.0, 3.0]}).select(des.gaussian_score("x", 1.0, 1.0))["x"].to_list()
    assert out == pytest.approx([1.0, math.exp(-0.5), math.exp(-2.0)])


def test_time_weight_and_softmax_weights():
    assert [des.time_weight(t, 4) for t in (0, 1, 4, 9)] == [0.0, 0.25, 1.0, 1.0]
    assert des.des_weights((0.0, 0.0, 0.0)) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert des.des_weights((math.log(2.0), 0.0, 0.0)) == pytest.approx((0.5, 0.25, 0.25))


STATS = PoolStats(d_mean=0.5, d_quantile=0.9, d_std=0.2, c_mean=0.0, c_quantile=1.0, c_std=1.0)


def des_input(**cols) -> pl.DataFrame:
    base = {
        S.DIFFICULTY_SCORE: [0.7],
        S.COT_LENGTH: [0.0],
        S.REWARD_EMA: [0.75],
        S.ZERO_VARIANCE: [False],
        S.LEARNING_PROGRESS: [0.0],
    }
    return pl.DataFrame(base | cols)


def test_des_with_equal_weights_is_the_mean_of_hand_computed_components():
    out = des_input().select(des.des_exprs(DesConfig(), 0, 10, STATS)).row(0, named=True)
    d = math.exp(-((0.7 - 0.5) ** 2) / (2 * 0.2**2))  # 0.6065
    assert out[S.DES_D] == pytest.approx(d)
    assert out[S.DES_C] == pytest.approx(1.0)
    assert out[S.DES_R] == pytest.approx(1.0)  # r̄ = 0.75 is R's centre at t = 0
    assert out[S.DES] == pytest.approx((d + 1.0 + 1.0) / 3)
    assert out[S.DES] == pytest.approx(0.8689, abs=1e-4)


def test_des_centres_move_to_the_quantile_and_reward_centre_at_the_horizon():
    row = des_input(**{S.DIFFICULTY_SCORE: [0.9], S.COT_LENGTH: [1.0], S.REWARD_EMA: [0.5]})
    late = row.select(des.des_exprs(DesConfig(), 10, 10, STATS)).row(0, named=True)
    assert late[S.DES_D] == pytest.approx(1.0) and late[S.DES_C] == pytest.approx(1.0)
    assert late[S.DES_R] == pytest.approx(1.0)
    mid = row.select(des.des_exprs(DesConfig(), 5, 10, STATS)).row(0, named=True)
    assert mid[S.DES_D] == pytest.approx(math.exp(-(0.2**2) / (2 * 0.2**2)))  # centre 0.7


def test_reward_component_is_zero_for_zero_variance_and_rises_with_progress():
    rows = des_input(
        **{
            S.DIFFICULTY_SCORE: [0.7] * 3,
            S.COT_LENGTH: [0.0] * 3,
            S.REWARD_EMA: [1.0, 0.5, 0.5],
            S.ZERO_VARIANCE: [True, False, False],
            S.LEARNING_PROGRESS: [0.0, 0.0, 0.4],
        }
    )
    r = rows.select(des.des_exprs(DesConfig(), 0, 1, STATS))[S.DES_R].to_list()
    g = math.exp(-(0.25**2) / (2 * 0.25**2))
    assert r == pytest.approx([0.0, g, min(1.0, g + 0.5 * 0.4)])


def test_des_weights_follow_phi():
    cfg = DesConfig(phi=(10.0, -10.0, -10.0))
    out = des_input().select(des.des_exprs(cfg, 0, 1, STATS)).row(0, named=True)
    assert out[S.DES] == pytest.approx(out[S.DES_D], abs=1e-6)


def test_a_des_factor_is_one_term_of_the_table_and_reaches_every_reader(monkeypatch):
    """A new factor is its column in ``curate.schema`` and a ``Term`` in ``curate.score.des.TERMS``: the DES columns,
    the weights' length and the constant-term warnings follow the table, and no other module names a term's column
    (issue 31: a factor touched seven files)."""
    import re
    from pathlib import Path

    extra = des.Term("length", "des_l", S.PROMPT_CHARS, lambda cfg, w, stats, _: pl.col(S.PROMPT_CHARS) * 0.0 + 1.0)
    monkeypatch.setattr(des, "TERMS", (*des.TERMS, extra))
    assert DesConfig().phi == (0.0,) * 4
    rows = des_input(**{S.PROMPT_CHARS: [10]}).vstack(des_input(**{S.PROMPT_CHARS: [20], S.COT_LENGTH: [1.0]}))
    out = rows.with_columns(des.des_exprs(DesConfig(), 0, 10, STATS))
    assert out["des_l"].to_list() == [1.0, 1.0] and out[S.DES][0] == pytest.approx((0.6065 + 1 + 1 + 1) / 4, 1e-4)
    assert des.constant_terms(out) == ["difficulty", "reward", "length"]
    assert "ranks by CoT length alone" in des.reduced_note(out)
    root = Path(des.__file__).resolve().parents[2]
    column = re.compile(r"\b(DES_[DCR]|des_[dcr])\b")
    named = [
        f"{path.relative_to(root)}:{i}"
        for folder in ("curate", "training", "flows")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "schema.py" and path != Path(des.__file__).resolve()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if column.search(line)
    ]
    assert named == []


def test_update_des_weights_raises_the_component_that_tracks_progress():
    rng = np.random.default_rng(0)
    progress = rng.normal(size=200)
    comps = np.column_stack([progress + rng.normal(scale=0.1, size=200), rng.normal(size=200), rng.normal(size=200)])
    phi = des.update_des_weights((0.0, 0.0, 0.0), comps, progress, lr=1.0)
    assert phi[0] > 0 > max(phi[1], phi[2])


# --------------------------------------------------------------------------------------------------- difficulty
def test_posterior_with_pseudo_count():
    frame = pl.DataFrame(
        {
            S.PRIOR_PASS_RATE: [0.5, 0.5, 0.2, 0.3],
            S.N_SAMPLES: [4, 4, 1000, None],
            S.N_CORRECT: [2, 4, 900, None],
        }
    )
    out = frame.select(score.posterior_exprs(8.0))
    assert out[S.ALPHA].to_list() == pytest.approx([6.0, 8.0, 901.6, 2.4])
    assert out[S.BETA].to_list() == pytest.approx([6.0, 4.0, 106.4, 5.6])
    # a few rollouts shift the prior; many dominate it; none leave it unchanged
    assert out[S.PASS_RATE].to_list() == pytest.approx([0.5, 8 / 12, 901.6 / 1008, 0.3])


def test_label_pass_rate_maps_levels_and_numeric_difficulty():
    frame = pl.DataFrame(
        {S.LEVEL: [1, 3, 5, None, None], S.DIFFICULTY: [1.0, 3.0, 5.0, 5.0, None]},
        schema={S.LEVEL: pl.Int32, S.DIFFICULTY: pl.Float64},
    )
    out = frame.select(score.label_pass_rate_expr(score.ScoreConfig()))[S.LEVEL].to_list()
    assert out[:3] == pytest.approx([0.9, 0.7, 0.35])
    assert out[3] == pytest.approx(0.95 - 0.1 * 4)
    assert out[4] is None


def test_coscale_pools_at_the_thresholds():
    p = pl.DataFrame({S.PASS_RATE: [0.0, 0.049, 0.05, 0.5, 0.70, 0.71, 1.0]})
    out = p.select(des.coscale_pool_expr())[S.COSCALE_POOL].to_list()
    assert out == ["unsolvable", "unsolvable", "solvable", "solvable", "solvable", "solved", "solved"]


def test_fit_predict_is_seeded_and_reports_heldout_mae():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 5))
    y = np.clip(0.5 + 0.1 * x[:, 0], 0, 1)
    train = np.arange(300) < 200
    cfg = score.ScoreConfig()
    a, rep = score.fit_predict(x, y, train, cfg, 3, clip=(0.01, 0.99))
    b, _ = score.fit_predict(x, y, train, cfg, 3, clip=(0.01, 0.99))
    assert np.array_equal(a, b)
    assert rep["n_train"] == 200 and rep["n_heldout"] == 40
    assert rep["mae"] < 0.01 < rep["baseline_mae"]
    few, rep_few = score.fit_predict(x, y, np.arange(300) < 5, cfg, 3, clip=None)
    assert rep_few["kind"] == "constant" and rep_few["mae"] is None and np.allclose(few, y[:5].mean())


# --------------------------------------------------------------------------------------------------- evidence
def test_ledger_evidence_ema_zero_variance_and_progress():
    rows = (
        ledger_rows("a", "old", [1.0] * 8)  # all right: zero variance once n >= min_samples
        + ledger_rows("b", "old", [0.0] * 4)  # all wrong, but only 4 rollouts
        + ledger_rows("c", "old", [0.0, 1.0, 1.0])  # EMA(0.5): 0 -> 0.5 -> 0.75
        + ledger_rows("c", "new", [1.0, 1.0, 1.0, 0.0], start=100)
    )
    ledger = ledger_frame(rows)
    assert target_model(ledger, None) == "new"
    ev = ledger_evidence(ledger, EvidenceConfig(model="old", ema_alpha=0.5)).sort(S.PROBLEM_ID)
    got = {r[S.PROBLEM_ID]: r for r in ev.iter_rows(named=True)}
    assert got["a"]["_all_equal"] and got["a"]["_n_recent"] == 8 and got["a"][S.N_CORRECT] == 8
    assert got["b"]["_all_equal"] and got["b"]["_n_recent"] == 4
    assert not got["c"]["_all_equal"]
    assert got["c"][S.REWARD_EMA] == pytest.approx(0.75)
    assert got["c"][S.MEAN_TOKENS_CORRECT] == pytest.approx(115.0)  # correct samples 1, 2 -> 110, 120 tokens
    assert got["c"][S.LEARNING_PROGRESS] == pytest.approx(0.75 - 2 / 3)  # new checkpoint minus old
    assert got["a"][S.LEARNING_PROGRESS] == 0.0
    new = ledger_evidence(ledger, EvidenceConfig(ema_alpha=0.5))
    assert new[S.PROBLEM_ID].to_list() == ["c"] and new[S.N_SAMPLES].to_list() == [4]


def test_rewards_on_another_scale_map_onto_zero_one():
    ledger = ledger_frame(ledger_rows("a", "m", [1.0, -1.0, -0.5]))
    ev = ledger_evidence(ledger, EvidenceConfig(reward_correct=1.0, reward_wrong=-1.0, ema_alpha=1.0))
    assert ev[S.REWARD_EMA][0] == pytest.approx(0.25)  # -0.5 on [-1, 1]


# --------------------------------------------------------------------------------------------------- stage
def scored(seed: int = 0, shuffle: bool = False, **cfg):
    problems = problems_frame()
    train_ids = problems.filter(pl.col(S.SPLIT) == "train")[S.PROBLEM_ID].to_list()
    emb = np.random.default_rng(0).normal(size=(problems.height, 8)).astype(np.float32)
    if shuffle:
        order = np.random.default_rng(5).permutation(problems.height)
        problems, emb = problems[order], emb[order]
    rows = ledger_rows(train_ids[0], "m", [1.0] * 8) + ledger_rows(train_ids[1], "m", [0.0, 1.0] * 4)
    evidence = ledger_evidence(ledger_frame(rows), EvidenceConfig())
    conf = score.ScoreConfig(clusters=3, min_train=5, seed=seed, **cfg)
    filters = pl.DataFrame(
        {S.PROBLEM_ID: [train_ids[2]], S.CONTAMINATED: [True], S.DUPLICATE_OF: [None]},
        schema_overrides={S.DUPLICATE_OF: pl.String},
    )
    return problems, train_ids, score.score_frame(problems, conf, evidence=evidence, embeddings=emb,
                                                  filters=filters)  # fmt: skip


def test_score_frame_scores_train_rows_only_with_flags_and_sources():
    problems, train_ids, (out, report) = scored()
    assert out.height == len(train_ids) == problems.filter(pl.col(S.SPLIT) == "train").height
    assert out[S.PROBLEM_ID].to_list() == sorted(train_ids)
    S.validate(out, S.SCORES)
    row = {r[S.PROBLEM_ID]: r for r in out.iter_rows(named=True)}
    solved = row[train_ids[0]]
    assert solved[S.ZERO_VARIANCE] and solved[S.SOLVED] and solved[S.DES_R] == 0.0
    assert solved[S.PASS_RATE_SOURCE] == "ledger" and solved[S.COT_SOURCE] == "ledger"
    m = solved[S.PRIOR_PASS_RATE]
    assert solved[S.PASS_RATE] == pytest.approx((8 * m + 8) / 16)
    assert not row[train_ids[1]][S.ZERO_VARIANCE] and row[train_ids[1]][S.REWARD_EMA] > 0
    assert not row[train_ids[1]][S.SOLVED]  # 4/8 observed: not retired, whatever the prior
    assert row[train_ids[2]][S.CONTAMINATED]
    assert set(out[S.PASS_RATE_SOURCE]) <= {"ledger", "label", "prior"}
    assert set(out[S.COT_SOURCE]) == {"ledger", "solution", "predicted"}
    assert out[S.DES].is_between(0.0, 1.0).all() and out[S.CLUSTER].n_unique() == 3
    assert report["prior_predictor"]["n_train"] > 0 and report["prior_predictor"]["mae"] is not None


def test_score_frame_is_deterministic_and_order_independent():
    _, _, (a, _) = scored()
    _, _, (b, _) = scored()
    _, _, (c, _) = scored(shuffle=True)
    assert_frame_equal(a, b)
    assert_frame_equal(a, c)


def test_score_stage_writes_manifest_skips_and_runs_from_the_cli(ws):
    from curate import io
    from curate.cli import main
    from curate.config import recipe_from_mapping

    problems = problems_frame()
    io.write_parquet(problems, ws.table("toy", "problems"), S.PROBLEMS)
    ledger = ledger_frame(ledger_rows(problems[S.PROBLEM_ID][1], "m", [0.0, 1.0, 1.0, 1.0]))
    io.write_parquet(ledger, ws.ledger_dir("toy", "m") / "part-000.parquet")
    recipe = recipe_from_mapping(
        {"name": "toy", "pool": "toy", "stages": ["score"], "score": {"use_embeddings": False, "min_train": 5}}
    )
    first = score.run_stage(ws, recipe)
    assert not first.skipped and first.summary["evidence"] == "ledger"
    assert first.summary["pass_rate_source"]["blend"] == 1
    manifest = read_manifest(ws.table("toy", "scores"))
    assert manifest["rows_in"] == 40 and manifest["rows_out"] + manifest["drops"]["split_test"] == 40
    assert manifest["extra"]["prior_predictor"]["mae"] is not None
    assert score.run_stage(ws, recipe).skipped
    written = io.read_parquet(ws.table("toy", "scores"), S.SCORES)
    assert written.height == 36
    assert main(["score", "--pool", "toy", "--no-embeddings", "--json", "--force", "--run", "cli"]) == 0
    assert io.read_parquet(ws.table("toy", "scores"))[S.RUN].unique().to_list() == ["cli"]
    assert read_manifest(ws.table("toy", "scores"))["config"]["run"] == "cli"


def test_stats_evidence_without_a_ledger():
    from curate.score.evidence import stats_evidence

    stats = pl.DataFrame(
        {
            S.PROBLEM_ID: ["a", "b", "a"],
            S.MODEL: ["new", "new", "old"],
            S.N_SAMPLES: [8, 8, 4],
            S.N_CORRECT: [8, 3, 1],
            S.MEAN_TOKENS_CORRECT: [50.0, 70.0, 10.0],
            S.UPDATED_AT: [T0, T0, T0 - dt.timedelta(days=1)],
        }
    )
    ev = stats_evidence(stats, None).sort(S.PROBLEM_ID)
    assert ev["_all_equal"].to_list() == [True, False] and ev[S.REWARD_EMA].to_list() == [1.0, 3 / 8]
    assert stats_evidence(stats, "old")[S.N_CORRECT].to_list() == [1]
