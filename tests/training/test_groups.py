"""``training run`` with CoScale-RL's parts (``training.groups``) on the tiny chain: the rollout ladder resumes on the
same rung after an interruption between rungs or a kill inside one, and parallel groups start from the same model
and are merged into the pass's model. The rules themselves: ``tests/training/test_ladder.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
import torch

from curate import io
from tests.tiny_chain import write_tiny_chain
from training.recipe import load_recipe


RL = {"loss_type": "cispo", "learning_rate": 1e-4, "num_generations": 2, "prompts_per_step": 2, "save_steps": 1,
      "gradient_checkpointing": False, "max_prompt_length": None}  # fmt: skip
EVAL = {"k": 1, "limit": 4, "init_limit": 2, "max_new_tokens": 32}


class Interrupted(Exception):
    """Stands in for a kill of ``training run`` between two of its steps."""


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_ladder_interrupted_between_and_inside_rungs_resumes_on_the_same_rung(tmp_path):
    """The rung 0 segment (N=2) plateaus (patience 1: the untrained model's reward does not rise); the run is
    stopped before its next rung and resumed: rung 1 trains at N=4 and lr x 2 from rung 0's last checkpoint (its
    weights, Adam, curriculum position), for the rollouts left. Then rung 1 is killed after its first checkpoint
    (its later files gone): the rerun resumes it there on the same rung (its ladder state from the checkpoint), and
    ends as it did, bit for bit, with the same event."""
    from curate.rollout import ledger
    from training.runner import run_chain

    home = tmp_path / "ws"
    ladder = {"patience": 1, "n_max": 4, "collapse_drop": 1.0}
    recipe = load_recipe(write_tiny_chain(tmp_path, name="ladder", rl={**RL, "ladder": ladder}, eval=EVAL,
                                          stages={"stage1": {"max_steps": 6}}, only_stages=["stage1"]))  # fmt: skip

    def stop_between_rungs(name, fn, *args):
        if name == "rl:stage1@n4":
            raise Interrupted
        return fn(*args)

    with pytest.raises(Interrupted):
        run_chain(recipe, home=home, echo=lambda s: None, call=stop_between_rungs)
    said: list[str] = []
    summary = run_chain(recipe, home=home, echo=said.append)
    run_dir = Path(summary["run_dir"])
    assert [s["step"] for s in summary["steps"]] == ["init", "sft", "rl:stage1", "rl:stage1@n4"]
    first, second = summary["ladder"]
    cut = first["event"]["step"]
    assert cut == 2  # the peak at step 1, none higher at step 2 (patience 1)
    assert (first["name"], first["event"]["n_from"], first["event"]["n_to"]) == ("rl:stage1", 2, 4)
    assert first["next"] == "rl:stage1@n4"
    assert any(line.startswith("[chain] ladder rl:stage1: plateau") for line in said)  # said again on the rerun
    rung0, rung1 = run_dir / "rl" / "01-stage1", run_dir / "rl" / "01-stage1-n4"
    config = json.loads((rung1 / "config.json").read_text())
    checkpoint = rung0 / "checkpoints" / f"checkpoint-{cut}"
    assert (config["rl"]["num_generations"], config["rl"]["warmup_steps"]) == (4, 0)
    assert config["rl"]["learning_rate"] == pytest.approx(2e-4)  # lr/N kept
    assert config["rl"]["max_steps"] == (6 - cut) * 2 // 4  # the stage's rollouts left, at N=4
    assert (config["model"], config["continue_from"]) == (str(rung0 / "final"), str(checkpoint))
    assert config["optimizer_from"] == str(checkpoint / "optimizer.pt")
    carry = json.loads((checkpoint / "sampler_state.json").read_text())["carry"][0]
    rows = ledger.read(io.Workspace(home), "t", json.loads((rung1 / "summary.json").read_text())["ledger"]["model"])
    assert sorted(set(rows.filter(pl.col("step") == 1)["problem_id"])) == sorted(set(carry))  # where rung 0 stopped
    assert second["name"] == "rl:stage1@n4" and second["event"]["exhausted"]  # N=4 is the top: the group ends
    assert any(line.startswith("[chain] ladder rl:stage1@n4: plateau") and line.endswith("the group ends")
               for line in said)  # fmt: skip

    # killed inside rung 1 after its first checkpoint: it resumes there, on the same rung, and ends the same way
    before = json.loads((rung1 / "summary.json").read_text())
    weights = _weights(rung1 / "final")
    for gone in ("summary.json", "optimizer.pt", "final", "checkpoints/checkpoint-2"):
        path = rung1 / gone
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    again = run_chain(recipe, home=home, echo=lambda s: None)
    after = json.loads((rung1 / "summary.json").read_text())
    assert after["resumed_from"] == str(rung1 / "checkpoints" / "checkpoint-1")
    assert after["ladder"]["event"] == before["ladder"]["event"]  # the window and peak came back with the rung
    new = _weights(rung1 / "final")
    assert new.keys() == weights.keys() and all(torch.equal(new[k], weights[k]) for k in new)
    assert again["ladder"] == summary["ladder"] and [s["step"] for s in again["steps"]] == [
        s["step"] for s in summary["steps"]
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_parallel_groups_start_from_the_same_model_and_their_merge_is_the_pass_model(tmp_path):
    """``groups: parallel``: both stages train from the SFT model (a fresh Adam each, although the recipe carries
    Adam between sequential stages), are merged (linear, equal shares: the average of their weights) into the
    pass's model, whose card gives each group's share and the method; the chain evaluates the merge, puts it on the
    eval curve, compares it with SFT, and the second group's own model stays off the curve."""
    from training.runner import run_chain

    home = tmp_path / "ws"
    stages = {"stage1": {"max_steps": 1}, "stage2": {"max_steps": 1, "max_completion_length": 96}}
    recipe = load_recipe(write_tiny_chain(tmp_path, name="groups", groups="parallel", merge={"method": "linear"},
                                          rl={**RL, "carry_optimizer": True}, stages=stages,
                                          eval={**EVAL, "temperatures": [1.0]}))  # fmt: skip
    said: list[str] = []
    summary = run_chain(recipe, home=home, echo=said.append)
    run_dir = Path(summary["run_dir"])
    assert [s["step"] for s in summary["steps"]] == ["init", "sft", "rl:stage1", "rl:stage2", "merge:2of2"]
    one, two = (json.loads((run_dir / "rl" / f / "config.json").read_text()) for f in ("01-stage1", "02-stage2"))
    assert one["model"] == two["model"] == str(run_dir / "sft" / "final")  # independent runs from the same model
    assert two["optimizer_from"] is None
    merged = run_dir / "rl" / "merge-2of2"
    a, b, m = (_weights(p) for p in (run_dir / "rl/01-stage1/final", run_dir / "rl/02-stage2/final", merged))
    key = next(k for k in m if m[k].is_floating_point())
    assert torch.allclose(m[key], (a[key] + b[key]) / 2)
    card = json.loads((merged / "lineage.json").read_text())
    assert card["kind"] == "merge" and card["data"]["method"] == "linear"
    assert card["data"]["group_shares"] == {"stage1": 0.5, "stage2": 0.5}
    assert "group_shares" in (merged / "README.md").read_text()
    assert summary["final_model"] == str(merged) and summary["gain_over_sft"]["after"] == "merge:2of2"
    assert [s.get("curve", True) for s in summary["steps"][2:]] == [True, False, True]
    curve = pl.read_parquet(run_dir / "eval.parquet")
    assert curve["step"].to_list() == [1, 2]  # stage1's model, then the merge at the steps of both groups
    assert sorted(p.name for p in (run_dir / "evals").glob("*@T1.parquet")) == ["merge_2of2@T1.parquet",
                                                                                "sft@T1.parquet"]  # fmt: skip
    assert summary["merges"][0]["shares"] == {"stage1": 0.5, "stage2": 0.5}
    assert any(line.startswith("[chain] merge:2of2: linear merge of 2 independent group(s)") for line in said)
    again = run_chain(recipe, home=home, echo=lambda s: None)  # nothing trained or merged again
    assert [s["step"] for s in again["steps"]] == [s["step"] for s in summary["steps"]]
    assert _weights(merged)[key].equal(m[key])
