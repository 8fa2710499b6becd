"""Benchmark: the cold path on a 220K generated pool, raw source to a 1,500-problem selection, as a new user meets it.

A fresh workspace (no embedding cache, no distilled static model), then four ``curate`` verbs, each in its own
process through the real CLI (so times include the imports a user pays and peak RSS is the step's own,
``getrusage(RUSAGE_SELF).ru_maxrss``):

  ingest         gen://mixed?n=220000&seed=0 (train + its test split)
  decontaminate  exact / n-gram / embedding leaks against the test split, near-duplicate clusters, with --encoder;
                 it embeds every problem (the first use of ``static-minilm`` also distills it: its ``meta.json``
                 says how long)
  score          DES, pass-rate prior, k-means clusters over the (now cached) embeddings
  select         --size 1500, plots and every export format

Target: under 10 minutes in all on 2 cores.

    nice -n 10 .venv/bin/python bench/bench_cold.py [--n 220000] [--home DIR] [--encoder static-minilm|default]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_select import REPO, step  # the same one-process-per-verb runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=220_000, help="Problems the generator makes.")
    ap.add_argument("--home", default=None, help="Workspace (default: a fresh temporary folder; must be empty).")
    ap.add_argument("--encoder", default="default", help="Encoder of decontaminate and score.")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_cold.json"), help="Results JSON.")
    args = ap.parse_args()
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="bench_cold_"))
    if home.exists() and any(home.iterdir()):
        raise SystemExit(f"{home} is not empty: the cold path needs a fresh workspace")
    pool = "gen"
    steps = {
        "ingest": ["ingest", f"gen://mixed?n={args.n}&seed=0", "--pool", pool],
        "decontaminate": ["decontaminate", "--pool", pool, "--encoder", args.encoder],
        "score": ["score", "--pool", pool, "--encoder", args.encoder],
        "select": ["select", "--pool", pool, "--size", "1500", "--name", "cold-1k5"],
    }
    results: dict = {"home": str(home), "n": args.n, "encoder": args.encoder, "cores": os.cpu_count()}
    results["load_average_start"] = [round(x, 2) for x in os.getloadavg()]
    results["date"] = time.strftime("%Y-%m-%d %H:%M")
    t0 = time.perf_counter()
    for name, argv in steps.items():
        print(f"[cold] {name} ...", flush=True)
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = step(argv, home)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = round(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, 1)  # the step and its worker processes
        results[name] = {"wall_s": r["wall_s"], "cpu_s": cpu, "rss_mb": r["rss_mb"]}
        results[name]["summary"] = r["summary"].get("summary", {})
        load = os.getloadavg()[0]
        print(f"[cold] {name:14s} {r['wall_s']:8.1f} s  cpu {cpu:7.1f} s  {r['rss_mb']:6d} MB  load {load:.1f}")
    results["total_s"] = round(time.perf_counter() - t0, 1)
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    meta = list(home.glob("cache/encoders/*/meta.json"))
    if meta:
        from curate import io

        results["static_model"] = io.read_json(meta[0])  # the static encoder's record (curate.embed)
    d = results["decontaminate"]["summary"]
    results["decontaminate_counts"] = {
        k: d.get(k) for k in ("train", "contaminated", "by_kind", "near_duplicates_dropped", "kept", "encoder")
    }
    print("\n| step | wall s | CPU s | peak RSS MB |\n|---|---:|---:|---:|")
    for name in steps:
        print(f"| {name} | {results[name]['wall_s']} | {results[name]['cpu_s']} | {results[name]['rss_mb']} |")
    cpu = round(sum(results[n]["cpu_s"] for n in steps), 1)
    print(f"| total | {results['total_s']} | {cpu} | {max(results[n]['rss_mb'] for n in steps)} |")
    print(f"load average start {results['load_average_start']}, end {results['load_average_end']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
