r"""Could the static encoder pre-filter for MiniLM? A simulation on DeepScaleR's cached vectors.

The hybrid: static vectors for every problem pick candidate problems (a near-duplicate pair at static cosine >=
t_dup within an answer group, or a benchmark item at >= t_leak); only candidates (and the benchmark items) get
MiniLM vectors, and MiniLM's decision code runs on those. Simulated with the real ``decontaminate.stage.run``:
non-candidates get a zero MiniLM vector (cosine 0 to everything), which is what such a stage would compute. Prints
the decisions against MiniLM's on all problems (leaks, near-duplicate Jaccard), the candidate count and the speedup
it implies, N x 78 / (N x 1.1 + candidates x 78) (CPU ms per problem: MiniLM float32 and the static model on this
box), and the ceiling of a perfect pre-filter (exactly MiniLM's cluster members and embedding leaks).

Two candidate rules: ``static`` (the static cosines alone) and ``+numbers`` (a candidate pair must also pass the
numbers guard the decision will apply anyway: same numbers, or a sub-multiset for long problems; free, no
encoder), which needs fewer MiniLM vectors for the same decisions.

Needs ``bench_embed.py --only agreement`` run first into the same ``--home`` (both caches filled); math-verify off.

    nice -n 10 .venv/bin/python bench/bench_prefilter.py --home /tmp/bench-embed-ws
"""

import argparse

import numpy as np
import polars as pl

from curate import io
from curate import schema as S
from curate.decontaminate.dedup import numbers, numbers_compatible, similarity_edges, tokenize
from curate.decontaminate.stage import DecontamConfig, benchmark_problems, run
from curate.embed import read_cache, vectors
from curate.verify import answers as A


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", default="/tmp/bench-embed-ws")
    p.add_argument("--pool", default="ds")
    args = p.parse_args()
    ws = io.Workspace.resolve(args.home)
    problems = io.read_parquet(ws.table(args.pool, "problems"), S.PROBLEMS).sort(S.PROBLEM_ID)
    train = problems.filter(pl.col(S.SPLIT) != "test").sort(S.PROBLEM_ID)
    bench = benchmark_problems(ws, problems, ())

    def vecs(key, ids):
        df = read_cache(ws, key, ids)
        al = pl.DataFrame({S.PROBLEM_ID: ids}).join(df, on=S.PROBLEM_ID, how="left", maintain_order="left")
        return vectors(al)

    tid, bid = train[S.PROBLEM_ID].to_list(), bench[S.PROBLEM_ID].to_list()
    M_t, M_b = vecs("minilm", tid), vecs("minilm", bid)
    T_t, T_b = vecs("static-minilm-256d-v1", tid), vecs("static-minilm-256d-v1", bid)
    keys = [A.answer_key(a or "") for a in train[S.ANSWER].to_list()]
    codes = pl.Series(keys).cast(pl.Categorical).to_physical().to_numpy()
    cfg = DecontamConfig(verify_answers=False)
    ref, _, _ = run(train, bench, cfg, M_t, M_b)
    hit = ref.filter(pl.col(S.CONTAMINATED))
    ref_hits = dict(zip(hit[S.PROBLEM_ID], hit[S.CONTAMINATION_KIND], strict=True))
    ref_drop = set(ref.filter(pl.col(S.DUPLICATE_OF).is_not_null())[S.PROBLEM_ID].to_list())
    inclust = set(ref.filter(pl.col(S.CLUSTER_SIZE) > 1)[S.PROBLEM_ID].to_list())
    emb = [p for p, k in ref_hits.items() if k == "embedding"]
    row = {p: i for i, p in enumerate(tid)}
    Ss = T_t @ T_b.T
    best_static = Ss.max(axis=1)
    print(
        "MiniLM (verify off): hits",
        len(ref_hits),
        "embedding",
        len(emb),
        "dropped",
        len(ref_drop),
        "in clusters",
        len(inclust),
    )
    print(
        "static max-cos to any bench item of MiniLM embedding hits:",
        sorted(round(float(best_static[row[p]]), 3) for p in emb),
    )
    N = train.height
    t_tok = [tokenize(p) for p in train[S.PROBLEM].to_list()]
    b_tok = [tokenize(p) for p in bench[S.PROBLEM].to_list()]
    t_num, b_num = [numbers(t) for t in t_tok], [numbers(t) for t in b_tok]
    slack = DecontamConfig().number_slack_tokens

    def dup_numbers(x: int, y: int) -> bool:  # dedup.near_duplicates' guard
        return t_num[x] == t_num[y] or (
            min(len(t_tok[x]), len(t_tok[y])) >= slack and numbers_compatible(t_num[x], t_num[y])
        )

    def leak_numbers(i: int, j: int) -> bool:  # decontaminate's guard for an embedding candidate
        return t_num[i] == b_num[j] or (len(b_tok[j]) >= slack and numbers_compatible(t_num[i], b_num[j]))

    grid = [("static", 0.92, 0.89), ("static", 0.94, 0.89), ("static", 0.96, 0.89), ("static", 0.92, 1.01),
            ("static", 1.01, 0.89), ("+numbers", 0.686, 0.80), ("+numbers", 0.75, 0.85), ("+numbers", 0.80, 0.85),
            ("+numbers", 0.85, 0.85)]  # fmt: skip
    for rule, t_dup, t_leak in grid:
        a, b, _ = similarity_edges(T_t, t_dup, groups=codes, max_neighbors=10**6)
        keep = np.array([keys[p] != "" for p in a.tolist()], bool)
        if rule == "+numbers":
            keep &= np.array([dup_numbers(x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True)], bool)
        cand = np.zeros(N, bool)
        cand[a[keep]] = True
        cand[b[keep]] = True
        if rule == "+numbers":
            for i, j in zip(*np.nonzero(Ss >= t_leak), strict=True):
                cand[i] = cand[i] or leak_numbers(int(i), int(j))
        else:
            cand |= best_static >= t_leak
        V = M_t.copy()
        V[~cand] = 0.0
        f, _, _ = run(train, bench, cfg, V, M_b)
        h = f.filter(pl.col(S.CONTAMINATED))
        hh = dict(zip(h[S.PROBLEM_ID], h[S.CONTAMINATION_KIND], strict=True))
        d = set(f.filter(pl.col(S.DUPLICATE_OF).is_not_null())[S.PROBLEM_ID].to_list())
        j = len(d & ref_drop) / len(d | ref_drop)
        nc = int(cand.sum())
        spd = N * 78 / (N * 1.1 + nc * 78)
        print(
            f"{rule:8s} t_dup {t_dup} t_leak {t_leak}: candidates {nc} ({nc / N:.1%}); leaks {len(hh)} "
            f"missed {sorted(set(ref_hits) - set(hh))} extra {sorted(set(hh) - set(ref_hits))}; "
            f"dropped {len(d)} jaccard {j:.4f}; speedup {spd:.1f}x",
            flush=True,
        )
    oracle = len(inclust) + len(emb)
    print(
        "oracle lower bound candidates (MiniLM cluster members + embedding hits):",
        oracle,
        "speedup",
        round(N * 78 / (N * 1.1 + oracle * 78), 1),
    )


if __name__ == "__main__":
    main()
