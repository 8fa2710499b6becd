"""``bench/bench_frontier.py``'s own logic on stub run folders, in seconds: what each arm types (RL from the plateau
model SFT chose, RFT on RL's prompts for RL's CPU, continued SFT for as many steps as RL's CPU buys), the order the
runs start in (an arm waits for the runs it reads; a failed run drops the arms that need it; a rerun starts only what
is missing), RL's learning curve with its frontier apart, and the test-split comparisons paired per seed, per band."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from curate import io
from curate import schema as S
from training.outcome import EVALS, checkpoint_eval, eval_file


ROOT = Path(__file__).resolve().parents[2]
OPS = {"v3": 3, "v8": 8, "v9": 9, "v12": 12, "t3": 3, "t8": 8, "t9": 9, "t12": 12}  # validation and test problems


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_frontier", ROOT / "bench" / "bench_frontier.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_frontier", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _pool(home: Path) -> None:
    ids = [*OPS, "r0"]
    frame = pl.DataFrame({S.PROBLEM_ID: ids, S.SPLIT: [("validation" if p[0] == "v" else "test") for p in OPS]
                          + ["train"], S.META: [json.dumps({"ops": OPS.get(p, 3)}) for p in ids]})  # fmt: skip
    io.write_parquet(frame, home / "pools" / "tiny" / "problems.parquet")


def _table(run: Path, name: str, short: float, long: float, split: str = "t", temperature: float | None = None):
    """A per-problem table: pass rate ``short`` on 3-8 operations, ``long`` at the frontier (9-12)."""
    ids = [p for p in OPS if p[0] == split]
    rates = [short if OPS[p] < 9 else long for p in ids]
    io.write_parquet(pl.DataFrame({S.PROBLEM_ID: ids, "mean": rates, "scored": [True] * len(ids)}),
                     run / EVALS / eval_file(name, temperature))  # fmt: skip


def _tests(run: Path, points: dict[str, tuple[float, float]]) -> None:
    for name, (short, long) in points.items():
        for temp in (None, 1.0):
            _table(run, "test:" + name, short, long, temperature=temp)


def plateau(home: Path, seed: int, short: float = 0.9, long: float = 0.1) -> Path:
    run = home / "runs" / f"plateau-seed{seed}"
    io.write_json(run / "chain.json", {"steps": [{"step": "sft", "model": str(run / "sft" / "best")}]})
    io.write_json(run / "summary.json", {"timings": [{"step": "sft", "cpu_s": 150.0}]})
    io.write_json(run / "sft" / "metrics.json", {"steps": 50, "validation_cpu_s": 50.0, "stopped": "plateau"})
    chosen = {"pass_at_1": 0.74, "stderr": 0.03, "step": 40, "steps": 50, "n_problems": 150, "k": 2}
    io.write_json(run / "sft" / "validation.json", {"chosen": chosen})
    _tests(run, {"start": (short, long)})
    return run


def rl(home: Path, seed: int, short: float = 0.9, long: float = 0.3) -> Path:
    """4 RL steps (2 prompts x 4 rollouts), a checkpoint at 2 evaluated on validation (better at the frontier than
    the end), 80 CPU-s of RL after 30 of measure."""
    run, start = home / "runs" / f"rl-seed{seed}", home / "runs" / f"plateau-seed{seed}" / "sft" / "best"
    stage = run / "rl" / "01-stage2"
    io.write_json(stage / "config.json", {"rl": {"prompts_per_step": 2, "num_generations": 4}})
    (stage / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    rec = {"step": "rl:stage2", "rl_steps": 4, "offset_step": 0, "stage_dir": str(stage), "model": str(stage / "m")}
    measure = [
        {"curriculum": {"name": f"tiny-frontier.rl-seed{seed}", "kept": 4}, "rollout": {"samples_generated": 64}}
    ]
    io.write_json(run / "chain.json", {"steps": [{"step": "init", "model": str(start)}, rec],
                                       "notes": {"measure": measure}})  # fmt: skip
    io.write_json(run / "summary.json", {"timings": [{"step": "measure", "cpu_s": 30.0},
                                                     {"step": "rl:stage2", "cpu_s": 80.0}]})  # fmt: skip
    _table(run, "init", 0.9, 0.1, "v")
    _table(run, checkpoint_eval("rl:stage2", 2), 0.9, 0.6, "v")
    _table(run, "rl:stage2", 0.9, 0.4, "v")
    _table(run, "rl:stage2", 0.8, 0.3, "v", temperature=1.0)
    _tests(run, {"end": (short, long), "best": (short, long + 0.05)})
    return run


def baseline(home: Path, arm: str, seed: int, short: float, long: float) -> Path:
    run = home / "runs" / f"{arm}-seed{seed}"
    steps = [{"step": "sft", "model": str(run / "sft" / "best")}]
    notes = {}
    if arm == "rft":
        steps += [{"step": "rft", "model": str(run / "rft" / "r2")}, {"step": "rft:best", "model": str(run / "r1")}]
        notes["rft"] = [{"name": "rounds", "last_step": "rft", "best_step": "rft:best"}]
    io.write_json(run / "chain.json", {"steps": steps, "notes": notes})
    io.write_json(run / "summary.json", {"timings": []})
    _tests(run, {"end": (short, long), "best": (short, long)})
    return run


def test_each_arm_runs_what_a_user_types_from_the_runs_it_reads(bench, tmp_path):
    home = tmp_path / "h"
    run, test = bench.commands("plateau", home, 3)
    assert run[1:6] == ["-m", "training.cli", "run", "--recipe", bench.DEFAULT] and "seed=3" in run
    assert "measure=null" in run and "curriculum=null" in run  # SFT only: the early stop's plateau model
    assert test[-4:] == ["--test-eval", "plateau", "--seeds", "3"]
    plateau(home, 3)
    (rl_run, _) = bench.commands("rl", home, 3)
    assert rl_run[5] == bench.FRONTIER and f"model={home / 'runs/plateau-seed3/sft/best'}" in rl_run
    rl(home, 3)
    (rft, _) = bench.commands("rft", home, 3)
    assert rft[5] == bench.FRONTIER and f"model={home / 'runs/plateau-seed3/sft/best'}" in rft
    assert "curriculum=tiny-frontier.rl-seed3" in rft and "measure=null" in rft  # the prompts RL trained on
    assert "rft.cpu_budget=80" in rft  # RL's 80 CPU-s, its measure not counted
    (sftmore, _) = bench.commands("sftmore", home, 3)
    # RL's 80 CPU-s over the plateau SFT's (150 - 50 validation) / 50 steps = 2 CPU-s a step: 40 steps
    assert "sft.max_steps=40" in sftmore and "sft.validation.every=10" in sftmore
    assert "sft.validation.patience=null" in sftmore  # equal CPU: every step, no early stop
    assert f"sft.data={home / 'runs/plateau-seed3/data/sft.parquet'}" in sftmore  # the plateau's verified traces


def test_arms_wait_for_what_they_read_and_a_failed_run_drops_its_dependents(bench, tmp_path, monkeypatch, capsys):
    """Two seeds, two jobs: each arm a stub process that writes its run folder; seed 1's rl run fails, so its rft and
    sftmore never start. A rerun starts only what is missing."""
    home, started = tmp_path / "h", []
    _pool(home)
    make = {"plateau": plateau, "rl": rl, "rft": lambda h, s: baseline(h, "rft", s, 0.9, 0.2),
            "sftmore": lambda h, s: baseline(h, "sftmore", s, 0.9, 0.15)}  # fmt: skip

    def launch(arm, home_, seed):
        for need in bench.ARMS[arm].needs:
            assert bench.tested(home_, need, seed), f"{arm} of seed {seed} started before {need} was tested"
        started.append(f"{arm}-seed{seed}")
        ok = not (arm == "rl" and seed == 1)
        if ok:
            make[arm](home_, seed)
        return subprocess.Popen([sys.executable, "-c", f"import time, sys; time.sleep(0.1); sys.exit({int(not ok)})"])

    monkeypatch.setattr(bench, "launch", launch)
    bench.run_all(home, list(bench.ARMS), [0, 1], jobs=2)
    assert sorted(started) == ["plateau-seed0", "plateau-seed1", "rft-seed0", "rl-seed0", "rl-seed1", "sftmore-seed0"]
    assert "rl-seed1.log" in capsys.readouterr().out
    started.clear()
    bench.run_all(home, list(bench.ARMS), [0, 1], jobs=2)
    assert started == ["rl-seed1"]  # only the failed run is tried again; its dependents still wait for it


def test_the_curve_and_the_comparisons_keep_the_frontier_apart(bench, tmp_path, capsys):
    home = tmp_path / "h"
    _pool(home)
    for seed in (0, 1):
        plateau(home, seed, 0.9, 0.1)
        rl(home, seed, 0.9, 0.3 + 0.1 * seed)
        baseline(home, "rft", seed, 0.9, 0.2)
        baseline(home, "sftmore", seed, 0.85, 0.15)
    curve = bench.rl_curve(home, 0)
    assert [(p["step"], p["rollouts"], p["cpu_s"]) for p in curve] == [(0, 64, 30), (2, 80, 70), (4, 96, 110)]
    assert [p["frontier@0.6"] for p in curve] == [0.1, 0.6, 0.4] and curve[-1]["pass@1"] == pytest.approx(0.55)
    points = bench.points(home, "rl", 0)
    assert points["best"].endswith("checkpoint-2") and points["end"].endswith("/m")  # best on validation: step 2
    results = bench.report(home, [0, 1])
    comps = results["comparisons@T=0.6"]
    start = comps["RL - its start (the plateau)"]
    assert start["3-8 ops"]["pooled"]["gain"] == pytest.approx(0.0)
    assert start["frontier (9-12 ops)"]["pooled"]["gain"] == pytest.approx(0.25)  # +0.2 and +0.3 over seeds 0, 1
    assert start["all"]["pooled"]["gain"] == pytest.approx(0.125) and start["all"]["pooled"]["seeds"] == 2
    rft = comps["RL - iterated RFT (equal CPU)"]["frontier (9-12 ops)"]["per_seed"]
    assert [round(g["gain"], 3) for g in rft.values()] == [0.1, 0.2]
    assert results["band"][0]["chosen_step"] == 40 and results["band"][0]["stopped"] == "plateau"
    out = capsys.readouterr().out
    assert "seed 0: 0.740 ± 0.030 at step 40 of 50" in out and "RL - continued SFT (equal CPU)" in out


def test_the_table_renders_what_the_report_wrote_and_says_what_has_not_run(bench, tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import tables

    home = tmp_path / "h"
    _pool(home)
    plateau(home, 0)
    results = json.loads(json.dumps({"measured": {"date": "d", "command": "c"}, **bench.report(home, [0])}))
    text = "\n".join(tables.frontier(results))
    assert "| 0 | - | 40 | 50 | 0.740 ± 0.030 | 0.500 | plateau |" in text  # test: 0.9 on 3-8 ops, 0.1 at 9-12
    assert "No RL point evaluated yet" in text and "| RL - its start (the plateau) | not run yet |" in text
