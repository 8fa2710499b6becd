r"""Training benchmarks on the built-in tiny task: does the data-centric part pay off, measured on held-out problems?

Every arm starts from the same from-scratch tiny model (``training.tiny``) and is judged by held-out pass@1 (mean
over k samples, with its standard error) on the pool's ``test`` split, which no arm trains on. Each experiment runs
over several seeds (seed = model init + data order + sampling); the table prints each seed and the mean.

- ``coscale``: CoScale-RL's data claim at the SFT stage. Same SFT budget (rows, epochs, batch): P problems x K
  verified solutions against P*K problems x 1 solution (the paper ran 90 x 20 against 1,800 x 1).
- ``rl``: from one SFT model per seed, RL at equal steps and batch: (a) ``uniform`` prompts from the full train
  pool, stock batch (no filters); (b) ``uniform`` prompts from the DES selection (ScalingRL's subset); (c) the
  curriculum sampler (``scalingrl`` policy, zero-variance skip, no-positive-resampling) with ScaleRL's batch
  hygiene (zero-variance filter, batch advantage norm, prompt-level loss) on the DES selection. Reports held-out
  pass@1 after SFT and after RL, the fraction of groups with signal, seconds per step, and the ScaleRL fit made on
  the first half of (c)'s eval curve against the pass rate measured at the end.

Needs a curated workspace with the tiny task (``curate run --recipe datasets/tiny/recipe.yaml``)::

    nice -n 10 .venv/bin/python bench/bench_training.py coscale --home /tmp/tinyws --seeds 0 1 2
    nice -n 10 .venv/bin/python bench/bench_training.py rl --home /tmp/tinyws --seeds 0 1 2

Results go to ``--out`` (default ``/tmp/bench_training``) as JSON and are printed as Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from training import layout, run_folder


def _mean_se(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0] if values else math.nan), math.nan
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def _eval(model_dir: Path, heldout: Any, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    from training.evaluate import EvalConfig, evaluate

    cfg = EvalConfig(
        k=args.k, temperature=args.eval_temperature, max_new_tokens=args.max_new_tokens, batch_size=64, seed=seed
    )
    r = evaluate(model_dir, heldout, cfg)
    return {"pass_at_1": r["pass_at_1"], "stderr": r["stderr"], "n": r["n_problems"], "k": r["k"]}


def _sft(model: Path, rows: Any, out: Path, args: argparse.Namespace, seed: int) -> Path:
    from training.sft import load_config, train_sft

    out.mkdir(parents=True, exist_ok=True)
    data = out / "rows.parquet"
    rows.write_parquet(data)
    cfg = load_config({
        "learning_rate": args.sft_lr, "epochs": args.sft_epochs, "per_device_batch_size": args.sft_batch,
        "max_length": 256, "seed": seed, "warmup_ratio": 0.05, "logging_steps": 50, "gradient_checkpointing": False,
    })  # fmt: skip
    train_sft(cfg, model=str(model), data=data, out_dir=out)
    return layout.final(out)


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(workspace, held-out problems, SFT rows of the selection's solutions)."""
    import polars as pl

    from curate import io
    from training.evaluate import heldout_problems

    ws = io.Workspace.resolve(args.home)
    heldout = heldout_problems(ws, args.pool, split="test", limit=args.eval_limit)
    sft_rows = pl.read_parquet(ws.root / "solutions" / args.selection / "sft.parquet")
    return ws, heldout, sft_rows


def _problem_key(df: Any) -> Any:
    import polars as pl

    return df.with_columns(pl.col("prompt").list.first().struct.field("content").alias("_key"))


def coscale(args: argparse.Namespace) -> dict[str, Any]:
    """P x K against P*K x 1 at the same SFT budget."""
    import polars as pl

    from training.tiny import TinyConfig, init_tiny

    _, heldout, rows = _setup(args)
    rows = _problem_key(rows).with_columns(pl.int_range(pl.len()).over("_key").alias("_j"))
    keys = rows["_key"].unique(maintain_order=True).to_list()
    budget = args.problems * args.k_solutions
    if budget > len(keys):
        raise SystemExit(f"P*K = {budget} exceeds the {len(keys)} problems with solutions")
    results = []
    for seed in args.seeds:
        import random

        rng = random.Random(seed)
        order = keys[:]
        rng.shuffle(order)
        multi = rows.filter(pl.col("_key").is_in(order[: args.problems]) & (pl.col("_j") < args.k_solutions))
        single = rows.filter(pl.col("_key").is_in(order[:budget]) & (pl.col("_j") == 0))
        assert multi.height == single.height == budget, (multi.height, single.height)
        base = Path(args.out) / args.experiment / f"seed{seed}"
        init = init_tiny(base / layout.INIT, TinyConfig(size=args.size, seed=seed))
        row: dict[str, Any] = {"seed": seed, "rows": budget}
        for arm, data in (("PxK", multi), ("PKx1", single)):
            t0 = time.perf_counter()
            final = _sft(init, data.drop("_key", "_j"), base / arm, args, seed)
            row[arm] = _eval(final, heldout, args, seed) | {"wall_s": round(time.perf_counter() - t0, 1)}
            print(f"[coscale] seed {seed} {arm}: {row[arm]}", flush=True)
        results.append(row)
    summary = {arm: _mean_se([r[arm]["pass_at_1"] for r in results]) for arm in ("PxK", "PKx1")}
    diffs = [r["PxK"]["pass_at_1"] - r["PKx1"]["pass_at_1"] for r in results]
    out = {"experiment": "coscale", "args": vars(args), "seeds": results, "mean_se": summary,
           "diff_mean_se": _mean_se(diffs)}  # fmt: skip
    print(f"\n| seed | P x K = {args.problems} x {args.k_solutions} | {budget} x 1 |\n|---|---:|---:|")
    for r in results:
        print(f"| {r['seed']} | {r['PxK']['pass_at_1']:.3f} ± {r['PxK']['stderr']:.3f} | "
              f"{r['PKx1']['pass_at_1']:.3f} ± {r['PKx1']['stderr']:.3f} |")  # fmt: skip
    m = out["mean_se"]
    cells = " | ".join(f"{m[a][0]:.3f} ± {m[a][1]:.3f}" for a in ("PxK", "PKx1"))
    print(f"| mean ± SE over seeds | {cells} |")
    print(f"difference (P x K - P*K x 1): {out['diff_mean_se'][0]:+.3f} ± {out['diff_mean_se'][1]:.3f}")
    return out


def _train_file(ws: Any, args: argparse.Namespace, source: str) -> Path:
    """RL prompts: the DES selection's trl.parquet, or every train problem of the pool in the same layout."""
    import polars as pl

    from curate import io, prompts
    from curate import schema as S

    if source == "selection":
        return ws.selection_dir(args.selection) / "trl.parquet"
    path = Path(args.out) / "pool_train.parquet"
    df = io.read_parquet(ws.require_pool(args.pool)).filter(pl.col(S.SPLIT) == "train")
    prompts.trl_frame(df).write_parquet(path)
    return path


ARMS = {
    "uniform/pool": ("pool", {"policy": "uniform"}),
    "uniform/DES": ("selection", {"policy": "uniform"}),
    "sampler+ScaleRL/DES": (
        "selection",
        {"policy": "scalingrl", "zero_variance_filter": True, "batch_adv_norm": True, "prompt_level_loss": True,
         "sampler": {"zero_variance_skip": True, "no_positive_resampling": True}},
    ),
}  # fmt: skip


def rl(args: argparse.Namespace) -> dict[str, Any]:
    """RL arms at equal steps from one SFT model per seed; plus the fit's prediction from half the curve."""
    import polars as pl

    from training.evaluate import append_eval
    from training.rl import load_rl_config, train_rl
    from training.scaling import FitConfig, extrapolate, fit_sigmoid
    from training.tiny import TinyConfig, init_tiny

    ws, heldout, rows = _setup(args)
    files = {src: _train_file(ws, args, src) for src in ("pool", "selection")}
    results = []
    for seed in args.seeds:
        base = Path(args.out) / args.experiment / f"seed{seed}"
        init = init_tiny(base / layout.INIT, TinyConfig(size=args.size, seed=seed))
        sft_rows = rows.sample(n=min(args.sft_rows, rows.height), seed=seed, shuffle=True)
        sft = _sft(init, sft_rows, base / layout.SFT, args, seed)
        row: dict[str, Any] = {"seed": seed, "sft": _eval(sft, heldout, args, seed)}
        print(f"[rl] seed {seed} after SFT: {row['sft']}", flush=True)
        for arm, (src, extra) in ARMS.items():
            if args.arms and arm not in args.arms:
                continue
            run = base / arm.replace("/", "_").replace("+", "_")
            cfg = load_rl_config({
                "loss_type": "cispo", "learning_rate": args.rl_lr, "num_generations": args.n,
                "prompts_per_step": args.prompts, "max_steps": args.steps, "save_steps": args.eval_every,
                "save_total_limit": None, "max_completion_length": args.max_new_tokens,
                "temperature": args.rl_temperature, "warmup_steps": args.warmup,
                "gradient_checkpointing": False, "seed": seed, **extra,
            })  # fmt: skip
            t0 = time.perf_counter()
            train_rl(cfg, model=sft, train=files[src], out_dir=run)
            wall = time.perf_counter() - t0
            metrics = pl.read_parquet(run / layout.METRICS)
            kept = metrics["kept_group_frac"].mean() if "kept_group_frac" in metrics.columns else None
            signal = 1 - metrics["frac_reward_zero_std"].mean() if "frac_reward_zero_std" in metrics.columns else None
            res = _eval(layout.final(run), heldout, args, seed)
            res |= {"signal_frac": signal, "kept_group_frac": kept, "s_per_step": wall / args.steps}
            if arm == "sampler+ScaleRL/DES" and args.eval_every < args.steps:
                append_eval(run, 0, 0.0, row["sft"] | {"n_problems": row["sft"]["n"]})
                for ck in run_folder.checkpoints(run / layout.CHECKPOINTS):
                    step = run_folder.checkpoint_step(ck)
                    ev = _eval(ck, heldout, args, seed)
                    append_eval(run, step, float(step), ev | {"n_problems": ev["n"]})
                append_eval(run, args.steps, float(args.steps), res | {"n_problems": res["n"]})
                curve = pl.read_parquet(run / layout.EVAL_CURVE).filter(pl.col("step") > 0)
                half = curve.filter(pl.col("step") <= args.steps // 2)
                try:
                    fit = fit_sigmoid(half["compute"].to_numpy(), half["pass_at_1"].to_numpy(),
                                      FitConfig(skip_frac=0.0, r0=row["sft"]["pass_at_1"]))  # fmt: skip
                    res["fit_half"] = {"A": fit.A, "B": fit.B, "C_mid": fit.C_mid,
                                       "predicted_end": float(extrapolate(fit, float(args.steps))),
                                       "measured_end": res["pass_at_1"]}  # fmt: skip
                except Exception as exc:  # too few or too flat points: report it, do not hide it
                    res["fit_half"] = {"error": str(exc)}
                res["curve"] = curve.to_dicts()
            row[arm] = res
            print(f"[rl] seed {seed} {arm}: {res}", flush=True)
        results.append(row)
    arms = [a for a in ARMS if all(a in r for r in results)]
    out = {"experiment": "rl", "args": vars(args), "seeds": results,
           "mean_se": {a: _mean_se([r[a]["pass_at_1"] for r in results]) for a in ["sft", *arms]}}  # fmt: skip
    print("\n| seed | after SFT | " + " | ".join(arms) + " |\n|---|---:|" + "---:|" * len(arms))
    for r in results:
        cells = [f"{r[a]['pass_at_1']:.3f} ± {r[a]['stderr']:.3f}" for a in ["sft", *arms]]
        print(f"| {r['seed']} | " + " | ".join(cells) + " |")
    print("| mean ± SE over seeds | " + " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in out["mean_se"].values()) + " |")
    for a in arms:
        sig = [r[a]["signal_frac"] for r in results if r[a].get("signal_frac") is not None]
        sps = [r[a]["s_per_step"] for r in results]
        gain = [(r[a]["pass_at_1"] - r["sft"]["pass_at_1"]) / max(r[a]["stderr"], 1e-9) for r in results]
        print(f"{a}: groups with signal {statistics.fmean(sig) if sig else float('nan'):.3f}; "
              f"s/step {statistics.fmean(sps):.2f}; (RL - SFT)/SE per seed {[round(g, 1) for g in gain]}")  # fmt: skip
    for r in results:
        fh = r.get("sampler+ScaleRL/DES", {}).get("fit_half")
        if fh:
            print(f"seed {r['seed']} fit on first half: {fh}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=["coscale", "rl"])
    p.add_argument("--home", default="/tmp/tinyws")
    p.add_argument("--pool", default="tiny")
    p.add_argument("--selection", default="tiny")
    p.add_argument("--out", default="/tmp/bench_training")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--size", default="small")
    p.add_argument("--k", type=int, default=4, help="eval samples per problem")
    p.add_argument("--eval-limit", type=int, default=200)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--sft-lr", type=float, default=2e-3)
    p.add_argument("--sft-epochs", type=float, default=1.0)
    p.add_argument("--sft-batch", type=int, default=32)
    p.add_argument("--sft-rows", type=int, default=2000, help="rl: SFT rows before RL")
    p.add_argument("--problems", type=int, default=300, help="coscale: P")
    p.add_argument("--k-solutions", type=int, default=4, help="coscale: K")
    p.add_argument("--rl-lr", type=float, default=2e-4)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=10, help="rl: checkpoint evals (the fit needs >= 3 in half)")
    p.add_argument("--warmup", type=int, default=0, help="rl: warm-up steps")
    p.add_argument("--rl-temperature", type=float, default=1.0)
    p.add_argument("--eval-temperature", type=float, default=0.6)
    p.add_argument("--arms", nargs="*", default=None, help=f"rl arms to run (default all: {list(ARMS)})")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = coscale(args) if args.experiment == "coscale" else rl(args)
    path = Path(args.out) / f"{args.experiment}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
