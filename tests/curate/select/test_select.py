"""Selection: filters with reasons, cluster quotas, seeded Gumbel-top-k sampling, the stage, LIMR's exact 1,389.

In-memory tables and a temporary workspace; the LIMR test reads the shared data (skipped where it is absent).
No network.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from curate import io
from curate import schema as S
from curate.select import stage as sel
from curate.verify.answers import normalize_answer


def candidates(n: int = 200, clusters: int = 4) -> pl.DataFrame:
    ids = [S.problem_id(f"problem number {i}") for i in range(n)]
    rng = np.random.default_rng(0)
    return pl.DataFrame(
        {
            S.PROBLEM_ID: ids,
            S.PROBLEM: [f"problem number {i}" for i in range(n)],
            S.ANSWER: [str(i) for i in range(n)],
            S.ANSWER_ALTERNATIVES: [[str(i)] for i in range(n)],
            S.SOURCE: ["toy"] * n,
            S.SPLIT: ["test" if i % 50 == 0 else "train" for i in range(n)],
            S.PROMPT_CHARS: [10_000 if i % 50 == 7 else 100 for i in range(n)],
            S.CONTAMINATED: [i % 50 == 1 for i in range(n)],
            S.DUPLICATE_OF: [ids[0] if i % 50 == 2 else (ids[i] if i % 50 == 3 else None) for i in range(n)],
            S.ZERO_VARIANCE: [i % 50 == 4 for i in range(n)],
            S.SOLVED: [i % 50 == 5 for i in range(n)],
            S.CLUSTER: [i % clusters if i < n // 2 else 0 for i in range(n)],
            S.PASS_RATE: rng.uniform(size=n),
            S.DES: rng.uniform(size=n),
        },
        schema_overrides={S.PROMPT_CHARS: pl.Int32, S.CLUSTER: pl.Int32},
    )


# --------------------------------------------------------------------------------------------------- pure parts
def test_cluster_quotas_largest_remainder():
    assert sel.cluster_quotas({0: 5, 1: 3, 2: 2}, 4) == {0: 2, 1: 1, 2: 1}  # exact 2.0, 1.2, 0.8
    assert sel.cluster_quotas({0: 6, 1: 3, 2: 1}, 5) == {0: 3, 1: 2, 2: 0}  # 3.0, 1.5, 0.5 -> tie to larger
    assert sel.cluster_quotas({0: 3, 1: 3}, 10) == {0: 3, 1: 3}
    counts = {c: 7 + 13 * c for c in range(9)}
    for size in (1, 17, 100, 300):
        q = sel.cluster_quotas(counts, size)
        assert sum(q.values()) == size and all(0 <= q[c] <= counts[c] for c in counts)


def test_gumbel_noise_is_seeded_and_order_independent():
    ids = [f"id{i}" for i in range(100)]
    a = sel.gumbel_noise(ids, 0)
    assert np.array_equal(a, sel.gumbel_noise(ids, 0))
    assert np.array_equal(a[::-1], sel.gumbel_noise(ids[::-1], 0))
    assert not np.array_equal(a, sel.gumbel_noise(ids, 1))
    assert np.isfinite(a).all() and abs(a.mean() - 0.5772) < 0.3  # Gumbel mean: Euler's constant


def test_filters_drop_with_reasons_and_counts_reconcile():
    frame = candidates()
    chosen, drops, report = sel.select_frame(frame, sel.SelectConfig(size=50))
    reasons = dict(drops.group_by(S.DROP_REASON).len().iter_rows())
    expected = {"split_test": 4, "contaminated": 4, "duplicate": 4, "zero_variance": 4, "solved": 4, "too_long": 4}
    assert reasons == expected == report["dropped"]
    assert report["selected"] == 50 and chosen.height == 50
    assert report["selected"] + report["not_sampled"] + sum(reasons.values()) == frame.height
    picked = frame.filter(pl.col(S.PROBLEM_ID).is_in(chosen[S.PROBLEM_ID].implode()))
    assert (picked[S.SPLIT] == "train").all() and not picked[S.CONTAMINATED].any()
    assert not picked[S.ZERO_VARIANCE].any() and not picked[S.SOLVED].any()
    assert (picked[S.DUPLICATE_OF].is_null() | (picked[S.DUPLICATE_OF] == picked[S.PROBLEM_ID])).all()
    assert chosen[S.RANK].to_list() == list(range(1, 51))
    off = sel.SelectConfig(size=0, drop_solved=False, drop_zero_variance=False, max_prompt_chars=None)
    assert set(sel.select_frame(frame, off)[2]["dropped"]) == {"split_test", "contaminated", "duplicate"}


def test_quotas_are_proportional_to_eligible_cluster_sizes():
    frame = candidates()
    chosen, drops, _ = sel.select_frame(frame, sel.SelectConfig(size=60, seed=7))
    eligible = frame.filter(~pl.col(S.PROBLEM_ID).is_in(drops[S.PROBLEM_ID].implode()))
    counts = dict(eligible.group_by(S.CLUSTER).len().iter_rows())
    got = dict(chosen.group_by(S.CLUSTER).len().iter_rows())
    assert got == {c: q for c, q in sel.cluster_quotas(counts, 60).items() if q}


def test_selection_is_deterministic_and_independent_of_row_order():
    frame = candidates()
    cfg = sel.SelectConfig(size=40, temperature=0.2, seed=3)
    a = sel.select_frame(frame, cfg)[0]
    b = sel.select_frame(frame, cfg)[0]
    c = sel.select_frame(frame.sample(fraction=1.0, shuffle=True, seed=9), cfg)[0]
    assert_frame_equal(a, b)
    assert_frame_equal(a, c)
    assert not a[S.PROBLEM_ID].equals(sel.select_frame(frame, dataclasses.replace(cfg, seed=4))[0][S.PROBLEM_ID])


def test_temperature_zero_is_top_k_per_cluster_and_low_temperature_prefers_high_scores():
    frame = candidates().with_columns(pl.lit(0, pl.Int32).alias(S.CLUSTER))
    greedy = sel.select_frame(frame, sel.SelectConfig(size=10, temperature=0.0, by="pass_rate"))[0]
    _, drops, _ = sel.select_frame(frame, sel.SelectConfig(size=0))
    eligible = frame.filter(~pl.col(S.PROBLEM_ID).is_in(drops[S.PROBLEM_ID].implode()))
    assert greedy[S.PROBLEM_ID].to_list() == eligible.sort(S.PASS_RATE, descending=True)[S.PROBLEM_ID][:10].to_list()
    low = sel.select_frame(frame, sel.SelectConfig(size=10, temperature=0.0, by="-pass_rate"))[0]
    assert low[S.PASS_RATE].max() < greedy[S.PASS_RATE].min()
    sharp = sel.select_frame(frame, sel.SelectConfig(size=40, temperature=0.05))[0]
    flat = sel.select_frame(frame, sel.SelectConfig(size=40, temperature=100.0))[0]
    assert sharp[S.DES].mean() > flat[S.DES].mean() + 0.1


def test_random_is_a_uniform_seeded_sample_that_needs_no_scores():
    """``by: random`` (the baseline DES is compared with): no score column needed, every eligible row equally
    likely whatever its DES, seeded, and the same at temperature 0 (a uniform sample is never top-k by id)."""
    frame = candidates(n=2000, clusters=1).drop(S.DES, S.PASS_RATE)
    chosen, _, report = sel.select_frame(frame, sel.SelectConfig(size=500, by="random"))
    assert report["selected"] == 500 and chosen[sel.RANDOM].unique().to_list() == [0.0]
    again = sel.select_frame(frame, sel.SelectConfig(size=500, by="random", temperature=0.0))[0]
    assert again[S.PROBLEM_ID].sort().equals(chosen[S.PROBLEM_ID].sort())  # the noise alone orders the rows
    other = sel.select_frame(frame, sel.SelectConfig(size=500, by="random", seed=1))[0]
    assert not other[S.PROBLEM_ID].sort().equals(chosen[S.PROBLEM_ID].sort())
    # uniform over the row index: a quarter of the eligible rows, whichever quarter of the index they sit in
    index = {pid: i for i, pid in enumerate(frame[S.PROBLEM_ID].to_list())}
    quarters = np.bincount([index[p] * 4 // frame.height for p in chosen[S.PROBLEM_ID].to_list()], minlength=4)
    assert quarters.min() > 90, quarters
    scored = candidates(n=2000, clusters=1)
    by_des = sel.select_frame(scored, sel.SelectConfig(size=300, temperature=0.05))[0]
    at_random = sel.select_frame(scored, sel.SelectConfig(size=300, by="random"))[0]
    assert by_des[S.DES].mean() > 0.8 and abs(at_random[S.DES].mean() - 0.5) < 0.06


def test_measured_prompts_are_preferred_and_a_selection_of_unmeasured_ones_says_so(ws):
    """A pool where the evidence model measured only some prompts (``measure.rollout.limit``): those are drawn
    first, whatever the predicted DES of the others, and the summary says how many of the selection were not measured
    (issue 38.12: a measure of 96 prompts gave a selection of 48 prompts that had never been measured)."""
    frame = candidates().with_columns(pl.Series(S.N_SAMPLES, [8 if i < 60 else 0 for i in range(200)]))
    frame = frame.with_columns(pl.when(pl.col(S.N_SAMPLES) > 0).then(pl.col(S.DES) / 10).otherwise(pl.col(S.DES)))
    few, _, report = sel.select_frame(frame, sel.SelectConfig(size=20))  # unmeasured prompts: a 10x higher DES
    assert (few[S.N_SAMPLES] > 0).all() and report["measured"]["selected"] == 20
    assert report["measured"] == {"candidates": 60, "eligible": 48, "selected": 20}  # 12 of the 60 dropped
    many, _, report = sel.select_frame(frame, sel.SelectConfig(size=80))
    assert (many[S.N_SAMPLES] > 0).sum() == 48 and report["measured"]["selected"] == 48
    assert many[S.RANK].to_list() == list(range(1, 81)) and (many.head(48)[S.N_SAMPLES] > 0).all()
    off, _, _ = sel.select_frame(frame, sel.SelectConfig(size=20, prefer_measured=False))
    assert (off[S.N_SAMPLES] == 0).sum() > 10  # what happened before: predicted DES wins
    _, _, report = sel.select_frame(frame, sel.SelectConfig(size=20, by="random"))
    assert "measured" not in report  # a uniform sample prefers nothing

    write_pool(ws, "p", frame)
    scores = frame.drop(S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SOURCE, S.SPLIT).with_columns(run=pl.lit("r"))
    io.write_parquet(scores, ws.table("p", "scores"))

    def warnings(size: int) -> list[str]:
        summary = sel.select_pool(ws, "p", sel.SelectConfig(size=size, plots=False), name=f"p{size}").summary
        return [w for w in summary["warnings"] if "rollouts of their own" in w]

    (warning,) = warnings(80)
    assert warning.startswith("30 of the 80 selected prompts have no rollouts of their own"), warning
    assert "50 of the 60 measured prompts pass the filters" in warning
    assert warnings(20) == []


def test_thresholds_without_size_take_every_passing_row():
    frame = candidates()
    cfg = sel.SelectConfig(by="pass_rate", min_value=0.5)
    assert cfg.effective_size() == 0
    chosen, _, report = sel.select_frame(frame, cfg)
    assert not report["sampled"] and report["not_sampled"] == 0
    assert chosen[S.PASS_RATE].min() >= 0.5 and report["dropped"]["below_min"] > 0
    assert chosen[S.RANK].to_list() == list(range(1, chosen.height + 1))
    assert chosen[S.SELECT_SCORE].is_sorted(descending=True)
    with pytest.raises(ValueError, match="numeric columns"):
        sel.select_frame(frame, sel.SelectConfig(by="nope"))


# --------------------------------------------------------------------------------------------------- stage
def write_pool(ws, pool: str, frame: pl.DataFrame) -> None:
    n = frame.height
    problems = frame.select(S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SOURCE, S.SPLIT).with_columns(
        pl.col(S.ANSWER).alias(S.ANSWER_RAW),
        pl.lit(None, pl.String).alias(S.SOLUTION),
        pl.lit(None, pl.Int32).alias(S.LEVEL),
        pl.lit(None, pl.Float64).alias(S.DIFFICULTY),
        pl.lit(None, pl.String).alias(S.SUBJECT),
        pl.Series(S.SOURCE_ROW, range(n), dtype=pl.Int64),
        pl.concat_list(pl.col(S.SOURCE)).alias(S.SOURCES),
        pl.lit("{}").alias(S.META),
    )
    io.write_parquet(problems, ws.table(pool, "problems"), S.PROBLEMS)


def test_pipeline_scores_then_selects_and_the_cli_matches(ws):
    from curate import pipeline
    from curate.cli import main
    from curate.config import recipe_from_mapping

    frame = candidates(120)
    write_pool(ws, "toy", frame)
    filters = frame.select(
        S.PROBLEM_ID, S.CONTAMINATED, S.DUPLICATE_OF, pl.lit(None, pl.String).alias(S.CONTAMINATED_BY)
    ).with_columns(pl.lit(None, pl.String).alias(S.BENCHMARK))
    io.write_parquet(
        S.validate(
            filters.with_columns(
                pl.lit(None, pl.String).alias(S.CONTAMINATION_KIND),
                pl.lit(None, pl.Float64).alias(S.CONTAMINATION_SCORE),
                pl.lit(None, pl.Int32).alias(S.CLUSTER_SIZE),
            ),
            S.FILTERS,
        ),
        ws.table("toy", "filters"),
    )
    recipe = recipe_from_mapping(
        {
            "name": "toy-sel",
            "pool": "toy",
            "stages": ["score", "select"],
            "score": {"use_embeddings": False, "min_train": 5},
            "select": {"size": 30, "plots": False},
        }
    )
    results = pipeline.run_recipe(recipe, ws)
    summary = results[1].summary
    assert summary["selected"] == 30 and summary["dropped"]["contaminated"] == 3
    out = ws.selection_dir("toy-sel")
    table = io.read_parquet(out / "selection.parquet")
    S.validate(table, S.SELECTIONS)
    assert not table[S.PROBLEM_ID].is_in(frame.filter(pl.col(S.CONTAMINATED))[S.PROBLEM_ID].implode()).any()
    assert pipeline.run_recipe(recipe, ws)[1].skipped
    code = main(["select", "--pool", "toy", "--size", "30", "--name", "cli", "--no-plots", "--json"])
    assert code == 0
    assert_frame_equal(io.read_parquet(ws.selection_dir("cli") / "selection.parquet"), table)
    assert main(["select", "--pool", "nope", "--json"]) == 2


def test_select_without_scores_needs_a_column(ws):
    write_pool(ws, "bare", candidates(20))
    with pytest.raises(FileNotFoundError, match="curate score"):
        sel.select_pool(ws, "bare", sel.SelectConfig(plots=False), name="x")


def test_limr_reproduction_is_exact(ws, shared_data):
    """LIMR's learning-impact scores >= 0.6 on its math.8k pool are exactly its released 1,389 problems."""
    pool_file, scores_file = shared_data / "limr" / "math.8k.json", shared_data / "limr" / "scores.json"
    if not (pool_file.is_file() and scores_file.is_file()):
        pytest.skip("LIMR files absent from shared data")
    raw = json.loads(pool_file.read_text(encoding="utf-8"))
    rows = [
        {
            S.PROBLEM_ID: S.problem_id(r["prompt"]),
            S.PROBLEM: r["prompt"],
            S.ANSWER: normalize_answer(r["answer"]),
            S.ANSWER_ALTERNATIVES: [normalize_answer(r["answer"])],
            S.SOURCE: "limr-math8k",
            S.SPLIT: "train",
        }
        for r in raw
    ]
    frame = pl.DataFrame(rows).unique(S.PROBLEM_ID, keep="first", maintain_order=True)
    write_pool(ws, "limr", frame)
    cfg = sel.SelectConfig(scores_file=str(scores_file), scores_key="prompt", scores_col="score", by="score",
                           min_value=0.6)  # fmt: skip
    result = sel.select_pool(ws, "limr", cfg, name="limr")
    expected = {S.problem_id(r["prompt"]) for r in json.loads(scores_file.read_text()) if r["score"] >= 0.6}
    assert len(expected) == 1389
    out = ws.selection_dir("limr")
    table = pl.read_parquet(out / "selection.parquet")
    assert table.height == 1389 and set(table[S.PROBLEM_ID]) == expected
    assert result.summary["sampled"] is False and result.summary["not_sampled"] == 0
    assert (
        result.summary["rows_in"]
        == frame.height
        == table.height + sum(result.summary["dropped"].values())  # below_min, missing_score, unverifiable_answer
    )
    released = shared_data / "limr" / "limr_train" / "data-00000-of-00001.arrow"
    if released.is_file():
        import pyarrow.ipc

        contexts = pyarrow.ipc.open_stream(released).read_all().column("context").to_pylist()
        assert {S.problem_id(c) for c in contexts} == expected
    from datasets import load_from_disk

    ds = load_from_disk(str(out / "hf"))
    assert len(ds) == 1389 and ds[0][S.PROBLEM_ID] == table[S.PROBLEM_ID][0]
    trl = pl.read_parquet(out / "trl.parquet")
    assert trl.columns == ["prompt", S.ANSWER, S.PROBLEM_ID]
    first = trl["prompt"][0].to_list()
    assert first[0]["role"] == "user" and first[0]["content"].endswith(S.INSTRUCTION_SUFFIX)
    assert "1,389" in (out / "README.md").read_text() and (out / "length.png").is_file()


def fake_embeddings(ws, problems, embed, progress):
    """Stand-in for the encoder: a fixed random vector per problem_id (what matters here is alignment)."""
    rows = [np.random.default_rng(int(pid, 16) % 2**32).normal(size=8) for pid in problems[S.PROBLEM_ID]]
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.slow
def test_clusters_from_embeddings_and_reclustering(ws, monkeypatch):
    from curate import cluster
    from curate.score import stage as score

    monkeypatch.setattr(cluster, "embed_pool", fake_embeddings)
    write_pool(ws, "toy", candidates(120))
    result = score.score_pool(ws, "toy", score.ScoreConfig(clusters=4, min_train=5), progress=False)
    assert result.summary["clusters"] == 4
    scores = io.read_parquet(ws.table("toy", "scores"))
    base = sel.SelectConfig(size=24, plots=False)
    chosen = sel.select_pool(ws, "toy", base, name="k4").summary
    assert chosen["clusters_eligible"] == 4 and chosen["clusters_selected"] == 4
    again = sel.select_pool(ws, "toy", dataclasses.replace(base, clusters=6), name="k6").summary
    assert again["clusters_eligible"] == 6
    flat = sel.select_pool(ws, "toy", dataclasses.replace(base, clusters=0), name="k0").summary
    assert flat["clusters_eligible"] == 1
    table = io.read_parquet(ws.selection_dir("k4") / "selection.parquet")
    joined = table.join(scores.select(S.PROBLEM_ID, pl.col(S.CLUSTER).alias("c")), on=S.PROBLEM_ID)
    assert joined[S.CLUSTER].equals(joined["c"], check_names=False)


def test_sources_keep_one_ingest_source_of_a_pool():
    """``select.sources``: the SFT set from one generator source, the RL set from another, in one pool."""
    import polars as pl

    from curate import schema as S
    from curate.select.stage import SelectConfig, select_frame

    n = 6
    candidates = pl.DataFrame({
        S.PROBLEM_ID: [f"p{i}" for i in range(n)], S.SOURCE: ["sft", "rl"] * (n // 2), S.SPLIT: ["train"] * n,
        S.CONTAMINATED: [False] * n, S.DUPLICATE_OF: [f"p{i}" for i in range(n)], S.PROMPT_CHARS: [10] * n,
        S.ZERO_VARIANCE: [False] * n, S.SOLVED: [False] * n, S.CLUSTER: [0] * n, "des": [0.5] * n,
        "unverifiable_answer": [False] * n,
    })  # fmt: skip
    chosen, drops, _ = select_frame(candidates, SelectConfig(sources=("rl",), size=0))
    assert sorted(chosen[S.PROBLEM_ID]) == ["p1", "p3", "p5"]
    assert drops[S.DROP_REASON].to_list() == ["other_source"] * 3
    everything, _, _ = select_frame(candidates, SelectConfig(size=0))
    assert everything.height == n
