"""PNG figures of a selection against its pool: pass rate, DES, problem length, cluster coverage.

matplotlib is imported inside the functions (never at import time) and used through ``Figure`` objects, not
pyplot, so no global backend or state is touched (safe under the CLI, pytest and Prefect threads).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from curate import schema as S
from curate.score import des


HISTOGRAMS = (
    (S.PASS_RATE, "pass_rate.png", "pass rate (posterior mean)"),
    (S.DES, "des.png", "DES (data effectiveness score)"),
    (S.PROMPT_CHARS, "length.png", "problem length (characters, log scale)"),
)
RANGES = {S.PASS_RATE: (0.0, 1.0)}  # the x axis of a value with a fixed range, whatever the data


def histogram_bins(values: np.ndarray, *, log: bool = False, bounds: tuple[float, float] | None = None) -> np.ndarray:
    """40 shared bins for ``values``: over ``bounds`` when the value has a fixed range (a pass rate: [0, 1]),
    log-spaced for ``log``, else over the data; a constant value gets bins centred on it, never ``[v, v + 1]``.

    >>> b = histogram_bins(np.array([0.9, 0.9]), bounds=(0.0, 1.0)); float(b[0]), float(b[-1])
    (0.0, 1.0)
    >>> b = histogram_bins(np.array([3.0, 3.0])); float(b[0]), float(b[-1])
    (2.5, 3.5)
    """
    if bounds is not None:
        return np.linspace(bounds[0], bounds[1], 41)
    if log:
        values = values[values > 0]
        lo, hi = max(float(values.min()), 1.0), max(float(values.max()), 1.0)
        return np.geomspace(lo / 1.05, hi * 1.05, 41) if hi <= lo * 1.1 else np.geomspace(lo, hi, 41)
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        half = max(abs(lo) * 0.05, 0.5)
        lo, hi = lo - half, hi + half
    return np.linspace(lo, hi, 41)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick positions for a log axis over [lo, hi] that never crowd: 1-2-5 per decade, or every integer step of
    the leading digit when the range is under a decade, or a few evenly spaced round numbers when even that gives
    fewer than three.

    >>> log_ticks(20, 27)
    [20.0, 22.0, 24.0, 26.0]
    >>> log_ticks(30, 5000)
    [50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]
    """
    for subs in ((1, 2, 5), tuple(range(1, 10))):
        ticks = [m * 10.0**e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1) for m in subs]
        ticks = [t for t in ticks if lo <= t <= hi]
        if len(ticks) >= 3:
            return ticks if len(ticks) <= 9 else ticks[:: int(np.ceil(len(ticks) / 9))]
    from matplotlib.ticker import MaxNLocator

    return [float(t) for t in MaxNLocator(nbins=4, steps=[1, 2, 5, 10]).tick_values(lo, hi) if lo <= t <= hi]


def compare_histogram(
    pool: np.ndarray,
    chosen: np.ndarray,
    xlabel: str,
    path: Path,
    *,
    log: bool = False,
    note: str | None = None,
    bounds: tuple[float, float] | None = None,
) -> Path:
    """Overlaid density histograms of a value in the pool and in the selection, on shared bins
    (``histogram_bins``; ``bounds``: the value's fixed range, the x axis); ``note`` is printed under the axes (why a
    plot carries no information, e.g. a pass rate that is the same everywhere)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    bins = histogram_bins(np.concatenate([pool, chosen]), log=log, bounds=bounds)
    fig = Figure(figsize=(6, 3.6), dpi=100)
    ax = fig.add_subplot()
    ax.hist(pool, bins=bins, density=True, alpha=0.5, label=f"pool (n={len(pool):,})")
    ax.hist(chosen, bins=bins, density=True, alpha=0.5, label=f"selection (n={len(chosen):,})")
    if log:
        ax.set_xscale("log")
        ticks = log_ticks(float(bins[0]), float(bins[-1]))
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())  # matplotlib labels minor ticks under a decade: they overlap
    ax.set_xlim(float(bins[0]), float(bins[-1]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.legend()
    fig.tight_layout()
    if note:
        import textwrap

        lines = textwrap.wrap(note, 95)
        fig.set_figheight(3.6 + 0.18 * len(lines))
        fig.subplots_adjust(bottom=0.14 + 0.05 * len(lines))
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, color="firebrick", va="bottom")
    fig.savefig(path, metadata={"Description": note} if note else None)  # the note is also a PNG text chunk
    return path


def plot_notes(pool: pl.DataFrame) -> dict[str, str]:
    """A note per figure whose value carries no signal in this pool: a constant pass rate (no rollouts, no
    difficulty labels), and DES reduced to some of its terms (``curate.score.des.reduced_note``)."""
    notes = {}
    if S.PASS_RATE in pool.columns and pool[S.PASS_RATE].drop_nulls().n_unique() == 1:
        p = float(pool[S.PASS_RATE].drop_nulls()[0])
        notes[S.PASS_RATE] = (
            f"Every problem has the pass rate {p:.2f}: no rollouts and no difficulty labels, so this plot and DES's "
            "difficulty and reward terms carry no information."
        )
    reduced = des.reduced_note(pool)
    if reduced is not None:
        notes[S.DES] = reduced[0].upper() + reduced[1:] + "."
    return notes


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
    notes = plot_notes(pool)
    for column, name, label in HISTOGRAMS:
        if column not in pool.columns or column not in selection.columns:
            continue
        a = pool[column].drop_nulls().cast(pl.Float64).to_numpy()
        b = selection[column].drop_nulls().cast(pl.Float64).to_numpy()
        if len(a) and len(b):
            note = notes.get(column)
            written.append(compare_histogram(a, b, label, out_dir / name, log=column == S.PROMPT_CHARS, note=note,
                                             bounds=RANGES.get(column)))  # fmt: skip
    if pool.height and selection.height and pool[S.CLUSTER].n_unique() > 1:
        written.append(cluster_coverage(pool[S.CLUSTER], selection[S.CLUSTER], out_dir / "clusters.png"))
    return written
