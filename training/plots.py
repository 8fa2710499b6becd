"""Figures of a training run folder: training curves, the eval curve, and the ScaleRL sigmoid fit.

- ``training.png`` (``plot_training``): reward and the kept-group fraction (groups left after zero-variance
  filtering) per step, from ``metrics.parquet``; any of its columns may be missing, and a missing one is left out.
- ``eval.png`` (``plot_eval``): held-out pass@1 +- SE against compute, from ``eval.parquet``.
- ``fit.png`` (``training.scaling.plot_fit``): the fitted sigmoid with its error band, the points left out of the
  fit, the asymptote A and C_mid, extrapolated past the last measurement.

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
            written.append(scaling.plot_fit(fit, run_dir / "fit.png"))
    return written
