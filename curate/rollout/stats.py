"""The stats table: per (problem, model) aggregates of the rollout ledger, with a Beta posterior of the pass rate.

``pools/<pool>/stats.parquet`` (schema.STATS) is what scoring, selection and the curriculum read instead of the
whole ledger. One row per (problem_id, model):

- ``n_samples``, ``n_correct``, empirical ``pass_rate``;
- the pass-rate posterior Beta(alpha, beta) = Beta(a0 + correct, b0 + wrong) under a Beta(a0, b0) prior (default
  Beta(1, 1), uniform), its mean and 5% / 95% quantiles (``scipy.stats.beta.ppf``, vectorized). The posterior is
  this project's estimator, not a paper's: the four methods (METHODS.md) use the empirical pass rate, which is
  kept beside it;
- mean completion tokens of correct and of incorrect samples (rows without a token count are left out), the
  truncation rate (``finish_reason == "length"``), the last training step seen, and when the row last changed.

Worked row: 4 samples, 3 correct, prior Beta(1, 1) -> alpha 4, beta 2, mean 4/6 = 0.6667, pass_rate 0.75.

Refreshing is incremental. Ledger part files are immutable (content-named, written once), so the manifest lists
the files already aggregated and ``refresh_stats`` reads only new ones; their rows, minus keys already counted
(dedupe by (problem_id, model, sample_idx) is the safety net against a shard written twice), are summed and added
to ``stats_state.parquet`` (schema.STATS_STATE: counts and token sums, which merge by addition). A removed or
rewritten file, a state or stats file the manifest does not vouch for (a crash between the writes) or ``force``
recomputes everything. Incremental and full give the same rows
(only ``updated_at`` differs: rows no new sample touched keep theirs).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.errors import ConfigError
from curate.manifest import Manifest, file_hash, read_manifest, write_manifest
from curate.rollout import ledger


GROUP = [S.PROBLEM_ID, S.MODEL]
LEDGER_COLUMNS = [*ledger.KEY, S.CORRECT, S.COMPLETION_TOKENS, S.FINISH_REASON, S.STEP]  # what stats read
QUANTILES = (0.05, 0.95)
DEFAULT_PRIOR = (1.0, 1.0)  # Beta(1, 1): uniform over the pass rate


# --------------------------------------------------------------------------------------------------- pure
def sums_of(rows: pl.DataFrame) -> pl.DataFrame:
    """Additive per-(problem, model) sums of ledger rows (deduplicated by key first), schema.STATS_STATE."""
    rows = ledger.dedupe(rows.select(LEDGER_COLUMNS))
    correct = pl.col(S.CORRECT).fill_null(False)
    tokens = pl.col(S.COMPLETION_TOKENS).cast(pl.Int64)
    out = rows.group_by(GROUP).agg(
        pl.len().cast(pl.Int64).alias(S.N_SAMPLES),
        correct.cast(pl.Int64).sum().alias(S.N_CORRECT),
        (pl.col(S.FINISH_REASON) == "length").fill_null(False).cast(pl.Int64).sum().alias(S.N_TRUNCATED),
        tokens.filter(correct).sum().alias(S.TOKENS_CORRECT_SUM),
        tokens.filter(correct).count().cast(pl.Int64).alias(S.TOKENS_CORRECT_N),
        tokens.filter(~correct).sum().alias(S.TOKENS_INCORRECT_SUM),
        tokens.filter(~correct).count().cast(pl.Int64).alias(S.TOKENS_INCORRECT_N),
        pl.col(S.STEP).cast(pl.Int64).max().alias(S.LAST_STEP),
    )
    return S.validate(out.sort(GROUP), S.STATS_STATE, table="stats_state")


def merge_sums(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Add sums of disjoint ledger rows together (counts and token sums add; the last step is the max)."""
    frames = [p for p in parts if p.height]
    if not frames:
        return S.empty(S.STATS_STATE)
    additive = [c for c in S.STATS_STATE if c not in (*GROUP, S.LAST_STEP)]
    out = pl.concat(frames).group_by(GROUP).agg(*(pl.col(c).sum() for c in additive), pl.col(S.LAST_STEP).max())
    return S.validate(out.sort(GROUP), S.STATS_STATE, table="stats_state")


def finalize(
    sums: pl.DataFrame, prior: tuple[float, float] = (1.0, 1.0), now: dt.datetime | None = None
) -> pl.DataFrame:
    """Stats rows (schema.STATS) from sums: empirical rate, Beta posterior, quantiles, token means, truncation."""
    from scipy.stats import beta as beta_dist

    a0, b0 = prior
    if a0 <= 0 or b0 <= 0:
        raise ConfigError(f"the Beta prior needs positive parameters, got {prior}")
    now = now or dt.datetime.now(dt.UTC)
    n, c = pl.col(S.N_SAMPLES), pl.col(S.N_CORRECT)
    out = sums.with_columns(
        (c / n).alias(S.PASS_RATE),
        (a0 + c).cast(pl.Float64).alias(S.ALPHA),
        (b0 + n - c).cast(pl.Float64).alias(S.BETA),
        pl.when(pl.col(S.TOKENS_CORRECT_N) > 0)
        .then(pl.col(S.TOKENS_CORRECT_SUM) / pl.col(S.TOKENS_CORRECT_N))
        .alias(S.MEAN_TOKENS_CORRECT),
        pl.when(pl.col(S.TOKENS_INCORRECT_N) > 0)
        .then(pl.col(S.TOKENS_INCORRECT_SUM) / pl.col(S.TOKENS_INCORRECT_N))
        .alias(S.MEAN_TOKENS_INCORRECT),
        (pl.col(S.N_TRUNCATED) / n).alias(S.TRUNCATION_RATE),
        pl.lit(now, dtype=S.STATS[S.UPDATED_AT]).alias(S.UPDATED_AT),
    )
    a, b = out[S.ALPHA].to_numpy(), out[S.BETA].to_numpy()
    out = out.with_columns(
        (pl.col(S.ALPHA) / (pl.col(S.ALPHA) + pl.col(S.BETA))).alias(S.PASS_RATE_MEAN),
        pl.Series(S.PASS_RATE_LO, beta_dist.ppf(QUANTILES[0], a, b), dtype=pl.Float64),
        pl.Series(S.PASS_RATE_HI, beta_dist.ppf(QUANTILES[1], a, b), dtype=pl.Float64),
        n.cast(pl.Int32).alias(S.N_SAMPLES),
        c.cast(pl.Int32).alias(S.N_CORRECT),
    )
    return S.validate(out, S.STATS, table="stats")


def compute_stats(rows: pl.DataFrame, prior: tuple[float, float] = (1.0, 1.0)) -> pl.DataFrame:
    """Stats rows for a ledger frame (any columns beyond ``LEDGER_COLUMNS`` are ignored), sorted by key.

    >>> import polars as pl
    >>> led = pl.DataFrame({"problem_id": ["p"] * 4, "model": ["m"] * 4, "sample_idx": [0, 1, 2, 3],
    ...     "correct": [True, True, True, False], "completion_tokens": [10, 20, 30, 40],
    ...     "finish_reason": ["stop"] * 3 + ["length"], "step": [None] * 4})
    >>> row = compute_stats(led).row(0, named=True)
    >>> row["alpha"], row["beta"], round(row["pass_rate_mean"], 4), row["mean_tokens_correct"], row["truncation_rate"]
    (4.0, 2.0, 0.6667, 20.0, 0.25)
    """
    return finalize(sums_of(rows), prior)


# --------------------------------------------------------------------------------------------------- I/O
def _read(files: Sequence[Path], cols: list[str]) -> pl.DataFrame:
    return ledger.read_files(files, cols)


def _fingerprint(ws: io.Workspace, pool: str, files: Sequence[Path]) -> dict[str, str]:
    """``{path relative to the pool: "size:<bytes>"}``: part files are immutable, so name + size identify them."""
    base = ws.pool_dir(pool)
    return {str(f.relative_to(base)): f"size:{f.stat().st_size}" for f in files}


def state_path(ws: io.Workspace, pool: str) -> Path:
    return ws.table(pool, "stats_state")


@io.pool_locked
def refresh_stats(
    ws: io.Workspace, pool: str, *, prior: tuple[float, float] | None = None, force: bool = False
) -> dict[str, Any]:
    """Bring ``stats.parquet`` up to date with the ledger, reading only new part files; returns what it did.

    Holds the pool's lock (``io.pool_locked``), so two refreshes (or a refresh and another stage) never
    interleave their writes of the tables and the manifest.

    ``prior`` None keeps the prior the table was last built with (Beta(1, 1) for a new table).
    """
    out_path, st_path = ws.table(pool, "stats"), state_path(ws, pool)
    files = ledger.files(ws, pool)
    current = _fingerprint(ws, pool, files)
    stored = read_manifest(out_path)
    if prior is None:
        prior = tuple((stored or {}).get("config", {}).get("prior") or DEFAULT_PRIOR)
    config = {"prior": list(prior)}
    done = dict((stored or {}).get("inputs", {}))
    incremental = (
        not force
        and stored is not None
        and out_path.is_file()
        and st_path.is_file()
        and all(current.get(k) == v for k, v in done.items())
        # a crash between writing the tables and the manifest must not count new files twice
        and stored.get("extra", {}).get("written") == [file_hash(st_path), file_hash(out_path)]
    )
    if incremental and set(current) == set(done) and stored.get("config") == config:
        return {"mode": "up_to_date", "new_files": 0, "new_rows": 0, "rows": stored.get("rows_out", 0)}
    now = dt.datetime.now(dt.UTC)
    base = ws.pool_dir(pool)
    if incremental:
        new_files = [f for f in files if str(f.relative_to(base)) not in done]
        old_keys = _read([base / k for k in sorted(done)], ledger.KEY)
        new_rows = ledger.dedupe(_read(new_files, LEDGER_COLUMNS)).join(old_keys, on=ledger.KEY, how="anti")
        added = sums_of(new_rows)
        sums = merge_sums([io.read_parquet(st_path, S.STATS_STATE), added])
        if stored.get("config") == config:  # same prior: only touched rows change
            old = io.read_parquet(out_path, S.STATS).join(added.select(GROUP), on=GROUP, how="anti")
            touched = finalize(sums.join(added.select(GROUP), on=GROUP, how="semi"), prior, now)
            stats = pl.concat([old, touched]).sort(GROUP)
        else:
            stats = finalize(sums, prior, now)
        mode, n_new = "incremental", new_rows.height
    else:
        new_files = files
        rows = _read(files, LEDGER_COLUMNS)
        sums = sums_of(rows)
        stats = finalize(sums, prior, now)
        mode, n_new = "full", rows.height
    io.write_parquet(sums, st_path, S.STATS_STATE)
    io.write_parquet(stats, out_path, S.STATS)
    manifest = Manifest(
        stage="stats",
        inputs=current,
        config=config,
        rows_in=int(sums[S.N_SAMPLES].sum() or 0),
        rows_out=stats.height,
        extra={"mode": mode, "new_files": len(new_files), "written": [file_hash(st_path), file_hash(out_path)]},
    )
    write_manifest(out_path, manifest)
    return {"mode": mode, "new_files": len(new_files), "new_rows": n_new, "rows": stats.height}


def read_stats(ws: io.Workspace, pool: str) -> pl.DataFrame:
    """``stats.parquet`` (schema.STATS), or an empty frame if the pool has no stats yet."""
    path = ws.table(pool, "stats")
    return io.read_parquet(path, S.STATS) if path.is_file() else S.empty(S.STATS)


# --------------------------------------------------------------------------------------------------- summary
def summarize(stats: pl.DataFrame, model: str | None = None, bins: int = 10) -> dict[str, Any]:
    """Per model: problems with evidence, samples, mean pass rate, zero-variance share, pass-rate histogram.

    Zero variance: every sample agrees (all correct or all wrong), so a GRPO group on the problem has no signal.
    The histogram counts problems per empirical pass-rate bin ``[i/bins, (i+1)/bins)`` (the last bin closed).
    """
    if model is not None:
        stats = stats.filter(pl.col(S.MODEL) == model)
    out = []
    for name in sorted(stats[S.MODEL].unique().to_list()):
        rows = stats.filter((pl.col(S.MODEL) == name) & (pl.col(S.N_SAMPLES) > 0))
        n, c = rows[S.N_SAMPLES], rows[S.N_CORRECT]
        rate = rows[S.PASS_RATE]
        counts = [0] * bins
        for r in rate.to_list():
            counts[min(bins - 1, math.floor(r * bins))] += 1
        out.append(
            {
                "model": name,
                "problems": rows.height,
                "samples": int(n.sum()),
                "correct": int(c.sum()),
                "mean_pass_rate": round(float(rate.mean()), 4),
                "mean_posterior": round(float(rows[S.PASS_RATE_MEAN].mean()), 4),
                "zero_variance": round(float(((c == 0) | (c == n)).mean()), 4),
                "all_correct": int((c == n).sum()),
                "none_correct": int((c == 0).sum()),
                "mean_tokens_correct": _round(rows[S.MEAN_TOKENS_CORRECT].mean()),
                "truncation_rate": _round((rows[S.TRUNCATION_RATE] * n).sum() / max(1, int(n.sum()))),
                "histogram": [
                    {"lo": round(i / bins, 3), "hi": round((i + 1) / bins, 3), "problems": k}
                    for i, k in enumerate(counts)
                ],
            }
        )
    return {"models": out}


def _round(x: Any) -> float | None:
    return None if x is None else round(float(x), 4)


def histogram_lines(hist: list[dict[str, Any]], width: int = 40) -> list[str]:
    """Text bars of a ``summarize`` histogram, one line per bin."""
    top = max((h["problems"] for h in hist), default=0) or 1
    return [
        f"{h['lo']:.2f}-{h['hi']:.2f} {'#' * round(width * h['problems'] / top):<{width}} {h['problems']}"
        for h in hist
    ]
