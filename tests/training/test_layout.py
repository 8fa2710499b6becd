"""``training/layout.py``: the run folder's names and the step-name grammar.

The names are the ones a finished run folder from before holds (``chain.json``'s paths, ``evals/``' files, the
checkpoint and stage folders), byte for byte; ``parse_step`` reads back every step name the chain writes."""

from __future__ import annotations

from pathlib import Path

from training import layout
from training.layout import StepName, parse_step


# --------------------------------------------------------------------------------------------------- the names
def test_paths_are_the_ones_a_finished_run_folder_holds(tmp_path):
    run = tmp_path / "runs" / "demo"
    assert layout.run_dir(tmp_path, "demo") == run
    assert layout.stage_folder(0, "stage1") == "01-stage1"
    assert layout.stage_folder(3, "easy", n=16) == "04-easy-n16"
    assert layout.stage_dir(run, "01-stage1") == run / "rl" / "01-stage1"
    assert layout.stage_dir(run, "01-stage1", 2) == run / "rl" / "it2-01-stage1"
    assert layout.merge_dir(run, 2, 3) == run / "rl" / "merge-2of3"
    assert layout.merge_dir(run, 2, 3, 1) == run / "rl" / "it1-merge-2of3"
    assert layout.coscale_dir(run, 1) == run / "coscale" / "it1"
    assert layout.rft_dir(run, 4) == run / "rft" / "r4"
    assert layout.checkpoint(run / "sft", 500) == run / "sft" / "checkpoints" / "checkpoint-500"
    assert layout.checkpoint_step(run / "sft" / "checkpoints" / "checkpoint-500") == 500
    assert layout.checkpoint_step(run / "sft" / "bad-checkpoint-500") is None
    assert layout.final(run / "sft") == run / "sft" / "final"
    assert layout.pinned_path(run, "sft") == run / "data" / "sft.parquet"
    assert layout.pinned_path(run, "curriculum") == run / "data" / "curriculum"
    assert layout.eval_path(run, "rl:stage2") == run / "evals" / "rl_stage2.parquet"
    assert layout.eval_path(run, "sft", 1.0, samples=True) == run / "evals" / "sft@T1.samples.parquet"
    assert layout.checkpoint_eval("rl:stage2", 10) == "rl_stage2-step10"
    assert (layout.CHAIN, layout.SUMMARY, layout.RECIPE, layout.EVAL_CURVE) == (
        "chain.json", "summary.json", "recipe.json", "eval.parquet")  # fmt: skip


def test_step_names_build_and_parse_back():
    assert layout.rl_step("stage1") == "rl:stage1"
    assert layout.rl_step("stage1", 2, n=16) == "it2:rl:stage1@n16"
    assert layout.merge_step(2, 3) == "merge:2of3"
    assert layout.merge_step(2, 3, 1) == "it1:merge:2of3"
    assert layout.in_iteration("sft", 1) == "it1:sft" and layout.in_iteration("sft") == "sft"
    assert layout.rft_step(3) == "rft:r3" and layout.is_rft_round("rft:r3") and not layout.is_rft_round("rft:best")
    assert parse_step("it2:rl:stage1@n16") == StepName("it2:rl:stage1@n16", "rl", 2, "stage1", 16)
    assert parse_step("rl:stage1@n16").stage_step == "rl:stage1"
    assert parse_step("it1:rl:g").stage_step == "it1:rl:g"
    assert parse_step("merge:2of3") == StepName("merge:2of3", "merge", count=2, total=3)
    assert parse_step("it1:sft") == StepName("it1:sft", iteration=1)
    assert parse_step("rl:stage1@n16").label == "stage1@n16" and parse_step("it1:rl:g").label == "it1:rl:g"
    assert layout.first_pass_rl("rl:g@n16") and not layout.first_pass_rl("it1:rl:g")
    assert not layout.first_pass_rl("merge:2of3") and not layout.first_pass_rl("sft")


def test_stage_plan_names_are_unchanged():
    """``StagePlan.folder`` and ``rl_step_name`` through the layout: the names a run folder from before holds."""
    from training.plan import StagePlan, rl_step_name
    from training.rl import RLConfig

    stage = StagePlan(1, "stage2", Path("s.parquet"), 10, RLConfig(num_generations=8))
    rung = StagePlan(1, "stage2", Path("s.parquet"), 10, RLConfig(num_generations=16), rung=1)
    assert (stage.folder, rung.folder) == ("02-stage2", "02-stage2-n16")
    assert (rl_step_name(stage), rl_step_name(rung, 1)) == ("rl:stage2", "it1:rl:stage2@n16")
