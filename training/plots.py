"""Figures of a training run folder: training curves, the eval curve, and the ScaleRL sigmoid fit.

- ``training.png`` (``plot_training``): reward and the kept-group fraction (groups left after zero-variance
  filtering) per RL step, from ``metrics.parquet``; any of its columns may be missing, and a missing one is left out.
  Its ``stage`` column (the chain writes it) draws the stage boundaries and names, with each stage's trained context.
- ``eval.png`` (``plot_eval``): held-out pass@1 +- SE against RL compute, from ``eval.parquet``, with the models the
  RL stages start from as horizontal baselines (``chain.json``'s ``init`` and ``sft`` records, +- SE) and the RL
  stages as shaded spans (from the ``rl:*`` records' compute offsets). The compute unit comes from the run's
  ``recipe.json`` (``fit.compute_unit``: tokens in the built-in recipes) unless given.
- ``plan.png`` (``plot_plan``): the curriculum's stages as this run trained them (context, rollouts, steps).
- ``fit.png`` (``plot_fit``): the fitted sigmoid with its error band (only where the fit is
  informative), the points left out of the fit, the asymptote A and C_mid, extrapolated past the last measurement.

matplotlib is imported inside the functions and used through ``Figure`` objects (Agg canvas, no pyplot state), so
``import training`` stays light and plotting is safe from any thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from training import layout
from training.chain import Chain
from training.scaling import (
    COMPUTE,
    PASS_AT_1,
    FitConfig,
    advise,
    extrapolate,
    extrapolate_band,
    fit_sigmoid,
    human,
)


METRICS_FILE, FIT = layout.METRICS, layout.FIT  # fit.json: ``fit_run``'s result beside the curve it fitted
TRAINING_SERIES = (("reward", "mean reward", "#1f77b4"), ("kept_group_frac", "kept-group fraction", "#ff7f0e"))
# chain.json records drawn as horizontal lines on eval.png
BASELINES = ((layout.SFT, "#2ca02c"), (layout.INIT, "#7f7f7f"))
_SPAN_COLOURS = ("#1f77b4", "#ff7f0e")  # alternate stage spans


def _figure(nrows: int = 1, figsize: tuple[float, float] = (7.0, 4.0)) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, 1, squeeze=False, sharex=True)[:, 0]
    return fig, list(axes)


def _save(fig: Any, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out


def run_compute_unit(run_dir: str | Path) -> str:
    """The unit of the run's compute axis: ``recipe.json``'s ``fit.compute_unit``, else ``compute``."""
    from training.chain import read_recipe

    fit = (read_recipe(run_dir) or {}).get("fit") or {}
    return str(fit.get("compute_unit") or "compute")


def _stage_rl(rec: Mapping[str, Any]) -> Any:
    """The ``RLConfig`` an RL stage of the chain trained with (its folder's ``config.json``), None without one."""
    from training.rl import read_config

    cfg = read_config(Path(rec["stage_dir"])) if rec.get("stage_dir") else None
    return cfg.rl if cfg is not None else None


def _stage_label(rec: Mapping[str, Any]) -> str:
    """``stage1`` plus the context the stage trained with (its run folder's ``config.json``), e.g. ``stage1 · 128``."""
    name = layout.parse_step(rec["step"]).label
    rl = _stage_rl(rec)
    return f"{name} · {rl.max_completion_length} tok" if rl is not None else name


def _stage_spans(ax: Any, spans: list[tuple[float, float, str]]) -> None:
    """Alternately shaded spans with the stage names along the top of ``ax`` (boundaries as thin lines)."""
    from matplotlib.transforms import blended_transform_factory

    top = blended_transform_factory(ax.transData, ax.transAxes)
    for i, (start, end, label) in enumerate(spans):
        ax.axvspan(start, end, color=_SPAN_COLOURS[i % 2], alpha=0.06, lw=0)
        if i:
            ax.axvline(start, color="#7f7f7f", lw=0.8, ls="--")
        ax.text((start + end) / 2, 0.98, label, transform=top, ha="center", va="top", fontsize=7.5, color="#444444")


def plot_training(run_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """``training.png`` (``training_figure``); ``None`` without data to plot."""
    fig = training_figure(run_dir)
    return None if fig is None else _save(fig, out or Path(run_dir) / layout.FIGURES["training"])


def training_figure(run_dir: str | Path) -> Any:
    """Reward and kept-group fraction per step (one panel each, whichever exist), stage boundaries from the
    ``stage`` column; ``None`` without data to plot."""
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
    spans = []
    if "stage" in df.columns:
        labels = {r["step"]: _stage_label(r) for r in Chain(run_dir).steps if "rl_steps" in r}
        bounds = df.group_by("stage", maintain_order=True).agg(pl.col("step").min().alias("lo"), pl.col("step").max())
        spans = [(lo - 0.5, hi + 0.5, labels.get(st, layout.parse_step(st).label)) for st, lo, hi in bounds.rows()]
    fig, axes = _figure(len(series), (7.5, 0.6 + 2.5 * len(series)))
    for ax, (col, label, colour) in zip(axes, series, strict=True):
        d = df.select("step", pl.col(col).cast(pl.Float64)).drop_nulls().filter(pl.col(col).is_not_nan())
        ax.plot(d["step"].to_list(), d[col].to_list(), color=colour, lw=1.2)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if spans:
            _stage_spans(ax, spans)
            lo, hi = ax.get_ylim()  # both series are fractions; room for the stage names on top
            ax.set_ylim(max(lo, -0.02), min(hi + 0.12 * (hi - lo), 1.08))
    axes[-1].set_xlabel("RL step (all stages, in order)")
    axes[0].set_title(f"training: {run_dir.name}")
    return fig


def plot_eval(run_dir: str | Path, out: str | Path | None = None, compute_unit: str | None = None) -> Path | None:
    """``eval.png`` (``eval_figure``); ``None`` without ``eval.parquet`` rows."""
    fig = eval_figure(run_dir, compute_unit)
    return None if fig is None else _save(fig, out or Path(run_dir) / layout.FIGURES["eval"])


def eval_figure(run_dir: str | Path, compute_unit: str | None = None) -> Any:
    """Held-out pass@1 +- SE against compute with the init / SFT baselines and the RL stages; ``None`` without
    ``eval.parquet`` rows."""
    from matplotlib.ticker import FuncFormatter

    run_dir = Path(run_dir)
    path = run_dir / layout.EVAL_CURVE
    if not path.is_file():
        return None
    df = pl.read_parquet(path).sort("compute")
    if df.is_empty():
        return None
    unit = compute_unit or run_compute_unit(run_dir)
    records = Chain(run_dir).steps
    fig, (ax,) = _figure(figsize=(7.5, 4.5))
    rl = sorted((r for r in records if "rl_steps" in r and "offset_compute" in r), key=lambda r: r["offset_compute"])
    spans = [(float(r["offset_compute"]), float(r.get("compute", r["offset_compute"])), _stage_label(r)) for r in rl]
    if spans:
        _stage_spans(ax, spans)
    x_end = max(float(df["compute"].max()), max((s[1] for s in spans), default=0.0))
    for name, colour in BASELINES:
        rec = next((r for r in records if r.get("step") == name and r.get("pass_at_1") is not None), None)
        if rec is None:
            continue
        p, se = float(rec["pass_at_1"]), float(rec.get("stderr") or 0.0)
        ax.axhline(p, color=colour, ls="--", lw=1.2, label=f"{name}: {p:.3f} ± {se:.3f} (n={rec.get('n_problems')})")
        if se:
            ax.axhspan(p - se, p + se, color=colour, alpha=0.12, lw=0)
    err = df["stderr"].fill_nan(None).fill_null(0.0).to_list() if "stderr" in df.columns else None
    ax.errorbar(df["compute"].to_list(), df["pass_at_1"].to_list(), yerr=err, fmt="o-", ms=4, capsize=3,
                color="#d62728", label="RL checkpoints ± SE", zorder=3)  # fmt: skip
    ax.set_xlim(0, x_end * 1.03)
    lo, hi = ax.get_ylim()
    ax.set_ylim(max(lo, -0.02), min(hi + 0.15 * (hi - lo), 1.05))  # a pass rate; room for the stage names on top
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: human(x)))
    ax.set_xlabel(
        f"RL compute ({unit}, cumulative over the stages)" if unit != "compute" else "RL compute (cumulative)"
    )
    ax.set_ylabel("held-out pass@1 (mean@k)")
    ax.set_title(f"eval: {run_dir.name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def plot_plan(run_dir: str | Path, out: str | Path | None = None) -> Path | None:
    """``plan.png`` of the run: its curriculum's stages with the context, rollouts per prompt and steps the RL
    stages trained with (each stage folder's ``config.json``), not the preset's (the curriculum folder's own
    ``plan.png`` shows those: 8K -> 24K for FastCuRL). The plan is the run's pinned copy (``data/curriculum``),
    else the lineage's curriculum folder; ``None`` without a plan or before any RL stage trained."""
    from curate.curriculum.plots import plot_plan as draw
    from curate.curriculum.stage import read_plan

    run_dir = Path(run_dir)
    chain = Chain(run_dir)
    plan = read_plan(layout.pinned_path(run_dir, "curriculum"))  # the run's own copy, else the curriculum folder
    if plan is None and (chain.lineage or {}).get("curriculum"):
        plan = read_plan(chain.lineage["curriculum"])
    if not (plan or {}).get("stages"):
        return None
    trained = {}
    for rec in chain.steps:
        step = layout.parse_step(rec.get("step", ""))
        rl = _stage_rl(rec) if layout.first_pass_rl(step.name) else None
        if rl is None:
            continue
        stage = step.stage  # a rung of the rollout ladder (``rl:<stage>@n16``) adds up
        steps = (rec.get("rl_steps") or rl.max_steps) + trained.get(stage, {}).get("steps", 0)
        trained[stage] = {"max_response_length": rl.max_completion_length, "n": rl.num_generations, "steps": steps}
    if not trained:
        return None
    bands = list(dict.fromkeys(b for st in plan["stages"] for b in st.get("difficulty_mix") or {}))
    png = out or run_dir / layout.FIGURES["plan"]
    return draw(plan, png, bands, trained=trained, trained_in=f"run {run_dir.name}")


# --------------------------------------------------------------------------------------------------- the fit of a run
def read_curve(path: str | Path) -> tuple[np.ndarray, np.ndarray, Path]:
    """(compute, pass_at_1, folder) from a run folder (its ``eval.parquet``) or a CSV / Parquet file."""
    import polars as pl

    from curate.errors import InputError, MissingInput

    path = Path(path)
    file = path / layout.EVAL_CURVE if path.is_dir() else path
    if not file.is_file():
        raise MissingInput(f"{file} not found (give a run folder with eval.parquet, or a CSV/Parquet file)")
    from curate.io import read_rows

    df = read_rows(file, "eval curve to fit")
    missing = [col for col in (COMPUTE, PASS_AT_1) if col not in df.columns]
    if missing:
        raise InputError(f"{file}: column(s) {missing} missing; have {df.columns}")
    return df[COMPUTE].cast(pl.Float64).to_numpy(), df[PASS_AT_1].cast(pl.Float64).to_numpy(), file.parent


def fit_run(
    path: str | Path,
    cfg: FitConfig = FitConfig(),
    *,
    extrapolate_to: list[float] | None = None,
    out_dir: str | Path | None = None,
    plot: bool = True,
) -> dict[str, Any]:
    """Fit a run's eval curve and write ``fit.json`` (and ``fit.png``) to the run folder (or ``out_dir``).

    ``path`` is a run folder with ``eval.parquet`` or a CSV/Parquet file with columns ``compute`` and
    ``pass_at_1``; the outputs go beside the file. Returns what ``fit.json`` holds: the fit, the advice, the
    predictions (with band) at 2x, 4x and every ``extrapolate_to`` compute.
    """
    from curate import io

    compute, rates, folder = read_curve(path)
    fit = fit_sigmoid(compute, rates, cfg)
    out = Path(out_dir) if out_dir is not None else folder
    c_now = max(fit.compute)
    targets = sorted({2 * c_now, 4 * c_now, *(float(x) for x in extrapolate_to or [])})
    lo, hi = extrapolate_band(fit, targets)
    result = {
        "source": str(path),
        "fit": fit.to_dict(),
        "advice": advise(fit, cfg=cfg),
        "predictions": [
            {"compute": t, "pass_at_1": float(extrapolate(fit, t)), "band": [float(a), float(b)]}
            for t, a, b in zip(targets, lo, hi, strict=True)
        ],
        "config": asdict(cfg),
    }
    io.write_text(out / FIT, json.dumps(result, indent=2, default=float) + "\n")
    if plot:
        stderr = _curve_stderr(path, compute, rates)
        png = out / layout.FIGURES["fit"]
        plot_fit(fit, png, extrapolate_to=max(targets), advice=result["advice"], cfg=cfg, stderr=stderr)
        result["plot"] = str(png)
    return result


def read_fit(run_dir: str | Path) -> dict[str, Any] | None:
    """A run folder's ``fit.json`` (``fit_run``: the fit, its advice, the predictions, the config), None without."""
    path = Path(run_dir) / FIT
    return json.loads(path.read_text()) if path.is_file() else None


def plot_fit(
    fit: Any,
    out: str | Path,
    extrapolate_to: float | None = None,
    advice: Mapping[str, Any] | None = None,
    cfg: FitConfig = FitConfig(),
    stderr: Any = None,
) -> Path:
    """``fit.png`` (``fit_figure``, same arguments)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fit_figure(fit, extrapolate_to, advice, cfg, stderr).savefig(out, dpi=120)
    return out


def fit_figure(
    fit: Any,
    extrapolate_to: float | None = None,
    advice: Mapping[str, Any] | None = None,
    cfg: FitConfig = FitConfig(),
    stderr: Any = None,
) -> Any:
    """The measured points (hollow: left out of the fit), the fitted sigmoid up to ``extrapolate_to`` (default 2x
    the last compute), the asymptote A, C_mid and the advice's verdict (``advise`` unless given) under the title.
    ``stderr``: each point's standard error, in the order of ``fit.compute`` (error bars; none when None).

    The error band is drawn only when the fit is informative (``uninformative`` has no reason against it): a band
    from a parameter at its grid edge fills most of the figure and means nothing, so the curve is then drawn grey
    and dashed, labelled "uninformative", with the reasons in the figure.
    """
    import textwrap

    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    advice = advice if advice is not None else advise(fit, cfg=cfg)
    reasons = list(advice.get("uninformative") or [])
    c = np.asarray(fit.compute, dtype=float)
    y = np.asarray(fit.pass_at_1, dtype=float)
    c_end = max(float(extrapolate_to or 0.0), 2.0 * float(c.max()))
    grid = np.linspace(0.0, c_end, 300)
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.subplots()
    se = np.asarray(stderr, dtype=float) if stderr is not None and len(stderr) == len(c) else np.zeros_like(c)
    used = (c >= fit.skip_below) & (c > 0)
    pm = " ± SE" if se.any() else ""
    ax.errorbar(c[used], y[used], yerr=se[used], fmt="o", color="#1f77b4", ms=5, capsize=3, zorder=3,
                label=f"fitted ({int(used.sum())}){pm}")  # fmt: skip
    if (~used).any():
        ax.errorbar(c[~used], y[~used], yerr=se[~used], fmt="o", mfc="none", color="#1f77b4", ms=5, capsize=3,
                    label=f"left out ({int((~used).sum())})")  # fmt: skip
    measured = grid <= c.max()
    pred = extrapolate(fit, grid)
    if reasons:
        colour, what = "#7f7f7f", "sigmoid fit (uninformative)"
    else:
        colour, what = "#ff7f0e", "sigmoid fit"
        lo, hi = extrapolate_band(fit, grid)
        ax.fill_between(grid, lo, hi, color=colour, alpha=0.2, lw=0, label=f"{fit.band_level:.0%} band")
    ax.plot(grid[measured], pred[measured], "-" if not reasons else "--", color=colour, lw=1.6, label=what)
    ax.plot(grid[~measured], pred[~measured], "--", color=colour, lw=1.6, alpha=0.7,
            label="extrapolation" if not reasons else None)  # fmt: skip
    ax.axhline(fit.A, color="#7f7f7f", ls=":", lw=1, label=f"A = {fit.A:.3f}")
    if fit.C_mid <= c_end:
        ax.axvline(fit.C_mid, color="#7f7f7f", ls="-.", lw=0.8, label=f"C_mid = {human(fit.C_mid)}")
    if reasons:  # the note goes above the points: stretch the y axis by a quarter to make room
        lo_y, hi_y = float(np.min(y - se)), float(np.max(y + se))
        span = max(hi_y - lo_y, 0.01)
        ax.set_ylim(lo_y - 0.08 * span, hi_y + 0.35 * span)
        note = "fit uninformative (no band drawn): " + "; ".join(reasons)
        ax.text(0.01, 0.99, "\n".join(textwrap.wrap(note, 70)), transform=ax.transAxes, va="top", ha="left",
                fontsize=7.5, color="firebrick", bbox={"fc": "white", "ec": "none", "alpha": 0.8})  # fmt: skip
    ax.set_xlabel(f"{fit.compute_unit} (cumulative)")
    ax.set_xlim(0, c_end)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: human(x)))
    ax.set_ylabel("held-out pass@1")
    title = f"R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B): A={fit.A:.3f}, B={fit.B:.3g}, C_mid={human(fit.C_mid)}"
    gain = advice.get("gain_4x")
    verdict = advice.get("verdict", "")
    sub = f"{verdict}: 4x the compute predicts {gain:+.3f}" if gain is not None else verdict
    if advice.get("gain_4x_band"):
        sub += " [{:+.3f}, {:+.3f}]".format(*advice["gain_4x_band"])
    ax.set_title(f"{title}\n{sub}", fontsize=9.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _curve_stderr(path: str | Path, compute: np.ndarray, rates: np.ndarray) -> np.ndarray | None:
    """The eval curve's ``stderr`` column in ``fit_sigmoid``'s point order (finite points sorted by compute), or
    None when the file has none (a CSV of compute and pass_at_1 only)."""
    import polars as pl

    path = Path(path)
    file = path / layout.EVAL_CURVE if path.is_dir() else path
    if file.suffix != ".parquet" or "stderr" not in pl.read_parquet_schema(file):
        return None
    se = pl.read_parquet(file, columns=["stderr"])["stderr"].cast(pl.Float64).fill_null(0.0).to_numpy()
    ok = np.isfinite(compute) & np.isfinite(rates) & (compute >= 0)
    if len(se) != len(compute):
        return None
    se = np.nan_to_num(se[ok])
    return se[np.argsort(compute[ok], kind="stable")]
