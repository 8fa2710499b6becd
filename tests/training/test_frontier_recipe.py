"""Issue 42: the built-in pool's frontier (datasets/tiny/recipe.yaml) and the recipe that trains RL there
(training/recipes/tiny/frontier.yaml): RL from an SFT model, on that model's middle at 8-12 operations, in one
stage whose context fits every answer it trains on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from curate import config
from training.recipe import load_recipe


ROOT = Path(__file__).resolve().parents[2]
FRONTIER = ROOT / "training" / "recipes" / "tiny" / "frontier.yaml"


def _sources() -> dict[str, dict]:
    data = config.read_yaml(ROOT / "datasets" / "tiny" / "recipe.yaml", "recipe")
    return {s["name"]: s for s in data["ingest"]["sources"]}


def test_the_pool_has_a_frontier_past_the_traces_with_its_own_held_out_bands_and_tiny_rls_waste():
    sources = _sources()
    traces = max(sources[s]["gen"]["max_ops"] for s in ("tiny/sft", "tiny/sft-long"))
    frontier = sources["tiny/rl-frontier"]["gen"]
    assert frontier["min_ops"] == traces < frontier["max_ops"] and frontier["n"] >= 2000  # at and past the traces
    assert "teacher_error" not in frontier  # answer-only: no teacher traces
    rates = ("wrong_gold", "duplicates", "conflicts", "near_duplicates", "leak")
    assert {k: frontier[k] for k in rates} == {k: sources["tiny/rl"]["gen"][k] for k in rates}
    for split in ("validation", "test"):
        band = sources[f"tiny/{split}-frontier"]
        assert band["split"] == split and (band["gen"]["min_ops"], band["gen"]["max_ops"]) == (traces, 12)
    seeds = [s["gen"]["seed"] for s in sources.values()]
    assert len(seeds) == len(set(seeds))  # new streams: the 3-10 problems are what they were
    assert (frontier["leak_seed"], frontier["leak_n"]) == (sources["tiny/test-frontier"]["gen"]["seed"], 200)


def test_the_frontier_recipe_trains_one_stage_from_an_sft_model_whose_context_fits_every_frontier_answer():
    from curate.ingest.generate import generate
    from curate.prompts import INSTRUCTION
    from training.tiny import TinyConfig, build_tokenizer, tokenizer_corpus

    recipe = load_recipe(FRONTIER)
    assert recipe.sft is None and recipe.model != "tiny"  # RL from a model SFT'd to its plateau elsewhere
    assert recipe.measure.rollout["sources"] == recipe.measure.select["sources"] == ["tiny/rl-frontier"]
    assert recipe.measure.select["size"] == 0  # the middle: every prompt that passes the filters
    assert recipe.only_stages == ["stage2"]
    context = round(16384 * recipe.scale.context)  # FastCuRL's stage 2: every selected prompt
    assert recipe.rl.prompts_per_step * recipe.rl.num_generations == 256
    assert recipe.stages["stage2"]["max_steps"] == 300
    assert (recipe.eval.split, recipe.eval.by, recipe.eval.every) == ("validation", "meta.ops", 20)
    assert (recipe.eval.temperature, recipe.eval.temperatures, recipe.eval.every_temperatures) == (0.6, [1.0], True)
    cfg = TinyConfig()  # the built-in recipes' tokenizer (fastcurl.yaml's `tiny`)
    tok = build_tokenizer(tokenizer_corpus(cfg.corpus_problems, INSTRUCTION), cfg.vocab_size, cfg.split_digits)
    gen = _sources()["tiny/rl-frontier"]["gen"]
    longest = generate(200, seed=99, family="arith", min_level=1, max_level=1, min_ops=gen["max_ops"],
                       max_ops=gen["max_ops"])  # fmt: skip
    tokens = max(len(tok(p["solution"])["input_ids"]) + 1 for p in longest)  # + the end-of-turn token
    assert tokens <= recipe.eval.max_new_tokens < context  # no answer it trains on or is scored on is cut


@pytest.mark.slow
def test_the_frontier_recipe_runs_end_to_end_from_a_model_folder_and_says_its_context_fits(tmp_path):
    """A smoke run (not a measurement): a from-scratch tiny model stands for the plateau model, a few prompts are
    measured, two RL steps of 4 rollouts; the chain prints the context line and pairs RL with its start."""
    from training.runner import run_chain
    from training.tiny import TinyConfig, init_tiny

    model = init_tiny(tmp_path / "plateau", TinyConfig(size="tiny", corpus_problems=300, vocab_size=400))
    sets = {"model": str(model), "measure.rollout.limit": 24, "measure.rollout.n": 4, "measure.rollout.max_tokens": 48,
            "measure.fresh": 0, "stages.stage2.max_steps": 2, "rl.num_generations": 2, "rl.prompts_per_step": 2,
            "eval.every": 1, "eval.limit": 8, "eval.k": 2, "eval.max_new_tokens": 48}  # fmt: skip
    lines: list[str] = []
    summary = run_chain(load_recipe(FRONTIER, sets), home=tmp_path / "ws", echo=lines.append)
    text = "\n".join(lines)
    fit = r"\[chain\] stage2: 0% of its \d+ measured prompts' \(of \d+\) answers exceed its 256-token context\n"
    assert re.search(fit, text), text
    assert "rl:stage1" not in text and "[chain] rl:stage2 " in text
    assert "rl:stage2 vs init on the same 8 held-out problems at T=1:" in text
    assert summary["gain_over_sft"]["before"] == "init"
    evals = Path(summary["run_dir"]) / "evals"  # the start and each checkpoint at both temperatures
    assert {"init@T1.parquet", "rl_stage2-step1.parquet", "rl_stage2-step1@T1.parquet"} <= {
        p.name for p in evals.iterdir()
    }
