"""Imported generations: an OpenR1-layout fixture written here, and the real shared GSM8K / simpleRL files.

Real parts: curate.verify's checker (math-verify in its worker pool), curate.ingest for ``--add-problems``, parquet
ledgers. The shared-data tests skip where ../shared/data is absent. No network, no GPU.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from curate import io
from curate import schema as S
from curate.cli import main as cli_main
from curate.rollout import imports, ledger, stats
from tests.tiny_model import problems_frame


OPENR1 = [
    {
        "problem": "What is $2+3$?",
        "answer": "5",
        "solution": "2+3=5",
        "generations": ["<think>2+3</think> So \\boxed{5}.", "It is \\boxed{6}"],
        "correctness_math_verify": [True, False],
        "finish_reasons": ["stop", "length"],
    },
    {
        "problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
        "answer": "\\frac{3}{4}",
        "solution": "3/4",
        "generations": ["so \\boxed{0.75}", "\\boxed{\\dfrac{3}{4}}", "I am not sure"],
        "correctness_math_verify": [True, True, True],  # the last label is wrong: no answer is given
        "finish_reasons": ["stop", "stop", "length"],
    },
    {
        "problem": "How many sides does a hexagon have?",
        "answer": "6",
        "solution": "six",
        "generations": ["A hexagon has \\boxed{6} sides."],
        "correctness_math_verify": [False],  # wrong label again: ours says correct
    },
]


@pytest.fixture
def openr1(tmp_path):
    path = tmp_path / "openr1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in OPENR1), encoding="utf-8")
    return path


def cfg(path, **kw) -> imports.ImportConfig:
    return imports.ImportConfig(path=str(path), format="openr1", verify_workers=1, **kw)


def test_openr1_fixture_import_resume_and_add_problems(ws, openr1):
    pool = [(r["problem"], r["answer"]) for r in OPENR1[:2]]
    io.write_parquet(problems_frame(pool), ws.table("p", "problems"), S.PROBLEMS)
    report = imports.import_generations(ws, "p", cfg(openr1))
    assert (report["source_rows"], report["generations"], report["planned"], report["present"]) == (3, 6, 5, 0)
    assert report["drops"] == {"not_in_pool": 1, "missing_completion": 0, "duplicate_in_file": 0}
    assert report["problems_not_in_pool"] == 1 and report["not_in_pool_examples"][0].startswith("How many sides")
    assert report["planned"] + report["present"] + sum(report["drops"].values()) == report["generations"]
    assert report["verdicts"] == {"correct": 3, "truncated": 1, "wrong": 1}
    (agree,) = report["agreement"]
    assert agree["model"] == "openr1/deepseek-r1" and agree["labelled"] == 5
    assert (agree["both_correct"], agree["both_wrong"], agree["ours_wrong_shipped_correct"]) == (3, 1, 1)
    assert agree["agreement"] == 0.8

    led = ledger.read(ws, "p", "openr1/deepseek-r1").sort(S.PROBLEM_ID, S.SAMPLE_IDX)
    assert led.height == 5 and set(led[S.BACKEND].to_list()) == {"import"}
    assert led.filter(pl.col(S.VERDICT) == "truncated")[S.FINISH_REASON].to_list() == ["length"]
    assert led[S.SHIPPED_LABEL].null_count() == 0 and led[S.COMPLETION_TOKENS].null_count() == 5
    assert stats.read_stats(ws, "p").height == 2

    again = imports.import_generations(ws, "p", cfg(openr1))
    assert (again["planned"], again["present"], again["shards_run"], again["ledger_rows"]) == (0, 5, 0, 5)

    added = imports.import_generations(ws, "p", cfg(openr1, add_problems=True))
    assert added["added_problems"]["admitted"] == 3 and added["planned"] == 1  # the pool now has all three
    assert added["agreement"][0]["ours_correct_shipped_wrong"] == 1 and added["ledger_rows"] == 6


def test_records_ranges_parquet_and_formats(tmp_path, openr1):
    parquet = tmp_path / "openr1.parquet"
    pl.DataFrame(OPENR1[:2]).write_parquet(parquet)
    assert [i for i, _ in imports.records(parquet, 1, 2)] == [1]
    assert [r["answer"] for _, r in imports.records(openr1, 1)] == ["\\frac{3}{4}", "6"]
    problem, gold, gens = imports.generations(OPENR1[0], "openr1", "my/model")
    assert (problem, gold) == ("What is $2+3$?", "5") and [g[S.MODEL] for g in gens] == ["my/model"] * 2
    gsm = {"question": "q", "ground_truth": "x\nA: 3", "6b_finetuning": {"is_correct": True, "solution": "A: 3"}}
    _, gold, gens = imports.generations(gsm, "gsm8k-solutions", None)
    assert gold == "x\nA: 3" and [(g[S.MODEL], g[S.SHIPPED_LABEL]) for g in gens] == [("gsm8k/6b_finetuning", True)]
    with pytest.raises(ValueError, match="drop --model"):
        imports.ImportConfig(path="x", format="gsm8k-solutions", model="m")
    with pytest.raises(ValueError, match="format"):
        imports.ImportConfig(path="x", format="csv")


def test_cli_import_json(ws, openr1, capsys):
    pool = [(r["problem"], r["answer"]) for r in OPENR1]
    io.write_parquet(problems_frame(pool), ws.table("p", "problems"), S.PROBLEMS)
    assert (
        cli_main(["import-generations", str(openr1), "--pool", "p", "--format", "openr1", "--workers", "1", "--json"])
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["ledger_rows"] == 6 and payload["agreement"][0]["labelled"] == 6


# --------------------------------------------------------------------------------------------------- shared data
def test_gsm8k_example_solutions_agreement(ws, shared_data):
    path = shared_data / "gsm8k" / "example_model_solutions.jsonl"
    report = imports.import_generations(
        ws, "gsm8k", imports.ImportConfig(path=str(path), format="gsm8k-solutions", add_problems=True)
    )
    assert (report["source_rows"], report["generations"], report["ledger_rows"]) == (1319, 5276, 5276)
    assert report["drops"]["not_in_pool"] == 0 and report["gold_mismatch"] == 0
    by_model = {a["model"]: a for a in report["agreement"]}
    assert set(by_model) == {f"gsm8k/{k}" for k in imports.GSM8K_MODELS} | {"all"}
    # shipped accuracies (ANALYSIS.md §5): 0.217, 0.390, 0.347, 0.563
    assert by_model["gsm8k/6b_finetuning"]["shipped_accuracy"] == pytest.approx(0.217, abs=1e-3)
    assert by_model["gsm8k/175b_verification"]["shipped_accuracy"] == pytest.approx(0.563, abs=1e-3)
    assert all(a["agreement"] >= 0.99 and a["labelled"] == a["rows"] for a in by_model.values())
    st = stats.read_stats(ws, "gsm8k")
    assert st.height == 5276 and st[S.N_SAMPLES].max() == 1


def test_simplerl_agreement(ws, shared_data):
    path = shared_data / "simplerl" / "math_cot_100.jsonl"
    report = imports.import_generations(
        ws, "simplerl", imports.ImportConfig(path=str(path), format="simplerl", add_problems=True)
    )
    (agree,) = report["agreement"]
    assert agree["model"] == "simplerl/math_cot_100" and agree["labelled"] == 800
    assert agree["shipped_accuracy"] == pytest.approx(0.91, abs=1e-3) and agree["agreement"] >= 0.98
    st = stats.read_stats(ws, "simplerl")
    assert st.height == 100 and set(st[S.N_SAMPLES].to_list()) == {8}


def test_duplicate_rows_in_a_file_are_imported_once(ws, tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(OPENR1[0]) + "\n" + json.dumps(OPENR1[0]) + "\n", encoding="utf-8")
    io.write_parquet(problems_frame([(OPENR1[0]["problem"], "5")]), ws.table("p", "problems"), S.PROBLEMS)
    shards, report = imports.plan_import(ws, "p", cfg(path, shard_rows=1))
    assert (report["generations"], report["planned"], report["drops"]["duplicate_in_file"]) == (4, 2, 2)
    assert [s.index for s in shards] == [0]
    (written,) = imports.run_import_shard(ws, "p", cfg(path, shard_rows=1), shards[0])
    assert pl.read_parquet(written).height == 2


def test_token_counts_with_a_local_tokenizer(ws, openr1, tmp_path_factory):
    from transformers import AutoTokenizer

    from tests.tiny_model import shared_tiny_model

    path, _ = shared_tiny_model(tmp_path_factory)
    pool = [(r["problem"], r["answer"]) for r in OPENR1]
    io.write_parquet(problems_frame(pool), ws.table("p", "problems"), S.PROBLEMS)
    imports.import_generations(ws, "p", cfg(openr1, tokenizer=str(path)))
    led = ledger.read(ws, "p", "openr1/deepseek-r1").sort(S.PROBLEM_ID, S.SAMPLE_IDX)
    tok = AutoTokenizer.from_pretrained(path)
    expected = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in led[S.COMPLETION].to_list()]
    assert led[S.COMPLETION_TOKENS].to_list() == expected and min(expected) > 0
    assert stats.read_stats(ws, "p")[S.MEAN_TOKENS_CORRECT].null_count() == 0
