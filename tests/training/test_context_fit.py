"""Issue 42: the plan says, per RL stage, what share of its prompts' measured answers would not fit its context.

FastCuRL's first stage, scaled by the built-in recipe to 128 tokens, trained on chains whose answers are longer
(8 operations: ~137 tokens), so RL there could never be rewarded on them, and nothing said so. Literal ledger rows
and shards in a tmp workspace, the recipes' own plan settings; no model.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from curate import schema as S
from curate.rollout import ledger
from training.plan import context_fit, fit_lines, measured_answers, rl_stages
from training.recipe import load_recipe


ROOT = Path(__file__).resolve().parents[2]
POOL, MODEL = "tiny", "runs/x/sft/final"


def _samples(ws, answers: dict[str, list[tuple[int, bool]]]) -> None:
    """The measured model's ledger: per prompt, (completion tokens, correct) of each sample."""
    pids = [p for p, samples in answers.items() for _ in samples]
    flat = [s for samples in answers.values() for s in samples]
    values = {S.COMPLETION_TOKENS: [t for t, _ in flat], S.CORRECT: [c for _, c in flat], S.COMPLETION: "x"}
    rows = ledger.build_rows(MODEL, pids, values, backend="hf", run_id="measure")
    ledger.append(ws, POOL, MODEL, rows, part=ledger.part_name("measure", "all"))


def _plan(folder: Path, shards: dict[str, list[str]], contexts: dict[str, int]) -> dict:
    """A FastCuRL-shaped plan.json (the paper's contexts) over shards holding these prompt ids."""
    folder.mkdir(parents=True, exist_ok=True)
    stages = []
    for name, ids in shards.items():
        pl.DataFrame({S.PROBLEM_ID: ids}).write_parquet(folder / f"{name}.parquet")
        stages.append({"stage": name, "shard": f"{name}.parquet", "rows": len(ids), "n": 8, "prompt_batch": 64,
                       "steps": 10, "max_response_length": contexts[name]})  # fmt: skip
    return {"stages": stages}


def test_the_default_recipes_first_stage_is_said_to_cut_the_answers_it_trains_on(ws):
    # short chains (60-token answers) and 8-10-operation ones (137-167 tokens), as the built-in pool's
    short, long = [f"s{i}" for i in range(6)], [f"l{i}" for i in range(3)]
    answers = {p: [(60, True), (62, True), (240, False)] for p in short}
    answers |= {"l0": [(137, True), (139, True), (90, False)], "l1": [(167, True)], "l2": [(240, False), (240, False)]}
    _samples(ws, answers)
    got = measured_answers(ws, POOL, MODEL)
    assert got == {**{p: 61 for p in short}, "l0": 138, "l1": 167, "l2": 240}  # correct samples' median, else all
    recipe = load_recipe(ROOT / "training" / "recipes" / "tiny" / "fastcurl.yaml")
    plan = _plan(ws.root / "c", {"stage1": short + long, "stage2": short + long}, {"stage1": 8192, "stage2": 16384})
    stages = rl_stages(plan, ws.root / "c", recipe.rl, fields=recipe.plan_fields, scale=recipe.scale)
    assert [s.rl.max_completion_length for s in stages] == [128, 256]
    fits = context_fit(stages, got)
    assert [(f["stage"], f["prompts"], f["measured"], f["over"]) for f in fits] == [
        ("stage1", 9, 9, 3),
        ("stage2", 9, 9, 0),
    ]
    lines = fit_lines(fits)
    assert lines[0] == (
        "warning: stage1: 33% of its 9 prompts' answers exceed its 128-token context (3): it truncates what it "
        "trains on"
    )
    assert lines[1] == "stage2: 0% of its 9 prompts' answers exceed its 256-token context"


def test_a_stage_whose_prompts_were_never_measured_says_so(ws):
    _samples(ws, {"a": [(50, True)]})
    plan = _plan(ws.root / "c", {"rl": ["a", "b", "c"]}, {"rl": 100})
    fits = context_fit(rl_stages(plan, ws.root / "c"), measured_answers(ws, POOL, MODEL))
    assert fit_lines(fits) == ["rl: 0% of its 1 measured prompts' (of 3) answers exceed its 100-token context"]
    assert measured_answers(ws, POOL, "never-sampled") == {}
    fits = context_fit(rl_stages(plan, ws.root / "c"), {})
    assert fit_lines(fits) == [
        "rl: none of its 3 prompts has measured answers to set against its 100-token context (no `measure`)"
    ]
