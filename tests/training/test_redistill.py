"""`training redistill`: latest correct RL solutions per problem from the last N steps -> SFT of the initial model."""

from __future__ import annotations

import json

import polars as pl
import pytest


def _ledger_rows():
    """Two RL runs (models g1, g2) with steps; problem ids a..e. Comments say what the selection must do."""
    rows = [
        # a: correct at steps 5, 15, 18 (twice, distinct texts): latest is step 18, the later row first
        ("g1", "a", 5, "a@5", True), ("g1", "a", 15, "a@15", True),
        ("g1", "a", 18, "a@18-first", True), ("g1", "a", 18, "a@18-second", True),
        ("g1", "a", 20, "a@20-wrong", False),
        # b: only correct at step 3, outside g1's window (steps 11..20): not picked
        ("g1", "b", 3, "b@3", True), ("g1", "b", 19, "b@19-wrong", False),
        # c: g2 ran only to step 8, so its window is its own last 10 steps (all of them)
        ("g2", "c", 1, "c@1", True), ("g2", "c", 8, "c@8", False),
        # d: the same correct text twice counts once; e: a curation row without a step is not an RL sample
        ("g2", "d", 7, "d@7", True), ("g2", "d", 8, "d@7", True),
        ("g2", "e", None, "e-rollout", True),
    ]  # fmt: skip
    return pl.DataFrame(
        rows, schema={"model": pl.String, "problem_id": pl.String, "step": pl.Int64, "completion": pl.String,
                      "correct": pl.Boolean}, orient="row",
    )  # fmt: skip


def test_select_latest_correct_per_problem_in_each_runs_window():
    from training.redistill import ORDER, select_solutions

    ledger = _ledger_rows().with_row_index(ORDER)
    one = select_solutions(ledger, last_steps=10, per_problem=1)
    assert one.select("problem_id", "completion", "step").rows() == [
        ("a", "a@18-second", 18), ("c", "c@1", 1), ("d", "d@7", 8)
    ]  # fmt: skip
    two = select_solutions(ledger, last_steps=10, per_problem=2)
    assert two.filter(pl.col("problem_id") == "a")["completion"].to_list() == ["a@18-second", "a@18-first"]
    assert two.filter(pl.col("problem_id") == "d").height == 1  # duplicates count once
    wide = select_solutions(ledger, last_steps=20, per_problem=1)
    assert "b" in wide["problem_id"].to_list()


def test_without_step_column_sample_order_is_time_and_verdict_decides():
    from training.redistill import ORDER, select_solutions

    ledger = pl.DataFrame(
        {"problem_id": ["a", "a", "a", "b"], "completion": ["x", "y", "z", "w"],
         "verdict": ["correct", "correct", "wrong", "wrong"]}
    ).with_row_index(ORDER)  # fmt: skip
    out = select_solutions(ledger, last_steps=1, per_problem=1)
    assert out.select("problem_id", "completion").rows() == [("a", "y")]
    assert out["step"].null_count() == 1


def test_redistill_trains_initial_model_on_ledger(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from curate.ingest.generate import generate
    from training.card import read_lineage
    from training.cli import main
    from training.tiny import TinyConfig, init_tiny

    initial = init_tiny(tmp_path / "init", TinyConfig(size="tiny", corpus_problems=300))
    problems = list(generate(6, seed=0, family="arith", min_level=1, max_level=1))
    ids = [f"p{i}" for i in range(6)]
    pl.DataFrame({"problem_id": ids, "problem": [p["problem"] for p in problems]}).write_parquet(
        tmp_path / "problems.parquet"
    )
    ledger_dir = tmp_path / "pools" / "p" / "rollouts" / "rl-run"
    ledger_dir.mkdir(parents=True)
    for part, steps in enumerate([(1, 2, 3), (10, 11, 12)]):
        rows = [
            {"problem_id": pid, "step": s, "completion": f"{p['solution']} (step {s})", "correct": pid != "p5",
             "reward": 1.0 if pid != "p5" else 0.0, "verdict": "correct" if pid != "p5" else "wrong"}
            for s in steps for pid, p in zip(ids, problems, strict=True)
        ]  # fmt: skip
        pl.DataFrame(rows).write_parquet(ledger_dir / f"part-{part:05d}.parquet")

    out = tmp_path / "rd"
    args = ["redistill", "--initial", str(initial), "--ledger", str(ledger_dir), "--problems",
            str(tmp_path / "problems.parquet"), "--out", str(out), "--last-steps", "3", "--json",
            "--set", "sft.learning_rate=1e-3", "--set", "sft.per_device_batch_size=5", "--set", "sft.save_steps=50",
            "--set", "sft.torch_threads=1"]  # fmt: skip
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["selection"]["problems"] == 5 and result["selection"]["solutions"] == 5
    assert result["selection"]["steps"] == [12, 12] and result["config"]["sft"]["epochs"] == 2.0
    data = pl.read_parquet(out / "redistill.parquet")
    assert all(c[0]["content"].endswith("(step 12)") for c in data["completion"])  # the latest solution
    assert data["prompt"][0][0]["content"].startswith(problems[0]["problem"])

    lineage = read_lineage(out / "final")
    assert lineage["kind"] == "redistill" and lineage["base_model"] == str(initial)
    assert lineage["data"]["selection"]["ledger"] == str(ledger_dir)
    assert lineage["recipe"]["redistill"]["learning_rate"] == 1e-3
    AutoModelForCausalLM.from_pretrained(out / "final")  # loadable
    assert main(args) == 0 and json.loads(capsys.readouterr().out)["skipped"] is True  # re-run: nothing to do


def test_no_correct_solution_is_an_error(tmp_path, capsys):
    from training.cli import main

    (tmp_path / "l").mkdir()
    pl.DataFrame({"problem_id": ["a"], "completion": ["x"], "correct": [False], "step": [1]}).write_parquet(
        tmp_path / "l" / "part-0.parquet"
    )
    pl.DataFrame({"problem_id": ["a"], "problem": ["q"]}).write_parquet(tmp_path / "problems.parquet")
    args = ["redistill", "--initial", "unused", "--ledger", str(tmp_path / "l"), "--problems",
            str(tmp_path / "problems.parquet"), "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(args) == 2
    assert "no correct solutions" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [{"last_steps": 0}, {"per_problem": 0}, {"sft": {"learning_rat": 1}}])
def test_config_is_strict(bad):
    from curate.errors import ConfigError
    from training.redistill import load_config

    with pytest.raises(ConfigError):
        load_config(bad)
