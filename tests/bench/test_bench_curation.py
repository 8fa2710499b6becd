"""``bench/bench_curation.py``'s own logic on stub runs, in seconds (issue 38.10: the old test ran the four arms
through the CLI in a subprocess with a 1,700 s limit, printed nothing for 33 minutes at load 17 and ran out of
time). What the arms run is the chain the training tests cover; here: the commands each arm types, the order the
runs start in (a seed's baselines wait for its curated run, and are dropped when it fails), and the report read back
from finished run folders written the way ``training run`` writes them (``summary.json``, ``chain.json``, the
per-problem tables in ``evals/``): every comparison paired and pooled over seeds, the rollouts and CPU for curated to
reach raw's final pass rate, the waste forecast against the observed, and the modes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import polars as pl
import pytest

from curate import io
from curate import schema as S
from training.outcome import EVALS, checkpoint_eval, eval_file


ROOT = Path(__file__).resolve().parents[2]
TEST = [f"t{i}" for i in range(6)]  # the held-out problems: t0 and t1 leaked into a training source
OPS = dict(zip(TEST, [3, 4, 5, 6, 7, 8], strict=True))


@pytest.fixture
def bench(monkeypatch):
    """The benchmark script as a module, its ``--set`` lists empty."""
    spec = importlib.util.spec_from_file_location("bench_curation", ROOT / "bench" / "bench_curation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "bench_curation", module)
    module.EXTRA.update(all=[], raw=[], curated=[])
    return module


def _pool(home: Path) -> None:
    meta = [json.dumps({"ops": OPS[p]}) for p in TEST]
    leaks = [json.dumps({"ops": 3, "waste": {"copy": {"kind": "leak", "of": p}}}) for p in ("t0", "t1")]
    golds = [json.dumps({"ops": 2, "waste": {"gold": {"kind": "slip", "true": "5"}}}), json.dumps({"ops": 2})] * 2
    frame = pl.DataFrame({S.PROBLEM_ID: [*TEST, "r0", "r1", "g0", "g1", "g2", "g3"],
                          S.SPLIT: ["test"] * 6 + ["train"] * 6, S.META: meta + leaks + golds})  # fmt: skip
    io.write_parquet(frame, home / "pools" / "tiny" / "problems.parquet")


def _table(run: Path, step: str, rates: list[float], temperature: float | None = None) -> None:
    """A step's per-problem held-out table (``training.outcome.eval_file``) and its samples (one per problem: a
    completion that writes as many steps as the problem has operations when the rate is above 0.5)."""
    path = run / EVALS / eval_file(step, temperature)
    io.write_parquet(pl.DataFrame({S.PROBLEM_ID: TEST, "mean": rates, "scored": [True] * len(TEST)}), path)
    steps = [("Add $1$.\n" * (OPS[p] if r > 0.5 else 1)) for p, r in zip(TEST, rates, strict=True)]
    samples = pl.DataFrame({S.PROBLEM_ID: TEST, "completion": steps, "correct": [r > 0.5 for r in rates]})
    io.write_parquet(samples, path.with_suffix(".samples.parquet"))


def finished_run(home: Path, arm: str, seed: int, sft: float, end: float, rl_steps: tuple[int, ...] = ()) -> Path:
    """A run folder as ``training run`` leaves it: an SFT step with pass rate ``sft`` per problem (shifted a little
    per problem), RL stages of ``rl_steps`` steps (8 rollouts each) ending at ``end``, each evaluated at T = 0.6
    and the SFT and last models at T = 1.0 too; RL stages evaluated every 2 steps inside the stage."""
    run = home / "runs" / f"{arm}-seed{seed}"
    shift = [0.0, 0.1, -0.1, 0.2, -0.2, 0.0]  # a mean of 0: a table's pass rate is the rate asked for
    rates = lambda r: [min(1.0, max(0.0, r + d)) for d in shift]  # noqa: E731
    steps: list[dict] = [{"step": "sft", "model": str(run / "sft" / "best")}]  # the checkpoint chosen on validation
    _table(run, "sft", rates(sft))
    notes = {}
    if arm == "rft-iter":  # iterated RFT: its last round (``rft``) at ``end``, its best on validation a little above
        _table(run, "rft", rates(end))
        _table(run, "rft", rates(end - 0.1), temperature=1.0)
        _table(run, "rft:best", rates(end + 0.01))
        notes["rft"] = [{"name": "rounds", "last_step": "rft", "best_step": "rft:best", "rounds": ["r1", "r2"]}]
    elif not rl_steps:  # a baseline: its last model at equal CPU, a little below the checkpoint it chose
        _table(run, "sft-final", rates(sft - 0.05))
        _table(run, "sft-final", rates(sft - 0.15), temperature=1.0)
    _table(run, "sft", rates(sft - 0.1), temperature=1.0)
    timings = [{"step": "sft", "cpu_s": 100.0}]
    offset, last = 0, "sft"
    for k, n in enumerate(rl_steps, 1):
        last, folder = f"rl:stage{k}", run / "rl" / f"{k:02d}-stage{k}"
        io.write_json(folder / "config.json", {"rl": {"prompts_per_step": 2, "num_generations": 4}})
        steps.append({"step": last, "rl_steps": n, "offset_step": offset, "stage_dir": str(folder)})
        at_end = sft + (end - sft) * (offset + n) / sum(rl_steps)
        _table(run, last, rates(at_end))
        for at in range(2, n, 2):
            _table(run, checkpoint_eval(last, at), rates(sft + (end - sft) * (offset + at) / sum(rl_steps)))
        timings.append({"step": last, "cpu_s": 20.0 * n})
        offset += n
    _table(run, last, rates(end - 0.1), temperature=1.0)
    if arm == "rlopt":  # the curriculum its measure built (rft-iter trains on its prompts)
        notes["measure"] = [{"curriculum": {"name": f"tiny-rl.{run.name}", "kept": 4}}]  # its record
    if arm == "curated":  # its headroom report: g0 and g2 carry wrong golds; g0 and g1 were flagged
        io.write_json(run / "headroom" / "headroom.json", {"totals": {"prompts": 4, "rl": 1, "rl_ceiling": 0.5}})
        io.write_parquet(
            pl.DataFrame({S.PROBLEM_ID: ["g0", "g1", "g2", "g3"]}), run / "headroom" / "headroom-prompts.parquet"
        )
        io.write_parquet(pl.DataFrame({S.PROBLEM_ID: ["g0", "g1"], "reason": ["gold_vs_reference", "gold_consensus"]}),
                         run / "headroom" / "headroom-suspects.parquet")  # fmt: skip
        timings.insert(1, {"step": "measure", "cpu_s": 30.0})
        measured = {"selection": f"tiny-rl.{run.name}"}
        notes["measure"] = [{"model": str(run / "sft" / "final"), "ledger_model": f"runs/{run.name}/sft/final",
                             "select": measured, "rollout": {"samples_generated": 64}}]  # fmt: skip
    io.write_json(run / "chain.json", {"steps": steps, "notes": notes})
    io.write_json(run / "sft" / "metrics.json", {"steps": 50})
    waste = {"forecast": {"share": 0.4, "stderr": 0.05, "rollouts": 8}, "observed": 0.375, "groups": 16}
    io.write_json(run / "summary.json", {"timings": timings, "zero_variance": waste if rl_steps else None})
    return run


ARMS = {  # (sft, end, RL stages): curated RL gains 0.2 over 4 steps, raw 0.15 over 6; the baselines' own SFT
    "curated": (0.40, 0.60, (2, 2)),
    "raw": (0.30, 0.45, (6,)),
    "sftmore": (0.45, 0.45, ()),
    "rft": (0.42, 0.42, ()),
    "rlopt": (0.45, 0.50, (2, 2)),  # RL from sftmore's chosen model (0.45): +0.05
    "rft-iter": (0.45, 0.47, ()),  # iterated RFT from the same model, on rlopt's prompts: +0.02 (best round +0.03)
}


def test_each_arm_runs_what_a_user_types(bench, tmp_path):
    home = tmp_path / "h"
    bench.EXTRA.update(all=["eval.k=1"], raw=["rl.max_steps=6"], curated=["measure.select.size=8"])
    (curated,) = bench.commands("curated", home, 3)
    assert curated[1:5] == ["-m", "training.cli", "run", "--recipe"] and curated[5] == bench.CURATED
    assert curated[curated.index("seed=3") - 1] == "--set"
    assert "eval.k=1" in curated and "measure.select.size=8" in curated and "eval.every=5" in curated
    (raw,) = bench.commands("raw", home, 3)
    assert raw[5] == bench.RAW and "rl.max_steps=6" in raw and "measure.select.size=8" not in raw

    finished_run(home, "curated", 3, *ARMS["curated"])
    sftmore, final = bench.commands("sftmore", home, 3)
    # SFT continued for what curated's RL cost: its RL CPU (80 s) over its SFT's per step (100 s / 50 steps), from
    # the SFT model curated's RL started from (its best checkpoint on validation), keeping 4 checkpoints to choose from
    assert "sft.max_steps=40" in sftmore and f"model={home / 'runs/curated-seed3/sft/best'}" in sftmore
    assert "sft.validation.every=10" in sftmore
    assert "sft.validation.patience=null" in sftmore  # equal CPU: all its steps, not stopped at a plateau
    metrics = home / "runs" / "curated-seed3" / "sft" / "metrics.json"
    io.write_json(metrics, {"steps": 50, "validation_cpu_s": 50.0})  # half its SFT CPU went to validation points
    assert bench.baseline_steps(home, 3) == 80  # 80 s of RL over (100 - 50) s / 50 steps
    io.write_json(metrics, {"steps": 50})
    assert "curriculum=null" in sftmore and "measure=null" in sftmore and "name=tiny-sftmore" in sftmore
    assert final[-2:] == ["--eval-final", str(home / "runs" / "sftmore-seed3")]  # its last model, at equal CPU
    make, check, train, _ = bench.commands("rft", home, 3)
    assert make[1:4] == ["run", "--recipe", bench.RFT_RECIPE]
    assert "solutions.models=[runs/curated-seed3/sft/final]" in make  # the ledger's name for the measured model
    assert "solutions.selection=tiny-rl.curated-seed3" in make and f"{bench.NO_SAMPLES})" in check[-1]
    assert f"sft.data={home / 'solutions/rft-seed3/sft.parquet'}" in train
    finished_run(home, "sftmore", 3, *ARMS["sftmore"])
    (rlopt,) = bench.commands("rlopt", home, 3)  # the curated recipe's measure and RL from sftmore's chosen model
    assert rlopt[5] == bench.CURATED and f"model={home / 'runs/sftmore-seed3/sft/best'}" in rlopt
    assert "sft=null" in rlopt and "eval.every=5" not in rlopt
    finished_run(home, "rlopt", 3, *ARMS["rlopt"])
    (rft_iter,) = bench.commands("rft-iter", home, 3)  # iterated RFT from rlopt's start, its prompts, its RL's CPU
    assert rft_iter[5] == bench.CURATED and f"model={home / 'runs/sftmore-seed3/sft/best'}" in rft_iter
    assert "curriculum=tiny-rl.rlopt-seed3" in rft_iter and "measure=null" in rft_iter and "sft=null" in rft_iter
    assert "rft.cpu_budget=80" in rft_iter  # rlopt's two RL stages of 2 steps, 20 CPU-s a step


def test_baselines_wait_for_their_curated_run_and_a_failed_one_drops_them(bench, tmp_path, monkeypatch, capsys):
    """Two seeds, two jobs at once: each arm is a stub process that writes its run folder and exits (curated of
    seed 1 fails; rft of seed 0 finds no verified sample). The baselines of a seed start only once its curated run
    has finished, those of the failed seed never, and every run's CPU is recorded. (Before, a run that ended while
    another started was reaped by subprocess and never seen by ``os.wait4``: "No child processes".)"""
    home, started = tmp_path / "h", []

    def launch(arm, home_, seed):
        import subprocess

        done = {"sftmore": True, "rft": False}.get(arm, True) and not (arm == "curated" and seed == 1)
        if arm not in ("curated", "raw"):
            after = bench.WAITS.get(arm, "curated")
            assert bench.finished(home_, after, seed), f"{arm} of seed {seed} started before {after} finished"
        started.append(f"{arm}-seed{seed}")
        if done:
            finished_run(home_, arm, seed, *ARMS[arm])
        code = 0 if done else (bench.NO_SAMPLES if arm == "rft" else 1)
        return subprocess.Popen([sys.executable, "-c", f"import time, sys; time.sleep(0.2); sys.exit({code})"])

    monkeypatch.setattr(bench, "launch", launch)
    cpu = bench.run_all(home, list(bench.ARMS), [0, 1], jobs=2)
    out = capsys.readouterr().out
    assert sorted(started) == ["curated-seed0", "curated-seed1", "raw-seed0", "raw-seed1", "rft-iter-seed0",
                               "rft-seed0", "rlopt-seed0", "sftmore-seed0"]  # fmt: skip
    assert set(cpu) == set(started) and all(c >= 0 for c in cpu.values())
    assert "no verified sample on the RL prompts" in out and "see " in out and "curated-seed1.log" in out
    assert set(bench.run_all(home, list(bench.ARMS), [0], jobs=2)) == {"rft-seed0"}  # a rerun: only what is missing


NAMED = ("curated - raw, equal rollouts (raw 60 = 40 + measure)", "RL - SFT continued (equal CPU)",
         "curated SFT - raw SFT (verified traces vs all)", "RL - rejection-sampling FT (equal CPU)")  # fmt: skip


def test_the_report_pairs_every_comparison_pools_seeds_and_finds_the_rollouts_to_target(bench, tmp_path, capsys):
    home = tmp_path / "h"
    _pool(home)
    for seed in (0, 1):
        for arm, (sft, end, stages) in ARMS.items():
            finished_run(home, arm, seed, sft + 0.02 * seed, end + 0.02 * seed, stages)
    results = bench.report(home, [0, 1], {"curated-seed0": 600.0})
    out = capsys.readouterr().out

    assert set(results["runs"]) == {f"{a}-seed{s}" for a in ARMS for s in (0, 1)}
    assert results["leaked"] == ["t0", "t1"] and results["test"] == 6
    curated = results["runs"]["curated-seed0"]
    assert curated["sft@0.6"] == pytest.approx(0.4) and curated["end@0.6"] == pytest.approx(0.6)
    assert curated["zero_variance"]["forecast"]["rollouts"] == 8 and curated["zero_variance"]["groups"] > 0
    assert curated["modes_end"]["finished"] == pytest.approx(4 / 6)  # the problems above 0.5 write every step
    for temperature in ("T=0.6", "T=1.0"):
        comps = results[f"comparisons@{temperature}"]
        for name in NAMED:
            pooled = comps[name]["pooled"]
            assert pooled["seeds"] == 2 and pooled["seed_stderr"] is not None, name
    equal_steps = results["comparisons@T=0.6"]["curated - raw, equal RL steps"]
    assert equal_steps["pooled"]["gain"] == pytest.approx(0.6 - 0.4)  # raw after 4 of its 6 steps: 0.3 + 0.15 * 4/6
    assert results["comparisons@T=1.0"]["curated - raw, equal RL steps"]["pooled"] is None  # checkpoints: T=0.6 only
    assert set(results["leaked_only"]["curated - raw, equal RL steps"]["per_seed"]) == {0, 1}

    # raw's final 0.45 after 6 x 8 rollouts and 120 CPU-s; curated, from 0.4 after measure (64 rollouts, 30 CPU-s),
    # reaches 0.5 at the end of its first stage (2 x 8 rollouts, 40 CPU-s): 0.45 halfway through it
    target = results["to_target"][0]
    assert (target["target"], target["target_rollouts"], target["target_cpu_s"]) == (pytest.approx(0.45), 48, 120)
    assert (target["rollouts"], target["cpu_s"]) == (pytest.approx(72), pytest.approx(50))
    assert target["rollout_ratio"] == pytest.approx(1.5) and target["cpu_ratio"] == pytest.approx(50 / 120)
    continued = results["comparisons@T=0.6"]  # a baseline at equal CPU (its last model) and at its chosen checkpoint
    assert continued["RL - SFT continued (equal CPU)"]["per_seed"][0]["gain"] == pytest.approx(0.6 - 0.40)
    best = continued["RL - SFT continued, its best checkpoint on validation"]["per_seed"][0]["gain"]
    assert best == pytest.approx(0.6 - 0.45)
    h = results["headroom"]["curated-seed0"]  # before RL: the middle, the suspects against the planted golds
    assert (h["middle"], h["ceiling"], h["wrong_golds"], h["recall"], h["precision"]) == (0.25, 0.5, 2, 0.5, 0.5)
    assert h["by_reason"] == {
        "gold_vs_reference": {"flagged": 1, "right": 1},
        "gold_consensus": {"flagged": 1, "right": 0},
    }
    assert (h["forecast"], h["observed"]) == (0.4, 0.375) and h["start"] == pytest.approx(0.40)
    plateau = results["comparisons@T=0.6"]["RL from SFT's plateau - its start (SFT continued, chosen on validation)"]
    assert plateau["per_seed"][1]["gain"] == pytest.approx(0.05)  # rlopt's end against sftmore's chosen model
    assert results["runs"]["rlopt-seed1"]["sft@0.6"] == pytest.approx(0.47)  # its start: that model, not its own
    iterated = results["comparisons@T=0.6"]  # RL against iterated RFT from the same start: at its end, its best round
    assert iterated["RL - iterated RFT (equal CPU)"]["per_seed"][0]["gain"] == pytest.approx(0.50 - 0.47)
    assert iterated["RL - iterated RFT, its best round on validation"]["pooled"]["gain"] == pytest.approx(0.02)
    assert results["comparisons@T=1.0"]["RL - iterated RFT (equal CPU)"]["pooled"]["seeds"] == 2
    assert results["runs"]["rft-iter-seed0"]["sft@0.6"] == pytest.approx(0.45)  # its start: sftmore's chosen model
    for line in ("== paired differences at T=0.6", "== rollouts and CPU for curated to reach raw's final", "== modes"):
        assert line in out
    quote = bench.quote(results, [0, 1])
    assert quote["per_seed"]["raw"][1] == {"sft": pytest.approx(0.32), "end": pytest.approx(0.47)}
    assert "curated - raw, equal RL steps" in quote["pooled"]
    assert "--arms" not in quote["command"]
    part = bench.quote(results, [0, 1], ["curated", "sftmore"])  # a grid cut to some arms says so in its command
    assert part["command"].endswith("--seeds 0 1 --arms curated sftmore") and set(part["per_seed"]) <= set(bench.ARMS)
