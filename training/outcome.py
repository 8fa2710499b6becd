"""What a training run bought, read from its run folder: the held-out tables of every step, RL's paired gain over
SFT, the zero-variance waste RL met, the chain's metrics, the scaling fit and the summary.

``training.runner`` trains and evaluates (the order of the steps and the steps); this module holds what the run's
records say afterwards, so the runner, the Prefect flow (``flows/training.py``) and the benchmarks
(``bench/bench_curation.py``, ``bench/bench_methods.py``, ``bench/bench_smollm2_gpu.py``) read a run the same way:

- ``evals/<step>[@T<t>].parquet``: the per-problem held-out table of each step (``keep_eval`` writes it,
  ``step_table`` reads it, ``eval_path`` names it), ``<name>.samples.parquet`` beside it; a stage's checkpoints as
  ``<step>-step<N>`` (``checkpoint_eval``);
- ``paired(run, after, before, temperature)``: two steps on the same held-out problems (``evaluate.paired_gain``);
  ``gain_over_sft``: the last RL model against the SFT model, at each temperature and per ``eval.by`` group;
- ``zero_variance``: the share of zero-variance groups RL met beside ``measure``'s forecast;
- ``fit_and_plot``: ``metrics.parquet`` of the whole chain, the figures and ScaleRL's sigmoid fit (``fit.json``);
- ``write_summary`` / ``read_summary``: ``summary.json``.

Two records have their readers beside their writers elsewhere: ``chain.json`` (``training.chain.Chain``) and a
stage's ``config.json`` (``training.rl.read_config``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curate import io
from curate import schema as S
from training import layout
from training.chain import ChainState, Run, chain_lineage
from training.rl import read_config


SUMMARY, EVALS = layout.SUMMARY, layout.EVALS  # summary.json; evals/, the per-problem held-out results of each step
# the names of ``evals/``' tables (``training.layout``): a step's, a stage's checkpoint's, and where they are
eval_file, checkpoint_eval, eval_path = layout.eval_file, layout.checkpoint_eval, layout.eval_path


# --------------------------------------------------------------------------------------------------- the evals


def keep_eval(run: str | Path, step: str, result: Mapping[str, Any], temperature: float | None = None) -> Path:
    """An evaluation's per-problem table (``training.evaluate.evaluate``'s ``per_problem``) as ``step``'s in
    ``evals/``, and its samples beside it."""
    path = eval_path(run, step, temperature)
    io.write_parquet(result["per_problem"], path)
    if "samples" in result:
        io.write_parquet(result["samples"], eval_path(run, step, temperature, samples=True))
    return path


def step_table(
    run: str | Path, step: str | None, temperature: float | None = None, *, samples: bool = False
) -> Any | None:
    """``step``'s per-problem held-out table in run folder ``run`` (problem_id, mean, scored, ...), or its samples;
    None when the step is None or was not evaluated there (at that temperature)."""
    import polars as pl

    if step is None:
        return None
    path = eval_path(run, step, temperature, samples=samples)
    return pl.read_parquet(path) if path.is_file() else None


def paired(
    run: str | Path,
    after: str | None,
    before: str | None,
    temperature: float | None = None,
    *,
    before_run: str | Path | None = None,
    keep: set[str] | None = None,
    grouping: Any | None = None,
) -> dict[str, Any] | None:
    """``after`` minus ``before`` on the same held-out problems (``training.evaluate.paired_gain``: the gain, its
    paired SE, z, both rates), from their tables in ``run``'s ``evals/``; None when a table is missing or fewer than
    two problems are scored by both.

    before_run: the run folder of ``before`` when it is another run's step (one arm against another,
    ``bench/bench_curation.py``). keep: only these problem ids. grouping: problem -> group (``evaluate.groups``)
    adds the gain per group as ``by``."""
    import polars as pl

    from training.evaluate import paired_gain, paired_gain_by

    a, b = step_table(run, after, temperature), step_table(before_run or run, before, temperature)
    if a is None or b is None:
        return None
    if keep is not None:
        a, b = (t.filter(pl.col(S.PROBLEM_ID).is_in(list(keep))) for t in (a, b))
    try:
        gain = paired_gain(a, b)
    except ValueError:  # fewer than two problems scored by both (a small subset)
        return None
    return {**gain, "by": paired_gain_by(a, b, grouping)} if grouping is not None else gain


def gain_over_sft(run: Run) -> dict[str, Any] | None:
    """The last RL model against the SFT model on the same held-out problems (``paired``): the figure a user asks
    of the chain, "did RL beat SFT, by how many standard errors?", at the eval temperature and at each of
    ``eval.temperatures``, per ``eval.by`` group; in a recipe without ``sft`` whose model was SFT'd elsewhere (RL
    from SFT's plateau), against that starting model (``init``). None without both."""
    from training.evaluate import groups, heldout_problems

    sec = run.recipe.eval
    rl_steps = [r["step"] for r in run.chain().steps if "rl_steps" in r]
    rl_steps = [step for step in rl_steps if eval_path(run.run_dir, step).is_file()]
    start = layout.SFT if run.recipe.sft is not None or run.recipe.model == "tiny" else layout.INIT  # SFT'd elsewhere
    if not rl_steps or not eval_path(run.run_dir, start).is_file():
        return None
    grouping = None
    if sec.by:
        heldout = heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=sec.limit, sources=sec.sources)
        grouping = groups(heldout, sec.by)
    gain = paired(run.run_dir, rl_steps[-1], start, grouping=grouping)
    if gain is None:
        return None
    out = {"after": rl_steps[-1], "before": start, "temperature": sec.temperature, **gain}
    others = {str(t): paired(run.run_dir, rl_steps[-1], start, t, grouping=grouping) for t in sec.temperatures}
    if any(others.values()):
        out["at_temperature"] = {t: g for t, g in others.items() if g}
    return out


def zero_variance(run: Run) -> dict[str, Any]:
    """The waste RL met: the share of zero-variance groups the trainer observed over every RL step of the run
    (``1 - kept_group_frac``, step by step, weighted by groups), beside ``measure``'s forecast for the selection
    (``curate.score.forecast``; None without ``measure``)."""
    import polars as pl

    note = run.chain().note(layout.MEASURE, layout.SFT) or {}
    # from fresh samples of the selection (``training.measure.forecast_waste``)
    forecast = run.chain().note(layout.FORECAST, layout.SFT)
    if not (forecast and forecast.get("share") is not None):  # a run measured before it existed: the selection's own
        forecast = ((note.get("select") or {}).get("zero_variance_forecast") or {}).get("selection")
    kept = groups = 0.0
    for rec in run.chain().steps:
        path = Path(rec.get("stage_dir", "")) / layout.METRICS
        if "stage_dir" in rec and path.is_file():
            m = pl.read_parquet(path)
            if "kept_group_frac" in m.columns:
                n = read_config(Path(rec["stage_dir"])).rl.prompts_per_step
                kept += float(m["kept_group_frac"].fill_null(0.0).sum()) * n
                groups += m.height * n
    observed = round(1.0 - kept / groups, 4) if groups else None
    return {"forecast": forecast if forecast and forecast.get("share") is not None else None,
            "observed": observed, "groups": int(groups)}  # fmt: skip


def report(run: Run) -> dict[str, Any]:
    """The chain's closing lines, and their figures for the summary: RL against SFT on the same held-out problems
    (``gain_over_sft``, at each temperature, per group) and the zero-variance groups (``zero_variance``)."""
    gain = gain_over_sft(run)
    if gain is not None:
        _echo_gain(run, gain)
    waste = zero_variance(run)
    if waste["observed"] is not None:  # nothing before any RL group
        forecast = waste["forecast"]
        where = "fresh samples" if forecast and "fresh_prompts" in forecast else "measure"
        said = f"forecast {forecast['share']:.3f} ± {forecast['stderr']:.3f} ({where}), " if forecast else ""
        run.echo(f"[chain] zero-variance groups: {said}observed {waste['observed']:.3f} over {waste['groups']} "
                 "RL groups")  # fmt: skip
    return {"gain_over_sft": gain, "zero_variance": waste}


def _echo_gain(run: Run, gain: Mapping[str, Any]) -> None:
    """RL against SFT on the same held-out problems, at each temperature, per group."""
    at = [(gain["temperature"], gain), *((float(t), g) for t, g in gain.get("at_temperature", {}).items())]
    for temperature, g in at:
        run.echo(f"[chain] {gain['after']} vs {gain.get('before', 'sft')} on the same {g['n_problems']} held-out "
                 f"problems at T={temperature:g}: {g['before_rate']:.3f} -> {g['after_rate']:.3f}, {g['gain']:+.3f} ± "
                 f"{g['stderr']:.3f} (paired SE), z = {g['z']:.1f}")  # fmt: skip
        for group, gg in (g.get("by") or {}).items():
            run.echo(f"[chain]   {run.recipe.eval.by} {group}: {gg['before_rate']:.3f} -> {gg['after_rate']:.3f}, "
                     f"{gg['gain']:+.3f} ± {gg['stderr']:.3f} (n={gg['n_problems']})")  # fmt: skip


# --------------------------------------------------------------------------------------------------- fit + summary
def chain_metrics(run: Run) -> Path | None:
    """Every RL stage's metrics.parquet on one step (and token) axis, offset by the stages before, with a ``stage``
    column: ``<run>/metrics.parquet``, the learning curves of the whole chain."""
    import polars as pl

    frames = []
    for rec in sorted((s for s in run.chain().steps if "stage_dir" in s), key=lambda s: s["offset_step"]):
        path = Path(rec["stage_dir"]) / layout.METRICS
        if path.is_file():
            df = pl.read_parquet(path)
            df = df.with_columns(pl.col("step") + rec["offset_step"], pl.lit(rec["step"]).alias("stage"))
            if "tokens" in df.columns:  # cumulative over the run, as the eval curve's compute axis
                df = df.with_columns(pl.col("tokens") + rec.get("offset_compute", 0.0))
            frames.append(df)
    if not frames:
        return None
    return io.write_parquet(pl.concat(frames, how="diagonal_relaxed").sort("step"), run.run_dir / layout.METRICS)


def fit_and_plot(run: Run, state: ChainState | None) -> dict[str, Any]:
    """The sigmoid fit of the whole eval curve (``fit.json``, ``fit.png`` with its extrapolation), the learning
    curves of every RL stage (``training.png``) and the eval curve (``eval.png``). Recomputed on every call (about
    a second): its inputs grow with the run."""
    from training.plots import fit_run, plot_eval, plot_plan, plot_training

    out: dict[str, Any] = {}
    chain_metrics(run)
    drawn = (plot_training(run.run_dir), plot_eval(run.run_dir), plot_plan(run.run_dir))
    figures = [p for p in drawn if p is not None]
    if (run.run_dir / layout.EVAL_CURVE).is_file():
        try:
            fit = fit_run(run.run_dir, run.recipe.fit)
            out["fit"] = fit
            figures.append(Path(fit["plot"]))
            run.echo(f"[chain] fit: {fit['advice']['summary']}")
        except (ValueError, RuntimeError) as exc:  # too few points for a fit: say so, keep the run
            out["fit"] = {"error": str(exc)}
            run.echo(f"[chain] fit skipped: {exc}")
    out["figures"] = [str(p) for p in figures]
    return out


def write_summary(
    run: Run,
    state: ChainState | None = None,
    fit: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``summary.json``: the run folder, every step, the lineage, decisions, the rollout ladder's events, the merges
    of parallel groups, fit, figures (and ``extra``)."""
    chain = run.chain()
    summary: dict[str, Any] = {
        "run_dir": str(run.run_dir),
        "name": run.recipe.name,
        "pool": run.recipe.pool,
        "home": str(run.ws.root),
        "steps": chain.steps,
        "lineage": chain.lineage or chain_lineage(run),
        "decisions": chain.notes.get(layout.DECISIONS, []),
        "coscale": chain.notes.get(layout.COSCALE, []),
        "ladder": chain.notes.get(layout.LADDER, []),  # where and why a stage's N doubled (training.groups.next_rung)
        "merges": chain.notes.get(layout.MERGES, []),  # parallel groups merged: method, each group's share
        "final_model": state.model if state is not None else None,
        **dict(fit or {}),
        **dict(extra or {}),
    }
    summary = io.jsonable(summary)
    io.write_json(run.run_dir / SUMMARY, summary)
    return summary


def read_summary(run: str | Path) -> dict[str, Any] | None:
    """Run folder ``run``'s ``summary.json`` (``write_summary``: every step, the lineage, decisions, the fit and
    figures, ``gain_over_sft``, ``zero_variance``, ``timings``), None before the run wrote one."""
    path = Path(run) / SUMMARY
    return json.loads(path.read_text()) if path.is_file() else None
