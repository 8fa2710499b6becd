r"""Benchmark: ``curate.verify.check_batch`` against the naive math-verify loop, on ~20K real (gold, completion) pairs.

Pairs (all from ../shared/data, read in place):
  * GSM8K ``example_model_solutions``: 4 model solutions x 1,319 problems; gold = the ``A: n`` of ``ground_truth``.
  * simpleRL ``math_cot_100``: 8 sampled CoTs x 100 MATH problems; gold = ``gt``.
  * FastCuRL (DeepScaleR) gold answers (``reward_model.ground_truth``), a seeded sample, each checked against itself
    wrapped as ``\boxed{gold}`` and against a perturbed variant (+1 on an integer, a swapped fraction, a changed
    digit) that must be wrong.

Naive loop = what users write today: ``math_verify.verify(parse(gold), parse(completion))`` per item, in one thread,
with math-verify's default timeouts. It is measured on a seeded random subset (``--naive-n``; 0 = all pairs) when the
full run would take too long. Ours = ``check_batch`` over all pairs, cold (worker pool started inside the timing) and
warm (pool already up: the steady state of a pipeline or a training run). Agreement is measured on the naive
subset, against the naive loop as written and against the same loop with the gold wrapped in ``$...$`` (so that
math-verify reads bare LaTeX golds such as tuples as LaTeX).

    .venv/bin/python bench/bench_verify.py [--runs 3] [--naive-n 4000] [--workers 0] [--fastcurl 6962] [--seed 0]

With ``--runs N`` ours runs N times from a cold start (pool shut down, parent memos cleared), each run between the two
halves of the naive loop as written (so that a drifting load on the shared box weighs on both alike), and the last
lines list every run's ratios.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from collections import Counter
from pathlib import Path


DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
_INT = re.compile(r"^-?\d+$")
_FRAC = re.compile(r"^\\[dt]?frac\{(-?\d+)\}\{(\d+)\}$")
_DIGIT = re.compile(r"\d")


def perturb(gold: str) -> str | None:
    """A variant of ``gold`` that must not verify as equal, or ``None`` when there is no safe one."""
    g = gold.strip()
    if _INT.match(g):
        return str(int(g) + 1)
    m = _FRAC.match(g)
    if m and m.group(1).lstrip("-") != m.group(2):
        return f"\\frac{{{m.group(2)}}}{{{m.group(1)}}}"
    m = _DIGIT.search(g)
    if m:
        return g[: m.start()] + str((int(m.group()) + 1) % 10) + g[m.end() :]
    return None


def load_pairs(n_fastcurl: int, seed: int) -> list[tuple[str, str, str]]:
    """(source, gold, completion) triples."""
    import polars as pl  # here, not at the top: every spawned checker worker re-imports this script

    from curate.verify.answers import normalize_answer

    pairs = []
    for row in pl.read_ndjson(DATA / "gsm8k" / "example_model_solutions.jsonl", infer_schema_length=None).to_dicts():
        gold = normalize_answer(row["ground_truth"])
        for key in ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"):
            pairs.append(("gsm8k", gold, row[key]["solution"]))
    for row in pl.read_ndjson(DATA / "simplerl" / "math_cot_100.jsonl", infer_schema_length=None).to_dicts():
        pairs.extend(("simplerl", row["gt"], c) for c in row["code"])
    frames = [pl.read_parquet(DATA / "fastcurl" / f) for f in ("train_L1.parquet", "train_L3.parquet")]
    pool = pl.concat(frames).sort(pl.col("extra_info").struct.field("index"))
    golds = [g for g in pool["reward_model"].struct.field("ground_truth").to_list() if g and g.strip()]
    golds = [g for g in golds if perturb(g) is not None]
    sample = random.Random(seed).sample(golds, n_fastcurl)
    template = "Let me work through this step by step.\nAfter simplifying, the final answer is $\\boxed{{{}}}$."
    pairs.extend(("fastcurl_self", g, template.format(g)) for g in sample)
    pairs.extend(("fastcurl_perturbed", g, template.format(perturb(g))) for g in sample)
    return pairs


def naive(pairs: list[tuple[str, str, str]], wrap: bool) -> tuple[list[bool], float, float]:
    """The loop as users write it (``wrap``: with the gold in ``$...$``): verdicts, wall and CPU seconds."""
    from math_verify import parse, verify

    t0, c0 = time.perf_counter(), time.process_time()
    out = [bool(verify(parse(f"${g}$" if wrap else g), parse(c))) for _, g, c in pairs]
    return out, time.perf_counter() - t0, time.process_time() - c0


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (Linux ``/proc``; 0 where unreadable)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def ours_run(verify, golds: list[str], completions: list[str], cfg) -> tuple[list, list[float], list[float]]:
    """``check_batch`` from a cold start: verdicts, wall and CPU seconds (parent + workers) of each half.

    Two calls on disjoint halves: the first pays the pool's start-up, the second is the steady state of a pipeline or
    a training run (a second call on the *same* pairs would hit the workers' caches instead).
    """
    from curate.verify import fastpath

    verify.shutdown()
    for cached in (fastpath.key, fastpath._no_solution, fastpath._unit):  # the parent's memos: every run starts cold
        cached.cache_clear()
    n = len(golds)
    ours: list = [None] * n
    walls, cpus = [], []
    for half in (list(range(0, n, 2)), list(range(1, n, 2))):
        t0, c0 = time.perf_counter(), time.process_time()
        pids = [w.proc.pid for w in verify._POOL.workers] if verify._POOL is not None else []
        w0 = cpu_seconds(pids)
        verdicts = verify.check_batch([completions[i] for i in half], [golds[i] for i in half], cfg)
        for i, v in zip(half, verdicts, strict=True):
            ours[i] = v
        walls.append(time.perf_counter() - t0)
        pids = pids or [w.proc.pid for w in verify._POOL.workers]
        cpus.append(time.process_time() - c0 + cpu_seconds(pids) - w0)  # parent + workers (replaced ones lost)
    return ours, walls, cpus


def agreement(pairs: list, ours: list, idx: list[int], ref: list[bool], examples: int) -> None:
    """Print the agreement of ours with one naive variant, and a few disagreements per source."""
    dis = [(i, r) for i, r in zip(idx, ref, strict=True) if ours[i].correct != r]
    by_source = dict(Counter(pairs[i][0] for i, _ in dis))
    print(f"      agreement {1 - len(dis) / len(idx):.4f} ({len(dis)} differ: {by_source})")
    per_source: dict[str, list] = {}
    for i, r in dis:  # a few of each source
        per_source.setdefault(pairs[i][0], []).append((i, r))
    shown = [x for group in per_source.values() for x in group[: max(1, examples // len(per_source))]]
    for i, r in shown:
        src, gold, completion = pairs[i]
        tail = completion[-120:].replace("\n", " ")
        print(f"      [{src}] gold={gold!r} ours={ours[i].verdict}/{ours[i].detail} {ours[i].extracted!r}, naive={r}")
        print(f"          ...{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--naive-n", type=int, default=4000, help="Pairs for the naive loop (0: all).")
    ap.add_argument("--workers", type=int, default=0, help="check_batch workers (0: one per core).")
    ap.add_argument("--fastcurl", type=int, default=6962, help="FastCuRL golds sampled (x2 pairs each).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=1, help="Cold runs of ours, each followed by the naive loop.")
    ap.add_argument("--examples", type=int, default=6, help="Disagreements to print per naive variant.")
    args = ap.parse_args()

    import logging

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # the naive loop logs every timeout with its input
    from curate.verify import checker as verify

    pairs = load_pairs(args.fastcurl, args.seed)
    golds = [g for _, g, _ in pairs]
    completions = [c for _, _, c in pairs]
    print(f"pairs: {len(pairs)} {dict(Counter(s for s, _, _ in pairs))}; load average {os.getloadavg()[0]:.1f}")
    rng = random.Random(args.seed)
    subset = sorted(rng.sample(range(len(pairs)), args.naive_n)) if 0 < args.naive_n < len(pairs) else None
    idx = subset if subset is not None else list(range(len(pairs)))
    cfg = verify.VerifyConfig(workers=args.workers)
    summary = []
    for run in range(1, args.runs + 1):
        # The naive loop as written runs half before and half after ours: a load that drifts during the run (the box
        # is shared) then weighs on both sides alike.
        before = naive([pairs[i] for i in idx[: len(idx) // 2]], False)
        ours, walls, cpus = ours_run(verify, golds, completions, cfg)
        after = naive([pairs[i] for i in idx[len(idx) // 2 :]], False)
        total, warm = len(pairs) / sum(walls), len(pairs) / 2 / walls[1]
        ours_cpu_ms = 1000 * sum(cpus) / len(pairs)
        print(f"run {run}/{args.runs} (load average {os.getloadavg()[0]:.1f})")
        print(f"ours  all pairs, incl. pool start-up: {total:8.1f} items/s ({sum(walls):.1f} s wall)")
        print(f"ours  second half, pool warm:         {warm:8.1f} items/s ({walls[1]:.1f} s wall)")
        print(f"ours  CPU (parent + workers):         {ours_cpu_ms:8.2f} ms/item")
        if run == 1:
            print(f"ours  verdicts: {dict(Counter(v.verdict for v in ours))}")
            for src in dict.fromkeys(s for s, _, _ in pairs):
                ids = [i for i, p in enumerate(pairs) if p[0] == src]
                print(f"      {src:20s} accuracy {sum(ours[i].correct for i in ids) / len(ids):.3f}")
            print(f"naive loop on {'a random subset of ' if subset else 'all '}{len(idx)} pairs:")
        variants = (("parse(gold)", False), ("parse($gold$)", True)) if run == 1 else (("parse(gold)", False),)
        for name, wrap in variants:
            if wrap:
                ref, wall, cpu = naive([pairs[i] for i in idx], wrap)
            else:
                ref, wall, cpu = before[0] + after[0], before[1] + after[1], before[2] + after[2]
            rate, cpu_ms = len(idx) / wall, 1000 * cpu / len(idx)
            ratios = (total / rate, warm / rate, cpu_ms / ours_cpu_ms)
            print(f"  {name:14s} {rate:8.1f} items/s, {cpu_ms:.2f} CPU ms/item")
            up, wm, cp = ratios
            print(f"      speed-up {up:.1f}x incl. start-up, {wm:.1f}x warm, {cp:.1f}x in CPU time")
            if not wrap:
                summary.append(ratios)
            if run == 1:
                agreement(pairs, ours, idx, ref, args.examples)
    for k, name in enumerate(("incl. start-up", "warm", "in CPU time")):
        print(f"speed-up over parse(gold), {name:14s}, per run: " + ", ".join(f"{r[k]:.1f}x" for r in summary))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
