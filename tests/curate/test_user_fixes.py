"""What a new user hit (issue 11, items 5-8, 10, 12-14), each through the code path the user takes.

- 5: without rollouts or labels DES reduces to prompt length: the score summary, the selection card's Warnings and
  the pass-rate / DES figures say so; a pool's subjects feed the learned prior.
- 6: a tiny rollout no longer relabels the pool: the prior needs evidence, reports its error, falls back with a
  warning when it cannot beat the mean.
- 7: gold answers the checker cannot verify are flagged at ingest, kept in the pool, left out of RL selections and
  counted in the card; the checker reads values with units and "no solution".
- 8: FastCuRL steps scale with the data unless fixed; a stage that repeats its data many times is warned about.
- 10: UTF-8 byte-order marks, unclosed ``\\boxed{`` golds, compressed inputs, ``curate ingest --json``'s wall time.
- 12: trl.parquet, verl.parquet and hf/ concatenate with an ordinary ``datasets.Dataset.from_dict``.
- 13: the card carries licence and upstream per source and links only what the user can open.
- 14: the checker's worker pool warns when the main script has no ``__main__`` guard.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from curate import schema as S
from curate import verify
from curate.config import IngestConfig, SourceSpec
from curate.ingest import stage as ingest_stage
from curate.score import stage as score_stage
from curate.select import stage as select_stage


REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------------- helpers
def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def plain_problems(n: int, start: int = 0) -> list[dict]:
    """Problems with an answer only: no level, difficulty, subject or solution (a pool "never tuned on")."""
    return [
        {"problem": f"Compute {i} + {i * 3}." + " Then check your work carefully." * (i % 7), "answer": str(4 * i)}
        for i in range(start, start + n)
    ]


def ingest(ws, pool: str, *paths: Path, **kw) -> dict:
    cfg = IngestConfig(sources=tuple(SourceSpec(path=str(p), **kw) for p in paths))
    return ingest_stage.ingest(ws, pool, cfg).summary


def score_and_select(ws, pool: str, name: str, **select) -> tuple[dict, dict]:
    scored = score_stage.score_pool(ws, pool, score_stage.ScoreConfig(use_embeddings=False), progress=False)
    cfg = select_stage.SelectConfig(**{"size": 0, **select})
    selected = select_stage.select_pool(ws, pool, cfg, name=name, progress=False)
    return scored.summary, selected.summary


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
        problems, score_stage.ScoreConfig(use_embeddings=False), 0, evidence=evidence
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
        problems, score_stage.ScoreConfig(use_embeddings=False), 0, evidence=_evidence(tried, 8, [0] * 12)
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
        problems, score_stage.ScoreConfig(use_embeddings=False), 0, evidence=_evidence(tried, 8, correct)
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


# --------------------------------------------------------------------------------------------------- item 7
def test_checker_reads_units_and_no_solution_where_it_is_safe():
    assert verify.check(r"so \boxed{12}", "12 km/h").correct
    assert verify.check(r"\boxed{12 \text{ km/h}}", "12").correct
    assert not verify.check(r"\boxed{15}", "12 km/h").correct
    assert not verify.check(r"\boxed{12 \text{ m/s}}", "12 km/h").correct  # another unit is not the same answer
    assert verify.check(r"\boxed{\emptyset}", "no real solution").correct
    assert verify.check(r"\boxed{\text{No solutions}}", r"\text{no real solution}").correct
    assert verify.check(r"\boxed{3}", "no real solution").verdict == "wrong"
    assert verify.check(r"\boxed{\text{none}}", "5").verdict == "wrong"
    assert verify.check(r"\boxed{2, 3, 4}", r"2, 3, \text{ and } 4").correct  # a serial-comma enumeration


def test_unverifiable_golds_are_flagged_kept_and_left_out_of_rl_selections(ws, tmp_path):
    rows = [
        *plain_problems(10),
        {"problem": "Two trains meet. Find both speeds.", "answer": "12 km/h and 15 km/h"},
        {"problem": "Describe the monotonicity of f.", "answer": r"\text{The function is increasing}"},
        {"problem": "Solve x^2 + 1 = 0 over the reals.", "answer": "no real solution"},
        {"problem": "How fast does the car go?", "answer": "60 km/h"},
    ]
    summary = ingest(ws, "flags", write_jsonl(tmp_path / "mine" / "flags.jsonl", rows))
    assert summary["admitted"] == 14  # kept in the pool
    assert summary["flags"]["unverifiable_answer"] == 2
    problems = pl.read_parquet(ws.table("flags", "problems"))
    flagged = problems.filter(pl.col(S.META).str.contains("unverifiable_answer"))
    assert sorted(flagged[S.ANSWER].to_list()) == sorted(["12 km/h and 15 km/h", r"\text{The function is increasing}"])

    _, selected = score_and_select(ws, "flags", "flags-sel", plots=False)
    assert selected["dropped"]["unverifiable_answer"] == 2 and selected["selected"] == 12
    chosen = pl.read_parquet(ws.selection_dir("flags-sel") / "selection.parquet")
    assert not set(chosen[S.ANSWER]) & set(flagged[S.ANSWER])
    card = (ws.selection_dir("flags-sel") / "README.md").read_text(encoding="utf-8")
    assert "| unverifiable_answer | 2 |" in card
    _, kept = score_and_select(ws, "flags", "flags-all", plots=False, drop_unverifiable=False)
    assert kept["selected"] == 14


# --------------------------------------------------------------------------------------------------- item 8
def _lengths(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {S.PROBLEM_ID: [f"{i:016x}" for i in range(n)], "prompt_length": [100 + (i * 37) % 400 for i in range(n)]}
    )


def test_fastcurl_steps_scale_with_the_data_unless_the_recipe_fixes_them():
    from curate.curriculum import rules
    from curate.curriculum.stage import CurriculumConfig, fastcurl_plan

    df = _lengths(1500)
    scaled, facts = fastcurl_plan(df, CurriculumConfig())
    for (entry, frame), spec in zip(scaled, rules.fastcurl_stages("preview"), strict=True):
        assert entry["paper_steps"] == spec.steps
        assert entry["epochs"] == pytest.approx(rules.paper_epochs(spec), abs=spec.prompt_batch / frame.height)
        assert entry["stop_rule"]["max_steps"] == entry["steps"] < spec.steps
    assert facts["warnings"] == [] and facts["steps"] == "scaled"

    paper, paper_facts = fastcurl_plan(df, CurriculumConfig(fastcurl_steps="paper"))
    assert [e["steps"] for e, _ in paper] == [160, 590, 230, 580]
    stage1 = paper[0][0]
    assert stage1["epochs"] > 20  # 160 steps of 128 prompts over ~800 short prompts
    assert any(w.startswith("stage1 goes over its") for w in paper_facts["warnings"])

    fixed, _ = fastcurl_plan(df, CurriculumConfig(fastcurl_steps=(5, 6, 7, 8)))
    assert [e["steps"] for e, _ in fixed] == [5, 6, 7, 8]
    from curate.config import ConfigError

    with pytest.raises(ConfigError, match="4 step counts"):
        CurriculumConfig(fastcurl_steps=(5, 6))


def test_bands_plan_warns_when_a_small_group_is_repeated_many_times():
    from curate.curriculum.stage import CurriculumConfig, bands_plan, with_bands

    df = pl.DataFrame({S.PROBLEM_ID: [f"{i:016x}" for i in range(30)], S.PASS_RATE: [0.1] * 10 + [0.6] * 20})
    cfg = CurriculumConfig(plan="bands")
    _, facts = bands_plan(with_bands(df, cfg), cfg)
    assert any("goes over its 10 prompts" in w for w in facts["warnings"])


# --------------------------------------------------------------------------------------------------- item 10
def test_byte_order_marks_are_stripped_in_csv_jsonl_and_json(ws, tmp_path):
    bom = b"\xef\xbb\xbf"
    d = tmp_path / "bom"
    d.mkdir()
    (d / "a.csv").write_bytes(bom + b"problem,answer\nWhat is 1+1?,2\nWhat is 2+2?,4\n")
    (d / "b.jsonl").write_bytes(
        bom + b'{"problem": "What is 3+3?", "answer": "6"}\n{"problem": "What is 4+4?", "answer": "8"}\n'
    )
    (d / "c.json").write_bytes(bom + b'[{"problem": "What is 5+5?", "answer": "10"}]')
    summary = ingest(ws, "bom", d / "a.csv", d / "b.jsonl", d / "c.json")
    assert (summary["read"], summary["admitted"], summary["quarantined"]) == (5, 5, 0)
    problems = pl.read_parquet(ws.table("bom", "problems"))
    assert sorted(problems[S.ANSWER].to_list(), key=int) == ["2", "4", "6", "8", "10"]


def test_unclosed_boxed_gold_answers_are_quarantined_as_unparseable(ws, tmp_path):
    rows = [
        *plain_problems(3),
        {"problem": "Unclosed one.", "answer": r"\boxed{6"},
        {"problem": "Empty box.", "answer": r"\boxed{"},
        {"problem": "A lone brace.", "answer": "}"},
    ]
    summary = ingest(ws, "boxes", write_jsonl(tmp_path / "mine" / "boxes.jsonl", rows))
    assert summary["admitted"] == 3 and summary["drops"] == {"unparseable_answer": 3}
    q = pl.read_parquet(ws.table("boxes", "quarantine"))
    assert set(q[S.ANSWER_RAW]) == {r"\boxed{6", r"\boxed{", "}"}
    assert set(q[S.DETAIL].str.split(":").list.first()) == {"unclosed \\boxed{", "unbalanced braces"}


def test_compressed_inputs_are_read(ws, tmp_path):
    import pyarrow as pa

    d = tmp_path / "packed"
    d.mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in plain_problems(4)).encode()
    (d / "train.jsonl.gz").write_bytes(gzip.compress(lines))
    (d / "more.csv.bz2").write_bytes(bz2.compress(b"problem,answer\nWhat is 9+9?,18\n"))
    (d / "arr.json.xz").write_bytes(lzma.compress(json.dumps(plain_problems(2, 10)).encode()))
    with pa.output_stream(str(d / "z.jsonl.zst"), compression="zstd") as out:
        out.write(b'{"problem": "What is 7+7?", "answer": "14"}\n')
    summary = ingest(ws, "packed", *sorted(d.iterdir()))
    assert summary["admitted"] == 8 and summary["quarantined"] == 0
    names = {s["source"] for s in summary["sources"]}
    assert {"packed/train", "packed/more", "packed/arr", "packed/z"} == names  # no ".jsonl" left in the names


def test_curate_ingest_json_reports_the_real_wall_time(ws, tmp_path, capsys, monkeypatch):
    """The reported time covers the whole ingest, reading the sources included (it was 0.0, then only the
    merge): reading is made to take 0.5 s here, so a wall_s below that leaves the reading out."""
    from curate.cli import main
    from curate.ingest import sources

    read = sources.read_source

    def slow_read(spec):
        time.sleep(0.5)
        return read(spec)

    monkeypatch.setattr(sources, "read_source", slow_read)
    path = write_jsonl(tmp_path / "mine" / "timed.jsonl", plain_problems(200))
    t0 = time.perf_counter()
    assert main(["ingest", str(path), "--pool", "timed", "--json"]) == 0
    elapsed = time.perf_counter() - t0
    payload = json.loads(capsys.readouterr().out)
    assert 0.5 <= payload["wall_s"] <= elapsed + 0.01


# --------------------------------------------------------------------------------------------------- items 12, 13
def test_exports_concatenate_with_an_ordinary_hf_dataset_and_the_card_has_licences(ws, tmp_path):
    import pyarrow.parquet as pq

    from datasets import Dataset, concatenate_datasets, load_dataset, load_from_disk

    ingest(ws, "mix", write_jsonl(tmp_path / "gsm8k" / "train.jsonl", plain_problems(6)))
    ingest(ws, "mix", write_jsonl(tmp_path / "mine" / "own.jsonl", plain_problems(6, 100)))
    score_and_select(ws, "mix", "mix", plots=False)
    out = ws.selection_dir("mix")

    for name in ("trl.parquet", "verl.parquet"):
        assert "large" not in str(pq.read_schema(out / name))
    trl = load_dataset("parquet", data_files=str(out / "trl.parquet"), split="train")
    mine = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "What is 1+1?"}]],
            "answer": ["2"],
            "problem_id": ["0000000000000000"],
        }
    )
    assert len(concatenate_datasets([trl, mine])) == trl.num_rows + 1
    verl = load_dataset("parquet", data_files=str(out / "verl.parquet"), split="train")
    row = verl[0]
    other = Dataset.from_dict({k: [v] for k, v in row.items()})  # a row built from plain Python values
    assert len(concatenate_datasets([verl, other])) == verl.num_rows + 1
    hf = load_from_disk(str(out / "hf"))
    plain = Dataset.from_dict({S.PROBLEM: ["What is 1+1?"], S.ANSWER: ["2"]})
    assert len(concatenate_datasets([hf.select_columns([S.PROBLEM, S.ANSWER]), plain])) == hf.num_rows + 1

    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| gsm8k/train | 6 | MIT | https://github.com/openai/grade-school-math" in card
    assert "| mine/own | 6 | unknown | unknown |" in card
    assert "METHODS.md" not in card and "https://aclanthology.org/2025.findings-emnlp.412/" in card


# --------------------------------------------------------------------------------------------------- item 14
def test_unguarded_main_script_is_detected(tmp_path):
    from curate.verify.pool import unguarded_main

    guarded = tmp_path / "guarded.py"
    guarded.write_text("import curate\n\nif __name__ == '__main__':\n    print(1)\n", encoding="utf-8")
    bare = tmp_path / "bare.py"
    bare.write_text("from curate import verify\nverify.check_batch(['x'], ['1'])\n", encoding="utf-8")
    assert not unguarded_main(guarded) and unguarded_main(bare) and not unguarded_main(None)


def test_an_unguarded_training_script_gets_a_warning_that_names_it(tmp_path):
    script = tmp_path / "train_reward.py"
    script.write_text(
        "from curate import verify\n"
        "print(verify.check_batch([r'\\boxed{\\frac{x}{2}}'], ['x/2'], workers=1)[0].verdict)\n",
        encoding="utf-8",
    )
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert f'{script} has no `if __name__ == "__main__":` guard' in run.stderr
    assert run.returncode != 0 and "re-running the main script" in run.stderr  # the worker says why it died
