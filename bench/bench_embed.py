"""Embedding speed (float32 vs the fast bfloat16 path), their agreement on decontamination and near-duplicates, the
decontaminate stage on DeepScaleR, and blocked near-duplicate search on a large synthetic set.

Sections (all by default; pick with --only):
  speed      problems/s and CPU ms/problem of the default encoder, float32 vs bfloat16, on a seeded sample of the pool
  agreement  embeds the whole pool with both (cached under --home), then compares per-problem cosine, the embedding
             decontamination hits and the near-duplicate pairs the two produce
  stage      runs `decontaminate` on the pool: leaks per benchmark and kind, near-duplicate clusters
  synthetic  near-duplicate search over N random unit vectors (answer groups drawn like the real pool's), time and
             peak memory; plus the ungrouped worst case on a smaller N

The pool is DeepScaleR (FastCuRL L1+L3, train) with MATH-500 and the DeepScaleR test sets (test), ingested into --home
on first use. Usage:
    nice -n 10 .venv/bin/python bench/bench_embed.py --home /tmp/bench-ws [--only speed,agreement] [--sample 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np
import polars as pl

from curate import io
from curate import schema as S


for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):  # before any Hugging Face import
    os.environ.setdefault(_k, "1")

SHARED = Path(os.environ.get("CURATE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
SOURCES = [
    "fastcurl/train_L1.parquet",
    "fastcurl/train_L3.parquet",
    "math500/test.jsonl",
    "deepscaler/test/aime.json",
    "deepscaler/test/amc.json",
    "deepscaler/test/minerva.json",
    "deepscaler/test/olympiad_bench.json",
]
FP32 = {"dtype": "float32"}
BF16 = {"dtype": "bfloat16"}


def pool_problems(ws: io.Workspace, pool: str) -> pl.DataFrame:
    """The pool's problems, ingesting the shared DeepScaleR + evaluation sources first if the pool is absent."""
    if not ws.table(pool, "problems").is_file():
        from curate.config import IngestConfig, SourceSpec
        from curate.ingest.stage import ingest

        specs = tuple(SourceSpec(path=str(SHARED / s)) for s in SOURCES)
        ingest(ws, pool, IngestConfig(sources=specs), progress=True)
    return io.read_parquet(ws.table(pool, "problems"), S.PROBLEMS).sort(S.PROBLEM_ID)


def speed(problems: pl.DataFrame, sample: int, rounds: int) -> dict:
    """Encode the same seeded sample with each precision, alternating, ``rounds`` times; best round counts."""
    from curate.embed import EmbedConfig, encode_texts, load_encoder

    rng = np.random.default_rng(0)
    texts = problems[S.PROBLEM].to_list()
    texts = [texts[i] for i in rng.choice(len(texts), min(sample, len(texts)), replace=False)]
    out: dict = {"sample": len(texts), "mean_chars": round(float(np.mean([len(t) for t in texts])), 1)}
    runs: dict[str, list[tuple[float, float]]] = {"float32": [], "bfloat16": []}
    vecs = {}
    for _ in range(rounds):
        for dtype in runs:
            cfg = EmbedConfig(dtype=dtype)
            model = load_encoder(cfg.encoder, dtype, "cpu")
            w0, c0 = time.perf_counter(), time.process_time()
            vecs[dtype] = encode_texts(model, texts, cfg)
            runs[dtype].append((time.perf_counter() - w0, time.process_time() - c0))
    for dtype, r in runs.items():
        wall, cpu = min(w for w, _ in r), min(c for _, c in r)
        out[dtype] = {
            "problems_per_s": round(len(texts) / wall, 1),
            "cpu_ms_per_problem": round(1000 * cpu / len(texts), 2),
        }
    out["speedup_wall"] = round(out["bfloat16"]["problems_per_s"] / out["float32"]["problems_per_s"], 2)
    out["speedup_cpu"] = round(out["float32"]["cpu_ms_per_problem"] / out["bfloat16"]["cpu_ms_per_problem"], 2)
    cos = np.sum(vecs["float32"] * vecs["bfloat16"], axis=1)
    out["cosine_fp32_bf16"] = {"min": round(float(cos.min()), 5), "mean": round(float(cos.mean()), 5)}
    return out


def _pairs(frame: pl.DataFrame, a: str, b: str) -> set[tuple[str, str]]:
    return set(frame.filter(pl.col(b).is_not_null()).select(a, b).iter_rows())


def agreement(ws: io.Workspace, problems: pl.DataFrame) -> dict:
    """Decontamination hits and near-duplicate pairs with float32 vs bfloat16 vectors of the whole pool."""
    from curate.decontaminate.stage import DecontamConfig, benchmark_problems, run
    from curate.embed import EmbedConfig, embed_problems

    train = problems.filter(pl.col(S.SPLIT) != "test").sort(S.PROBLEM_ID)
    bench = benchmark_problems(ws, problems, ())
    both = pl.concat([train.select(S.PROBLEM_ID, S.PROBLEM), bench.select(S.PROBLEM_ID, S.PROBLEM)])
    results, vectors = {}, {}
    for name, kw in (("float32", FP32), ("bfloat16", BF16)):
        t0 = time.perf_counter()
        vecs = embed_problems(ws, both, EmbedConfig(**kw), progress=True)
        vectors[name] = vecs
        cfg = DecontamConfig(embed=EmbedConfig(**kw), verify_answers=False)
        filters, _, _ = run(train, bench, cfg, vecs[: train.height], vecs[train.height :])
        results[name] = filters
        print(f"[agreement] {name}: embedded + decontaminated in {time.perf_counter() - t0:.0f}s", flush=True)
    cos = np.sum(vectors["float32"] * vectors["bfloat16"], axis=1)
    out: dict = {"problems": both.height, "cosine_fp32_bf16": {"min": float(cos.min()), "mean": float(cos.mean())}}
    for label, a, b in (
        ("decontamination hits", S.PROBLEM_ID, S.CONTAMINATED_BY),
        ("near-dup pairs", S.PROBLEM_ID, S.DUPLICATE_OF),
    ):
        x, y = _pairs(results["float32"], a, b), _pairs(results["bfloat16"], a, b)
        out[label] = {
            "float32": len(x),
            "bfloat16": len(y),
            "both": len(x & y),
            "jaccard": round(len(x & y) / max(1, len(x | y)), 4),
        }
    emb = {
        name: _pairs(r.filter(pl.col(S.CONTAMINATION_KIND) == "embedding"), S.PROBLEM_ID, S.CONTAMINATED_BY)
        for name, r in results.items()
    }
    out["embedding hits"] = {
        "float32": len(emb["float32"]),
        "bfloat16": len(emb["bfloat16"]),
        "both": len(emb["float32"] & emb["bfloat16"]),
    }
    return out


def stage(ws: io.Workspace, pool: str) -> dict:
    """The decontaminate stage as a user runs it (default config), forced."""
    from curate.decontaminate.stage import DecontamConfig, decontaminate_pool

    t0 = time.perf_counter()
    result = decontaminate_pool(ws, pool, DecontamConfig(), force=True, progress=True)
    s = result.summary
    keys = ("train", "contaminated", "by_benchmark", "by_kind", "exact_at_ingest", "siblings_ignored",
            "near_duplicate_clusters", "near_duplicates_dropped", "kept", "reconciles")  # fmt: skip
    return {k: s[k] for k in keys} | {"wall_s": round(time.perf_counter() - t0, 1), "examples": s["examples"]}


def synthetic(n: int, worst_n: int, problems: pl.DataFrame, block: int) -> dict:
    """Blocked near-duplicate search over random unit vectors: answer-grouped at ``n``, ungrouped at ``worst_n``."""
    from curate.decontaminate.dedup import similarity_edges
    from curate.verify.answers import answer_key

    rng = np.random.default_rng(0)
    keys = [answer_key(a or "") for a in problems.filter(pl.col(S.SPLIT) != "test")[S.ANSWER].to_list()]
    freq = pl.Series(keys).value_counts(sort=True)["count"].to_numpy().astype(float)
    out: dict = {"largest answer group share": round(float(freq[0] / freq.sum()), 4)}

    def one(m: int, grouped: bool) -> dict:
        v = rng.standard_normal((m, 384), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        v[1::1000] = v[::1000][: len(v[1::1000])]  # planted exact duplicates: 1 per 1000
        groups = rng.choice(len(freq), m, p=freq / freq.sum()) if grouped else None
        if grouped:
            groups[1::1000] = groups[::1000][: len(groups[1::1000])]
        t0 = time.perf_counter()
        i, _, _ = similarity_edges(v, 0.95, groups=groups, block_size=block, progress=True)
        return {"n": m, "grouped": grouped, "edges": len(i), "wall_s": round(time.perf_counter() - t0, 1),
                "vectors_mb": round(v.nbytes / 2**20)}  # fmt: skip

    out["grouped"] = one(n, True)
    out["ungrouped"] = one(worst_n, False)
    out["ungrouped"]["extrapolated_s_at_n"] = round(out["ungrouped"]["wall_s"] * (n / worst_n) ** 2)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", default="/tmp/bench-embed-ws", help="Workspace (pool + embedding cache) to use.")
    ap.add_argument("--pool", default="ds", help="Pool name inside --home.")
    ap.add_argument("--only", default="speed,agreement,stage,synthetic", help="Comma-separated sections to run.")
    ap.add_argument("--sample", type=int, default=1024, help="Problems in the speed sample.")
    ap.add_argument("--rounds", type=int, default=2, help="Alternating rounds in the speed section (best counts).")
    ap.add_argument("--synthetic-n", type=int, default=220_000, help="Vectors in the grouped synthetic run.")
    ap.add_argument("--worst-n", type=int, default=40_000, help="Vectors in the ungrouped (worst-case) run.")
    ap.add_argument("--block", type=int, default=2048, help="Tile size of the blocked similarity search.")
    ap.add_argument("--json", help="Also write all figures to this JSON file.")
    args = ap.parse_args()
    ws = io.Workspace.resolve(args.home)
    problems = pool_problems(ws, args.pool)
    print(f"pool {args.pool}: {problems.height} problems ({dict(problems[S.SPLIT].value_counts().iter_rows())}), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    figures = {}
    sections = {
        "speed": lambda: speed(problems, args.sample, args.rounds),
        "agreement": lambda: agreement(ws, problems),
        "stage": lambda: stage(ws, args.pool),
        "synthetic": lambda: synthetic(args.synthetic_n, args.worst_n, problems, args.block),
    }
    for name in args.only.split(","):
        figures[name] = sections[name]()
        print(f"\n== {name}\n" + json.dumps(figures[name], indent=2, default=str), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
