"""`curate embed` and `curate decontaminate`: thin wrappers over ``embed.embed_problems`` and
``decontam.decontaminate_pool``.

curate embed --pool deepscaler                         fill the embedding cache (only missing problems are encoded)
curate decontaminate --pool deepscaler                 leaks vs the pool's test split + near-duplicate clusters
curate decontaminate --pool ds --benchmark-pool evals  also check against every problem of pool "evals"
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from curate.cli.common import Force, Home, Json, LockWait, emit, render_summary, workspace


Pool = Annotated[str, typer.Option("--pool", "-p", help="Pool to read (see `curate pools`).")]
Encoder = Annotated[
    str,
    typer.Option(
        "--encoder",
        "-e",
        help="'default' (= 'minilm', all-MiniLM-L6-v2 offline), 'static-minilm' (distilled from it: 70x+ less CPU, "
        "not the same decisions, see bench/HISTORY.md), a sentence-transformers name, or a path.",
    ),
]
Dtype = Annotated[
    str, typer.Option(help="auto (bfloat16 where the CPU does bf16 natively or on CUDA), float32 or bfloat16.")
]
BatchSize = Annotated[int, typer.Option(help="Texts per forward pass of the encoder.")]
Device = Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available).")]


def _render(payload: dict) -> None:

    render_summary(payload["summary"])


def embed(
    pool: Pool,
    encoder: Encoder = "default",
    dtype: Dtype = "auto",
    batch_size: BatchSize = 64,
    device: Device = None,
    home: Home = None,
    as_json: Json = False,
) -> None:
    """Embed a pool's problems into the shared cache; problems already cached for this encoder are not recomputed."""
    from curate import embed as E
    from curate import io
    from curate import schema as S

    ws = workspace(home)
    cfg = E.EmbedConfig(encoder=encoder, dtype=dtype, batch_size=batch_size, device=device)
    problems = io.read_parquet(ws.require_pool(pool), S.PROBLEMS).sort(S.PROBLEM_ID)
    before = E.cache_summary(ws, cfg)["cached"]
    t0 = time.perf_counter()
    vectors = E.embed_problems(ws, problems, cfg, progress=not as_json)
    wall = time.perf_counter() - t0
    after = E.cache_summary(ws, cfg)
    computed = after["cached"] - before
    summary = {
        "pool": pool,
        "problems": problems.height,
        "computed": computed,
        "from_cache": problems.height - computed,
        "dim": int(vectors.shape[1]) if vectors.size else 0,
        "wall_s": round(wall, 2),
        "problems_per_s": round(computed / wall, 1) if computed and wall > 0 else None,
        **after,
    }
    emit({"summary": summary}, as_json, _render)


def decontaminate(
    pool: Pool,
    benchmark_pool: Annotated[
        list[str] | None,
        typer.Option("--benchmark-pool", "-b", help="Another pool whose every problem is a benchmark (repeatable)."),
    ] = None,
    ngram_n: Annotated[int, typer.Option(help="n-gram length in normalized tokens.")] = 8,
    ngram_threshold: Annotated[
        float, typer.Option(help="Min fraction of a benchmark item's n-grams found in a train problem.")
    ] = 0.4,
    embeddings: Annotated[
        bool, typer.Option("--embeddings/--no-embeddings", help="Run the embedding-similarity test too.")
    ] = True,
    embed_threshold: Annotated[
        float | None, typer.Option(help="Min cosine of the embedding test (default: the encoder's calibrated one).")
    ] = None,
    dedup: Annotated[
        bool, typer.Option("--dedup/--no-dedup", help="Cluster near-duplicates inside the train pool.")
    ] = True,
    dedup_threshold: Annotated[
        float | None,
        typer.Option(help="Min cosine for two train problems to be near-dups (default: the encoder's calibrated)."),
    ] = None,
    encoder: Encoder = "default",
    dtype: Dtype = "auto",
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Flag train problems that leak benchmark items (exact, n-gram, embedding) and near-duplicates (`curate
    select` drops them).

    Writes pools/<pool>/filters.parquet and the stage's rows of quarantine.parquet; the problems table is unchanged.
    """
    from curate.decontaminate import stage as D
    from curate.decontaminate.dedup import DedupConfig
    from curate.embed import EmbedConfig

    cfg = D.DecontamConfig(
        benchmark_pools=tuple(benchmark_pool or ()),
        ngram_n=ngram_n,
        ngram_threshold=ngram_threshold,
        use_embeddings=embeddings,
        embed_threshold=embed_threshold,
        embed=EmbedConfig(encoder=encoder, dtype=dtype),
        dedup=DedupConfig(enabled=dedup, threshold=dedup_threshold),
    )
    result = D.decontaminate_pool(workspace(home, lock_timeout), pool, cfg, force=force, progress=not as_json)
    emit(result.to_dict(), as_json, _render)


def register(app: typer.Typer) -> None:
    """Add this module's verbs to the `curate` app."""
    app.command()(embed)
    app.command()(decontaminate)
