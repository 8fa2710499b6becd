"""Does RL after SFT make the model better? The whole chain (``training run``), one run per seed, RL against SFT.

For each seed: ``training run --recipe R --set seed=N --out <home>/runs/seedN`` in its own process (curation is
shared through the workspace; each run builds its own model, SFT, measure step and RL curriculum), then from the
run's ``summary.json``: held-out pass@1 after SFT and after the last RL stage on the same problems, the paired
difference with its standard error and z (``training.evaluate.paired_gain``), at the evaluation temperature and at
every other recipe temperature, per group (``eval.by``: the tiny task's chain length), and the run's CPU time
(the process and every training step it ran). The bar of issue 21: RL - SFT > 3 paired SE on each seed at the
evaluation temperature, on held-out problems, within 40 CPU-minutes per seed.

    python bench/bench_rl_chain.py --seeds 0 1 2 --jobs 2 --home /tmp/bench-rl
    python bench/bench_rl_chain.py --set solutions.recheck=true ...   # (a curate recipe key: edit its YAML instead)

Prints one block per seed and a summary table; ``--json FILE`` writes everything. Runs that finished are read back
(rerunning prints the table again without training).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def run_seed(args: argparse.Namespace, seed: int) -> subprocess.Popen:
    out = Path(args.home) / "runs" / f"seed{seed}"
    cmd = [sys.executable, "-m", "training.cli", "run", "--recipe", args.recipe, "--home", args.home,
           "--out", str(out), "--set", f"seed={seed}", "--json"]  # fmt: skip
    for item in args.set or []:
        cmd += ["--set", item]
    log = open(Path(args.home) / f"seed{seed}.log", "w")  # noqa: SIM115 (the child holds it)
    summary = open(Path(args.home) / f"seed{seed}.json", "w")  # noqa: SIM115
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=summary, stderr=log)


def report(seed: int, summary: dict, cpu_s: float | None, wall_s: float | None) -> dict:
    gain = summary.get("gain_over_sft") or {}
    rows = [(gain.get("temperature"), gain), *((float(t), g) for t, g in (gain.get("at_temperature") or {}).items())]
    print(f"\n== seed {seed}: {summary['run_dir']}")
    out = {"seed": seed, "cpu_min": round(cpu_s / 60, 1) if cpu_s else None, "wall_min": round(wall_s / 60, 1)
           if wall_s else None, "at": {}}  # fmt: skip
    for temperature, g in rows:
        if not g:
            continue
        print(f"T={temperature:g}: SFT {g['before_rate']:.3f} -> RL {g['after_rate']:.3f}: {g['gain']:+.3f} ± "
              f"{g['stderr']:.3f} (paired SE, n={g['n_problems']}), z = {g['z']:+.1f}")  # fmt: skip
        for group, gg in (g.get("by") or {}).items():
            line = f"{gg['before_rate']:.3f} -> {gg['after_rate']:.3f}: {gg['gain']:+.3f} ± {gg['stderr']:.3f}"
            print(f"    {group}: {line}")
        out["at"][str(temperature)] = g
    if cpu_s:
        print(f"CPU {cpu_s / 60:.1f} min (run + its steps), wall {wall_s / 60:.1f} min")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default="training/recipes/tiny/fastcurl.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--home", default="/tmp/bench-rl-chain")
    ap.add_argument("--set", action="append", help="a training recipe override for every run (key=value)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    Path(args.home).mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}")
    pending, running, results = list(args.seeds), {}, []
    while pending or running:
        while pending and len(running) < args.jobs:
            seed = pending.pop(0)
            proc = run_seed(args, seed)
            running[proc.pid] = (seed, time.perf_counter())
            time.sleep(20)  # the first run's curation goes first; the next one finds it done (or waits on the lock)
        pid, status, usage = os.wait4(-1, 0)  # its CPU time includes every training step it ran (and waited for)
        seed, t0 = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code:
            print(f"seed {seed} failed with exit code {code}: see {args.home}/seed{seed}.log")
            continue
        summary = json.loads((Path(args.home) / f"seed{seed}.json").read_text())
        results.append(report(seed, summary, usage.ru_utime + usage.ru_stime, time.perf_counter() - t0))
    print(f"\nload average after: {os.getloadavg()}")
    print("\nseed | T    | SFT   | RL    | RL - SFT (paired SE) | z     | CPU-min")
    for r in sorted(results, key=lambda r: r["seed"]):
        for t, g in r["at"].items():
            print(f"{r['seed']:>4} | {float(t):<4g} | {g['before_rate']:.3f} | {g['after_rate']:.3f} | "
                  f"{g['gain']:+.3f} ± {g['stderr']:.3f}       | {g['z']:+5.1f} | {r['cpu_min']}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
