r"""Sampling speed of the built-in model: the rollout engine against transformers' ``generate``, in one run.

On the same model and the same requests (``--problems`` validation problems x ``--k`` samples at T = 0.6 and
``--max-tokens``, as the chain's held-out evaluation asks them), it measures:

- ``generate`` as the chain batched it before the engine (``engine: hf``, static batches of ``--batch`` rows,
  prompts padded, every batch until its longest answer ends), the engine (``engine: auto``, ``--slots`` rows,
  continuous batching), and the matrix-products-only bound (the model's linear layers alone, for the same
  completion tokens in rows of ``--slots``): tokens/s and CPU-seconds, and the ratios between them;
- that the two samplers agree: held-out pass@1 of both on the same problems at T = 0.6 and 1.0, paired per
  problem (the difference with its paired SE);
- an RL step (``--rl-steps`` steps of 32 prompts x 8 rollouts, CISPO, the tiny recipe's settings) with TRL's
  ``generate`` and with the engine: CPU-seconds per step.

Every figure comes with the CPU-seconds it cost and the load average while it ran. One torch thread
(``OMP_NUM_THREADS=1``), as the chain runs. The JSON feeds bench/README.md's ``generate`` table
(``python bench/tables.py``)::

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_generate.py --home workspace \
        --model workspace/runs/tiny-fastcurl/sft/best --json bench/json/generate.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):  # before any Hugging Face import
    os.environ.setdefault(_k, "1")


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> dict[str, float]:
    wall, cpu = _clock()
    return {
        "wall_s": round(wall - start[0], 2),
        "cpu_s": round(cpu - start[1], 2),
        "load": round(os.getloadavg()[0], 2),
    }


def requests_of(problems: Any, k: int, seed: int = 0) -> list[Any]:
    """The evaluation's requests: each problem's user message, samples 0..k-1 (``training.evaluate.evaluate``)."""
    from curate import schema as S
    from curate.prompts import user_message
    from curate.rollout.backends import Request, request_seed

    return [
        Request(pid, user_message(text), tuple(range(k)), request_seed(seed, pid, 0))
        for pid, text in zip(problems[S.PROBLEM_ID].to_list(), problems[S.PROBLEM].to_list(), strict=True)
    ]


def speed(model: str, requests: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Tokens/s and CPU-seconds of ``generate`` (static batches), the engine and the matmul-only bound."""
    from curate.rollout.backends import HFOptions, Sampling, generate_hf, load_hf

    sampling = Sampling(temperature=0.6, max_tokens=args.max_tokens, seed=0)
    out: dict[str, Any] = {}
    runs = {"generate": HFOptions(batch_size=args.batch, threads=1, engine="hf"),
            "engine": HFOptions(batch_size=args.slots, threads=1, engine="auto")}  # fmt: skip
    for name, opts in runs.items():
        load_hf(model, None, opts)
        start = _clock()
        completions = generate_hf(requests, model, sampling, opts)
        cost = _since(start)
        tokens = sum(c.completion_tokens or 0 for c in completions)
        out[name] = {**cost, "tokens": tokens, "samples": len(completions),
                     "tokens_per_s": round(tokens / cost["wall_s"], 1),
                     "tokens_per_cpu_s": round(tokens / max(cost["cpu_s"], 1e-9), 1)}  # fmt: skip
        print(f"[generate] {name}: {tokens:,} tokens in {cost['wall_s']} s ({cost['cpu_s']} CPU-s, load "
              f"{cost['load']}): {out[name]['tokens_per_cpu_s']:,.0f} tokens per CPU-second", flush=True)  # fmt: skip
    out["matmul_bound"] = matmul_bound(load_hf(model, None, runs["engine"])[1], out["engine"]["tokens"], args.slots)
    out["ratio_engine_over_generate"] = round(
        out["engine"]["tokens_per_cpu_s"] / out["generate"]["tokens_per_cpu_s"], 2
    )
    out["ratio_bound_over_generate"] = round(
        out["matmul_bound"]["tokens_per_cpu_s"] / out["generate"]["tokens_per_cpu_s"], 2
    )
    print(f"[generate] engine / generate: {out['ratio_engine_over_generate']}x; matmul bound / generate: "
          f"{out['ratio_bound_over_generate']}x", flush=True)  # fmt: skip
    return out


def matmul_bound(lm: Any, tokens: int, rows: int) -> dict[str, Any]:
    """The model's linear layers alone (q/k/v, o, gate/up, down, lm_head) for ``tokens`` tokens in rows of
    ``rows``: what a step would cost with no attention, cache, sampling or per-operation overhead."""
    import torch

    weights = [m.weight.detach() for m in lm.modules() if isinstance(m, torch.nn.Linear)]
    x = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
    steps = max(1, tokens // rows)
    start = _clock()
    with torch.no_grad():
        for _ in range(steps):
            for w in weights:
                torch.nn.functional.linear(x[w.shape[1]], w)
    cost = _since(start)
    return {**cost, "tokens": steps * rows, "tokens_per_cpu_s": round(steps * rows / max(cost["cpu_s"], 1e-9), 1)}


def agreement(model: str, problems: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Held-out pass@1 of both samplers on the same problems, paired per problem, at T = 0.6 and 1.0."""
    from training.evaluate import EvalConfig, evaluate, paired_gain

    out: dict[str, Any] = {}
    for temperature in (0.6, 1.0):
        res = {}
        for engine, batch in (("auto", args.slots), ("hf", args.batch)):
            cfg = EvalConfig(k=args.k, temperature=temperature, max_new_tokens=args.max_tokens, batch_size=batch,
                             threads=1, engine=engine)  # fmt: skip
            start = _clock()
            res[engine] = evaluate(model, problems, cfg)
            res[engine]["cost"] = _since(start)
        gain = paired_gain(res["auto"]["per_problem"], res["hf"]["per_problem"])
        out[str(temperature)] = {
            "engine": round(res["auto"]["pass_at_1"], 4), "generate": round(res["hf"]["pass_at_1"], 4),
            "difference": round(gain["gain"], 4), "paired_se": round(gain["stderr"], 4),
            "n_problems": res["auto"]["n_problems"], "k": args.k,
            "within_2se": abs(gain["gain"]) <= 2 * gain["stderr"] + 1e-12,
            "cost": {"engine": res["auto"]["cost"], "generate": res["hf"]["cost"]},
        }  # fmt: skip
        print(f"[generate] T={temperature}: engine {out[str(temperature)]['engine']:.3f}, generate "
              f"{out[str(temperature)]['generate']:.3f}, difference {gain['gain']:+.3f} ± {gain['stderr']:.3f} "
              f"(paired SE, {res['auto']['n_problems']} problems x {args.k})", flush=True)  # fmt: skip
    return out


def rl_step(model: str, problems: Any, args: argparse.Namespace) -> dict[str, Any]:
    """CPU-seconds per RL step (32 prompts x 8 rollouts, CISPO) with TRL's ``generate`` and with the engine, each
    in a fresh process (``training rl``), on the same prompts and model."""
    import polars as pl

    from curate import prompts as P
    from curate import schema as S

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "prompts.parquet"
        chats = [P.chat_prompt(q) for q in problems[S.PROBLEM].to_list()]
        pl.DataFrame(
            {"prompt": chats, S.ANSWER: problems[S.ANSWER], S.PROBLEM_ID: problems[S.PROBLEM_ID]}
        ).write_parquet(train)
        for engine in ("hf", "auto"):
            cmd = [sys.executable, "-m", "training.cli", "rl", "--model", model, "--train", str(train), "--out",
                   str(Path(tmp) / engine), "--set", f"max_steps={args.rl_steps}", "--set", "prompts_per_step=32",
                   "--set", "num_generations=8", "--set", "loss_type=cispo", "--set", "epsilon_high=5.0",
                   "--set", "learning_rate=1e-4", "--set", f"max_completion_length={args.max_tokens}",
                   "--set", "temperature=1.0", "--set", f"engine={engine}", "--set", "save_steps=1000"]  # fmt: skip
            start = time.perf_counter()
            before = os.times()
            subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            after = os.times()
            cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
            out[engine] = {"cpu_s": round(cpu, 1), "wall_s": round(time.perf_counter() - start, 1),
                           "steps": args.rl_steps, "cpu_s_per_step": round(cpu / args.rl_steps, 2),
                           "load": round(os.getloadavg()[0], 2), "command": shlex.join(cmd[1:])}  # fmt: skip
            print(
                f"[generate] RL step, {'TRL generate' if engine == 'hf' else 'engine'}: "
                f"{out[engine]['cpu_s_per_step']} CPU-s per step (process total, model load included)",
                flush=True,
            )
    out["ratio"] = round(out["hf"]["cpu_s_per_step"] / max(out["auto"]["cpu_s_per_step"], 1e-9), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", required=True, help="a workspace with the built-in pool curated (its validation split)")
    ap.add_argument("--model", required=True, help="the model to sample (the demo's SFT model: runs/<name>/sft/best)")
    ap.add_argument("--pool", default="tiny")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--problems", type=int, default=300)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=240)
    ap.add_argument("--batch", type=int, default=100, help="generate's batch (the chain's eval.batch_size)")
    ap.add_argument("--slots", type=int, default=128, help="the engine's rows")
    ap.add_argument("--rl-steps", type=int, default=3)
    ap.add_argument("--only", default="speed,agreement,rl", help="comma-separated: speed, agreement, rl")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    from curate import io
    from training.evaluate import heldout_problems

    torch.set_num_threads(1)
    only = set(args.only.split(","))
    problems = heldout_problems(io.Workspace(Path(args.home)), args.pool, split=args.split, limit=args.problems)
    model = str(Path(args.model).resolve())
    result: dict[str, Any] = {
        "measured": {"date": time.strftime("%Y-%m-%d"), "command": shlex.join(["python", "bench/bench_generate.py",
                     *(argv if argv is not None else sys.argv[1:])]), "load": round(os.getloadavg()[0], 2),
                     "cpu": _cpu_name()},
        "settings": {k: v for k, v in vars(args).items() if k not in ("json",)} | {"home": None, "model": None},
    }  # fmt: skip
    if "speed" in only:
        result["speed"] = speed(model, requests_of(problems, args.k), args)
    if "agreement" in only:
        result["agreement"] = agreement(model, problems, args)
    if "rl" in only:
        result["rl_step"] = rl_step(model, problems, args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"[generate] wrote {args.json}")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
