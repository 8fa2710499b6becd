"""Held-out evaluation: mean@k and its SE, the test split, eval.parquet, a real tiny model, `training eval`."""

from __future__ import annotations

import json
import math
import statistics

import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.prompts import user_message
from curate.rollout.backends import Completion
from tests.tiny_model import make_problems, problems_frame, shared_tiny_model
from training.evaluate import EvalConfig, append_eval, evaluate, heldout_problems, read_eval


def _stub(problems: pl.DataFrame, n_right: dict[str, int], seen: list | None = None):
    """A generation function: sample ``i`` of a problem is right when ``i < n_right[problem_id]``."""
    gold = dict(zip(problems[S.PROBLEM_ID], problems[S.ANSWER], strict=True))

    def generate(requests, sampling):
        if seen is not None:
            seen.append((list(requests), sampling))
        return [
            Completion(
                r.problem_id,
                i,
                f"so \\boxed{{{gold[r.problem_id] if i < n_right[r.problem_id] else 'x'}}}",
                12,
                6,
                "stop",
            )
            for r in requests
            for i in r.sample_idxs
        ]

    return generate


def test_pass_at_1_is_the_mean_of_per_problem_means_with_its_standard_error():
    problems = problems_frame(make_problems(5), split="test")
    ids = problems[S.PROBLEM_ID].to_list()
    n_right = dict(zip(ids, [0, 1, 2, 3, 4], strict=True))
    seen: list = []
    cfg = EvalConfig(k=4, temperature=0.7, max_new_tokens=64, seed=3)
    res = evaluate("unused", problems, cfg, generate=_stub(problems, n_right, seen))
    means = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert res["pass_at_1"] == pytest.approx(0.5)
    assert res["stderr"] == pytest.approx(statistics.stdev(means) / math.sqrt(5))
    assert (res["n_problems"], res["k"], res["n_samples"]) == (5, 4, 20)
    assert "weak evidence" in res["warning"] and "20 samples" in res["warning"]
    table = res["per_problem"]
    assert dict(zip(table[S.PROBLEM_ID], table["n_correct"], strict=True)) == n_right
    assert table["n_samples"].to_list() == [4] * 5
    assert res["verdicts"] == {"correct": 10, "wrong": 10}
    # the requests: every problem once, k sample indices, the shared user turn, distinct seeds; the sampling is cfg's
    ((requests, sampling),) = seen
    assert [r.problem_id for r in requests] == ids
    assert all(r.sample_idxs == (0, 1, 2, 3) for r in requests)
    assert [r.message for r in requests] == [user_message(p) for p in problems[S.PROBLEM]]
    assert len({r.seed for r in requests}) == 5
    assert (sampling.temperature, sampling.max_tokens, sampling.seed) == (0.7, 64, 3)


def test_a_model_that_is_always_right_scores_one_and_enough_samples_drop_the_warning():
    problems = problems_frame(make_problems(50), split="test")
    everything = {pid: 4 for pid in problems[S.PROBLEM_ID]}
    res = evaluate("unused", problems, EvalConfig(k=4), generate=_stub(problems, everything))
    assert (res["pass_at_1"], res["stderr"], res["n_samples"]) == (1.0, 0.0, 200)
    assert res["warning"] is None
    limited = evaluate("unused", problems, EvalConfig(k=2, limit=7), generate=_stub(problems, everything))
    assert limited["n_problems"] == 7
    assert limited["per_problem"][S.PROBLEM_ID].to_list() == sorted(problems[S.PROBLEM_ID])[:7]


def test_unreadable_gold_is_left_out_and_missing_completions_fail():
    problems = problems_frame(make_problems(4), split="test").with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("")).otherwise(pl.col(S.ANSWER)).alias(S.ANSWER),
        pl.lit(None, pl.List(pl.String)).alias(S.ANSWER_ALTERNATIVES),
    )
    all_right = {pid: 2 for pid in problems[S.PROBLEM_ID]}
    res = evaluate("unused", problems, EvalConfig(k=2), generate=_stub(problems, all_right))
    assert (res["n_problems"], res["skipped_unreadable_gold"], res["pass_at_1"]) == (3, 1, 1.0)

    def short(requests, sampling):
        return _stub(problems, all_right)(requests, sampling)[:-1]

    with pytest.raises(RuntimeError, match="1 missing"):
        evaluate("unused", problems, EvalConfig(k=2), generate=short)


def test_heldout_problems_are_the_pools_test_split(ws):
    train = problems_frame(make_problems(6, seed=1), split="train")
    test = problems_frame(make_problems(4, seed=2), split="test")
    io.write_parquet(pl.concat([train, test]), ws.table("p", "problems"), S.PROBLEMS)
    got = heldout_problems(ws, "p")
    assert got[S.PROBLEM_ID].to_list() == sorted(test[S.PROBLEM_ID])
    assert set(got[S.PROBLEM_ID]).isdisjoint(train[S.PROBLEM_ID])
    assert heldout_problems(str(ws.root), "p", limit=2)[S.PROBLEM_ID].to_list() == sorted(test[S.PROBLEM_ID])[:2]
    assert heldout_problems(ws, "p", split="train").height == 6
    with pytest.raises(ValueError, match="no 'dev' problems"):
        heldout_problems(ws, "p", split="dev")
    with pytest.raises(FileNotFoundError, match="pool 'nope' not found"):
        heldout_problems(ws, "nope")


def test_append_eval_adds_and_replaces_rows_atomically(tmp_path):
    run = tmp_path / "run"
    assert read_eval(run).is_empty()
    result = {"pass_at_1": 0.25, "stderr": 0.05, "n_problems": 100, "k": 4}
    append_eval(run, 200, 6.0, result)
    append_eval(run, 100, 3.0, result)
    append_eval(run, 200, 6.5, {**result, "pass_at_1": 0.3})  # re-evaluated step 200 replaces its row
    df = read_eval(run)
    assert df.rows() == [(100, 3.0, 0.25, 0.05, 100, 4), (200, 6.5, 0.3, 0.05, 100, 4)]
    assert df.schema["step"] == pl.Int64 and df.schema["compute"] == pl.Float64
    assert sorted(p.name for p in run.iterdir()) == ["eval.parquet"]  # no temp files left


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return shared_tiny_model(tmp_path_factory)  # 24 problems, the first 8 taught


def test_tiny_model_eval_is_a_reproducible_rate_with_se(tiny):
    path, problems = tiny
    df = problems_frame(problems[:16], split="test")
    taught = {S.problem_id(q) for q, _ in problems[:8]}
    cfg = EvalConfig(k=4, max_new_tokens=24, batch_size=64, device="cpu", threads=1, seed=0)
    res = evaluate(path, df, cfg)
    assert 0.0 <= res["pass_at_1"] <= 1.0 and 0.0 < res["stderr"] < 0.5
    assert (res["n_problems"], res["k"], res["n_samples"]) == (16, 4, 64)
    assert sum(res["verdicts"].values()) == 64 and res["warning"] is not None
    table = res["per_problem"]
    on_taught = table.filter(pl.col(S.PROBLEM_ID).is_in(list(taught)))["mean"].mean()
    on_rest = table.filter(~pl.col(S.PROBLEM_ID).is_in(list(taught)))["mean"].mean()
    assert on_taught > on_rest  # it learned the taught answers, not arithmetic
    again = evaluate(path, df, cfg)
    assert again["per_problem"].equals(table) and again["pass_at_1"] == res["pass_at_1"]


def test_cli_eval_prints_pass_at_1_on_the_test_split(tiny, ws, capsys):
    from training.cli import main

    path, problems = tiny
    frame = pl.concat([problems_frame(problems[:8], "test"), problems_frame(problems[8:], "train")])
    io.write_parquet(frame, ws.table("p", "problems"), S.PROBLEMS)
    args = ["eval", str(path), "--home", str(ws.root), "--pool", "p", "--k", "2", "--limit", "4"]
    args += ["--max-new-tokens", "24", "--device", "cpu"]
    assert main([*args, "--json", "--out", str(ws.root / "per_problem.parquet")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_problems"], out["k"], out["n_samples"]) == (4, 2, 8)
    assert 0.0 <= out["pass_at_1"] <= 1.0
    assert pl.read_parquet(ws.root / "per_problem.parquet").height == 4
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "pass@1 = " in captured.out and "4 test problems x 2 samples" in captured.out
    assert "weak evidence" in captured.err
    assert main(["eval", str(path), "--home", str(ws.root), "--pool", "missing"]) == 2
    assert main(["eval", str(ws.root), "--home", str(ws.root), "--pool", "p"]) == 2


def test_paired_gain_uses_per_problem_differences_on_common_scored_problems():
    from training.evaluate import paired_gain

    before = pl.DataFrame({"problem_id": ["a", "b", "c", "d", "x"], "mean": [0.0, 0.5, 1.0, 0.25, 0.0],
                           "scored": [True, True, True, True, True]})  # fmt: skip
    after = pl.DataFrame({"problem_id": ["a", "b", "c", "d", "y"], "mean": [0.25, 0.75, 1.0, 0.25, 1.0],
                          "scored": [True, True, True, False, True]})  # fmt: skip
    g = paired_gain(after, before)  # common scored problems: a, b, c; differences 0.25, 0.25, 0
    assert g["n_problems"] == 3
    assert g["gain"] == pytest.approx(1 / 6)
    sd = math.sqrt(((0.25 - 1 / 6) ** 2 * 2 + (1 / 6) ** 2) / 2)
    assert g["stderr"] == pytest.approx(sd / math.sqrt(3))
    assert g["z"] == pytest.approx((1 / 6) / (sd / math.sqrt(3)))
    assert (g["after_rate"], g["before_rate"]) == (pytest.approx(2 / 3), pytest.approx(0.5))
    # the paired SE is below the unpaired one when problems differ in difficulty
    assert g["stderr"] < math.sqrt(0.25 / 3)
    with pytest.raises(ValueError, match=">= 2 problems"):
        paired_gain(after.head(1), before.head(1))


def test_paired_gain_per_group_of_problems():
    """``eval.by``: the paired gain per chain length (``meta.ops``) or any problems column."""
    import json

    import polars as pl

    from training.evaluate import groups, paired_gain_by

    problems = pl.DataFrame({"problem_id": ["a", "b", "c", "d"], "level": [1, 1, 2, 2],
                             "meta": [json.dumps({"ops": n}) for n in (2, 2, 4, 4)]})  # fmt: skip
    by_ops = groups(problems, "meta.ops")
    assert by_ops["group"].to_list() == ["2", "2", "4", "4"] and groups(problems, "level")["group"][2] == "2"
    before = pl.DataFrame({"problem_id": list("abcd"), "mean": [0.5, 0.25, 0.0, 0.25], "scored": [True] * 4})
    after = before.with_columns(pl.col("mean") + pl.Series([0.5, 0.5, 0.25, 0.25]))
    gains = paired_gain_by(after, before, by_ops)
    assert gains["2"]["gain"] == pytest.approx(0.5) and gains["4"]["gain"] == pytest.approx(0.25)
    assert gains["2"]["n_problems"] == 2
    with pytest.raises(ValueError, match=r"meta\.nope"):
        groups(problems, "meta.nope")
