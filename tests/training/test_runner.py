"""`training run`: plan -> stages (pure), recipe strictness, and the whole chain on a tiny model (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from curate.errors import ConfigError
from training.plan import PlanScale, rl_stages
from training.runner import load_recipe


PLAN = {
    "stages": [
        {"stage": "stage1", "shard": "stage1.parquet", "rows": 7, "n": 8, "prompt_batch": 128, "steps": 160,
         "max_response_length": 8192, "max_prompt_length": 1024, "use_kl_loss": True, "kl_loss_coef": 1e-3,
         "entropy_coef": 1e-3, "lr": 1e-6, "temperature": 0.6},
        {"stage": "stage2", "shard": "stage2.parquet", "rows": 9, "n": 16, "prompt_batch": 64, "steps": 580,
         "max_response_length": 16384, "max_prompt_length": 1024, "use_kl_loss": False, "kl_loss_coef": 1e-3,
         "entropy_coef": 0.0, "lr": 1e-6, "temperature": 0.6},
    ]
}  # fmt: skip


def test_plan_stages_follow_the_plan_scaled_and_overridden_in_order():
    stages = rl_stages(
        PLAN, Path("cur"), {"loss_type": "cispo", "learning_rate": 1e-4},
        fields=["n", "prompt_batch", "steps", "max_response_length", "kl", "entropy_coef"],
        scale=PlanScale(context=1 / 128, steps=0.1, max_prompts_per_step=4, max_num_generations=8),
        per_stage={"stage2": {"max_steps": 3}},
    )  # fmt: skip
    assert [s.name for s in stages] == ["stage1", "stage2"] and [s.folder for s in stages] == [
        "01-stage1",
        "02-stage2",
    ]
    one, two = (s.rl for s in stages)
    assert (one["max_completion_length"], two["max_completion_length"]) == (64, 128)  # context grows as planned
    assert (one["num_generations"], two["num_generations"]) == (8, 8)  # capped
    assert one["prompts_per_step"] == 4 and one["max_steps"] == 16 and two["max_steps"] == 3  # stage override wins
    assert one["beta"] == pytest.approx(1e-3) and two["beta"] == 0.0  # KL off where the plan turns it off
    assert one["learning_rate"] == 1e-4  # lr not in fields: the recipe's, not the 1.5B plan's
    assert one["epsilon_high"] == 5.0  # cispo's explicit cap
    assert stages[0].shard == Path("cur/stage1.parquet")


def test_plan_errors_fail_before_any_training():
    with pytest.raises(ConfigError, match="not in the plan"):
        rl_stages(PLAN, Path("c"), per_stage={"stage9": {}})
    with pytest.raises(ConfigError):
        rl_stages(PLAN, Path("c"), per_stage={"stage1": {"max_stepz": 3}})  # a typo in one stage's section
    with pytest.raises(ConfigError, match="plan_fields"):
        rl_stages(PLAN, Path("c"), fields=["n", "bogus"])


def test_recipe_is_strict(tmp_path):
    good = {"name": "r", "pool": "p", "curriculum": "c", "rl": {"loss_type": "cispo"}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(good))
    assert load_recipe(path).curriculum == "c"
    for bad in ({**good, "curriculm": "c"}, {**good, "eval": {"kk": 2}}, {**good, "scale": {"contxt": 0.5}},
                {**good, "train": "x.parquet"}, {**good, "sft": {"learning_rate": 1e-4}}):  # fmt: skip
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(ConfigError):
            load_recipe(path)


@pytest.mark.slow
def test_chain_runs_sft_then_two_stages_with_growing_context_and_hands_the_model_over(tmp_path):
    """curation -> tiny model -> SFT -> two RL stages (64 then 96 tokens) -> eval after each -> fit attempt."""
    from training.runner import run_chain

    home = tmp_path / "ws"
    curate_recipe = tmp_path / "curate.yaml"
    curate_recipe.write_text(yaml.safe_dump({
        "name": "t", "pool": "t", "seed": 0,
        "stages": ["ingest", "score", "select", "curriculum", "solutions"],
        "ingest": {"sources": [
            {"path": "gen://arith?n=40&seed=0&max_level=1", "name": "t/train", "split": "train"},
            {"path": "gen://arith?n=8&seed=1&max_level=1", "name": "t/eval", "split": "test"},
        ]},
        "score": {"use_embeddings": False},
        "select": {"size": 24, "name": "t", "plots": False, "clusters": 1},
        "curriculum": {"name": "t", "plan": "fastcurl", "selection": "t"},
        "solutions": {"k": 2, "selection": "t"},
    }))  # fmt: skip
    recipe_path = tmp_path / "train.yaml"
    recipe_path.write_text(yaml.safe_dump({
        "name": "chain", "pool": "t", "model": "tiny", "curate_recipe": str(curate_recipe), "curriculum": "t",
        "tiny": {"size": "tiny", "corpus_problems": 300, "vocab_size": 400},
        "sft": {"data": "solutions/t/sft.parquet", "learning_rate": 1e-3, "epochs": 1, "per_device_batch_size": 8,
                "max_length": 256, "gradient_checkpointing": False},
        "rl": {"loss_type": "cispo", "learning_rate": 1e-4, "num_generations": 2, "prompts_per_step": 2,
               "save_steps": 1, "gradient_checkpointing": False, "max_prompt_length": None},
        "plan_fields": ["max_response_length"], "scale": {"context": 1 / 128},
        "stages": {"stage1": {"max_steps": 2}, "stage2": {"max_steps": 2, "max_completion_length": 96}},
        "only_stages": ["stage1", "stage2"],
        "eval": {"k": 2, "limit": 8, "max_new_tokens": 48, "every": 1},
    }))  # fmt: skip
    summary = run_chain(load_recipe(recipe_path), home=home, echo=lambda s: None)
    run_dir = Path(summary["run_dir"])
    steps = [s["step"] for s in json.loads((run_dir / "chain.json").read_text())["steps"]]
    assert steps == ["init", "sft", "rl:stage1", "rl:stage2"]
    one = json.loads((run_dir / "rl/01-stage1/config.json").read_text())
    two = json.loads((run_dir / "rl/02-stage2/config.json").read_text())
    assert one["rl"]["max_completion_length"] == 64 and two["rl"]["max_completion_length"] == 96
    assert two["model"] == str(run_dir / "rl/01-stage1/final")  # stage 2 starts from stage 1's final model
    assert one["model"] == str(run_dir / "sft/final")
    for step in json.loads((run_dir / "chain.json").read_text())["steps"]:
        assert 0.0 <= step["pass_at_1"] <= 1.0 and step["n_problems"] == 8
    curve = pl.read_parquet(run_dir / "eval.parquet")
    assert curve["step"].to_list() == sorted(curve["step"].to_list()) and curve.height >= 3  # checkpoints + finals
    # Re-running the same command trains nothing again.
    again = run_chain(load_recipe(recipe_path), home=home, echo=lambda s: None)
    assert [s["step"] for s in again["steps"]] == steps
