"""What a new user hit in scoring (issue 11, items 5-6), each through the code path the user takes.

- 5: without rollouts or labels DES reduces to prompt length: the score summary, the selection card's Warnings and
  the pass-rate / DES figures say so; a pool's subjects feed the learned prior.
- 6: a tiny rollout no longer relabels the pool: the prior needs evidence, reports its error, falls back with a
  warning when it cannot beat the mean.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from curate import schema as S
from curate.score import stage as score_stage
from tests.curate.user_pools import ingest, plain_problems, score_and_select, write_jsonl


# --------------------------------------------------------------------------------------------------- item 5
def test_des_without_rollouts_or_labels_says_it_ranks_by_prompt_length(ws, tmp_path):
    from PIL import Image

    ingest(ws, "plain", write_jsonl(tmp_path / "mine" / "plain.jsonl", plain_problems(60)))
    scored, selected = score_and_select(ws, "plain", "plain", size=20, plots=True)
    assert scored["constant_terms"] == ["difficulty", "reward"]
    [warning] = [w for w in scored["warnings"] if w.startswith("DES terms")]
    assert "ranks by CoT length alone" in warning and "prompt length" in warning
    assert warning in selected["warnings"]  # the selection carries it to its card
    out = ws.selection_dir("plain")
    card = (out / "README.md").read_text(encoding="utf-8")
    warnings_section = card.split("## Warnings", 1)[1].split("##", 1)[0]
    assert "DES terms difficulty, reward are constant" in warnings_section and "- none" not in warnings_section
    assert "pass rate 0.50" in Image.open(out / "pass_rate.png").text["Description"]
    assert "prompt length" in Image.open(out / "des.png").text["Description"]


def test_labelled_pool_has_no_constant_term_warning(ws, tmp_path):
    rows = [{**r, "level": 1 + i % 5} for i, r in enumerate(plain_problems(40))]
    ingest(ws, "levels", write_jsonl(tmp_path / "mine" / "levels.jsonl", rows))
    scored, _ = score_and_select(ws, "levels", "levels", plots=False)
    assert scored["constant_terms"] == [] and not any(w.startswith("DES terms") for w in scored["warnings"])


def test_subjects_are_a_difficulty_signal_for_the_learned_prior():
    """Same-looking problems, two subjects: rollouts say one is easy, the other hard; problems without rollouts
    get their subject's difficulty (before, the prior saw only text features and predicted one value)."""
    rows = []
    for i in range(120):
        subject = "Easy" if i % 2 == 0 else "Hard"
        text = f"Question {i:04d}: find the value of the expression in {subject.lower()} form."
        rows.append({S.PROBLEM_ID: S.problem_id(text), S.PROBLEM: text, S.SUBJECT: subject})
    problems = pl.DataFrame(rows).with_columns(
        pl.lit("train").alias(S.SPLIT), pl.lit(None, pl.String).alias(S.SOLUTION),
        pl.lit(None, pl.Int32).alias(S.LEVEL), pl.lit(None, pl.Float64).alias(S.DIFFICULTY),
    )  # fmt: skip
    observed = problems.head(80)  # rollouts on 80 problems: easy ones 7/8 right, hard ones 1/8
    evidence = pl.DataFrame(
        {
            S.PROBLEM_ID: observed[S.PROBLEM_ID],
            S.N_SAMPLES: [8] * 80,
            S.N_CORRECT: [7 if s == "Easy" else 1 for s in observed[S.SUBJECT]],
        }
    )
    scores, report = score_stage.score_frame(
        problems, score_stage.ScoreConfig(use_embeddings=False), evidence=evidence
    )
    unseen = scores.join(problems.tail(40).select(S.PROBLEM_ID, S.SUBJECT), on=S.PROBLEM_ID)
    prior = dict(unseen.group_by(S.SUBJECT).agg(pl.col(S.PRIOR_PASS_RATE).mean()).iter_rows())
    assert prior["Easy"] > prior["Hard"] + 0.3
    assert report["prior_predictor"]["mae"] < report["prior_predictor"]["baseline_mae"]


# --------------------------------------------------------------------------------------------------- item 6
def _evidence(ids: list[str], n: int, correct: list[int]) -> pl.DataFrame:
    return pl.DataFrame({S.PROBLEM_ID: ids, S.N_SAMPLES: [n] * len(ids), S.N_CORRECT: correct})


def _unlabelled(n: int, same_length: bool = False) -> pl.DataFrame:
    texts = [
        f"Problem {i:04d}: what is the value of x?" if same_length else plain_problems(1, i)[0]["problem"]
        for i in range(n)
    ]
    return pl.DataFrame({S.PROBLEM_ID: [S.problem_id(t) for t in texts], S.PROBLEM: texts}).with_columns(
        pl.lit("train").alias(S.SPLIT), pl.lit(None, pl.String).alias(S.SOLUTION),
        pl.lit(None, pl.Int32).alias(S.LEVEL), pl.lit(None, pl.Float64).alias(S.DIFFICULTY),
        pl.lit(None, pl.String).alias(S.SUBJECT),
    )  # fmt: skip


def test_a_tiny_all_failed_rollout_does_not_relabel_the_pool():
    problems = _unlabelled(300)
    tried = problems[S.PROBLEM_ID].head(12).to_list()
    scores, report = score_stage.score_frame(
        problems, score_stage.ScoreConfig(use_embeddings=False), evidence=_evidence(tried, 8, [0] * 12)
    )
    untried = scores.filter(~pl.col(S.PROBLEM_ID).is_in(tried))
    assert (untried[S.PRIOR_PASS_RATE] == 0.5).all()  # the default prior, not the 12 failures' mean of 0
    assert (untried[S.COSCALE_POOL] == "unsolvable").sum() == 0
    assert report["prior_predictor"]["kind"] == "default"
    [warning] = [w for w in report["warnings"] if "prior" in w]
    assert "12 problems" in warning and "need 30" in warning and "all wrong" in warning
    # the 12 problems' own rollouts still count: 0/8 pulls each posterior down from the prior
    assert scores.filter(pl.col(S.PROBLEM_ID).is_in(tried))[S.PASS_RATE].max() < 0.5


def test_a_prior_that_cannot_beat_the_mean_falls_back_to_it_with_a_warning():
    problems = _unlabelled(200, same_length=True)  # features carry nothing: the learner can only match the mean
    tried = problems[S.PROBLEM_ID].head(100).to_list()
    correct = [(7 * i) % 9 for i in range(100)]  # both outcomes, unrelated to the text
    scores, report = score_stage.score_frame(
        problems, score_stage.ScoreConfig(use_embeddings=False), evidence=_evidence(tried, 8, correct)
    )
    prior = report["prior_predictor"]
    assert prior["mae"] is not None and prior["mae"] >= prior["baseline_mae"]
    assert prior["kind"].startswith("mean")
    untried = scores.filter(~pl.col(S.PROBLEM_ID).is_in(tried))
    assert untried[S.PRIOR_PASS_RATE].n_unique() == 1
    assert untried[S.PRIOR_PASS_RATE][0] == pytest.approx(np.mean([c / 8 for c in correct]))
    assert any("does not beat predicting the mean" in w for w in report["warnings"])
    summary = score_stage.summarize(scores, report, filters_present=False)
    assert summary["prior_mae"] == prior["mae"] and summary["warnings"] == report["warnings"]
