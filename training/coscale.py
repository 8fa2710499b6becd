"""CoScale-RL's iteration steps of ``training run`` (METHODS.md §2.2: re-measure, scale the data, RL again).

After a pass of RL stages ends (all stages, or a ``decide`` stop), while ``decide.coscale_iterations`` allows:

a. ``coscale_measure``: ``curate rollout`` of the current model (``decide.rollout`` settings; ``hf`` backend by
   default) over the pool's training problems, so the pass rates are the trained model's own;
b. ``coscale_solutions``: ``curate solutions`` with that model as the student (the curate recipe's ``solutions``
   section, overridden by ``decide.solutions``): the CoScale pools are re-read (unsolvable < 5%, solvable,
   solved > 70%) and, with a teacher configured, solutions are added for the unsolvable problems; the pools table
   is copied into the run folder (``coscale/itN/``) so the iteration reads a fixed snapshot;
c. ``coscale_sft`` (when the recipe has ``sft``): SFT of the current model on the solutions of the unsolvable
   problems (data scaling makes them solvable);
d. ``coscale_stages``: the RL stages again, each shard restricted to the solvable problems (CoScale: only Solvable
   problems enter RL; a stage left empty is skipped). ``training.runner`` runs them like the first pass.

Each step is recorded as a ``coscale`` note in ``chain.json`` and skipped once recorded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from curate import io
from training import layout
from training.chain import ChainState, Run, chain_lineage, sft_step
from training.plan import StagePlan
from training.recipe import curate_recipe, rollout_section, solutions_section


def coscale_measure(run: Run, state: ChainState) -> ChainState:
    """Start CoScale iteration N+1: ``curate rollout`` of the current model over the pool's training problems
    (resumable, skipped once recorded); returns the state with the new iteration number."""
    from curate import pipeline

    state = dataclasses.replace(state, iteration=state.iteration + 1)
    name = layout.in_iteration(layout.MEASURE, state.iteration)
    chain = run.chain()
    if chain.note(layout.COSCALE, name) is None:
        crecipe = curate_recipe(run.recipe, "rollout", rollout_section(run.recipe, run.measured_model(state.model)))
        result = pipeline.run_stage("rollout", run.ws, crecipe).to_dict()
        record = {"model": state.model, "wall_s": result["wall_s"], "summary": result["summary"]}
        chain.note(layout.COSCALE, name, record)
        run.echo(f"[chain] {name}: rollouts of {state.model} [{result['wall_s']:.0f} s]")
    return state


def coscale_solutions(run: Run, state: ChainState) -> ChainState:
    """``curate solutions`` with the current model as the student (pools re-read, a teacher fills the unsolvable
    problems when configured); snapshots the pools table and writes the iteration's shards restricted to the
    solvable problems and the SFT rows of the unsolvable ones into ``coscale/itN/``."""
    import polars as pl

    from curate import pipeline
    from curate import schema as S
    from curate.solutions import export as solutions_export
    from curate.solutions import stage as solutions_stage

    name = layout.in_iteration(layout.SOLUTIONS, state.iteration)
    chain = run.chain()
    if chain.note(layout.COSCALE, name) is not None:
        return state
    folder = run.coscale_dir(state.iteration)
    lineage = chain.lineage or chain_lineage(run)
    selection = Path(lineage["selection"]).parent.name if lineage.get("selection") else None
    section = solutions_section(run.recipe, run.measured_model(state.model), state.iteration, selection)
    crecipe = curate_recipe(run.recipe, "solutions", section)
    result = pipeline.run_stage("solutions", run.ws, crecipe).to_dict()
    config = solutions_stage.load_config(crecipe)
    pools = pl.read_parquet(solutions_stage.set_tables(run.ws, run.recipe.pool, config)[2])  # this iteration's set
    io.write_parquet(pools, folder / layout.SOLUTION_POOLS)
    solvable = pools.filter(pl.col(S.COSCALE_POOL) == "solvable").select(S.PROBLEM_ID)
    unsolvable = pools.filter(pl.col(S.COSCALE_POOL) == "unsolvable").select(S.PROBLEM_ID)
    for stage in run.stages():
        shard = pl.read_parquet(stage.shard).join(solvable, on=S.PROBLEM_ID, how="semi")
        io.write_parquet(shard, layout.coscale_shard(folder, stage.name))
    export = solutions_stage.export_dir(run.ws, run.recipe.pool, config)
    rows = pl.read_parquet(export / solutions_export.SFT_FILE).join(unsolvable, on=S.PROBLEM_ID, how="semi")
    io.write_parquet(rows, folder / layout.UNSOLVABLE_SFT)
    counts = dict(pools.group_by(S.COSCALE_POOL).len().iter_rows())
    chain.note(layout.COSCALE, name, {"model": state.model, "pools": counts, "export": str(export),
                                      "sft_rows": rows.height, "wall_s": result["wall_s"]})  # fmt: skip
    run.echo(f"[chain] {name}: pools {counts}; {rows.height} SFT rows for unsolvable problems")
    return state


def coscale_sft(run: Run, state: ChainState) -> ChainState:
    """SFT of the current model on the unsolvable problems' solutions of this iteration (when the recipe has
    ``sft`` and there are any); with ``sft.validation.patience`` it stops at its validation plateau, as the chain's
    first SFT does (``sft.max_steps`` is a cap, not a step count, on a few hundred rows), and goes on from its last
    model, within the rule's noise of its best."""
    import polars as pl

    folder = run.coscale_dir(state.iteration)
    data = folder / layout.UNSOLVABLE_SFT
    if run.recipe.sft is None or pl.scan_parquet(data).select(pl.len()).collect().item() == 0:
        return state
    name = layout.in_iteration(layout.SFT, state.iteration)
    return sft_step(run, state, name, folder / layout.SFT, data, early_stop=True)


def coscale_stages(run: Run, state: ChainState) -> list[StagePlan]:
    """The RL stages of CoScale iteration N: the recipe's stages over the shards restricted to solvable problems
    (written by ``coscale_solutions``); stages left without problems are dropped."""
    import polars as pl

    folder = run.coscale_dir(state.iteration)
    out = []
    for stage in run.stages():
        shard = layout.coscale_shard(folder, stage.name)
        rows = pl.scan_parquet(shard).select(pl.len()).collect().item()
        if rows:
            out.append(dataclasses.replace(stage, shard=shard, rows=rows))
    return out
