"""``measure``: before RL, what the SFT model can do on the RL candidates, and what RL will meet there.

Two steps that tell the chain what it needs before any RL step, each recorded in a note of
``chain.json`` (``measure``, ``forecast``) and skipped once recorded:

1. ``measure``: ``curate rollout`` of the current model over the RL candidates, then the **headroom report** of those
   rollouts (``curate.score.headroom``: per ``eval.by`` band and pass-rate bucket, pass@1 and pass@k, the middle's
   share, the ceiling, where each prompt belongs, suspected wrong golds), printed and kept in ``<run>/headroom/``;
   then ``curate score`` with those rollouts as the evidence (suspect golds marked), ``curate select`` (they leave
   with their reason) and ``curate curriculum`` into the run's own curriculum, which the run pins;
2. ``forecast_waste``: ``measure.fresh`` fresh samples of each selected prompt (``curate rollout --selection``), from
   which the share of zero-variance groups RL will meet is forecast at the plan's group sizes: rollouts that did not
   choose the prompts, so the forecast carries no selection bias (``training.outcome.zero_variance`` prints it
   beside what RL met).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from curate import io
from training import layout
from training.chain import ChainState, Run, chain_lineage, pin_data


HEADROOM = layout.HEADROOM  # the run folder's headroom report (``headroom_report``)
# the notes this module writes in chain.json, each named by the model they measured: the SFT step's
MEASURE, FORECAST, SFT = layout.MEASURE, layout.FORECAST, layout.SFT


def measure(run: Run, state: ChainState) -> ChainState:
    """Before RL (recipe key ``measure``): ``curate rollout`` of the current model (the SFT model, or the starting
    model in a recipe without ``sft``: a model SFT'd elsewhere) over the RL candidates,
    ``curate score`` with those rollouts as the evidence, ``curate select`` and ``curate curriculum`` into the
    recipe's curriculum, then pin that curriculum into the run folder. Recorded as the ``measure`` note of
    ``chain.json`` (rollout summary, pass-rate spread, selection, curriculum) and skipped once recorded."""
    from curate import pipeline
    from training.chain import measured_name
    from training.recipe import curate_recipe, measure_sections

    chain = run.chain()
    if run.recipe.measure is None or chain.note(MEASURE, SFT) is not None:
        return state
    t0 = time.perf_counter()
    name = measured_name(run)
    ledger_model = run.measured_model(state.model)
    record: dict[str, Any] = {"model": state.model, "ledger_model": ledger_model, "curriculum": name}
    sections = measure_sections(run.recipe, ledger_model, name)

    def run_curate(stage: str) -> None:
        crecipe = curate_recipe(run.recipe, stage, sections[stage])
        result = pipeline.run_stage(stage, run.ws, crecipe, progress=True).to_dict()  # the rollout's progress line
        record[stage] = io.jsonable(result.get("summary") or {})
        run.echo(f"[chain] measure: {stage} [{result['wall_s']:.0f} s]")

    run_curate("rollout")
    record["headroom"] = headroom_report(run, sections["rollout"])
    with run.ws.lock("pool", run.recipe.pool):  # the pool's scores table is shared: no other run scores meanwhile
        for stage in ("score", "select", "curriculum"):
            run_curate(stage)
    from curate.score.forecast import describe

    for part, fc in (record["select"].get("zero_variance_forecast") or {}).items():
        run.echo(f"[chain] measure: zero-variance groups forecast for the {part}: {describe(fc)}")
    for warning in record["select"].get("warnings") or []:  # e.g. a selection of prompts it never measured
        run.echo(f"[chain] measure: warning: {warning}")
    pinned = pin_data(run, ("curriculum",))
    chain.note(MEASURE, SFT, {**record, "wall_s": round(time.perf_counter() - t0, 1), "pinned": pinned})
    chain.set_lineage(chain_lineage(run))  # now naming the measured curriculum
    return state


def headroom_report(run: Run, rollout: Mapping[str, Any]) -> dict[str, Any]:
    """What RL can still sharpen, before any RL step (``curate.score.headroom`` of ``measure``'s rollouts, per
    ``eval.by`` band): printed, and kept in ``<run>/headroom/`` (tables, ``headroom.json``, ``headroom.png``).
    Returns the summary ``chain.json``'s ``measure`` note holds."""
    from curate.score import headroom
    from curate.verify import load_config

    n = int(rollout.get("n", 8))
    check = load_config(run.recipe.curate)
    rep = headroom.pool_report(run.ws, run.recipe.pool, rollout["model"], n=n, by=run.recipe.eval.by,
                               sources=rollout.get("sources"), verify_config=check)  # fmt: skip
    files = headroom.write_report(rep, run.run_dir / HEADROOM)
    for line in headroom.lines(rep, buckets=False):
        run.echo(f"[chain] measure: headroom: {line}")
    return {"verdict": rep["verdict"], "totals": rep["totals"], "files": files}


def forecast_waste(run: Run, state: ChainState) -> ChainState:
    """The share of zero-variance groups RL will meet, forecast from ``measure.fresh`` fresh samples of each prompt
    ``measure`` selected (``curate rollout --selection``: rollouts that did not choose the prompts, so the forecast
    has no selection bias), at the group size of each planned RL stage, weighted by its groups. Recorded as the
    ``forecast`` note of ``chain.json`` (skipped once recorded); ``training.outcome.zero_variance`` sets it beside
    what RL met."""
    from curate import pipeline
    from curate.rollout import ledger
    from curate.score import headroom
    from training.chain import measured_name
    from training.recipe import curate_recipe, measure_sections

    chain, m = run.chain(), run.recipe.measure
    note = chain.note(MEASURE, SFT)
    fresh = m.fresh if m is not None and m.fresh is not None else run.recipe.rl.num_generations
    if note is None or not fresh or chain.note(FORECAST, SFT) is not None:
        return state
    t0 = time.perf_counter()
    name = measured_name(run)  # the selection ``measure`` made (its note's ``curriculum`` holds the stage's summary)
    section = measure_sections(run.recipe, note["ledger_model"], name)["rollout"]
    n = int(section.get("n", 8))
    section = {**section, "n": n + fresh, "selection": name}
    pipeline.run_stage("rollout", run.ws, curate_recipe(run.recipe, "rollout", section), progress=True)
    import polars as pl

    from curate import schema as S

    chosen = pl.read_parquet(run.ws.selection_dir(name) / "selection.parquet")[S.PROBLEM_ID].to_list()
    samples = ledger.read(run.ws, run.recipe.pool, note["ledger_model"], columns=headroom.LEDGER_COLUMNS)
    stages = run.stages()
    sizes = sorted({s.rl.num_generations for s in stages})
    out = headroom.fresh_forecast(samples, chosen, after=n, sizes=sizes)
    weights = {size: sum(s.rl.max_steps * s.rl.prompts_per_step for s in stages if s.rl.num_generations == size)
               for size in sizes}  # fmt: skip
    total = sum(weights.values())
    if out.get("fresh_prompts") and total:
        shares = [(weights[size], out[str(size)]) for size in sizes]
        out["share"] = round(sum(w * f["share"] for w, f in shares) / total, 4)
        out["stderr"] = round(max(f["stderr"] for _, f in shares), 4)
        out["prompts"] = out["fresh_prompts"]
        run.echo(f"[chain] measure: zero-variance groups forecast from {out['fresh_samples']} fresh samples of the "
                 f"{out['fresh_prompts']} selected prompts: {out['share']:.3f} ± {out['stderr']:.3f} at the plan's "
                 f"group sizes ({', '.join(map(str, sizes))}); the fresh groups of {fresh}: {out['observed']:.3f} "
                 "all-equal")  # fmt: skip
    chain.note(FORECAST, SFT, {**out, "fresh": fresh, "wall_s": round(time.perf_counter() - t0, 1)})
    return state
