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


def test_a_band_added_to_the_test_split_as_a_new_source_leaves_a_limit_over_the_old_one_unchanged(ws):
    """Issue 42: the built-in pool's frontier band joins the held-out splits as new sources (tiny/test-frontier);
    a recipe whose eval names the old source (``eval.sources``) scores exactly the problems it scored before."""
    old = problems_frame(make_problems(6, seed=2), split="test").with_columns(pl.lit("old").alias(S.SOURCE))
    band = problems_frame(make_problems(6, seed=3), split="test").with_columns(pl.lit("band").alias(S.SOURCE))
    io.write_parquet(old, ws.table("p", "problems"), S.PROBLEMS)
    before = heldout_problems(ws, "p", limit=4)[S.PROBLEM_ID].to_list()
    io.write_parquet(pl.concat([old, band]), ws.table("p", "problems"), S.PROBLEMS)
    assert heldout_problems(ws, "p", limit=4)[S.PROBLEM_ID].to_list() != before  # the band takes some places
    assert heldout_problems(ws, "p", limit=4, sources=["old", "other"])[S.PROBLEM_ID].to_list() == before
    assert heldout_problems(ws, "p", sources=["band"])[S.PROBLEM_ID].to_list() == sorted(band[S.PROBLEM_ID])
    with pytest.raises(ValueError, match=r"no 'test' problems from sources \['gone'\].*'band', 'old'"):
        heldout_problems(ws, "p", sources=["gone"])


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
                             "meta": [json.dumps({"ops": n}) for n in (2, 2, 10, 10)]})  # fmt: skip
    by_ops = groups(problems, "meta.ops")
    assert by_ops["group"].to_list() == ["2", "2", "10", "10"] and groups(problems, "level")["group"][2] == "2"
    before = pl.DataFrame({"problem_id": list("abcd"), "mean": [0.5, 0.25, 0.0, 0.25], "scored": [True] * 4})
    after = before.with_columns(pl.col("mean") + pl.Series([0.5, 0.5, 0.25, 0.25]))
    gains = paired_gain_by(after, before, by_ops)
    assert gains["2"]["gain"] == pytest.approx(0.5) and gains["10"]["gain"] == pytest.approx(0.25)
    assert list(gains) == ["2", "10"]  # chain lengths in numeric order, as the chain prints them
    assert gains["2"]["n_problems"] == 2
    with pytest.raises(ValueError, match=r"meta\.nope"):
        groups(problems, "meta.nope")


def test_headroom_bands_and_eval_groups_are_one_grouping_by_a_field_with_their_own_column_and_bins():
    """``eval.by``'s groups (``training.evaluate.groups``) and the headroom report's bands
    (``curate.score.headroom.band_values``) are one grouping by a field: the same text values in the problems' order,
    as a String column named ``group`` or ``band``; only the bands bin a score in [0, 1] and have a band for no
    field. Pinned frame for frame (names, dtypes, order) so neither caller's output moves."""
    from polars.testing import assert_frame_equal

    from curate.score.headroom import band_values
    from training.evaluate import groups

    meta = [json.dumps({"ops": 10}), None, json.dumps({"ops": 2}), json.dumps({})]
    problems = pl.DataFrame({"problem_id": ["a", "b", "c", "d"], "level": [3, 1, 2, None], "meta": meta,
                             "des": [0.05, 0.35, 1.0, 0.999], "subject": ["x", "y", "x", "y"]})  # fmt: skip
    ids = pl.Series("problem_id", ["a", "b", "c", "d"])
    for by, text in {"meta.ops": ["10", "None", "2", "None"], "level": ["3", "1", "2", "None"],
                     "subject": ["x", "y", "x", "y"]}.items():  # fmt: skip
        assert_frame_equal(groups(problems, by), pl.DataFrame([ids, pl.Series("group", text, pl.String)]))
        assert_frame_equal(band_values(problems, by), pl.DataFrame([ids, pl.Series("band", text, pl.String)]))
    assert groups(problems, "des")["group"].to_list() == ["0.05", "0.35", "1.0", "0.999"]  # eval.by: the values
    bins = ["0.0-0.1", "0.3-0.4", "0.9-1.0", "0.9-1.0"]  # headroom: a score's bins of 0.1
    assert_frame_equal(band_values(problems, "des"), pl.DataFrame([ids, pl.Series("band", bins, pl.String)]))
    assert_frame_equal(band_values(problems, None), pl.DataFrame([ids, pl.Series("band", ["all"] * 4)]))
    for by in ("meta.depth", "nope"):
        with pytest.raises(ValueError, match=f"^eval.by '{by}': "):
            groups(problems, by)
        with pytest.raises(ValueError, match=f"^'{by}': "):
            band_values(problems, by)
    with pytest.raises(ValueError, match="no meta column"):
        groups(problems.drop("meta"), "meta.ops")


# --------------------------------------------------------------------------------------------------- backends
def _openai_server(problems: pl.DataFrame, seen: list):
    """A local OpenAI-compatible chat server (stdlib): every sample of a problem boxes its gold answer, except the
    odd samples, which box 0. ``seen``: the status file read at each request (``curate.progress.read_status``)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    gold = {user_message(p): a for p, a in zip(problems[S.PROBLEM], problems[S.ANSWER], strict=True)}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            answer = gold[body["messages"][0]["content"]]
            choices = [{"index": i, "message": {"content": f"so \\boxed{{{answer if i % 2 == 0 else 0}}}"},
                        "finish_reason": "stop"} for i in range(body["n"])]  # fmt: skip
            data = json.dumps({"choices": choices, "usage": {"prompt_tokens": 9, "completion_tokens": 4}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_openai_backend_scores_a_served_model_with_a_progress_line_and_status(tmp_path, monkeypatch, capsys):
    """``eval.backend: openai`` (issue 30.11): the same backends as ``curate rollout``; the held-out evaluation
    prints its progress (done/total, rate) and keeps the run's status file current (issue 30.8), which
    ``training show`` reads while the run is live."""
    from curate import progress
    from curate.rollout.backends import OpenAIOptions

    monkeypatch.setattr(progress, "STATUS_EVERY_S", 0.0)  # every batch rewrites the status file
    problems = problems_frame(make_problems(6), split="test")
    seen: list = []
    status = tmp_path / "running.json"
    server = _openai_server(problems, seen)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        cfg = EvalConfig(k=2, backend="openai", served_model="tiny-served",
                         openai=OpenAIOptions(base_url=url, concurrency=1, max_retries=0))  # fmt: skip
        with progress.status_file(status, step="eval sft"):
            res = evaluate(tmp_path / "sft" / "final", problems, cfg, progress=True)
            after = progress.read_status(status)
    finally:
        server.shutdown()
    assert res["pass_at_1"] == pytest.approx(0.5) and res["n_samples"] == 12
    assert {body["model"] for body in seen} == {"tiny-served"} and len(seen) == 6
    assert after["step"] == "eval sft" and "bar" not in after  # the bar is done; the step still runs
    assert not status.exists()  # the block is over
    err = capsys.readouterr().err
    assert "eval sft: 12 samples in" in err  # the progress line's last word (non-TTY: plain lines)


def test_the_status_file_tracks_an_evaluation_while_it_runs(tmp_path, monkeypatch):
    """Without a stub, ``evaluate`` generates through ``backend_generate``; each finished batch moves the status
    file's bar (here the backend is replaced by one that reads the status file after every problem)."""
    from curate import progress

    monkeypatch.setattr(progress, "STATUS_EVERY_S", 0.0)
    problems = problems_frame(make_problems(4), split="test")
    status, during = tmp_path / "running.json", []
    stub = _stub(problems, {pid: 1 for pid in problems[S.PROBLEM_ID]})

    def fake_backend(model_dir, cfg, on_done):
        def generate(requests, sampling):
            out = []
            for r in requests:  # one problem at a time, as a batch would finish
                out += stub([r], sampling)
                on_done(len(r.sample_idxs), 10)
                during.append(progress.read_status(status)["bar"])
            return out

        return generate

    monkeypatch.setattr("training.evaluate.backend_generate", fake_backend)
    with progress.status_file(status, step="eval rl:stage1"):
        evaluate("m", problems, EvalConfig(k=3), progress=True)
    assert [b["done"] for b in during] == [3, 6, 9, 12] and {b["total"] for b in during} == {12}
    assert during[0]["unit"] == "samples" and "left" in progress.status_line(during[1])


def test_vllm_backend_without_vllm_is_one_line_and_an_unknown_backend_fails_at_load():
    import importlib.util

    from curate.errors import ConfigError
    from training.evaluate import backend_generate
    from training.recipe import recipe_from_mapping

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match=r"vLLM is not installed \(pip install -e '\.\[gpu\]'"):
            backend_generate("m", EvalConfig(backend="vllm"))
    base = {"name": "r", "pool": "p", "train": "x.parquet"}
    recipe = recipe_from_mapping({**base, "eval": {"backend": "vllm", "vllm": {"max_model_len": 17408},
                                                   "every_limit": 200}})  # fmt: skip
    assert recipe.eval.config().vllm.max_model_len == 17408 and recipe.eval.every_limit == 200
    with pytest.raises(ConfigError, match=r"eval\.backend must be one of"):
        recipe_from_mapping({**base, "eval": {"backend": "sglang"}})
    with pytest.raises(ConfigError, match="max_model_length"):
        recipe_from_mapping({**base, "eval": {"vllm": {"max_model_length": 1}}})
