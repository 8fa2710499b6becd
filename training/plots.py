"""Figures of a training run folder: training curves, the eval curve, and the ScaleRL sigmoid fit.

- ``training.png`` (``plot_training``): reward and the kept-group fraction (groups left after zero-variance
  filtering) per step, from ``metrics.parquet``; any of its columns may be missing, and a missing one is left out.
- ``eval.png`` (``plot_eval``): held-out pass@1 +- SE against compute, from ``eval.parquet``.
- ``fit.png`` (``plot_fit``): the fitted sigmoid with its error band, the points left out of the fit, the asymptote A
  and C_mid, extrapolated past the last measurement.

matplotlib is imported inside the functions and used through ``Figure`` objects (Agg canvas, no pyplot state), so
``import training`` stays light and plotting is safe from any thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl


METRICS_FILE = "metrics.parquet"
TRAINING_SERIES = (("reward", "mean reward", "#1f77b4"), ("kept_group_frac", "kept-group fraction", "#ff7f0e"))


def _figure(nrows: int = 1, figsize: tuple[float, float] = (7.0, 4.0)) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def _save(fig: Any, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out


def plot_training(run_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """Reward and kept-group fraction per step (one panel each, whichever exist); ``None`` without data to plot."""
    run_dir = Path(run_dir)
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return None
    df = pl.read_parquet(path)
    if "step" not in df.columns:
        df = df.with_row_index("step", offset=1)
    series = [s for s in TRAINING_SERIES if s[0] in df.columns and df[s[0]].drop_nulls().len()]
    if not series:
        return None
    fig, axes = _figure(len(series), (7.0, 2.6 * len(series)))
    for ax, (col, label, colour) in zip(axes, series, strict=True):
        d = df.select("step", pl.col(col).cast(pl.Float64)).drop_nulls().filter(pl.col(col).is_not_nan())
        ax.plot(d["step"].to_list(), d[col].to_list(), color=colour, lw=1.2)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("training step")
    axes[0].set_title(f"training: {run_dir.name}")
    return _save(fig, out or run_dir / "training.png")


def plot_eval(run_dir: str | Path, out: str | Path | None = None, compute_unit: str = "compute") -> Path | None:
    """Held-out pass@1 +- SE against compute; ``None`` without ``eval.parquet`` rows."""
    run_dir = Path(run_dir)
    path = run_dir / "eval.parquet"
    if not path.is_file():
        return None
    df = pl.read_parquet(path).sort("compute")
    if df.is_empty():
        return None
    fig, (ax,) = _figure()
    err = df["stderr"].fill_nan(None).fill_null(0.0).to_list() if "stderr" in df.columns else None
    ax.errorbar(df["compute"].to_list(), df["pass_at_1"].to_list(), yerr=err, fmt="o-", ms=4, capsize=3)
    ax.set_xlabel(compute_unit)
    ax.set_ylabel("held-out pass@1 (mean@k)")
    ax.set_title(f"eval: {run_dir.name}")
    ax.grid(alpha=0.3)
    return _save(fig, out or run_dir / "eval.png")


def plot_fit(fit: Any, out: str | Path, extrapolate_to: float | None = None) -> Path:
    """The measured points (hollow: left out of the fit), the fitted sigmoid and its band up to ``extrapolate_to``
    (default 2x the last compute), the asymptote A and C_mid."""
    import numpy as np

    from training.scaling import extrapolate, extrapolate_band

    c = np.asarray(fit.compute, dtype=float)
    y = np.asarray(fit.pass_at_1, dtype=float)
    c_end = max(float(extrapolate_to or 0.0), 2.0 * float(c.max()))
    grid = np.linspace(0.0, c_end, 300)
    fig, (ax,) = _figure(figsize=(7.5, 4.5))
    used = (c >= fit.skip_below) & (c > 0)
    ax.plot(c[used], y[used], "o", color="#1f77b4", ms=5, label=f"fitted ({int(used.sum())})")
    if (~used).any():
        ax.plot(c[~used], y[~used], "o", mfc="none", color="#1f77b4", ms=5, label=f"left out ({int((~used).sum())})")
    lo, hi = extrapolate_band(fit, grid)
    ax.fill_between(grid, lo, hi, color="#ff7f0e", alpha=0.2, lw=0, label=f"{fit.band_level:.0%} band")
    measured = grid <= c.max()
    pred = extrapolate(fit, grid)
    ax.plot(grid[measured], pred[measured], "-", color="#ff7f0e", lw=1.6, label="sigmoid fit")
    ax.plot(grid[~measured], pred[~measured], "--", color="#ff7f0e", lw=1.6, label="extrapolation")
    ax.axhline(fit.A, color="#7f7f7f", ls=":", lw=1, label=f"A = {fit.A:.3f}")
    if fit.C_mid <= c_end:
        ax.axvline(fit.C_mid, color="#7f7f7f", ls="-.", lw=0.8, label=f"C_mid = {fit.C_mid:.4g}")
    ax.set_xlabel(fit.compute_unit)
    ax.set_ylabel("held-out pass@1")
    ax.set_title(f"R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B): A={fit.A:.3f}, B={fit.B:.2f}, C_mid={fit.C_mid:.4g}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, out)


def plot_run(run_dir: str | Path, fit_cfg: Any = None) -> list[Path]:
    """Every figure the run folder has data for: training.png, eval.png and fit.png (the last needs at least four
    eval points with compute > 0); returns the paths written."""
    from training import scaling

    run_dir = Path(run_dir)
    written = [p for p in (plot_training(run_dir), plot_eval(run_dir)) if p is not None]
    path = run_dir / "eval.parquet"
    if path.is_file():
        df = pl.read_parquet(path)
        if df.filter(pl.col("compute") > 0).height >= 4:
            fit = scaling.fit_sigmoid(df["compute"], df["pass_at_1"], fit_cfg or scaling.FitConfig())
            written.append(plot_fit(fit, run_dir / "fit.png"))
    return written
