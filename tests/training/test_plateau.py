"""``training.plateau``: SFT stops at its validation plateau, not at a fixed step count, and not on a false plateau.

The rule is checked on synthetic validation curves shaped like the measured ones (150 problems x 2 samples, each
problem of its own difficulty, each point sampled afresh: the paired SE comes out ~0.02 at the floor and ~0.03 at
0.3-0.7, as on the real split); the callback on a real SFT run of the built-in tiny model, whose checkpoints are
really evaluated and whose scores are then replaced by a scripted curve, so where it must stop is known.
"""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from training.choose import best_point
from training.plateau import should_stop


def _curve(*rates: float, n: int = 150, k: int = 2, seed: int = 0, every: int = 500) -> list[dict]:
    """Validation points at ``every``-step intervals whose expected pass@1 are ``rates``: problem i is solved with
    probability sigmoid(a - d_i) (d_i its difficulty, the same at every point; a set for the rate), k samples each."""
    rng = random.Random(seed)
    difficulty = [rng.gauss(0, 1.5) for _ in range(n)]

    def solve(rate: float) -> float:  # the ability a whose mean solve rate over the problems is ``rate``
        lo, hi = -15.0, 15.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(1 / (1 + math.exp(d - mid)) for d in difficulty) / n < rate else (lo, mid)
        return lo

    points = []
    for i, rate in enumerate(rates):
        a = solve(rate)
        means = [sum(rng.random() < 1 / (1 + math.exp(d - a)) for _ in range(k)) / k for d in difficulty]
        points.append({"step": every * (i + 1), "pass_at_1": sum(means) / n,
                       "per_problem": {"problem_id": [f"p{j:03d}" for j in range(n)], "mean": means}})  # fmt: skip
    return points


def _never_stops(points: list[dict], patience: int) -> bool:
    return not any(should_stop(points[: j + 1], patience).stop for j in range(len(points)))


def test_the_measured_curves_still_rising_at_3000_steps_are_not_stopped():
    """Issue 42's curves at 500-3,000 steps (seed 0, and a seed the benchmarks never used) were still rising:
    continued SFT gained on them. The rule keeps training both (and 3,000 steps would have cut both short)."""
    for rates in ((0.010, 0.083, 0.337, 0.550, 0.627, 0.693), (0.043, 0.070, 0.313, 0.400, 0.470, 0.497)):
        assert _never_stops(_curve(*rates), patience=3), rates


def test_a_run_that_hits_its_cap_says_whether_it_was_still_rising():
    """The chain's stop line (``why_stopped``): the issue's seed-0 curve cut at 3,000 steps hit its cap while still
    rising; a curve whose last evaluations brought no gain says how many of its patience it had used."""
    from training.plateau import why_stopped

    rising = _curve(0.010, 0.083, 0.337, 0.550, 0.627, 0.693)
    why = why_stopped(should_stop(rising, 3), rising, 3000, 3, 1.0)
    assert why["rule"] == "cap" and why["rising"]
    assert why["text"].startswith("hit the step cap (3000) while still rising")
    flat = _curve(0.30, 0.60, 0.60, 0.60)[:3]
    why = why_stopped(should_stop(flat, 3), flat, 1500, 3, 1.5)
    assert why["rule"] == "cap" and not why["rising"]
    assert why["text"].startswith("hit the step cap (1500) with 1 of 3 evaluations without a gain over the best (step")
    assert why["text"].endswith("by more than 1.5x its paired SE")


def test_patience_carries_a_false_plateau_at_the_floor_and_stops_at_the_real_one_keeping_the_best():
    """Flat at its guessing floor for 1,500 steps (two evaluations without a gain after the first), then it learns
    (0.31, 0.65), then it plateaus at 0.70: with 2 evaluations of patience the rule stops on the floor and loses the
    whole rise; with 3 (the recipe's) it trains through the floor and stops 3 evaluations after the plateau's best
    (a plateau point's noise may beat the best by more than one SE: that costs a window, not the rise)."""
    points = _curve(0.03, 0.03, 0.03, 0.31, 0.65, *[0.70] * 8)
    floor = should_stop(points[:3], patience=2)
    assert floor.stop and floor.best == 500 and floor.waited == 2  # the false plateau fools a short window
    assert _never_stops(points[:6], patience=3)  # through the floor and the rise
    stops = [j for j in range(len(points)) if should_stop(points[: j + 1], patience=3).stop]
    assert stops and points[stops[0]]["step"] > 3000  # after the rise, at the plateau
    verdict = should_stop(points[: stops[0] + 1], patience=3)
    assert verdict.waited == 3 and verdict.best >= 2500  # the best: a point of the plateau
    kept = best_point(points[: stops[0] + 1])  # what training.choose keeps: the highest point, not the last
    assert kept["pass_at_1"] >= max(p["pass_at_1"] for p in points[: stops[0] + 1])


def test_a_slow_creep_counts_as_a_gain_once_it_adds_up_and_noise_does_not():
    """The best so far is the last point that beat its predecessor best by more than the margin, so gains under
    one SE each add up against it (a curve creeping up is not stopped), while a flat curve's noise is not a gain;
    identical points (SE 0) are no gain; the margin is a multiple of the SE."""
    creep = _curve(0.50, 0.53, 0.56, 0.59, 0.62, 0.65, 0.68, 0.71, 0.74)
    assert _never_stops(creep, patience=3)
    flat = _curve(0.60, 0.60, 0.60, 0.60)
    assert should_stop(flat, patience=3).stop
    same = [{**flat[0], "step": 500 * (i + 1)} for i in range(3)]
    assert should_stop(same, patience=2).stop and should_stop(same, patience=2, min_delta=0.0).stop
    rising = _curve(0.30, 0.40)
    assert not should_stop(rising, patience=1).stop  # +0.10: several SEs
    assert should_stop(rising, patience=1, min_delta=100.0).stop  # a margin of 100 SEs is not met
    with pytest.raises(ValueError, match="patience"):
        should_stop(rising, patience=0)


# ------------------------------------------------------------------------------------------ the SFT step itself
def _setup(tmp_path):
    """The built-in tiny model, 32 SFT rows and 8 validation problems (the smallest real SFT run)."""
    from curate.ingest.generate import generate
    from curate.prompts import sft_row
    from training.tiny import TinyConfig, init_tiny

    model = init_tiny(tmp_path / "init", TinyConfig(size="tiny", corpus_problems=300, vocab_size=400))
    rows = [sft_row(p["problem"], p["solution"]) for p in generate(32, seed=0, family="arith", max_level=1)]
    pl.DataFrame(rows).write_parquet(tmp_path / "sft.parquet")
    problems = list(generate(8, seed=1, family="arith", max_level=1))
    pl.DataFrame({"problem_id": [f"v{i}" for i in range(8)], "problem": [p["problem"] for p in problems],
                  "answer": [p["answer"] for p in problems]}).write_parquet(tmp_path / "val.parquet")  # fmt: skip
    return str(model)


SCRIPT = {2: 0, 4: 3, 6: 6}  # solved validation problems (of 8) at each step: rising to step 6, then flat at 6


def _scripted(monkeypatch, calls: list[int], fail_at: int | None = None):
    """``training.plateau``'s ``evaluate``: the real evaluation of the checkpoint, its scores then replaced by
    ``SCRIPT``'s; ``fail_at``: the first evaluation of that step dies (a kill between a save and its point)."""
    import training.plateau as plateau_mod
    from training.evaluate import evaluate, summarize
    from training.run_folder import checkpoint_step

    def scripted(model_dir, problems, cfg, **kw):
        step = checkpoint_step(model_dir)
        calls.append(step)
        if step == fail_at and calls.count(step) == 1:
            raise KeyboardInterrupt  # what a kill leaves: the checkpoint saved, its point not taken
        result = evaluate(model_dir, problems, cfg, **kw)
        solved = SCRIPT.get(step, 6)
        table = result["per_problem"].with_columns(mean=pl.Series([1.0 * (i < solved) for i in range(8)]),
                                                   scored=pl.lit(True))  # fmt: skip
        return {**result, **summarize(table, cfg.k), "per_problem": table}

    monkeypatch.setattr(plateau_mod, "evaluate", scripted)


def _train(tmp_path, model: str, out: str):
    from training.evaluate import EvalConfig
    from training.plateau import EarlyStop
    from training.sft import SFTRunConfig, train_sft

    cfg = SFTRunConfig(learning_rate=1e-3, max_steps=40, per_device_batch_size=4, max_length=256, save_steps=2,
                       save_total_limit=None, warmup_ratio=0.0, torch_threads=1, logging_steps=10)  # fmt: skip
    early = EarlyStop(problems=str(tmp_path / "val.parquet"), patience=2,
                      eval=EvalConfig(k=1, max_new_tokens=8, batch_size=8, threads=1, device="cpu"))  # fmt: skip
    return train_sft(cfg, model=model, data=tmp_path / "sft.parquet", out_dir=tmp_path / out, validation=early)


@pytest.mark.slow
def test_sft_stops_a_real_run_at_its_plateau_and_a_killed_run_resumes_with_its_points(tmp_path, monkeypatch):
    """A 40-step cap, a point every 2 steps, patience 2: validation rises to step 6 and is flat after, so SFT stops
    at step 10 (steps 8 and 10 without a gain), not at 40, and says why. Killed while evaluating step 6 (checkpoint
    saved, point not taken), the rerun evaluates step 6, resumes from it and stops at step 10 with the same points:
    no point taken twice, none lost. Killed after the rule stopped it (final model not written), a rerun trains
    and evaluates nothing more."""
    from training.plateau import read_curve
    from training.run_folder import checkpoint_step, checkpoints

    model = _setup(tmp_path)
    calls: list[int] = []
    _scripted(monkeypatch, calls)
    metrics = _train(tmp_path, model, "once")
    assert calls == [2, 4, 6, 8, 10] and metrics["steps"] == 10
    stopped = metrics["stopped"]
    assert stopped["rule"] == "plateau" and stopped["best"] == 6 and stopped["cap"] == 40
    assert stopped["text"].startswith("stopped at step 10 of at most 40: no gain over the best (step 6, pass@1 0.750)")
    once = read_curve(tmp_path / "once")["points"]
    assert [p["step"] for p in once] == [2, 4, 6, 8, 10] and [p["pass_at_1"] for p in once][2:] == [0.75] * 3
    assert [checkpoint_step(c) for c in checkpoints(tmp_path / "once" / "checkpoints")] == [2, 4, 6, 8, 10]
    assert metrics["validation_cpu_s"] > 0

    calls.clear()
    _scripted(monkeypatch, calls, fail_at=6)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, model, "killed")
    assert [p["step"] for p in read_curve(tmp_path / "killed")["points"]] == [2, 4]
    again = _train(tmp_path, model, "killed")
    assert calls == [2, 4, 6, 6, 8, 10]  # step 6 once killed, then taken once; 2 and 4 not taken again
    assert again["steps"] == 10 and again["stopped"] == stopped and again["resumed_from"].endswith("checkpoint-6")
    resumed = read_curve(tmp_path / "killed")["points"]
    assert [(p["step"], p["pass_at_1"]) for p in resumed] == [(p["step"], p["pass_at_1"]) for p in once]
    weights = "final/model.safetensors"
    assert (tmp_path / "killed" / weights).read_bytes() == (tmp_path / "once" / weights).read_bytes()  # bit for bit

    calls.clear()
    (tmp_path / "killed" / "metrics.json").unlink()  # killed after the rule stopped it, before its final model
    import shutil

    shutil.rmtree(tmp_path / "killed" / "final")
    last = _train(tmp_path, model, "killed")
    assert calls == [] and last["steps"] == 10 and last["stopped"] == stopped
    assert (tmp_path / "killed" / "final" / "model.safetensors").is_file()


def test_the_early_stop_scores_the_problems_the_choice_scores(tmp_path, monkeypatch):
    """The early stop's validation problems come from the recipe's ``eval.sources``, as the choice's and held-out
    evaluation's do (it scored the pool's frontier band too: 0.557 where the same model scored 0.738)."""
    from types import SimpleNamespace

    import polars as pl

    from training import chain, evaluate
    from training.recipe import load_recipe

    recipe = load_recipe("training/recipes/tiny/fastcurl.yaml")
    seen = {}

    def fake(ws, pool, **kwargs):
        seen.update(kwargs)
        return pl.DataFrame({"problem_id": ["p"]})

    monkeypatch.setattr(evaluate, "heldout_problems", fake)
    spec = chain.early_stop_spec(SimpleNamespace(recipe=recipe, ws=None), tmp_path)
    assert spec is not None and recipe.eval.sources
    assert seen["sources"] == recipe.eval.sources and seen["split"] == recipe.sft.validation.split


SEED2 = (0.043, 0.050, 0.153, 0.317, 0.380, 0.597, 0.393, 0.620, 0.487, 0.533,
         0.777, 0.747, 0.763, 0.773, 0.783, 0.780)  # fmt: skip


def test_the_recipes_patience_carries_the_measured_swing_at_a_high_lr_that_three_did_not():
    """Seed 2's validation curve, 500-8,000 steps (the default recipe trained to its cap): at a high lr the
    checkpoints swing (0.597, 0.393, 0.620, 0.487, 0.533 at 3,000-5,000) before the lr anneals and it rises to 0.78.
    Patience 3 stopped that run at 4,500 (it kept 0.620); the recipe's patience carries it through the swing."""
    from training.recipe import load_recipe

    points = _curve(*SEED2)
    stops = [points[j]["step"] for j in range(len(points)) if should_stop(points[: j + 1], patience=3).stop]
    assert stops and stops[0] <= 5000  # three evaluations fooled by the swing
    patience = load_recipe("training/recipes/tiny/fastcurl.yaml").sft.validation.patience
    assert patience == 5
    kept = [j for j in range(len(points)) if should_stop(points[: j + 1], patience=patience).stop]
    assert not kept or points[kept[0]]["step"] >= 7500  # through the swing, to where the rise has flattened
    assert best_point(points[: (kept[0] + 1) if kept else None])["pass_at_1"] > 0.72
