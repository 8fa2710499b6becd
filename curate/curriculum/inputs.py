"""What the ``curriculum`` stage reads: a selection or a pool's problems, with the pass-rate and CoT-length
evidence other stages left in the pool (``scores.parquet`` from ``curate score``, ``stats.parquet`` from the ledger).

Precedence for a problem's pass rate: the selection's own column, else the scores table's, else the stats
posterior mean of one model. Missing evidence stays null; the plans decide what to do with it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from curate import io, prompts
from curate import schema as S
from curate.errors import ConfigError, InputError, MissingInput
from curate.manifest import read_manifest


_COLUMNS = (S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SOURCE, S.SPLIT)


def selection_pool(ws: io.Workspace, selection: str) -> str | None:
    """The pool a selection was drawn from, as its manifest records it (config, summary or extra ``pool``)."""
    manifest = read_manifest(ws.selection_dir(selection)) or {}
    extra = manifest.get("extra", {})
    for place in (manifest.get("config", {}), manifest.get("summary", {}), extra, extra.get("summary", {})):
        if isinstance(place, dict) and isinstance(place.get("pool"), str):
            return place["pool"]
    return None


def selection_instruction(ws: io.Workspace, selection: str) -> str:
    """The instruction a selection's exports use (``select.instruction``, recorded in its manifest's config), so
    curriculum shards carry the same user turn; ``prompts.INSTRUCTION`` when the manifest does not say."""
    manifest = read_manifest(ws.selection_dir(selection)) or {}
    instruction = (manifest.get("config") or {}).get("instruction")
    return instruction if isinstance(instruction, str) else prompts.INSTRUCTION


def resolve_source(ws: io.Workspace, selection: str | None, pool: str | None) -> dict[str, str | None]:
    """The selection and/or pool that feed the plan, as given (a recipe's ``curriculum.load_config`` decided them
    when the recipe loaded). A selection's pool defaults to the one its manifest records. Raises ``MissingInput``
    when the chosen input is not there, ``ConfigError`` when neither is given."""
    if selection is not None:
        path = ws.selection_dir(selection) / "selection.parquet"
        if not path.is_file():
            raise MissingInput(f"selection {selection!r} not found at {path}; run `curate select` first")
        pool = pool or selection_pool(ws, selection)
    elif pool is None:
        raise ConfigError("give a selection (--selection) or a pool (--pool)")
    if selection is None:
        ws.require_pool(pool)
    return {"selection": selection, "pool": pool}


def input_paths(ws: io.Workspace, source: dict[str, str | None]) -> list[Path]:
    """Files whose content decides the plan (hashed into the manifest; missing ones hash as \"missing\")."""
    paths = []
    if source["selection"]:
        paths.append(ws.selection_dir(source["selection"]) / "selection.parquet")
    if source["pool"]:
        if not source["selection"]:
            paths.append(ws.table(source["pool"], "problems"))
        paths += [ws.table(source["pool"], "scores"), ws.table(source["pool"], "stats")]
    return paths


def load_inputs(
    ws: io.Workspace, source: dict[str, str | None], *, score_run: str | None = None, model: str | None = None
) -> pl.DataFrame:
    """The problems to plan over, with ``pass_rate`` (selection's, else scores', else the stats posterior mean),
    ``cot_length`` (scores') and ``zero_variance`` (scores', else the stats': evidence with all-equal rewards) where
    known; nulls where not. Test-split rows are kept here and dropped by the caller."""
    if source["selection"]:
        df = io.read_parquet(ws.selection_dir(source["selection"]) / "selection.parquet")
        df = df.select(
            *_COLUMNS,
            pl.col(S.PASS_RATE).cast(pl.Float64)
            if S.PASS_RATE in df.columns
            else pl.lit(None, pl.Float64).alias(S.PASS_RATE),
        )
    else:
        df = io.read_parquet(ws.table(source["pool"], "problems"), S.PROBLEMS)
        df = df.select(*_COLUMNS, pl.lit(None, pl.Float64).alias(S.PASS_RATE))
    df = df.with_columns(pl.lit(None, pl.Float64).alias(S.COT_LENGTH), pl.lit(None, pl.Boolean).alias(S.ZERO_VARIANCE))
    pool = source["pool"]
    scores_path = ws.table(pool, "scores") if pool else None
    if scores_path is not None and scores_path.is_file():
        scores = io.read_parquet(scores_path)
        runs = sorted(set(scores[S.RUN].to_list()))
        run = score_run or (runs[0] if len(runs) == 1 else None)
        if run is None:
            raise InputError(f"pool {pool!r} has several score runs {runs}; pick one with curriculum.score_run")
        scores = scores.filter(pl.col(S.RUN) == run).select(
            S.PROBLEM_ID,
            pl.col(S.PASS_RATE).alias("_p"),
            pl.col(S.COT_LENGTH).alias("_c"),
            pl.col(S.ZERO_VARIANCE).alias("_z"),
        )
        df = (
            df.join(scores, on=S.PROBLEM_ID, how="left")
            .with_columns(
                pl.coalesce(S.PASS_RATE, "_p").alias(S.PASS_RATE),
                pl.col("_c").alias(S.COT_LENGTH),
                pl.col("_z").alias(S.ZERO_VARIANCE),
            )
            .drop("_p", "_c", "_z")
        )
    stats_path = ws.table(pool, "stats") if pool else None
    if (
        stats_path is not None
        and stats_path.is_file()
        and (df[S.PASS_RATE].null_count() or df[S.ZERO_VARIANCE].null_count())
    ):
        stats = stats_posterior(io.read_parquet(stats_path, S.STATS), model, pool).select(
            S.PROBLEM_ID, pl.col(S.PASS_RATE_MEAN).alias("_p"), pl.col(S.ZERO_VARIANCE).alias("_z")
        )
        df = (
            df.join(stats, on=S.PROBLEM_ID, how="left")
            .with_columns(
                pl.coalesce(S.PASS_RATE, "_p").alias(S.PASS_RATE),
                pl.coalesce(S.ZERO_VARIANCE, "_z").alias(S.ZERO_VARIANCE),
            )
            .drop("_p", "_z")
        )
    return df


def stats_posterior(stats: pl.DataFrame, model: str | None, pool: str | None = None) -> pl.DataFrame:
    """One row per problem: alpha, beta, pass_rate_mean and zero_variance (at least 2 samples, all correct or all
    wrong) of ``model`` (the pool's only model when None). ``"*"`` pools every model's samples into one
    Beta(1 + correct, 1 + wrong) posterior (e.g. several imported generators, one sample each).
    """
    n, k = pl.col(S.N_SAMPLES), pl.col(S.N_CORRECT)
    zero = ((n >= 2) & ((k == 0) | (k == n))).alias(S.ZERO_VARIANCE)
    models = sorted(set(stats[S.MODEL].to_list()))
    if model == "*":
        return (
            stats.group_by(S.PROBLEM_ID)
            .agg(n.sum(), k.sum())
            .select(
                S.PROBLEM_ID,
                (1.0 + k).cast(pl.Float64).alias(S.ALPHA),
                (1.0 + n - k).cast(pl.Float64).alias(S.BETA),
                ((1.0 + k) / (2.0 + n)).alias(S.PASS_RATE_MEAN),
                zero,
            )
            .sort(S.PROBLEM_ID)
        )
    model = model or (models[0] if len(models) == 1 else None)
    if model not in models:
        raise InputError(f"pool {pool!r} has stats for models {models}; pick one (or '*' to pool them) with --model")
    return stats.filter(pl.col(S.MODEL) == model).select(S.PROBLEM_ID, S.ALPHA, S.BETA, S.PASS_RATE_MEAN, zero)
