r"""Does RL after SFT improve a small from-scratch model on a built-in task?

Per seed, in one process (one torch thread):

1. problems from the built-in generator (``gen://arith``, level 1 numbers 1-10, operators ``+-``; chain length from
   the generator's ``min_ops``/``max_ops``), three disjoint sets by problem id: held-out problems (``--eval-ops``,
   ``--eval-per-length`` per chain length) drawn first, SFT problems (``--sft-ops`` plus a ``--long-share`` of
   ``--long-ops``) avoiding them, RL prompts (``--rl-ops``) avoiding both;
2. SFT rows: each problem's canonical step list (``curate.prompts.sft_row``); with ``--truncated-share`` ("two
   modes", RL-LEARNING.md) that share of problems also gets a copy stopped one operation early, its intermediate
   value boxed (same arithmetic, always wrong: a stand-in for unverified teacher data with truncated traces);
3. a from-scratch tiny model (``training.tiny.init_tiny``), SFT (``training.sft.train_sft``);
4. held-out pass@1 (mean@k) of the SFT model at each ``--eval-temps`` temperature (``training.evaluate``);
5. CISPO (``training.rl.train_rl``) from the SFT model on the RL prompts: cap 5 and the ScaleRL switches, uniform
   prompts, ``--rl-prompts-per-step`` x ``--rollouts`` per step, warm-up then ``--rl-schedule``;
6. held-out pass@1 of the RL model and RL minus SFT with the paired SE (``training.evaluate.paired_gain``: same
   problems, same eval seed, per-problem difference of mean@k), overall and per chain length; with ``--modes`` the
   share of full / stopped-early solutions and the accuracy within the full mode (the very samples the evaluation
   scored); with ``--eval-checkpoints`` the held-out curve at every ``--rl-save-steps``;
7. CPU-seconds per phase (this process plus its waited-for children: ``resource.getrusage``).

Everything goes under ``--out/seed<N>`` (``result_<tag>.json`` per seed); a re-run reuses the SFT model, the RL run
and cached evaluations, so another ``--tag`` adds an RL arm to the same SFT model. The ``__main__`` guard is
required: the answer checker spawns workers that re-import this script.

The "two modes" measurement (SFT 2-4 operations with every solution also stopped early; RL and held-out on
2-4 operations; results in bench/HISTORY.md):

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_learning.py --seeds 0 1 2 --out /tmp/rl_explore/r2 \
        --sft-ops 2-4 --long-share 0 --truncated-share 1.0 --sft-rows 4000 --sft-epochs 2 --rl-ops 2-4 \
        --eval-ops 2-4 --rl-steps 40 --rl-lr 1e-4 --max-new-tokens 128 --eval-checkpoints --rl-save-steps 20 \
        --tag lr1e-4 --modes

The "edge of competence" run that did not pay (SFT 1-3 operations + 3% of 4-6, RL and held-out 3-6) is the
defaults with ``--sft-rows 6000 --sft-epochs 3``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from training import layout, run_folder  # noqa: E402 (from this checkout, the line above)


def cpu_s() -> float:
    """CPU seconds of this process (all threads) plus its terminated, waited-for children."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def n_ops(problem: str) -> int:
    """Operations in a generated arith problem (``Compute $1 + 2 - 3$.``); numbers in it are never negative."""
    expr = problem.split("$")[1]
    return len(re.findall(r" [+-] |\\times", expr))


def parse_range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def problems(
    n: int, seed: int, ops_range: tuple[int, int], operators: str, level: int, exclude: set[str]
) -> list[dict]:
    """``n`` distinct problems (by id) of the generator stream, none of whose ids is in ``exclude``."""
    from curate import schema as S
    from curate.ingest.generate import generate_problem

    out, seen, i = [], set(exclude), 0
    while len(out) < n:
        p = generate_problem(
            i, seed=seed, family="arith", level=level, min_ops=ops_range[0], max_ops=ops_range[1], ops=operators
        )
        i += 1
        if i > 50 * n + 1000:
            raise RuntimeError(f"cannot draw {n} distinct problems with {ops_range} ops (got {len(out)})")
        pid = S.problem_id(p["problem"])
        if pid in seen:
            continue
        seen.add(pid)
        out.append({**p, "problem_id": pid, "ops": n_ops(p["problem"])})
    return out


def truncated(solution: str) -> str:
    """The step list stopped one operation early, its last value boxed: same arithmetic, always wrong (b >= 1)."""
    lines = solution.split("\n")
    prev = re.search(r"(-?\d+)\$\.$", lines[-3]).group(1)
    return "\n".join([*lines[:-2], f"The result is $\\boxed{{{prev}}}$."])


def per_length(problems_by_len: dict[int, list[dict]], n_each: int) -> list[dict]:
    return [p for length in sorted(problems_by_len) for p in problems_by_len[length][:n_each]]


def build_sets(args: argparse.Namespace, seed: int) -> dict[str, list[dict]]:
    """held-out (per length), RL prompts and SFT rows, disjoint by problem id, from separate generator streams."""
    base = 1000 * (seed + 1)
    lv, opset = args.level, args.operators
    held: list[dict] = []
    lo, hi = parse_range(args.eval_ops)
    for length in range(lo, hi + 1):  # the same number of held-out problems at each chain length
        held += problems(
            args.eval_per_length, base + 10 + length, (length, length), opset, lv, {p["problem_id"] for p in held}
        )
    ids = {p["problem_id"] for p in held}
    n_long = round(args.sft_rows * args.long_share)
    sft = problems(args.sft_rows - n_long, base + 3, parse_range(args.sft_ops), opset, lv, ids)
    if n_long:
        sft += problems(n_long, base + 4, parse_range(args.long_ops), opset, lv, ids | {p["problem_id"] for p in sft})
    ids |= {p["problem_id"] for p in sft}  # SFT rows do not depend on the RL options; RL prompts avoid them
    rl = problems(args.rl_prompts, base + 2, parse_range(args.rl_ops), opset, lv, ids)
    all_ids = [p["problem_id"] for s in (held, rl, sft) for p in s]
    assert len(all_ids) == len(set(all_ids)), "held-out, RL and SFT sets must be disjoint"
    return {"held": held, "rl": rl, "sft": sft}


def write_sets(sets: dict[str, list[dict]], folder: Path, seed: int, args: argparse.Namespace) -> dict[str, Path]:
    import random

    import polars as pl

    from curate import prompts

    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        prompts.sft_row(p["problem"], p["solution"]) | {"problem_id": p["problem_id"], "answer": p["answer"]}
        for p in sets["sft"]
    ]
    if share := getattr(args, "truncated_share", 0.0):  # "two modes": a copy that stops one operation early
        rng = random.Random(seed + 7)
        rows += [
            prompts.sft_row(p["problem"], truncated(p["solution"]))
            | {"problem_id": p["problem_id"] + "-t", "answer": ""}
            for p in sets["sft"]
            if p["ops"] >= 2 and rng.random() < share
        ]
    random.Random(seed).shuffle(rows)  # long rows spread over the epoch, not at its end
    sft_path = folder / "sft.parquet"
    pl.DataFrame(rows).write_parquet(sft_path)
    rl_path = folder / f"rl_{args.tag}.parquet"
    pl.DataFrame(
        {
            "prompt": [prompts.chat_prompt(p["problem"]) for p in sets["rl"]],
            "answer": [p["answer"] for p in sets["rl"]],
            "problem_id": [p["problem_id"] for p in sets["rl"]],
        }
    ).write_parquet(rl_path)
    held_path = folder / "held.parquet"
    pl.DataFrame([{k: p[k] for k in ("problem_id", "problem", "answer", "ops")} for p in sets["held"]]).write_parquet(
        held_path
    )
    return {"sft": sft_path, "rl": rl_path, "held": held_path}


def evaluate_at(model_dir: Path, held, args: argparse.Namespace, temperature: float, cache: Path) -> object:
    """Per-problem table of ``evaluate`` at one temperature (cached as parquet next to the model)."""
    import polars as pl

    from training.evaluate import EvalConfig, evaluate

    if cache.is_file():
        return pl.read_parquet(cache)
    cfg = EvalConfig(
        k=args.k, temperature=temperature, max_new_tokens=args.max_new_tokens, batch_size=args.eval_batch,
        seed=args.eval_seed, device="cpu", dtype="float32", threads=1, min_samples=0,
    )  # fmt: skip
    res = evaluate(str(model_dir), held.select("problem_id", "problem", "answer"), cfg)
    table = res["per_problem"].join(held.select("problem_id", "ops"), on="problem_id")
    table.write_parquet(cache)
    return table


def modes(model_dir: Path, held, args: argparse.Namespace, temperature: float, cache: Path) -> dict:
    """Which mode each held-out sample took: ``full`` (one step line per operation), ``early`` (one step short: the
    truncated SFT copies' mode) or ``other``; the share of each and the accuracy within ``full``, per chain length.
    Same requests, seeds and batch size as ``evaluate_at``, so these are the samples it scored."""
    import polars as pl

    from curate import io
    from curate.prompts import user_message
    from curate.rollout.backends import HFOptions, Request, Sampling, generate_hf, request_seed

    if cache.is_file():
        return io.read_json(cache)
    rows = held.to_dicts()  # evaluate's order: generation is seeded per batch
    seeds = [request_seed(args.eval_seed, r["problem_id"], 0) for r in rows]
    reqs = [
        Request(r["problem_id"], user_message(r["problem"]), tuple(range(args.k)), sd)
        for r, sd in zip(rows, seeds, strict=True)
    ]
    sampling = Sampling(temperature=temperature, top_p=1.0, max_tokens=args.max_new_tokens, seed=args.eval_seed)
    opts = HFOptions(device="cpu", dtype="float32", batch_size=args.eval_batch, threads=1)
    by_id = {r["problem_id"]: r for r in rows}
    recs = []
    for c in generate_hf(reqs, str(model_dir), sampling, opts):
        r = by_id[c.problem_id]
        steps = len(re.findall(r"^(?:Add|Subtract|Multiply by) ", c.text, flags=re.M))
        boxed = re.findall(r"\\boxed\{(-?\d+)\}", c.text)
        mode = "full" if steps == r["ops"] else "early" if steps == r["ops"] - 1 else "other"
        recs.append({"ops": r["ops"], "mode": mode, "correct": bool(boxed) and boxed[-1] == r["answer"]})
    df = pl.DataFrame(recs)
    out = {}
    for key, part in [("all", df), *((f"ops{n}", df.filter(pl.col("ops") == n)) for n in sorted(df["ops"].unique()))]:
        full = part.filter(pl.col("mode") == "full")
        out[key] = {
            "full": part["mode"].eq("full").mean(),
            "early": part["mode"].eq("early").mean(),
            "other": part["mode"].eq("other").mean(),
            "acc_full": full["correct"].mean() if full.height else None,
        }
    cache.write_text(json.dumps(out))
    return out


def compare(after, before) -> dict:
    """Overall and per-length pass@1 of both, and the paired gain (after - before) with its SE."""
    import polars as pl

    from training.evaluate import paired_gain

    out = {"all": paired_gain(after, before)}
    for length in sorted(before["ops"].unique().to_list()):
        a, b = after.filter(pl.col("ops") == length), before.filter(pl.col("ops") == length)
        out[f"ops{length}"] = paired_gain(a, b)
    return out


def rates(table) -> dict:
    import polars as pl

    out = {"all": float(table["mean"].mean()), "tokens": float(table["mean_tokens"].mean())}
    for length in sorted(table["ops"].unique().to_list()):
        out[f"ops{length}"] = float(table.filter(pl.col("ops") == length)["mean"].mean())
    return out


class Phases:
    """CPU and wall seconds per named phase of one seed (``with phases("sft"): ...``), each logged as it ends."""

    def __init__(self, log) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.log = log

    @contextlib.contextmanager
    def __call__(self, name: str):
        c, w = cpu_s(), time.perf_counter()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + cpu_s() - c
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w
            self.log(f"{name}: {cpu_s() - c:.0f} CPU-s, {time.perf_counter() - w:.0f} s wall")


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    """One seed: data, the tiny model, SFT, its held-out evaluation, then (``--rl-steps``) the RL arm."""
    import polars as pl
    import torch

    from training.tiny import TinyConfig, init_tiny

    torch.set_num_threads(1)
    out = Path(args.out) / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    log = lambda msg: print(f"[seed {seed}] {msg}", flush=True)  # noqa: E731
    phase = Phases(log)

    with phase("data"):
        sets = build_sets(args, seed)
        paths = write_sets(sets, out / layout.DATA, seed, args)  # a seed's folder is laid out as a run folder
        held = pl.read_parquet(paths["held"])
    sft_lens = [p["ops"] for p in sets["sft"]]
    log(
        f"sets: sft {len(sets['sft'])} rows (ops {min(sft_lens)}-{max(sft_lens)}, long share {args.long_share}), "
        f"rl {len(sets['rl'])} prompts ({args.rl_ops}), held-out {held.height} ({args.eval_ops})"
    )

    with phase("init"):
        model0 = out / layout.INIT
        if not (model0 / "config.json").is_file():
            init_tiny(model0, TinyConfig(size=args.size, seed=seed))
        from transformers import AutoModelForCausalLM

        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model0).parameters())
    log(f"model {args.size}: {n_params / 1e6:.2f}M parameters")

    with phase("sft"):
        sft_m = sft_model_of(args, seed, out, model0, paths["sft"])
    sft_model = layout.final(out / layout.SFT)
    log(f"sft: {sft_m.get('steps')} steps, loss {sft_m.get('train_loss_first')} -> {sft_m.get('train_loss_last')}")

    temps = [float(t) for t in args.eval_temps.split(",")]
    sft_tab = {}
    with phase("eval_sft"):
        for t in temps:
            sft_tab[t] = evaluate_at(sft_model, held, args, t, out / f"eval_sft_T{t}.parquet")
            log(f"SFT  T={t}: {json.dumps({k: round(v, 3) for k, v in rates(sft_tab[t]).items()})}")

    result = {"seed": seed, "params": n_params, "sft_metrics": sft_m, "args": vars(args)}
    if args.rl_steps > 0:
        result.update(rl_arm(args, seed, out, sft_model, paths["rl"], held, sft_tab, phase, log))
    result["cpu_s"] = {k: round(v, 1) for k, v in phase.cpu.items()}
    result["wall_s"] = {k: round(v, 1) for k, v in phase.wall.items()}
    result["cpu_total_min"] = round(sum(phase.cpu.values()) / 60, 2)
    result["loadavg_end"] = os.getloadavg()
    log(f"CPU-s per phase {result['cpu_s']}, total {result['cpu_total_min']} CPU-min; load {os.getloadavg()}")
    (out / f"result_{args.tag}.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def sft_model_of(args: argparse.Namespace, seed: int, out: Path, model0: Path, data: Path) -> dict:
    """SFT of ``model0`` into ``out/sft`` (``training.tiny.SMALL_SFT``'s optimisation; rows up to 512 tokens), or
    the metrics of the one another RL arm of this seed already trained."""
    from training.sft import SFTRunConfig, read_metrics, train_sft

    done = read_metrics(out / layout.SFT)
    if done is not None and (layout.final(out / layout.SFT) / "config.json").is_file():  # another RL arm of this seed
        return {**done, "reused": True}
    sft_cfg = SFTRunConfig(
        learning_rate=args.sft_lr, epochs=args.sft_epochs, per_device_batch_size=args.sft_batch, warmup_ratio=0.05,
        lr_scheduler="cosine", max_length=512, torch_threads=1, seed=seed, save_steps=100000, logging_steps=100,
    )  # fmt: skip
    return train_sft(sft_cfg, model=str(model0), data=data, out_dir=out / layout.SFT)


def rl_arm(args, seed, out, sft_model, rl_data, held, sft_tab, phase, log) -> dict:
    """The RL arm from the SFT model (CISPO with ScaleRL's hygiene), its reward curve, its held-out evaluation
    against SFT at each temperature and, as asked, the answer modes and every checkpoint's evaluation."""
    import polars as pl

    from training.rl import RLConfig, train_rl

    temps = list(sft_tab)
    with phase("rl"):
        rl_cfg = RLConfig(
            loss_type="cispo", epsilon_high=args.cispo_cap, num_generations=args.rollouts,
            prompts_per_step=args.rl_prompts_per_step, max_steps=args.rl_steps, learning_rate=args.rl_lr,
            lr_scheduler_type=args.rl_schedule, warmup_steps=args.rl_warmup, max_completion_length=args.max_new_tokens,
            temperature=args.rl_temperature, seed=seed, save_steps=args.rl_save_steps, save_total_limit=None,
            zero_variance_filter=True, batch_adv_norm=True, prompt_level_loss=True, fp32_lm_head=True,
            gradient_checkpointing=False, policy="uniform", beta=args.rl_beta,
        )  # fmt: skip
        rl_dir = out / f"rl_{args.tag}"
        summary = train_rl(rl_cfg, model=str(sft_model), train=rl_data, out_dir=rl_dir)
    rl_model = Path(summary["final"])
    try:
        m = pl.read_parquet(rl_dir / layout.METRICS)
        rew = m["reward"].to_list()
        q = max(1, len(rew) // 5)
        curve = [round(sum(rew[i : i + q]) / len(rew[i : i + q]), 3) for i in range(0, len(rew), q)]
        kept = m["kept_group_frac"].mean() if "kept_group_frac" in m.columns else None
    except Exception as exc:
        curve, kept = [f"metrics unreadable: {exc}"], None
    log(f"rl: {summary['steps']} steps, reward by fifths {curve}, kept-group frac {kept}")
    result = {
        "rl_summary": {k: summary.get(k) for k in ("steps", "reward_first", "reward_last", "wall_s")},
        "reward_curve": curve,
        "kept_group_frac": kept,
        "evals": {},
    }
    with phase("eval_rl"):
        for t in temps:
            rl_tab = evaluate_at(rl_model, held, args, t, rl_dir / f"eval_T{t}.parquet")
            cmp = compare(rl_tab, sft_tab[t])
            result["evals"][str(t)] = {"sft": rates(sft_tab[t]), "rl": rates(rl_tab), "gain": cmp}
            g = cmp["all"]
            per = ", ".join(
                f"{k}: {v['before_rate']:.3f}->{v['after_rate']:.3f} ({v['gain']:+.3f}±{v['stderr']:.3f})"
                for k, v in cmp.items() if k != "all"
            )  # fmt: skip
            log(
                f"T={t}: SFT {g['before_rate']:.3f} RL {g['after_rate']:.3f} gain {g['gain']:+.3f} ± "
                f"{g['stderr']:.3f} z {g['z']:+.2f} | {per}"
            )
    if args.modes:
        with phase("modes"):
            result["modes"] = modes_of(args, out, sft_model, rl_model, rl_dir, held, temps, log)
    if args.eval_checkpoints:
        result["checkpoints"] = checkpoint_gains(args, rl_dir, held, temps[0], sft_tab[temps[0]], phase, log)
    return result


def modes_of(args, out, sft_model, rl_model, rl_dir, held, temps, log) -> dict:
    """The answer modes (finished, stopped early, other) of the SFT and RL models at each temperature."""
    found = {}
    for t in temps:
        ms = modes(sft_model, held, args, t, out / f"modes_sft_T{t}.json")
        mr = modes(rl_model, held, args, t, rl_dir / f"modes_T{t}.json")
        found[str(t)] = {"sft": ms, "rl": mr}
        for name, m in (("SFT", ms), ("RL ", mr)):
            log(
                f"modes {name} T={t}: "
                + " | ".join(
                    f"{k}: full {v['full']:.2f} early {v['early']:.2f} other {v['other']:.2f} "
                    f"acc(full) {v['acc_full'] if v['acc_full'] is None else round(v['acc_full'], 3)}"
                    for k, v in m.items()
                )
            )
    return found


def checkpoint_gains(args, rl_dir, held, t, sft_table, phase, log) -> dict:
    """Every RL checkpoint's held-out gain over SFT at temperature ``t``."""
    gains = {}
    for ck in run_folder.checkpoints(rl_dir / layout.CHECKPOINTS):
        with phase("eval_ckpt"):
            tab = evaluate_at(ck, held, args, t, rl_dir / f"eval_{ck.name}_T{t}.parquet")
            g = compare(tab, sft_table)["all"]
        gains[ck.name] = g
        log(f"{ck.name} T={t}: {g['after_rate']:.3f} gain {g['gain']:+.3f} ± {g['stderr']:.3f} z {g['z']:+.2f}")
    return gains


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="/tmp/rl_explore/run")
    ap.add_argument("--tag", default="a", help="names the RL run folder and result file (several RL arms per SFT)")
    ap.add_argument("--size", default="small")
    ap.add_argument("--level", type=int, default=1, help="generator level: number size (1: 1-10)")
    ap.add_argument("--operators", default="+-")
    ap.add_argument("--sft-ops", default="1-3")
    ap.add_argument("--long-ops", default="4-6")
    ap.add_argument("--long-share", type=float, default=0.03)
    ap.add_argument("--rl-ops", default="3-6")
    ap.add_argument("--eval-ops", default="3-6")
    ap.add_argument("--sft-rows", type=int, default=4000)
    ap.add_argument(
        "--truncated-share", type=float, default=0.0,
        help="two modes: share of SFT problems (>= 2 ops) that also get their solution stopped one operation early",
    )  # fmt: skip
    ap.add_argument("--sft-epochs", type=float, default=3.0)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-lr", type=float, default=2e-3)
    ap.add_argument("--rl-prompts", type=int, default=2000)
    ap.add_argument("--eval-per-length", type=int, default=100)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--eval-temps", default="1.0,0.7")
    ap.add_argument("--eval-seed", type=int, default=1234)
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--eval-checkpoints", action="store_true")
    ap.add_argument("--modes", action="store_true", help="share and accuracy of each solution mode (full / early)")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--rl-steps", type=int, default=60)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--rl-schedule", default="linear")
    ap.add_argument("--rl-warmup", type=int, default=5)
    ap.add_argument("--rl-prompts-per-step", type=int, default=32)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--rl-temperature", type=float, default=1.0)
    ap.add_argument("--rl-beta", type=float, default=0.0)
    ap.add_argument("--rl-save-steps", type=int, default=1000)
    ap.add_argument("--cispo-cap", type=float, default=5.0)
    args = ap.parse_args(argv)
    for seed in args.seeds:
        run_seed(args, seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
