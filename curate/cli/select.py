"""`curate score` and `curate select`: thin wrappers over ``score.score_pool`` and ``select.select_pool``.

curate score --pool deepscaler                      DES components, pass-rate posterior, clusters, flags
curate select --pool deepscaler --size 1500 --name ds-1k5 --seed 0
curate select --pool limr --scores-file limr/scores.json --by score --min 0.6 --name limr   (LIMR's 1,389)
"""

from __future__ import annotations

from typing import Annotated

import typer

from curate.cli.common import Force, Home, Json, LockWait, emit, render_summary, workspace


Pool = Annotated[str, typer.Option("--pool", "-p", help="Pool to read (see `curate pools`).")]
Embed = Annotated[
    list[str] | None,
    typer.Option(
        "--embed",
        help="Encoder setting KEY=VALUE (repeatable): encoder, batch_size, dtype, device, chunk_size (a recipe's "
        "embed: keys).",
    ),
]


Encoder = Annotated[
    str | None,
    typer.Option(help="Encoder of the clusters: default (= minilm), static-minilm (fast), a model name or path."),
]


def _embed_settings(items: list[str] | None, encoder: str | None = None):
    """``--embed KEY=VALUE`` options (and ``--encoder``) as an ``EmbedConfig`` (unknown keys fail with a
    suggestion)."""
    from curate import config
    from curate.embed import EmbedConfig

    items = [*(items or []), *([f"encoder={encoder}"] if encoder else [])]
    return config.from_mapping(EmbedConfig, config.parse_overrides(items), "--embed")


def _render(payload: dict) -> None:
    render_summary(payload["summary"])


def score(
    pool: Pool,
    run: Annotated[str, typer.Option(help="Name of this score run (the `run` column).")] = "default",
    model: Annotated[
        str | None, typer.Option(help="Ledger model whose rollouts give pass rates (default: newest own model).")
    ] = None,
    clusters: Annotated[int, typer.Option(help="k of the k-means clusters over embeddings.")] = 64,
    pseudo_count: Annotated[
        float, typer.Option(help="Prior weight k in rollouts: Beta(k·m + correct, k·(1-m) + wrong).")
    ] = 8.0,
    predictor: Annotated[str, typer.Option(help="Pass-rate prior model: ridge or hgb.")] = "ridge",
    embeddings: Annotated[
        bool, typer.Option("--embeddings/--no-embeddings", help="Use the encoder (off: text features, one cluster).")
    ] = True,
    embed: Embed = None,
    encoder: Encoder = None,
    seed: Annotated[int, typer.Option(help="Seed of the predictor split and k-means.")] = 0,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Score a pool's train problems: difficulty posterior, CoT complexity, reward adaptability, DES, clusters."""
    from curate.score import stage as score_mod
    from curate.score.evidence import EvidenceConfig

    cfg = score_mod.ScoreConfig(
        run=run,
        evidence=EvidenceConfig(model=model),
        clusters=clusters,
        pseudo_count=pseudo_count,
        predictor=predictor,
        use_embeddings=embeddings,
        embed=_embed_settings(embed, encoder),
        seed=seed,
    )
    ws = workspace(home, lock_timeout)
    result = score_mod.score_pool(ws, pool, cfg, force=force, progress=not as_json)
    emit(result.to_dict(), as_json, _render)


def select(
    pool: Pool,
    size: Annotated[
        int | None,
        typer.Option(help="Rows to select (default 1500; with --min/--max and no size: every passing row)."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Selection folder name (default: the pool name).")] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed; same seed and inputs give the same subset.")] = 0,
    by: Annotated[
        str,
        typer.Option(
            help="Column to sample on: des, pass_rate, any numeric column; '-col' prefers low values; "
            "'random': a uniform sample (the baseline DES is compared with)."
        ),
    ] = "des",
    min_value: Annotated[float | None, typer.Option("--min", help="Keep rows with --by >= this.")] = None,
    max_value: Annotated[float | None, typer.Option("--max", help="Keep rows with --by <= this.")] = None,
    temperature: Annotated[
        float, typer.Option(help="T of P ∝ exp(score/T), in the --by column's units; 0 = greedy top-k.")
    ] = 1.0,
    clusters: Annotated[
        int | None, typer.Option(help="Re-cluster with this k (0/1: no diversity quotas; default: score's).")
    ] = None,
    scores_file: Annotated[
        str | None, typer.Option(help="External scores (JSON/JSONL/Parquet/CSV), joined by problem text.")
    ] = None,
    scores_key: Annotated[str, typer.Option(help="Column of --scores-file holding the problem text.")] = "prompt",
    scores_col: Annotated[str, typer.Option(help="Column of --scores-file holding the score.")] = "score",
    max_prompt_chars: Annotated[int | None, typer.Option(help="Drop problems longer than this as too_long.")] = 8192,
    keep_solved: Annotated[bool, typer.Option(help="Do not drop problems with pass rate >= 0.9.")] = False,
    keep_zero_variance: Annotated[bool, typer.Option(help="Do not drop problems with all-equal rewards.")] = False,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Write the PNG figures.")] = True,
    embed: Embed = None,
    encoder: Encoder = None,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Select a diverse subset: filters, per-cluster quotas, DES-weighted seeded sampling; writes selections/NAME/."""
    from curate.select import stage as select_mod

    cfg = select_mod.SelectConfig(
        name=name,
        size=size,
        by=by,
        min_value=min_value,
        max_value=max_value,
        temperature=temperature,
        clusters=clusters,
        scores_file=scores_file,
        scores_key=scores_key,
        scores_col=scores_col,
        max_prompt_chars=max_prompt_chars,
        drop_solved=not keep_solved,
        drop_zero_variance=not keep_zero_variance,
        plots=plots,
        embed=_embed_settings(embed, encoder),
        seed=seed,
    )
    result = select_mod.select_pool(
        workspace(home, lock_timeout), pool, cfg, name=name or pool, force=force, progress=not as_json
    )
    emit(result.to_dict(), as_json, _render)


def register(app: typer.Typer) -> None:
    """Add ``score`` and ``select`` to the `curate` app."""
    app.command()(score)
    app.command()(select)
