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
from training.plan import context_fit, fit_lines, measured_answers, reference_answers, rl_stages
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
        "rl: none of its 3 prompts has a measured or reference answer to set against its 100-token context"
    ]


def test_without_measured_samples_the_reference_solutions_in_the_models_tokens_stand_for_the_answers(ws, tmp_path):
    """A recipe without ``measure`` (one RL stage over a prompt file) still hears whether its context fits: the
    prompts' reference solutions, in the starting model's tokenizer, plus the end of turn."""
    from curate import io
    from curate.ingest.generate import generate
    from training.tiny import build_tokenizer

    problems = list(generate(6, seed=0, family="arith", min_level=1, max_level=1, min_ops=2, max_ops=12))
    ids = [S.problem_id(p["problem"]) for p in problems]
    table = pl.DataFrame({S.PROBLEM_ID: ids, S.PROBLEM: [p["problem"] for p in problems],
                          S.SOLUTION: [p["solution"] for p in problems]})  # fmt: skip
    io.write_parquet(table, ws.table(POOL, "problems"))
    tok = build_tokenizer([p["solution"] for p in generate(50, seed=1, family="arith")], 300)
    tok.save_pretrained(tmp_path / "model")
    want = {pid: len(tok(p["solution"])["input_ids"]) + 1 for pid, p in zip(ids, problems, strict=True)}
    got = reference_answers(ws, POOL, str(tmp_path / "model"), [*ids, "unknown"])
    assert got == want
    context = sorted(want.values())[3]  # half of them longer
    plan = _plan(ws.root / "c", {"rl": ids}, {"rl": context})
    line = fit_lines(context_fit(rl_stages(plan, ws.root / "c"), got), "reference")[0]
    assert line == (f"warning: rl: 33% of its 6 prompts' reference answers (none measured) exceed its {context}-token "
                    "context (2): it truncates what it trains on")  # fmt: skip
    assert reference_answers(ws, POOL, str(tmp_path / "no-model"), ids) == {}
