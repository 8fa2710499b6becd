"""PNG figures of a selection against its pool: pass rate, DES, problem length, cluster coverage.

matplotlib is imported inside the functions (never at import time) and used through ``Figure`` objects, not
pyplot, so no global backend or state is touched (safe under the CLI, pytest and Prefect threads).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from curate import schema as S


HISTOGRAMS = (
    (S.PASS_RATE, "pass_rate.png", "pass rate (posterior mean)"),
    (S.DES, "des.png", "DES (data effectiveness score)"),
    (S.PROMPT_CHARS, "length.png", "problem length (characters, log scale)"),
)


def compare_histogram(pool: np.ndarray, chosen: np.ndarray, xlabel: str, path: Path, *, log: bool = False) -> Path:
    """Overlaid density histograms of a value in the pool and in the selection, on shared bins."""
    from matplotlib.figure import Figure

    values = np.concatenate([pool, chosen])
    if log:
        values = values[values > 0]
        bins = np.geomspace(max(values.min(), 1.0), max(values.max(), 2.0), 40)
    else:
        lo, hi = float(values.min()), float(values.max())
        bins = np.linspace(lo, hi if hi > lo else lo + 1.0, 40)
    fig = Figure(figsize=(6, 3.6), dpi=100)
    ax = fig.add_subplot()
    ax.hist(pool, bins=bins, density=True, alpha=0.5, label=f"pool (n={len(pool):,})")
    ax.hist(chosen, bins=bins, density=True, alpha=0.5, label=f"selection (n={len(chosen):,})")
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return path


def cluster_coverage(pool: pl.Series, chosen: pl.Series, path: Path) -> Path:
    """Share of each cluster in the pool vs in the selection, clusters ordered by pool size."""
    from matplotlib.figure import Figure

    p = pool.value_counts().rename({"count": "pool"})
    c = chosen.value_counts().rename({"count": "selection"})
    table = p.join(c, on=pool.name, how="left").fill_null(0).sort(["pool", pool.name], descending=[True, False])
    x = np.arange(table.height)
    fig = Figure(figsize=(max(6, table.height * 0.12), 3.6), dpi=100)
    ax = fig.add_subplot()
    ax.bar(x - 0.2, table["pool"] / max(len(pool), 1), width=0.4, label="pool")
    ax.bar(x + 0.2, table["selection"] / max(len(chosen), 1), width=0.4, label="selection")
    covered = int((table["selection"] > 0).sum())
    ax.set_title(f"cluster coverage: {covered} of {table.height} clusters in the selection")
    ax.set_xlabel("cluster (by pool size)")
    ax.set_ylabel("share of rows")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    return path


def selection_plots(pool: pl.DataFrame, selection: pl.DataFrame, out_dir: Path) -> list[Path]:
    """Every figure whose column has values in the pool; returns the written paths."""
    written = []
    for column, name, label in HISTOGRAMS:
        if column not in pool.columns or column not in selection.columns:
            continue
        a = pool[column].drop_nulls().cast(pl.Float64).to_numpy()
        b = selection[column].drop_nulls().cast(pl.Float64).to_numpy()
        if len(a) and len(b):
            written.append(compare_histogram(a, b, label, out_dir / name, log=column == S.PROMPT_CHARS))
    if pool.height and selection.height and pool[S.CLUSTER].n_unique() > 1:
        written.append(cluster_coverage(pool[S.CLUSTER], selection[S.CLUSTER], out_dir / "clusters.png"))
    return written
