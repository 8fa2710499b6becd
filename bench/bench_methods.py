"""What do the four methods buy on the built-in task where RL learns? Five comparisons, 3 seeds, one harness.

Every arm is one ``training run`` of the tiny recipe with ``--set`` overrides (printed, so any arm reruns from the
CLI), at equal RL compute (40 steps x 256 rollouts) and, within a seed, from the same SFT model: the base run's
(``runs/seed<N>``, the recipe as shipped, which ``bench/bench_rl_chain.py`` runs too) ``sft/final``, except the two
CoScale arms, which are about the SFT data and train their own. Arms (``ARMS``):

1. ScalingRL: ``des300`` (DES on the SFT model's real pass rates, 300 of the ~880 RL candidates, ScaleRL's
   solved / all-equal filters) against ``random300`` (a uniform sample of 300, no evidence used) against ``full``
   (every candidate, no filters); the curriculum and sampler as shipped.
2. The curriculum sampler: ``base`` (the scalingrl policy, zero-variance skip, no-positive-resampling) against
   ``uniform`` (a random permutation per epoch, neither filter); the same DES-800 curriculum.
3. FastCuRL: ``base`` (the staged plan, contexts 128/256/384/256 tokens over the L1/L2/L3/L2 splits) against
   ``single`` (one 40-step stage over L2 at the largest context, 384, the lr decayed linearly instead of stepped),
   and ``tight`` (the staged plan at half the context, 64/128/192/128), compared per training token;
   ``mask_truncated_completions`` and the truncation rate recorded.
4. CoScale-RL: ``pxk`` (1,866 problems x both teacher traces) against ``pk1`` (3,732 problems x one trace, drawn at
   random) at equal SFT rows (3,732) and steps (4 epochs: the base SFT's 1,866 steps), each from the same
   from-scratch model, then RL on the base run's curriculum.
5. ScaleRL's fit: the sigmoid fitted on the first half (by compute) of ``single``'s eval curve (every 5 steps),
   extrapolated to its end, against the measured end, with the error band.

Per arm: held-out pass@1 (300 test problems x k = 4 at T = 0.6) after the early budget (10 of 40 steps) and at the
end, the kept-group fraction, rollouts and completion tokens; paired differences (``training.evaluate.paired_gain``)
against the SFT model and between the arms of each comparison, per seed. Pooled over seeds: the mean of the
per-seed differences with its SE (sqrt of the summed variances / seeds).

    python bench/bench_methods.py --seeds 0 1 2 --jobs 2 --home /tmp/bench-rl-chain     # runs, then the tables
    python bench/bench_methods.py --report-only --home /tmp/bench-rl-chain --json /tmp/methods.json

The base runs come first (``training run --set seed=N --out <home>/runs/seed<N>``, skipped when finished); every
other arm of a seed waits for its base run. Runs that finished are read back, so rerunning prints the tables (and
draws ``<home>/methods.png``: pass@1 against RL tokens per comparison, and the fit) without training.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
RECIPE = "training/recipes/tiny/fastcurl.yaml"
EARLY = 10  # the early budget: RL steps (of 40)


@dataclass(frozen=True)
class Arm:
    """One recipe variant: ``sets(seed, base_run)`` -> ``--set`` items; ``sft_table``: builds its SFT rows."""

    name: str
    claim: str
    what: str
    sets: tuple[str, ...] = ()
    from_base_sft: bool = True  # RL from the base run's SFT model (else: its own SFT on ``sft_table``)
    sft_table: str | None = None


NO_FILTERS = ("measure.select.drop_solved=false", "measure.select.drop_zero_variance=false")
SINGLE = ("only_stages=[stage2]", "stages.stage2.max_steps=40", "stages.stage2.max_completion_length=384",
          "stages.stage2.learning_rate=1.0e-4", "stages.stage2.warmup_steps=5",
          "stages.stage2.lr_scheduler_type=linear", "eval.every=5")  # fmt: skip
RANDOM = ("measure.select.size=300", "measure.select.by=random", *NO_FILTERS)
TIGHT = ("scale.context=0.0078125",)  # 8K/16K/24K/16K x 1/128
COSCALE = ("sft.epochs=4",)  # 3,732 rows x 4 epochs: the base SFT's 1,866 steps (2 epochs gave SFT pass@1 0.04)
UNIFORM = ("rl.policy=uniform", "rl.sampler.zero_variance_skip=false", "rl.sampler.no_positive_resampling=false")
ARMS = (
    Arm("base", "sampler,fastcurl", "the recipe as shipped: DES-800, FastCuRL stages, scalingrl sampler + filters"),
    Arm("des300", "scalingrl", "DES subset: 300 of the RL candidates by DES", ("measure.select.size=300",)),
    Arm("random300", "scalingrl", "random subset: 300, uniform, no evidence", RANDOM),
    Arm("full", "scalingrl", "the full pool: every RL candidate, no filters", ("measure.select.size=0", *NO_FILTERS)),
    Arm("uniform", "sampler", "uniform sampler, no zero-variance skip, no no-positive-resampling", UNIFORM),
    Arm("single", "fastcurl,fit", "one 40-step stage at the largest context (384), lr 1e-4 decayed linearly", SINGLE),
    Arm("tight", "fastcurl", "the staged plan at half the context, 64/128/192/128: stage 1 can truncate", TIGHT),
    Arm("pxk", "coscale", "SFT on P x K: 1,866 problems x 2 traces", COSCALE, from_base_sft=False, sft_table="pxk"),
    Arm("pk1", "coscale", "SFT on PK x 1: 3,732 problems x 1 trace", COSCALE, from_base_sft=False, sft_table="pk1"),
)
BY_NAME = {a.name: a for a in ARMS}


def base_dir(home: Path, seed: int) -> Path:
    return home / "runs" / f"seed{seed}"


def arm_dir(home: Path, arm: str, seed: int) -> Path:
    return base_dir(home, seed) if arm == "base" else home / "runs" / f"{arm}-seed{seed}"


def coscale_table(home: Path, seed: int, kind: str) -> Path:
    """The CoScale arms' SFT rows from the base run's pinned table (every problem x 2 teacher traces): ``pxk`` half
    the problems with both traces, ``pk1`` every problem but one with one trace drawn at random; equal rows."""
    import polars as pl

    out = home / "coscale" / f"seed{seed}" / f"{kind}.parquet"
    if out.is_file():
        return out
    rows = pl.read_parquet(base_dir(home, seed) / "data" / "sft.parquet")
    problems = rows["problem_id"].unique().sort().sample(fraction=1.0, shuffle=True, seed=seed)
    half = problems.len() // 2
    if kind == "pxk":
        table = rows.filter(pl.col("problem_id").is_in(problems[:half].implode()))
    else:
        keep = problems[: 2 * half]
        one = rows.filter(pl.col("problem_id").is_in(keep.implode())).sample(fraction=1.0, shuffle=True, seed=seed)
        table = one.unique("problem_id", keep="first", maintain_order=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.sort("problem_id", "solution_id").write_parquet(out)
    return out


def arm_sets(arm: Arm, home: Path, seed: int) -> list[str]:
    """The ``--set`` items of ``arm`` at ``seed`` (what a user passes to ``training run`` to rerun it)."""
    sets = [f"seed={seed}"]
    if arm.name == "base":
        return sets
    sets.append("eval.temperatures=[]")
    base = base_dir(home, seed)
    if arm.from_base_sft:
        sets += [f"model={base / 'sft' / 'final'}", "sft=null"]
    else:  # its own SFT on the CoScale table, then RL on the base run's measured curriculum
        chain = json.loads((base / "chain.json").read_text())
        curriculum = chain["notes"]["measure"][0]["curriculum"]["name"]
        sets += [f"sft.data={coscale_table(home, seed, arm.sft_table or '')}", "measure=null",
                 f"curriculum={curriculum}", "curate_recipe=null"]  # fmt: skip
    return sets + list(arm.sets)


def command(arm: Arm, home: Path, seed: int) -> list[str]:
    cmd = [sys.executable, "-m", "training.cli", "run", "--recipe", RECIPE, "--home", str(home),
           "--out", str(arm_dir(home, arm.name, seed)), "--json"]  # fmt: skip
    for item in arm_sets(arm, home, seed):
        cmd += ["--set", item]
    return cmd


def launch(arm: Arm, home: Path, seed: int) -> subprocess.Popen:
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    cmd = command(arm, home, seed)
    shown = " ".join(c if " " not in c else repr(c) for c in cmd[1:])
    print(f"[{time.strftime('%H:%M:%S')}] start {arm.name} seed {seed}: python {shown}", flush=True)
    log = open(logs / f"{arm.name}-seed{seed}.log", "w")  # noqa: SIM115 (the child holds it)
    out = open(logs / f"{arm.name}-seed{seed}.json", "w")  # noqa: SIM115
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=log)


def finished(home: Path, arm: str, seed: int) -> bool:
    return (arm_dir(home, arm, seed) / "summary.json").is_file()


def run_all(home: Path, arms: list[str], seeds: list[int], jobs: int) -> dict[str, float]:
    """Every (arm, seed) not finished yet, ``jobs`` at once; an arm of a seed waits for that seed's base run.
    Returns CPU seconds per run (the process and every step it ran)."""
    todo = [(a, s) for a in (["base"] + [a for a in arms if a != "base"]) for s in seeds if not finished(home, a, s)]
    running: dict[int, tuple[str, int, float]] = {}
    cpu: dict[str, float] = {}
    while todo or running:
        ready = [(a, s) for a, s in todo if a == "base" or finished(home, "base", s)]
        while ready and len(running) < jobs:
            a, s = ready.pop(0)
            todo.remove((a, s))
            proc = launch(BY_NAME[a], home, s)
            running[proc.pid] = (a, s, time.perf_counter())
        if not running:
            raise SystemExit(f"nothing can start: {todo} wait for base runs that failed")
        pid, status, usage = os.wait4(-1, 0)
        a, s, t0 = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        cpu[f"{a}-seed{s}"] = usage.ru_utime + usage.ru_stime
        print(f"[{time.strftime('%H:%M:%S')}] {a} seed {s}: exit {code}, {(time.perf_counter() - t0) / 60:.1f} min "
              f"wall, {cpu[f'{a}-seed{s}'] / 60:.1f} CPU-min, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        if code:
            print(f"    see {home}/logs/{a}-seed{s}.log")
            todo = [(x, y) for x, y in todo if y != s] if a == "base" else todo  # its seed's arms cannot start
    return cpu


# --------------------------------------------------------------------------------------------------- the report
def _chain_steps(run: Path) -> list[dict[str, Any]]:
    return json.loads((run / "chain.json").read_text())["steps"]


def _table(run: Path, step: str) -> Any:
    """The per-problem held-out table of a chain step (``training.runner.eval_file``), or None."""
    import polars as pl

    from training.runner import EVALS, eval_file

    path = run / EVALS / eval_file(step)
    return pl.read_parquet(path) if path.is_file() else None


def _rate(table: Any) -> float:
    """pass@1 of a per-problem table: the mean over the scored problems."""
    import polars as pl

    return float(table.filter(pl.col("scored"))["mean"].mean())


def rl_tables(run: Path) -> dict[str, Any]:
    """The per-problem held-out tables of a run at the early budget and at the end (``None`` where missing)."""
    from training.runner import checkpoint_eval

    rl = [r for r in _chain_steps(run) if "rl_steps" in r]
    out: dict[str, Any] = {"early": None, "end": _table(run, rl[-1]["step"]) if rl else None}
    for r in rl:
        first, last = r["offset_step"], r["offset_step"] + r["rl_steps"]
        if last == EARLY:
            out["early"] = _table(run, r["step"])
        elif first < EARLY < last:
            out["early"] = _table(run, checkpoint_eval(r["step"], EARLY - first))
    return out


def run_figures(run: Path) -> dict[str, Any]:
    """Rollouts, completion tokens, kept-group fraction and truncation of a run's RL stages (``metrics.parquet``,
    each stage's ``config.json``)."""
    import polars as pl

    m = pl.read_parquet(run / "metrics.parquet")
    rollouts, masked = 0, set()
    for r in _chain_steps(run):
        if "stage_dir" in r:
            cfg = json.loads((Path(r["stage_dir"]) / "config.json").read_text())["rl"]
            rollouts += r["rl_steps"] * cfg["prompts_per_step"] * cfg["num_generations"]
            masked.add(bool(cfg.get("mask_truncated_completions")))
    means = {k: float(m[k].mean()) for k in ("kept_group_frac", "truncation_rate")}
    return {"rl_steps": int(m["step"].max()), "rollouts": rollouts, "tokens": float(m["tokens"].max()), **means,
            "mask_truncated_completions": sorted(masked)}  # fmt: skip


def sft_table(home: Path, arm: str, seed: int) -> Any:
    """The per-problem table of the arm's SFT model: its own (CoScale arms), else the base run's."""
    own = _table(arm_dir(home, arm, seed), "sft")
    return own if own is not None else _table(base_dir(home, seed), "sft")


def pooled(gains: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of per-seed paired differences and its SE (independent seeds)."""
    import math

    n = len(gains)
    mean = sum(g["gain"] for g in gains) / n
    se = math.sqrt(sum(g["stderr"] ** 2 for g in gains)) / n
    return {"gain": mean, "stderr": se, "z": mean / se if se else 0.0, "seeds": n}


def _fmt(g: dict[str, Any] | None) -> str:
    return "-" if not g else f"{g['gain']:+.3f} ± {g['stderr']:.3f} (z {g['z']:+.1f})"


def fit_first_half(home: Path, seed: int) -> dict[str, Any] | None:
    """ScaleRL's sigmoid on the first half (by RL tokens) of ``single``'s eval curve, the SFT model's pass rate as
    R0 at compute 0, extrapolated to the run's last evaluation: prediction, band, measured, inside or not."""
    import polars as pl

    from training.evaluate import read_eval
    from training.scaling import FitConfig, extrapolate, extrapolate_band, fit_sigmoid

    run = arm_dir(home, "single", seed)
    curve = read_eval(run)
    sft = sft_table(home, "single", seed)
    if curve.height < 4 or sft is None:
        return None
    r0 = _rate(sft)
    end = curve.sort("step").row(-1, named=True)
    half = curve.filter(pl.col("compute") <= end["compute"] / 2)
    cfg = FitConfig(r0=r0, skip_frac=0.0, compute_unit="tokens", min_points=3)
    flat = half.sort("step").row(-1, named=True)["pass_at_1"]  # the obvious baseline: no further gain
    out: dict[str, Any] = {
        "seed": seed, "r0": r0, "points_fitted": half.height, "end_step": end["step"], "end_compute": end["compute"],
        "measured": end["pass_at_1"], "measured_se": end["stderr"], "flat_prediction": flat,
        "flat_error": end["pass_at_1"] - flat,
    }  # fmt: skip
    for label, part in (("half", half), ("all", curve)):
        try:
            fit = fit_sigmoid([0.0, *part["compute"].to_list()], [r0, *part["pass_at_1"].to_list()], cfg)
        except (ValueError, RuntimeError) as exc:
            out[label] = {"error": str(exc)}
            continue
        lo, hi = extrapolate_band(fit, end["compute"])
        pred = float(extrapolate(fit, end["compute"]))
        out[label] = {
            "A": fit.A, "B": fit.B, "C_mid": fit.C_mid, "A_band": (fit.band or {}).get("A"), "prediction": pred,
            "band": [float(lo[0]), float(hi[0])], "inside": bool(lo[0] <= end["pass_at_1"] <= hi[0]),
            "error": end["pass_at_1"] - pred, "warnings": fit.warnings,
        }  # fmt: skip
    return out


COMPARISONS = {  # claim -> (arm, arm) pairs: the first is the method, the second its baseline
    "scalingrl": [("des300", "random300"), ("des300", "full"), ("random300", "full")],
    "sampler": [("base", "uniform")],
    "fastcurl": [("base", "single"), ("tight", "base"), ("tight", "single")],
    "coscale": [("pxk", "pk1")],
}


def arm_row(home: Path, arm: str, seed: int, cpu: dict[str, float]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One finished run: its figures, SFT / early / end pass@1 and the gains over its SFT model (a row), and its
    per-problem tables (for the comparisons)."""
    from training.evaluate import paired_gain

    run = arm_dir(home, arm, seed)
    tables = {**rl_tables(run), "sft": sft_table(home, arm, seed), "own_sft": not BY_NAME[arm].from_base_sft}
    used = cpu.get(f"{arm}-seed{seed}")
    row: dict[str, Any] = {**run_figures(run), "cpu_min": round(used / 60, 1) if used else None}
    row["command"] = "training run " + " ".join(command(BY_NAME[arm], home, seed)[4:])
    row["sft"] = _rate(tables["sft"])
    for when in ("early", "end"):
        if tables[when] is not None:
            g = paired_gain(tables[when], tables["sft"])
            row[when], row[f"{when}_vs_sft"] = g["after_rate"], g
    return row, tables


def compare(tables: dict[tuple[str, int], dict[str, Any]], a: str, b: str, when: str, seeds: list[int]) -> dict:
    """Arm ``a`` minus arm ``b`` at ``when`` (sft / early / end), paired per seed, and pooled over seeds."""
    from training.evaluate import paired_gain

    gains = {}
    for seed in seeds:
        ta, tb = tables.get((a, seed)), tables.get((b, seed))
        if not (ta and tb) or ta.get(when) is None or tb.get(when) is None:
            continue
        if when == "sft" and not (ta["own_sft"] and tb["own_sft"]):
            continue  # the same SFT model: nothing to compare
        gains[seed] = paired_gain(ta[when], tb[when])
    return {"a": a, "b": b, "at": when, "per_seed": gains, "pooled": pooled(list(gains.values())) if gains else None}


def print_fit(f: dict[str, Any]) -> None:
    for label in ("half", "all"):
        x = f.get(label) or {}
        if "prediction" not in x:
            print(f"seed {f['seed']} fit on {label}: {x.get('error')}")
            continue
        points = f["points_fitted"] if label == "half" else "every"
        print(f"seed {f['seed']} fit on {label:<4} ({points} points): A = {x['A']:.3f}, predicted "
              f"{x['prediction']:.3f} [{x['band'][0]:.3f}, {x['band'][1]:.3f}] at {f['end_compute'] / 1e3:.0f}K "
              f"tokens; measured {f['measured']:.3f} ± {f['measured_se']:.3f}: "
              f"{'inside' if x['inside'] else 'OUTSIDE'} the band, error {x['error']:+.3f}")  # fmt: skip
    print(f"seed {f['seed']} baseline (the half's last pass rate, no further gain): {f['flat_prediction']:.3f}, "
          f"error {f['flat_error']:+.3f}")  # fmt: skip


def per_token(home: Path, arms: list[str], seeds: list[int], budgets: tuple[float, ...] = (2e5, 5e5, 9e5)) -> dict:
    """FastCuRL's axis: held-out pass@1 of each arm at equal RL completion tokens, linearly interpolated on its eval
    curve (the SFT model at 0 tokens), per seed and the mean; no paired SE (interpolated points are not samples)."""
    import numpy as np

    from training.evaluate import read_eval

    out: dict[str, Any] = {}
    for arm in arms:
        rates = []
        for seed in seeds:
            if not finished(home, arm, seed):
                continue
            curve = read_eval(arm_dir(home, arm, seed)).sort("compute")
            sft = _rate(sft_table(home, arm, seed))
            xs, ys = [0.0, *curve["compute"].to_list()], [sft, *curve["pass_at_1"].to_list()]
            rates.append([float(np.interp(b, xs, ys, right=np.nan)) for b in budgets])
        if rates:
            out[arm] = {"per_seed": rates, "mean": np.array(rates).mean(axis=0).tolist()}
    if out:
        print("\n== FastCuRL per training token: pass@1 at equal RL completion tokens (interpolated, mean of seeds)")
        print("arm    | " + " | ".join(f"{b / 1e3:.0f}K tokens" for b in budgets))
        for arm, r in out.items():
            print(f"{arm:<6} | " + " | ".join(f"{x:.3f}     " for x in r["mean"]))
    return out


HEADER = (
    "arm        | seed | SFT   | early | end   | end - SFT (paired SE)    | kept  | trunc | rollouts | tokens | CPU"
)


def report(home: Path, arms: list[str], seeds: list[int], cpu: dict[str, float]) -> dict[str, Any]:
    """Per arm and seed: SFT, early and end pass@1 and their paired gains over SFT; per comparison: the paired
    differences between arms; the fit. Prints the tables, returns everything."""
    per: dict[str, dict[int, dict[str, Any]]] = {}
    tables: dict[tuple[str, int], dict[str, Any]] = {}
    done = [(a, s) for a in ["base", *[a for a in arms if a != "base"]] for s in seeds if finished(home, a, s)]
    for arm, seed in done:
        per.setdefault(arm, {})[seed], tables[(arm, seed)] = arm_row(home, arm, seed, cpu)
    print(f"\n== every arm (held-out pass@1, 300 problems x 4 at T=0.6; early = after {EARLY} of 40 RL steps)")
    print(HEADER)
    for (arm, seed), r in ((k, per[k[0]][k[1]]) for k in done):
        print(f"{arm:<10} | {seed:>4} | {r['sft']:.3f} | {r.get('early', float('nan')):.3f} | "
              f"{r.get('end', float('nan')):.3f} | {_fmt(r.get('end_vs_sft')):<24} | {r['kept_group_frac']:.3f} | "
              f"{r['truncation_rate']:.3f} | {r['rollouts']:>8} | {r['tokens'] / 1e3:>5.0f}K | "
              f"{r['cpu_min']}")  # fmt: skip
    results: dict[str, Any] = {"arms": per, "comparisons": {}, "fit": []}
    print("\n== comparisons (paired on the same held-out problems, per seed; pooled = mean over seeds ± its SE)")
    for claim, pairs in COMPARISONS.items():
        for (a, b), when in ((pair, when) for pair in pairs for when in ("sft", "early", "end")):
            rec = compare(tables, a, b, when, seeds)
            if rec["pooled"] is None:
                continue
            results["comparisons"][f"{claim}:{a}-{b}@{when}"] = {"claim": claim, **rec}
            seeds_txt = "; ".join(f"s{s} {_fmt(g)}" for s, g in rec["per_seed"].items())
            print(f"{claim:<9} {a} - {b} @{when:<5}: pooled {_fmt(rec['pooled'])}   [{seeds_txt}]")
    results["per_token"] = per_token(home, ["base", "single", "tight"], seeds)
    print("\n== ScaleRL's fit on the first half (by RL tokens) of `single`, extrapolated to its last evaluation")
    for seed in seeds:
        f = fit_first_half(home, seed) if finished(home, "single", seed) else None
        if f:
            results["fit"].append(f)
            print_fit(f)
    return results


PANELS = (  # the figure: one panel per comparison
    ("1. ScalingRL: which 300 prompts", ("des300", "random300", "full", "base")),
    ("2. the curriculum sampler", ("base", "uniform")),
    ("3. FastCuRL: staged context, per token", ("base", "single", "tight")),
    ("4. CoScale-RL: P x K against PK x 1", ("pxk", "pk1")),
)


def figure(home: Path, seeds: list[int], path: Path) -> Path | None:
    """Held-out pass@1 against RL completion tokens, the mean over seeds per arm (the SFT model at 0), one panel
    per comparison, and ScaleRL's first-half fit of ``single`` (seed 0) with its band against the measured end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import polars as pl

    from training.evaluate import read_eval

    def curve(arm: str) -> tuple[np.ndarray, np.ndarray] | None:
        frames = []
        for seed in seeds:
            run = arm_dir(home, arm, seed)
            sft = sft_table(home, arm, seed)
            if not (run / "summary.json").is_file() or sft is None:
                return None
            start = pl.DataFrame({"step": [0], "compute": [0.0], "pass_at_1": [_rate(sft)]})
            frames.append(pl.concat([start, read_eval(run).select("step", "compute", "pass_at_1")]))
        means = pl.concat(frames).group_by("step").agg(pl.col("compute").mean(), pl.col("pass_at_1").mean(), pl.len())
        both = means.filter(pl.col("len") == len(seeds)).sort("step")  # steps every seed evaluated
        return both["compute"].to_numpy() / 1e3, both["pass_at_1"].to_numpy()

    fig, axes = plt.subplots(1, 5, figsize=(22, 4.2))
    for ax, (title, arms) in zip(axes, PANELS, strict=False):
        for arm in arms:
            c = curve(arm)
            if c is not None:
                ax.plot(*c, marker="o", ms=3, label=arm)
        ax.set(title=title, xlabel="RL completion tokens (K)", ylabel=f"held-out pass@1 (mean of {len(seeds)} seeds)")
        ax.legend(fontsize=6, loc="lower right")
        ax.grid(alpha=0.3)
    ax = axes[4]
    f = fit_first_half(home, seeds[0]) if (arm_dir(home, "single", seeds[0]) / "summary.json").is_file() else None
    if f and "prediction" in (f.get("half") or {}):
        from training.scaling import sigmoid

        ev = read_eval(arm_dir(home, "single", seeds[0]))
        half = ev.filter(pl.col("compute") <= f["end_compute"] / 2)
        ax.plot(ev["compute"] / 1e3, ev["pass_at_1"], "o", color="grey", label="measured (every 5 steps)")
        ax.plot(half["compute"] / 1e3, half["pass_at_1"], "o", color="C0", label="fitted: the first half")
        xs = np.linspace(1.0, f["end_compute"], 100)
        h = f["half"]
        ys = sigmoid(xs, h["A"], h["B"], h["C_mid"], f["r0"])
        ax.plot(xs / 1e3, ys, color="C0", label=f"sigmoid, A = {h['A']:.3f}")
        bar = [[h["prediction"] - h["band"][0]], [h["band"][1] - h["prediction"]]]
        ax.errorbar([f["end_compute"] / 1e3], [h["prediction"]], yerr=bar, fmt="s", color="C3", capsize=4,
                    label="predicted end, band")  # fmt: skip
        ax.axhline(f["flat_prediction"], color="C2", ls=":", label="baseline: no further gain")
        ax.set(title=f"5. ScaleRL's fit (single, seed {seeds[0]})", xlabel="RL completion tokens (K)",
               ylabel="held-out pass@1")  # fmt: skip
        ax.legend(fontsize=6, loc="lower right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=[a.name for a in ARMS], choices=[a.name for a in ARMS])
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--home", default="/tmp/bench-rl-chain")
    ap.add_argument("--report-only", action="store_true", help="read the finished runs back; train nothing")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--figure", help="write the figure here (PNG; default <home>/methods.png)")
    args = ap.parse_args()
    home = Path(args.home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    cpu_file = home / "cpu.json"
    cpu = json.loads(cpu_file.read_text()) if cpu_file.is_file() else {}
    if not args.report_only:
        print(f"load average before: {os.getloadavg()}")
        ran = run_all(home, args.arms, args.seeds, args.jobs)
        cpu = {**(json.loads(cpu_file.read_text()) if cpu_file.is_file() else {}), **ran}  # another bench may write
        cpu_file.write_text(json.dumps(cpu, indent=1))
        print(f"load average after: {os.getloadavg()}")
    results = report(home, args.arms, args.seeds, cpu)
    print(f"\nfigure: {figure(home, args.seeds, Path(args.figure or home / 'methods.png'))}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
