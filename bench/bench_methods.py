"""Each method's share of what curation buys, on the built-in pool with waste (issue 29): leave-one-out arms.

Every arm is the curated arm of ``bench/bench_curation.py`` (``training/recipes/tiny/fastcurl.yaml``, the project's
defaults) with one part replaced, run with ``training run --set ...`` (printed, so each reruns from the CLI), at equal
RL compute (40 steps of 256 rollouts), in the same workspace and, within a seed, from the curated arm's SFT model
(``--set model=<curated>/sft/final --set sft=null``: its ``measure`` rollouts are in the ledger and are reused),
except ``unverified``, which is about the SFT data: it starts from the raw arm's SFT model (every teacher trace,
with the curated recipe's SFT settings and seed: the same SFT step, so it is borrowed, not trained again).

- ScalingRL: ``random`` (a uniform 300 of the measured candidates, no filters) and ``full`` (every measured
  candidate, no solved / zero-variance filter) in place of the DES selection of 300;
- the curriculum sampler: ``uniform`` (a random permutation per epoch; no zero-variance skip, no
  no-positive-resampling) in place of the scalingrl policy with ScaleRL's filters;
- verified solutions: ``unverified`` (SFT on every teacher trace, ``solutions/tiny-raw``: the raw arm's SFT model;
  537 of its 6,017 traces are wrong, 8.9%, by the pool's ground truth, meta ``waste``; 817, 13.6%, disagree with
  their gold, 287 of them right traces under a wrong gold), the rest curated (``measure`` of that model, DES
  selection, the sampler);
- decontamination: ``nodecon`` (the RL selection keeps the test split's reworded copies); reported on the leaked
  test problems and on the clean ones apart, so the inflation shows;
- dedup: ``nodedup`` (the RL selection keeps near duplicates);
- FastCuRL: ``single`` (one 40-step stage over every prompt at the largest context, 384 tokens, the lr decayed
  linearly) against the staged plan, compared at equal RL completion tokens, with the truncation rate;
- ScaleRL's fit: the sigmoid fitted on the first half (by RL tokens) of the curated arm's eval curve (every 5 steps),
  extrapolated to its end, against the measured end and the "no further gain" baseline.

Per arm, per seed and pooled (the mean of per-seed paired differences, SE = sqrt(sum of variances) / n): held-out
pass@1 (300 test problems x 4 at T = 0.6) minus the curated arm's, at the early budget (10 RL steps) and at the end;
rollouts and CPU-seconds to reach the curated arm's end (where reached); the kept-group fraction; the truncation rate.

    python bench/bench_curation.py --seeds 0 1 2 --home /tmp/bench-curation --arms curated raw   # the base runs
    python bench/bench_methods.py --seeds 0 1 2 --jobs 2 --home /tmp/bench-curation --json bench/json/methods.json
    python bench/bench_methods.py --report-only --home /tmp/bench-curation --json /tmp/methods.json
    python bench/tables.py     # bench/README.md's table (and README.md's headline) from bench/json/

Finished runs are read back; a rerun trains only what is missing and draws ``<home>/methods.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_curation import (
    CURATED,
    ROOT,
    finished,
    fmt,
    held_out,
    measured_at,
    paired,
    pooled,
    rate,
    run_dir,
    step_cpu,
    steps_of,
    summary,
    table,
    to_target,
)


EARLY = 10  # the early budget: RL steps (of 40)
BUDGETS = (2e5, 5e5, 1e6)  # RL completion tokens at which FastCuRL's staged and one-stage arms are compared
NO_FILTERS = ("measure.select.drop_solved=false", "measure.select.drop_zero_variance=false")
ARMS: dict[str, tuple[str, tuple[str, ...]]] = {  # name -> (claim, --set items over the curated arm)
    "random": ("ScalingRL", ("measure.select.by=random", *NO_FILTERS)),
    "full": ("ScalingRL", ("measure.select.size=0", *NO_FILTERS)),
    "uniform": ("sampler", ("rl.policy=uniform", "rl.sampler.zero_variance_skip=false",
                            "rl.sampler.no_positive_resampling=false")),
    "unverified": ("verified solutions", ()),  # the model: sft_arm
    "nodecon": ("decontamination", ("measure.select.drop_contaminated=false",)),
    "nodedup": ("dedup", ("measure.select.drop_duplicates=false",)),
    "single": ("FastCuRL", ("only_stages=[stage2]", "stages.stage2.max_steps=40",
                            "stages.stage2.max_completion_length=384", "stages.stage2.learning_rate=1.0e-4",
                            "stages.stage2.warmup_steps=5", "stages.stage2.lr_scheduler_type=linear")),
}  # fmt: skip
WHAT = {  # what replaces the part, as the tables say it (bench/tables.py)
    "random": "a random 300 of the measured candidates", "full": "the whole measured pool",
    "uniform": "uniform sampling, no filters", "unverified": "SFT on every teacher trace",
    "nodecon": "the RL selection keeps the test split's reworded copies", "nodedup": "near-duplicates kept",
    "single": "one stage at the largest context (384)",
}  # fmt: skip
SFT_FROM = {"unverified": "raw"}  # arm -> the bench_curation arm whose SFT model it starts from (else curated)
EVERY = {"single": 5}  # eval.every: stage ends (10 steps) give the early budget; the one-stage arm needs a curve


def sft_arm(arm: str) -> str:
    """The arm whose SFT model (and its held-out table) this arm starts from. ``unverified`` fine-tunes on every
    teacher trace with the curated recipe's SFT settings and seed: that is the raw arm's SFT step (the same data,
    settings, seed and from-scratch model; bench_curation.py's raw recipe), so it borrows that model."""
    return SFT_FROM.get(arm, "curated")


def commands(arm: str, home: Path, seed: int) -> list[str]:
    """``training run`` of one arm at one seed (what a user types to rerun it)."""
    sets = [f"seed={seed}", "eval.temperatures=[]", f"eval.every={EVERY.get(arm, 10)}", *ARMS[arm][1]]
    sets += [f"model={run_dir(home, sft_arm(arm), seed) / 'sft' / 'final'}", "sft=null"]
    cmd = [sys.executable, "-m", "training.cli", "run", "--recipe", CURATED, "--home", str(home), "--out",
           str(run_dir(home, arm, seed)), "--json"]  # fmt: skip
    return cmd + [x for s in sets for x in ("--set", s)]


def run_all(home: Path, arms: list[str], seeds: list[int], jobs: int) -> dict[str, float]:
    """Every (arm, seed) not finished, ``jobs`` at once, each once the ``bench_curation.py`` run of its seed whose SFT
    model it starts from (``sft_arm``; that script may be running beside this) has finished."""
    todo = [(a, s) for a in arms for s in seeds if not finished(home, a, s)]  # arm by arm: a cut grid has whole arms
    running: dict[int, tuple[str, int, float, subprocess.Popen]] = {}  # Popen kept: bench_curation.run_all says why
    cpu: dict[str, float] = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    (home / "logs").mkdir(parents=True, exist_ok=True)
    while todo or running:
        ready = [(a, s) for a, s in todo if finished(home, sft_arm(a), s)]
        if not ready and not running:
            print(f"[{time.strftime('%H:%M:%S')}] waiting for bench_curation.py's runs of seeds "
                  f"{sorted({s for _, s in todo})}", flush=True)  # fmt: skip
            time.sleep(60)
            continue
        while ready and len(running) < jobs:
            a, s = ready.pop(0)
            todo.remove((a, s))
            cmd = commands(a, home, s)
            print(f"[{time.strftime('%H:%M:%S')}] {a} seed {s}: python " + " ".join(cmd[1:]), flush=True)
            log = open(home / "logs" / f"{a}-seed{s}.log", "w")  # noqa: SIM115 (the child holds it)
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[proc.pid] = (a, s, time.perf_counter(), proc)
        pid, status, usage = os.wait4(-1, 0)
        a, s, t0, proc = running.pop(pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu[f"{a}-seed{s}"] = usage.ru_utime + usage.ru_stime
        print(f"[{time.strftime('%H:%M:%S')}] {a} seed {s}: exit {os.waitstatus_to_exitcode(status)}, "
              f"{(time.perf_counter() - t0) / 60:.1f} min wall, {cpu[f'{a}-seed{s}'] / 60:.1f} CPU-min, load "
              f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    return cpu


# --------------------------------------------------------------------------------------------------- the report
def figures(home: Path, arm: str, seed: int) -> dict[str, Any]:
    """Rollouts, completion tokens, kept-group fraction and truncation of a run's RL stages."""
    import polars as pl

    m = pl.read_parquet(run_dir(home, arm, seed) / "metrics.parquet")
    s = summary(home, arm, seed)
    return {"tokens": float(m["tokens"].max()), "kept_group_frac": float(m["kept_group_frac"].mean()),
            "truncation_rate": float(m["truncation_rate"].mean()), "rl_cpu_s": step_cpu(s, "rl:"),
            "zero_variance": s.get("zero_variance")}  # fmt: skip


def at_tokens(home: Path, arm: str, seed: int, budgets: tuple[float, ...]) -> list[float]:
    """Held-out pass@1 at equal RL completion tokens, interpolated on the run's eval curve (SFT at 0 tokens)."""
    import numpy as np

    from training.evaluate import read_eval

    ev = read_eval(run_dir(home, arm, seed)).sort("compute")
    xs = [0.0, *ev["compute"].to_list()]
    ys = [rate(table(home, sft_arm(arm), seed, "sft")), *ev["pass_at_1"].to_list()]
    return [float(np.interp(b, xs, ys, right=np.nan)) for b in budgets]


def fit_first_half(home: Path, seed: int, arm: str = "curated") -> dict[str, Any] | None:
    """ScaleRL's sigmoid on the first half (by RL tokens) of an arm's eval curve, R0 = its SFT model at 0 tokens,
    extrapolated to the last evaluation: prediction, band, measured, and the "no further gain" baseline."""
    import polars as pl

    from training.evaluate import read_eval
    from training.scaling import FitConfig, extrapolate, extrapolate_band, fit_sigmoid

    ev = read_eval(run_dir(home, arm, seed)).sort("step")
    if ev.height < 4:
        return None
    r0 = rate(table(home, sft_arm(arm), seed, "sft"))
    end = ev.row(-1, named=True)
    half = ev.filter(pl.col("compute") <= end["compute"] / 2)
    flat = half.row(-1, named=True)["pass_at_1"]
    out: dict[str, Any] = {"seed": seed, "arm": arm, "r0": r0, "points": half.height, "measured": end["pass_at_1"],
                           "measured_se": end["stderr"], "flat_error": end["pass_at_1"] - flat}  # fmt: skip
    try:
        fit = fit_sigmoid([0.0, *half["compute"].to_list()], [r0, *half["pass_at_1"].to_list()],
                          FitConfig(r0=r0, skip_frac=0.0, compute_unit="tokens", min_points=3))  # fmt: skip
    except (ValueError, RuntimeError) as exc:
        return {**out, "error": str(exc)}
    lo, hi = extrapolate_band(fit, end["compute"])
    pred = float(extrapolate(fit, end["compute"]))
    return {**out, "A": fit.A, "prediction": pred, "band": [float(lo[0]), float(hi[0])],
            "inside": bool(lo[0] <= end["pass_at_1"] <= hi[0]), "error": end["pass_at_1"] - pred}  # fmt: skip


def arm_rows(home: Path, arm: str, seeds: list[int], cpu: dict[str, float], split: dict[str, set]) -> dict:
    """One arm against the curated arm: early and end differences per seed and pooled, figures per seed, and (the
    decontamination arm) the end difference on the leaked and on the clean test problems apart."""
    rows: dict[str, Any] = {"claim": ARMS[arm][0], "what": WHAT[arm], "per_seed": {}}
    for when, at in (("early", f"at{EARLY}"), ("end", "end")):
        gains = {}
        for seed in (s for s in seeds if finished(home, arm, s) and finished(home, "curated", s)):
            g = paired(home, seed, (arm, steps_of(home, arm, seed).get(at)),
                       ("curated", steps_of(home, "curated", seed).get(at)))  # fmt: skip
            if g is not None:
                gains[seed] = g
        rows[when] = {"per_seed": gains, "pooled": pooled(list(gains.values()))}
    for seed in (s for s in seeds if finished(home, arm, s)):
        rows["per_seed"][seed] = {**figures(home, arm, seed), "cpu_s": cpu.get(f"{arm}-seed{seed}"),
                                  "to_curated_end": to_target(home, seed, arm, "curated", sft_arm(arm)),
                                  "command": " ".join(commands(arm, home, seed)[1:])}  # fmt: skip
    if arm == "nodecon":
        for name, keep in split.items():
            gains = {s: paired(home, s, (arm, "rl:stage4"), ("curated", "rl:stage4"), keep=keep)
                     for s in seeds if finished(home, arm, s)}  # fmt: skip
            rows[name] = {"per_seed": gains, "pooled": pooled([g for g in gains.values() if g])}
    return rows


def print_fit(f: dict[str, Any]) -> None:
    if "A" not in f:
        print(f"seed {f['seed']}: {f['error']}")
        return
    print(f"seed {f['seed']}: A {f['A']:.3f}, predicted {f['prediction']:.3f} [{f['band'][0]:.3f}, "
          f"{f['band'][1]:.3f}], measured {f['measured']:.3f} ± {f['measured_se']:.3f}: "
          f"{'inside' if f['inside'] else 'OUTSIDE'}, error {f['error']:+.3f} (no further gain: "
          f"{f['flat_error']:+.3f})")  # fmt: skip


def kept_and_truncation(figs: list[dict[str, Any]]) -> tuple[float, float]:
    """The mean kept-group fraction and truncation rate over runs' ``figures`` (NaN without any run)."""
    if not figs:
        return float("nan"), float("nan")
    n = len(figs)
    return sum(f["kept_group_frac"] for f in figs) / n, sum(f["truncation_rate"] for f in figs) / n


def report(home: Path, arms: list[str], seeds: list[int], cpu: dict[str, float]) -> dict[str, Any]:
    """Every arm against the curated arm, per seed and pooled; FastCuRL per token; the fit. Prints, returns all."""
    test, leaked = held_out(home)
    split = {"leaked": leaked, "clean": set(test["problem_id"]) - leaked}
    results: dict[str, Any] = {"arms": {}, "fit": [], "per_token": {}}
    print(f"\n== every arm minus the curated arm (held-out pass@1, {test.height} problems x 4 at T=0.6, paired)")
    print("arm        | claim              | early (10 steps)         | end (40 steps)           | kept  | trunc")
    base = results["curated"] = [figures(home, "curated", s) for s in seeds if finished(home, "curated", s)]
    if base:  # the reference's own kept-group fraction and truncation, for the columns below
        kept, trunc = kept_and_truncation(base)
        print(f"{'curated':<10} | {'(the reference)':<18} | {'':<24} | {'':<24} | {kept:.3f} | {trunc:.3f}")
    for arm in arms:
        rows = results["arms"][arm] = arm_rows(home, arm, seeds, cpu, split)
        kept, trunc = kept_and_truncation(list(rows["per_seed"].values()))
        print(f"{arm:<10} | {rows['claim']:<18} | {fmt(rows['early']['pooled']):<24} | "
              f"{fmt(rows['end']['pooled']):<24} | {kept:.3f} | {trunc:.3f}")  # fmt: skip
        for name in ("leaked", "clean"):
            if name in rows:
                print(f"{'':<10}   on the {len(split[name])} {name} test problems: end {fmt(rows[name]['pooled'])}")
    print("\n== FastCuRL per training token: pass@1 at equal RL completion tokens (interpolated, mean of seeds)")
    for arm in ("curated", "single"):
        per = [at_tokens(home, arm, s, BUDGETS) for s in seeds if finished(home, arm, s)]
        if per:
            results["per_token"][arm] = mean = [sum(x) / len(per) for x in zip(*per, strict=True)]
            print(f"{arm:<8} " + " | ".join(f"{b / 1e3:.0f}K: {x:.3f}" for b, x in zip(BUDGETS, mean, strict=True)))
    print("\n== ScaleRL's fit on the first half of the curated arm's curve, extrapolated to its end")
    for seed in (s for s in seeds if finished(home, "curated", s)):
        f = fit_first_half(home, seed)
        if f is not None:
            results["fit"].append(f)
            print_fit(f)
    return results


def plot(results: dict[str, Any], path: Path) -> None:
    """Each arm's end difference against the curated arm (per seed dots, the pooled mean with +-2 paired SE), and
    FastCuRL's pass@1 at equal RL tokens (staged against one stage)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    arms = [a for a, r in results["arms"].items() if r["end"]["pooled"]]
    for i, arm in enumerate(arms):
        end = results["arms"][arm]["end"]
        ax.plot([g["gain"] for g in end["per_seed"].values()], [i] * len(end["per_seed"]), "o", color="0.6", ms=4)
        p = end["pooled"]
        ax.errorbar(p["gain"], i, xerr=2 * p["stderr"], fmt="D", color="C0", capsize=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(arms)), [f"{a} ({results['arms'][a]['claim']})" for a in arms])
    ax.set_xlabel("held-out pass@1 minus the curated arm, after 40 RL steps (grey: seeds; blue: pooled ± 2 SE)")
    for arm, ys in results["per_token"].items():
        bx.plot(BUDGETS, ys, "o-", label=arm)
    bx.set_xlabel("RL completion tokens")
    bx.set_ylabel("held-out pass@1 (mean of seeds)")
    bx.set_title("FastCuRL: staged (curated) vs one stage")
    bx.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--home", default="/tmp/bench-curation")
    ap.add_argument("--report-only", action="store_true", help="read the finished runs back; train nothing")
    ap.add_argument("--json", help="write the results here (bench/json/methods.json: bench/tables.py reads it)")
    args = ap.parse_args()
    from curate import io

    home = Path(args.home).resolve()
    cpu_file = home / "cpu-methods.json"
    cpu = io.read_json(cpu_file) if cpu_file.is_file() else {}
    if not args.report_only:
        print(f"load average before: {os.getloadavg()}")
        cpu.update(run_all(home, args.arms, args.seeds, args.jobs))
        cpu_file.write_text(json.dumps(cpu, indent=1))
        print(f"load average after: {os.getloadavg()}")
    results = {"measured": measured_at(sys.argv), **report(home, args.arms, args.seeds, cpu)}
    plot(results, home / "methods.png")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
