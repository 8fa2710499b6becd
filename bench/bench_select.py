"""Benchmark: `curate score` + `curate select --size 1500` on the real 40K DeepScaleR pool and a 220K generated one.

Pools (built with ``curate ingest`` into a scratch workspace):
  * ``deepscaler``: FastCuRL ``train_L1`` + ``train_L3`` from ../shared/data (= the 40,315-row DeepScaleR set);
  * ``gen220k``: ``gen://mixed?n=220000&seed=0``, the built-in procedural generator.

For each pool, every step runs in its own process through the real CLI, so wall time includes the imports a user
pays and peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss`` of that process) is the step's own:
  score cold   the embedding cache is empty, so the encoder runs over the whole pool;
  score warm   ``--force`` again: embeddings come from the cache (the everyday re-score);
  select       ``--size 1500``, plots and every export format included.
Growth is reported as the 220K/40K ratio of wall times next to the ratio of rows (5.5x = linear).

Targets: 220K warm score + select < 2 min, cold < 10 min, RSS < 4 GB, near-linear growth.

    nice -n 10 .venv/bin/python bench/bench_select.py [--pools deepscaler,gen220k] [--home DIR] [--no-embeddings]
        [--embed KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
RUNNER = (
    "import json, resource, sys, time\n"
    "from curate.cli import main\n"
    "t = time.perf_counter()\n"
    "rc = main(sys.argv[1:])\n"
    "m = {'rc': rc, 'in_process_s': time.perf_counter() - t,\n"
    "     'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}\n"
    "print('BENCH ' + json.dumps(m), file=sys.stderr)\n"
)
POOLS = {
    "deepscaler": [str(DATA / "fastcurl" / "train_L1.parquet"), str(DATA / "fastcurl" / "train_L3.parquet")],
    "gen220k": ["gen://mixed?n=220000&seed=0"],
}


def step(args: list[str], home: Path) -> dict:
    """Run one ``curate`` verb in a fresh process; its JSON summary plus wall time and peak RSS."""
    env = os.environ | {"CURATE_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env |= {"HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, *args, "--json"], capture_output=True, text=True, env=env, cwd=REPO
    )
    wall = time.perf_counter() - t0
    metrics = bench_lines(proc.stderr)
    if proc.returncode != 0 or not metrics or metrics[-1]["rc"] != 0:
        raise RuntimeError(f"curate {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return {"wall_s": round(wall, 2), "rss_mb": round(metrics[-1]["rss_mb"]), "summary": verb_summary(proc.stdout)}


def bench_lines(stderr: str) -> list[dict]:
    """The ``BENCH`` lines a ``RUNNER`` process printed on stderr: exit code, in-process seconds, peak RSS."""
    return [json.loads(line[6:]) for line in stderr.splitlines() if line.startswith("BENCH ")]


def verb_summary(stdout: str) -> dict:
    """The verb's ``--json`` summary a ``RUNNER`` process printed on stdout (empty when it printed none)."""
    return json.loads(stdout) if stdout.strip() else {}


def synthetic_cache(pool: str, home: Path, embed: dict, dim: int = 384) -> int:
    """Fill the embedding cache of ``pool``'s train problems with seeded random unit vectors (the warm path reads
    the cache the same way whatever produced it); returns how many vectors were written."""
    import numpy as np
    import polars as pl

    from curate import embed as embed_mod
    from curate import io
    from curate import schema as S

    ws = io.Workspace.resolve(home)
    cfg = embed_mod.EmbedConfig(**embed)
    key = embed_mod.encoder_key(cfg)
    ids = io.read_parquet(ws.table(pool, "problems")).filter(pl.col(S.SPLIT) != "test")[S.PROBLEM_ID].to_list()
    rng = np.random.default_rng(0)
    for lo in range(0, len(ids), cfg.chunk_size):
        vecs = rng.normal(size=(len(ids[lo : lo + cfg.chunk_size]), dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        embed_mod.write_cache_part(ws, key, ids[lo : lo + cfg.chunk_size], vecs)
    return len(ids)


def bench_pool(pool: str, home: Path, embed_args: list[str], synthetic: dict | None) -> dict:
    out: dict = {}
    print(f"[{pool}] ingest ...", flush=True)
    out["ingest"] = step(["ingest", *POOLS[pool], "--pool", pool], home)
    if synthetic is not None:
        out["synthetic_vectors"] = synthetic_cache(pool, home, synthetic)
    for name in ("score_warm",) if synthetic is not None else ("score_cold", "score_warm"):
        print(f"[{pool}] {name} ...", flush=True)
        out[name] = step(["score", "--pool", pool, "--force", *embed_args], home)
    out["rows"] = out["score_warm"]["summary"]["summary"]["problems"]  # train problems scored
    print(f"[{pool}] select ...", flush=True)
    sel_args = ["select", "--pool", pool, "--size", "1500", "--name", f"{pool}-1k5", "--force"]
    out["select"] = step(sel_args + [a for a in embed_args if a != "--no-embeddings"], home)
    for key in ("ingest", "score_cold", "score_warm", "select"):
        if key not in out:
            continue
        s = out[key]
        print(f"[{pool}] {key:10s} {s['wall_s']:8.1f} s  {s['rss_mb']:6d} MB", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pools", default="deepscaler,gen220k", help="Comma-separated pools to run (in order).")
    ap.add_argument("--home", default=None, help="Workspace for the run (default: a fresh temporary folder).")
    ap.add_argument("--no-embeddings", action="store_true", help="Score with text features only (no encoder).")
    ap.add_argument("--embed", action="append", default=[], help="EmbedConfig KEY=VALUE passed to score/select.")
    ap.add_argument(
        "--synthetic-embeddings",
        default="",
        help="Comma-separated pools whose embedding cache is filled with random unit vectors instead of running "
        "the encoder: measures the warm path only (cold = warm + encoder time, reported by bench_embed.py).",
    )
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_select.json"), help="Results JSON.")
    args = ap.parse_args()
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="bench_select_"))
    embed_args = ["--no-embeddings"] if args.no_embeddings else []
    for item in args.embed:
        embed_args += ["--embed", item]
    results = {"home": str(home), "embeddings": not args.no_embeddings, "embed": args.embed, "pools": {}}
    synthetic = set(filter(None, args.synthetic_embeddings.split(",")))
    settings = dict(item.split("=", 1) for item in args.embed)
    for pool in args.pools.split(","):
        results["pools"][pool] = bench_pool(pool, home, embed_args, settings if pool in synthetic else None)
    pools = results["pools"]
    if {"deepscaler", "gen220k"} <= set(pools):
        small, big = pools["deepscaler"], pools["gen220k"]
        results["growth"] = {
            "rows_ratio": round(big["rows"] / small["rows"], 2) if small["rows"] and big["rows"] else None,
            **{
                k: round(big[k]["wall_s"] / small[k]["wall_s"], 2)
                for k in ("score_cold", "score_warm", "select")
                if k in big and k in small
            },
        }
    print("\n| pool | rows | score cold s | score warm s | select s | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for pool, r in pools.items():
        rss = max(r[k]["rss_mb"] for k in ("score_cold", "score_warm", "select") if k in r)
        cold = r["score_cold"]["wall_s"] if "score_cold" in r else "synthetic cache"
        print(f"| {pool} | {r['rows']} | {cold} | {r['score_warm']['wall_s']} | {r['select']['wall_s']} | {rss} |")
    if "growth" in results:
        print(f"\ngrowth 40K -> 220K: {results['growth']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
