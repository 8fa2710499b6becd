"""A run folder shaped like the built-in demo's (README: `training run --recipe training/recipes/tiny/fastcurl.yaml`),
written from literal numbers, for the tests of what a user reads and sees (tests/training/test_plots.py,
test_run_report.py): chain.json with init / sft / four RL stage records, eval.parquet, metrics.parquet with a
``stage`` column, each stage folder's config.json, recipe.json, summary.json with the paired gain over SFT.

The pass rates are the README's (SFT 0.534, RL 0.514 / 0.530 / 0.534 / 0.521 over 297 problems): four points whose
sigmoid fit puts B at its bound and A's band from 0.515 to 1.0, the uninformative fit of issue 23.

    run = write_demo_run(tmp_path / "ws")   # <ws>/runs/tiny-fastcurl
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl


CONTEXTS = {"stage1": 128, "stage2": 256, "stage3": 384, "stage4": 256}
RATES = {"stage1": (0.514, 0.021), "stage2": (0.530, 0.022), "stage3": (0.534, 0.022), "stage4": (0.521, 0.022)}
TOKENS_PER_STEP = {128: 3000.0, 256: 4500.0, 384: 6000.0}


def write_demo_run(ws: Path) -> Path:
    """Write the workspace skeleton and the run folder ``<ws>/runs/tiny-fastcurl``; return the run folder."""
    run = ws / "runs" / "tiny-fastcurl"
    run.mkdir(parents=True)
    (ws / "pools" / "tiny").mkdir(parents=True)
    steps = [
        {"step": "init", "model": str(run / "init"), "pass_at_1": 0.0, "stderr": 0.0, "n_problems": 32, "k": 4,
         "wall_s": 243.0},
        {"step": "sft", "model": str(run / "sft" / "final"), "pass_at_1": 0.534, "stderr": 0.022, "n_problems": 297,
         "k": 4, "wall_s": 507.0},
    ]  # fmt: skip
    metrics, evals, tokens = [], [], 0.0
    for i, (name, ctx) in enumerate(CONTEXTS.items()):
        stage_dir = run / "rl" / f"{i + 1:02d}-{name}"
        stage_dir.mkdir(parents=True)
        (stage_dir / "config.json").write_text(
            json.dumps({"rl": {"max_completion_length": ctx, "num_generations": 8}})
        )
        start = tokens
        for s in range(1, 16):
            tokens += TOKENS_PER_STEP[ctx]
            metrics.append({"step": 15 * i + s, "tokens": tokens, "reward": 0.45 + 0.01 * (s % 5),
                            "kept_group_frac": 0.6, "stage": f"rl:{name}"})  # fmt: skip
        rate, se = RATES[name]
        steps.append({
            "step": f"rl:{name}", "model": str(stage_dir / "final"), "pass_at_1": rate, "stderr": se,
            "n_problems": 297, "k": 4, "wall_s": 100.0 + 10 * i, "rl_steps": 15, "compute": tokens,
            "offset_step": 15 * i, "offset_compute": start, "stage_dir": str(stage_dir),
        })  # fmt: skip
        evals.append({"step": 15 * (i + 1), "compute": tokens, "pass_at_1": rate, "stderr": se, "n": 297, "k": 4})
    lineage = {
        "pool": "tiny", "selection": str(ws / "selections" / "tiny" / "selection.parquet"),
        "curriculum": str(ws / "curricula" / "tiny"), "solutions": str(ws / "solutions" / "tiny" / "sft.parquet"),
        "recipe": str(run / "recipe.json"), "recipe_name": "tiny-fastcurl", "run": str(run),
    }  # fmt: skip
    reason = "A=0.530 is not pinned down (no band, or it reaches the edge)"
    decisions = [{"name": f"rl:stage{i}", "after": f"rl:stage{i}", "action": "continue", "points": i,
                  "reason": reason} for i in (1, 2, 3)]  # fmt: skip
    (run / "chain.json").write_text(
        json.dumps({"steps": steps, "lineage": lineage, "notes": {"decisions": decisions}})
    )
    (run / "recipe.json").write_text(json.dumps({"name": "tiny-fastcurl", "fit": {"compute_unit": "tokens"}}))
    pl.DataFrame(metrics).write_parquet(run / "metrics.parquet")
    pl.DataFrame(evals).write_parquet(run / "eval.parquet")
    gain = {"after": "rl:stage4", "before": "sft", "gain": -0.013, "stderr": 0.011, "z": -1.2, "n_problems": 297,
            "after_rate": 0.521, "before_rate": 0.534}  # fmt: skip
    (run / "summary.json").write_text(json.dumps({"gain_over_sft": gain}))
    return run
