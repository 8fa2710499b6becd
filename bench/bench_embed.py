"""Encoder speed (static-minilm, distilled from MiniLM, vs all-MiniLM-L6-v2), their agreement on decontamination
and near-duplicates, the decontaminate stage on DeepScaleR, and blocked near-duplicate search on a large synthetic
set.

Sections (all by default; pick with --only):
  speed      problems/s and CPU ms/problem of each of --encoders (default: static-minilm, and MiniLM in the precision
             ``auto`` picks on this CPU; also minilm-fp32, minilm-bf16) on the same seeded sample, alternating rounds
  agreement  embeds the whole pool with static-minilm and with MiniLM (cached under --home), runs decontamination and
             near-duplicate clustering with each (math-verify on, as users run it), and compares: leaks found (and
             lists every one found by only one of them, with texts and scores), near-duplicate dropped ids (Jaccard),
             and a sweep of the static model's two thresholds against MiniLM's decisions (how they were calibrated)
  stage      runs `decontaminate` on the pool: leaks per benchmark and kind, near-duplicate clusters
  synthetic  near-duplicate search over N random unit vectors (answer groups drawn like the real pool's), time and
             peak memory; plus the ungrouped worst case on a smaller N

The pool is DeepScaleR (FastCuRL L1+L3, train) with MATH-500 and the DeepScaleR test sets (test), ingested into --home
on first use. Usage:
    nice -n 10 .venv/bin/python bench/bench_embed.py --home /tmp/bench-ws [--only speed,agreement] [--sample 512]
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
ENCODERS = {  # label -> EmbedConfig settings
    "static": {"encoder": "static-minilm"},
    "minilm": {"encoder": "minilm"},  # dtype auto: bf16 on CPUs with native bf16, else float32
    "minilm-fp32": {"encoder": "minilm", "dtype": "float32"},
    "minilm-bf16": {"encoder": "minilm", "dtype": "bfloat16"},
}


def pool_problems(ws: io.Workspace, pool: str) -> pl.DataFrame:
    """The pool's problems, ingesting the shared DeepScaleR + evaluation sources first if the pool is absent."""
    if not ws.table(pool, "problems").is_file():
        from curate.config import IngestConfig, SourceSpec
        from curate.ingest.stage import ingest

        specs = tuple(SourceSpec(path=str(SHARED / s)) for s in SOURCES)
        ingest(ws, pool, IngestConfig(sources=specs), progress=True)
    return io.read_parquet(ws.table(pool, "problems"), S.PROBLEMS).sort(S.PROBLEM_ID)


def speed(ws: io.Workspace, problems: pl.DataFrame, sample: int, rounds: int, encoders: list[str]) -> dict:
    """Encode the same seeded sample with each encoder, alternating, ``rounds`` times; the best round counts."""
    from curate.embed import EmbedConfig, encode_texts, encoder_key, get_encoder

    rng = np.random.default_rng(0)
    texts = problems[S.PROBLEM].to_list()
    texts = [texts[i] for i in rng.choice(len(texts), min(sample, len(texts)), replace=False)]
    out: dict = {"sample": len(texts), "mean_chars": round(float(np.mean([len(t) for t in texts])), 1)}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in encoders}
    for _ in range(rounds):
        for name in encoders:
            cfg = EmbedConfig(**ENCODERS[name])
            model = get_encoder(ws, cfg, progress=True)  # loading (and a first distillation) is not timed
            w0, c0 = time.perf_counter(), time.process_time()
            encode_texts(model, texts, cfg)
            runs[name].append((time.perf_counter() - w0, time.process_time() - c0))
            out.setdefault(name, {})["key"] = encoder_key(cfg)
    for name, r in runs.items():
        wall, cpu = min(w for w, _ in r), min(c for _, c in r)
        out[name] |= {
            "problems_per_s": round(len(texts) / wall, 1),
            "cpu_ms_per_problem": round(1000 * cpu / len(texts), 3),
        }
    base = encoders[0]
    out["ratios"] = {
        f"{base} vs {name}": {
            "wall": round(out[base]["problems_per_s"] / out[name]["problems_per_s"], 1),
            "cpu": round(out[name]["cpu_ms_per_problem"] / out[base]["cpu_ms_per_problem"], 1),
        }
        for name in encoders[1:]
    }
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _hits(filters: pl.DataFrame) -> dict[str, tuple[str, str, float]]:
    """train id -> (benchmark id, kind, score) of every contaminated train problem."""
    hit = filters.filter(pl.col(S.CONTAMINATED))
    cols = (S.PROBLEM_ID, S.CONTAMINATED_BY, S.CONTAMINATION_KIND, S.CONTAMINATION_SCORE)
    return {r[0]: (r[1], r[2], r[3]) for r in hit.select(*cols).iter_rows()}


def _dropped(filters: pl.DataFrame) -> set[str]:
    return set(filters.filter(pl.col(S.DUPLICATE_OF).is_not_null())[S.PROBLEM_ID].to_list())


def _jaccard(a: set, b: set) -> float:
    return round(len(a & b) / max(1, len(a | b)), 4)


def agreement(ws: io.Workspace, problems: pl.DataFrame, sweep: bool) -> dict:
    """The static encoder's decontamination and near-duplicate decisions against MiniLM's on the whole pool."""
    from curate.decontaminate.dedup import DedupConfig, near_duplicates, numbers, tokenize
    from curate.decontaminate.stage import DecontamConfig, benchmark_problems, decontaminate, run
    from curate.embed import EmbedConfig, embed_problems, encoder_key

    train = problems.filter(pl.col(S.SPLIT) != "test").sort(S.PROBLEM_ID)
    bench = benchmark_problems(ws, problems, ())
    both = pl.concat([train.select(S.PROBLEM_ID, S.PROBLEM), bench.select(S.PROBLEM_ID, S.PROBLEM)])
    text = dict(zip(both[S.PROBLEM_ID], both[S.PROBLEM], strict=True))
    results, vectors = {}, {}
    out: dict = {"problems": both.height}
    for name in ("minilm", "static"):
        cfg = EmbedConfig(**ENCODERS[name])
        t0 = time.perf_counter()
        vectors[name] = embed_problems(ws, both, cfg, progress=True)
        t1 = time.perf_counter()
        filters, _, _ = run(
            train, bench, DecontamConfig(embed=cfg), vectors[name][: train.height], vectors[name][train.height :]
        )
        results[name] = filters
        out[name] = {
            "key": encoder_key(cfg),
            "embed_s": round(t1 - t0, 1),
            "decontaminate_s": round(time.perf_counter() - t1, 1),
        }
        print(f"[agreement] {name}: {out[name]}", flush=True)
    hits = {name: _hits(f) for name, f in results.items()}
    drops = {name: _dropped(f) for name, f in results.items()}
    ref, new = hits["minilm"], hits["static"]
    static_t, static_b = vectors["static"][: train.height], vectors["static"][train.height :]
    row = {pid: i for i, pid in enumerate(train[S.PROBLEM_ID].to_list())}
    brow = {pid: i for i, pid in enumerate(bench[S.PROBLEM_ID].to_list())}

    def detail(pid: str, match: tuple[str, str, float]) -> dict:
        cos = float(static_t[row[pid]] @ static_b[brow[match[0]]])
        mcos = float(vectors["minilm"][row[pid]] @ vectors["minilm"][train.height + brow[match[0]]])
        return {"train": pid, "benchmark": match[0], "kind": match[1], "score": match[2], "cos_static": round(cos, 4),
                "cos_minilm": round(mcos, 4), "train_text": " ".join(text[pid].split())[:300],
                "benchmark_text": " ".join(text[match[0]].split())[:300]}  # fmt: skip

    out["leaks"] = {
        "minilm": len(ref),
        "static": len(new),
        "both": len(set(ref) & set(new)),
        "by_kind": {
            n: dict(pl.Series([m[1] for m in h.values()], dtype=pl.String).value_counts().iter_rows())
            for n, h in hits.items()
        },
        "only_minilm": [detail(p, m) for p, m in sorted(ref.items()) if p not in new],
        "only_static": [detail(p, m) for p, m in sorted(new.items()) if p not in ref],
    }
    out["near_duplicates"] = {
        "dropped_minilm": len(drops["minilm"]),
        "dropped_static": len(drops["static"]),
        "both": len(drops["minilm"] & drops["static"]),
        "jaccard": _jaccard(drops["minilm"], drops["static"]),
    }
    if sweep:
        # the static model's thresholds against MiniLM's decisions: near duplicates among the problems both call clean,
        # embedding candidates (text tests and math-verify off, numbers/answer checks on) against MiniLM's hits
        clean = ~results["minilm"][S.CONTAMINATED].to_numpy()
        rows = np.flatnonzero(clean)
        subset = train[rows]
        tokens = [tokenize(p) for p in subset[S.PROBLEM].to_list()]
        nums, lengths = [numbers(t) for t in tokens], [len(t) for t in tokens]
        ref_drop = drops["minilm"]
        out["sweep_near_duplicate"] = {}
        for t in (0.93, 0.94, 0.95, 0.96, 0.97, 0.98):
            d = near_duplicates(subset, static_t[rows], DedupConfig(threshold=t), nums, False, lengths)
            got = set(d.filter(pl.col(S.DUPLICATE_OF).is_not_null())[S.PROBLEM_ID].to_list())
            out["sweep_near_duplicate"][t] = {"dropped": len(got), "jaccard": _jaccard(ref_drop, got)}
        # one run at the lowest threshold: a train problem is an embedding hit at t iff its hit's cosine is >= t
        ref_emb = {p for p, m in ref.items() if m[1] == "embedding"}
        low = 0.86
        f, _ = decontaminate(
            train, bench, DecontamConfig(embed_threshold=low, verify_answers=False), static_t, static_b
        )
        h = _hits(f)
        out["sweep_contamination"] = {}
        for t in (0.86, 0.88, 0.9, 0.91, 0.92, 0.94):
            emb = {p for p, m in h.items() if m[1] == "embedding" and m[2] >= t}
            out["sweep_contamination"][t] = {
                "embedding_hits": len(emb),
                "of_minilm_embedding_hits": len(emb & ref_emb),
                "minilm_hits_missed": sorted(set(ref) - emb - {p for p, m in h.items() if m[1] != "embedding"}),
            }
        print(f"[agreement] sweeps: {out['sweep_near_duplicate']} {out['sweep_contamination']}", flush=True)
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
    ap.add_argument("--sample", type=int, default=512, help="Problems in the speed sample.")
    ap.add_argument("--encoders", default="static,minilm", help=f"Encoders of the speed section: {list(ENCODERS)}.")
    ap.add_argument("--no-sweep", action="store_true", help="Skip the threshold sweeps of the agreement section.")
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
        "speed": lambda: speed(ws, problems, args.sample, args.rounds, args.encoders.split(",")),
        "agreement": lambda: agreement(ws, problems, not args.no_sweep),
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
