"""``training run``: one recipe from a curated pool to a trained, evaluated model, with the scaling fit.

The chain, one public function per step, each skipped when its output is already there (re-running resumes):

1. ``curation`` (optional ``curate_recipe``): the ``curate run`` stages, skipped when up to date (manifests), and
   not run again once the run has started training (``curation_pinned``: the run's data stays what it trained on);
2. ``init_model``: ``tiny`` builds a small from-scratch model for the built-in task (``training.tiny``),
   ``package:<name>`` converts a model shipped in a PyPI package once into the workspace (``training.packaged``),
   anything else is a local folder or a hub name; the run copies its SFT rows and curriculum into ``data/``
   (``pin_data``): from here on it trains on its own copies;
3. ``sft`` (optional ``sft``) on solutions (``curate solutions``' ``sft.parquet``);
3b. ``measure`` (optional ``measure``): the SFT model's own pass rates over the RL candidates (``curate rollout``,
   ``score``, ``select``, ``curriculum``), the RL curriculum built from them and pinned;
4. ``rl_stage`` for each RL stage of the curriculum plan (``training.plan``), in order, each starting from the
   previous stage's final model (and, with ``rl.carry_optimizer``, its Adam state); checkpoints every
   ``eval.every`` steps are evaluated after the stage;
5. ``evaluate_model`` after every training step (pass@1 as mean@k with its standard error, ``split: test`` only;
   also at ``eval.temperatures``), the result in the model's card;
6. ``decide`` after every RL stage when the recipe has ``decide`` (below);
7. ``redistill`` (optional ``redistill``): SFT of the starting model on the last stage's correct RL rollouts;
8. ``fit_and_plot``: the ScaleRL sigmoid fit over (compute, pass rate) of the RL steps, its advice and figures;
9. ``write_summary``: ``summary.json``.

Every step takes ``(run, state)``: a ``Run`` (recipe, workspace, run folder) and the ``ChainState`` the previous step
returned (the current model, RL step and compute offsets, the model waiting for its evaluation), and returns the
next state. ``run_chain`` calls them in order through a ``call(name, fn, *args)`` hook: by default a plain call;
the Prefect flow (``flows/training.py``) passes one that runs each call as a task, so the CLI and the flow run the
same steps and the same control flow. What is done is read back from the run folder (``chain.json``, each training
step's own completion file), never from the caller, so a re-run after a failure resumes at the failed step (an RL
stage from its last checkpoint, ``training.rl``).

The decision (recipe key ``decide``, ``DecideSection``): after each RL stage's evaluation the sigmoid is fitted to
the eval curve so far (every RL evaluation of the run, cumulative compute). The chain **stops** the current pass
when the fitted asymptote A is pinned down (it has an error band, which takes at least four points, and the band
does not reach the grid edge) and lies within ``stop_margin``
of the pass rate just measured: more compute on the same data buys almost nothing. Otherwise (no fit yet, A not
pinned down, or A above the current pass rate by more than the margin) it **continues** with the next stage. When
a pass ends (all stages, or a stop), a **CoScale iteration** follows while ``coscale_iterations`` allows
(CoScale-RL §2.2, one iteration = re-measure, scale data, RL again: ``training.coscale``).

Run folder (``runs/<name>`` under the workspace unless ``--out``)::

    recipe.json   the resolved recipe          chain.json  every step: model folder, pass rate, wall time;
    init/ sft/    models (``final/`` inside)               decisions, CoScale notes, the lineage
    rl/NN-<stage>/  train_rl run folders       coscale/itN/  pools snapshot, restricted shards, SFT rows, sft/
    eval.parquet  RL eval curve (step, compute, pass_at_1, stderr)   metrics.parquet  RL metrics of every stage
    fit.json, training.png, eval.png, fit.png  the fit and the figures      summary.json  the run's summary
    evals/<step>[@T<t>].parquet  per-problem held-out results of each step (and temperature; a stage's checkpoints
                  at the eval temperature as <step>-step<N>.parquet); summary.json's
                  ``gain_over_sft`` pairs the last RL model with the SFT model on them (gain, paired SE, z, per
                  ``eval.by`` group and temperature); ``<name>.samples.parquet`` beside each: every sample
    data/         the run's own copy of its SFT rows and curriculum (pinned.json: sources and hashes)
    run.lock      one writer at a time

Lineage: every model folder the chain trains (SFT, RL stages, re-distillation) gets the chain's lineage in its card
and ``lineage.json`` (``chain_lineage``: pool, selection, curriculum, solutions table, resolved recipe, run folder;
the card adds the code version). ``training show RUN`` prints the chain.

Where the rest lives: the recipe and its checks in ``training.recipe``, the stages of the plan in
``training.plan``, run state, the one-process-per-step runner and lineage in ``training.chain``, whether a step's
folder is done in ``training.run_folder``. Keep scripts that import this module under
``if __name__ == "__main__":`` (the answer checker's spawn workers re-import the main module).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from curate import io
from curate import schema as S
from curate.progress import status_file
from training import rl, run_folder
from training.chain import (
    RUNNING,
    ChainState,
    Run,
    chain_lineage,
    check_launch,
    open_run,
    pin_data,
    run_lock,
    run_step,
    sft_step,
    stamp_lineage,
)
from training.coscale import coscale_measure, coscale_sft, coscale_solutions, coscale_stages
from training.packaged import model_folder, packaged_name
from training.plan import StagePlan, rl_step_name, sequential_note
from training.recipe import RunRecipe, resolve_path, stage_rl


SUMMARY = "summary.json"
EVALS = "evals"  # per-problem held-out results of every chain step (<step>.parquet)
STOP, CONTINUE = "stop", "continue"


# --------------------------------------------------------------------------------------------------- helpers
def _eval(
    model_dir: Path, run: Run, save_as: str | None = None, others: bool = True, limit: int | None = None
) -> dict[str, Any]:
    """Held-out eval of one model with the recipe's settings; ``save_as`` keeps its per-problem table in
    ``<run>/evals/<save_as>.parquet`` (what ``gain_over_sft`` pairs up); ``others``: also at ``eval.temperatures``
    (each table ``<save_as>@T<t>.parquet``); ``limit``: at most this many problems (default ``eval.limit``, the
    starting model's ``eval.init_limit``)."""
    from training.evaluate import evaluate, heldout_problems

    sec = run.recipe.eval
    if limit is None:
        limit = sec.init_limit if save_as == "init" and sec.init_limit is not None else sec.limit
    heldout = heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=limit)
    result = evaluate(model_dir, heldout, sec.config(limit), progress=True)
    out = {k: result[k] for k in ("pass_at_1", "stderr", "n_problems", "k", "warning") if k in result}
    if save_as is None:
        return out
    _keep_eval(result, run.run_dir / EVALS / eval_file(save_as))
    if others and save_as != "init":  # the other temperatures (a model built from scratch scores 0 at any)
        for temperature in sec.temperatures:
            cfg = dataclasses.replace(sec.config(limit), temperature=temperature)
            other = evaluate(model_dir, heldout, cfg, progress=True)
            _keep_eval(other, run.run_dir / EVALS / eval_file(save_as, temperature))
            out.setdefault("at_temperature", {})[str(temperature)] = {k: other[k] for k in ("pass_at_1", "stderr")}
    return out


def _keep_eval(result: Mapping[str, Any], path: Path) -> None:
    """An evaluation's per-problem table at ``path`` and its samples beside it (``<name>.samples.parquet``)."""
    io.write_parquet(result["per_problem"], path)
    if "samples" in result:
        io.write_parquet(result["samples"], path.with_suffix(".samples.parquet"))


def eval_file(step: str, temperature: float | None = None) -> str:
    """The per-problem table of a step in ``evals/``: ``<step>.parquet`` at the eval temperature, else
    ``<step>@T<temperature>.parquet``."""
    return f"{S.slug(step)}.parquet" if temperature is None else f"{S.slug(step)}@T{temperature:g}.parquet"


def checkpoint_eval(step: str, at: int) -> str:
    """The ``evals/`` name of a stage's checkpoint at its step ``at`` (``rl:stage2`` step 10 -> ``rl_stage2-step10``):
    its per-problem table, for paired comparisons at an early budget."""
    return f"{S.slug(step)}-step{at}"


def gain_over_sft(run: Run) -> dict[str, Any] | None:
    """The last RL model against the SFT model on the same held-out problems (``evaluate.paired_gain``): the
    figure a user asks of the chain, "did RL beat SFT, by how many standard errors?". None without both."""
    import polars as pl

    from training.evaluate import groups, heldout_problems, paired_gain, paired_gain_by

    folder, sec = run.run_dir / EVALS, run.recipe.eval
    rl_steps = [r["step"] for r in run.chain().steps if "rl_steps" in r]
    rl_steps = [step for step in rl_steps if (folder / eval_file(step)).is_file()]
    if not rl_steps or not (folder / "sft.parquet").is_file():
        return None
    grouping = None
    if sec.by:
        grouping = groups(heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=sec.limit), sec.by)

    def pair(temperature: float | None) -> dict[str, Any] | None:
        after, before = folder / eval_file(rl_steps[-1], temperature), folder / eval_file("sft", temperature)
        if not (after.is_file() and before.is_file()):
            return None
        a, b = pl.read_parquet(after), pl.read_parquet(before)
        return {**paired_gain(a, b), **({"by": paired_gain_by(a, b, grouping)} if grouping is not None else {})}

    out = {"after": rl_steps[-1], "before": "sft", "temperature": sec.temperature, **pair(None)}
    others = {str(t): pair(t) for t in sec.temperatures}
    if any(others.values()):
        out["at_temperature"] = {t: g for t, g in others.items() if g}
    return out


def _echo_gain(run: Run, gain: Mapping[str, Any]) -> None:
    """The chain's last lines: RL against SFT on the same held-out problems, at each temperature, per group."""
    at = [(gain["temperature"], gain), *((float(t), g) for t, g in gain.get("at_temperature", {}).items())]
    for temperature, g in at:
        run.echo(f"[chain] {gain['after']} vs sft on the same {g['n_problems']} held-out problems at "
                 f"T={temperature:g}: {g['before_rate']:.3f} -> {g['after_rate']:.3f}, {g['gain']:+.3f} ± "
                 f"{g['stderr']:.3f} (paired SE), z = {g['z']:.1f}")  # fmt: skip
        for group, gg in (g.get("by") or {}).items():
            run.echo(f"[chain]   {run.recipe.eval.by} {group}: {gg['before_rate']:.3f} -> {gg['after_rate']:.3f}, "
                     f"{gg['gain']:+.3f} ± {gg['stderr']:.3f} (n={gg['n_problems']})")  # fmt: skip


def zero_variance(run: Run) -> dict[str, Any]:
    """The waste RL met: the share of zero-variance groups the trainer observed over every RL step of the run
    (``1 - kept_group_frac``, step by step, weighted by groups), beside ``measure``'s forecast for the selection
    (``curate.score.forecast``; None without ``measure``)."""
    import polars as pl

    note = run.chain().note("measure", "sft") or {}
    forecast = ((note.get("select") or {}).get("zero_variance_forecast") or {}).get("selection")
    kept = groups = 0.0
    for rec in run.chain().steps:
        path = Path(rec.get("stage_dir", "")) / "metrics.parquet"
        if "stage_dir" in rec and path.is_file():
            m = pl.read_parquet(path)
            if "kept_group_frac" in m.columns:
                n = json.loads((Path(rec["stage_dir"]) / "config.json").read_text())["rl"]["prompts_per_step"]
                kept += float(m["kept_group_frac"].fill_null(0.0).sum()) * n
                groups += m.height * n
    observed = round(1.0 - kept / groups, 4) if groups else None
    return {"forecast": forecast if forecast and forecast.get("share") is not None else None,
            "observed": observed, "groups": int(groups)}  # fmt: skip


def stage_dir(run: Run, stage: StagePlan, iteration: int = 0) -> Path:
    """``rl/NN-<stage>`` in the first pass, ``rl/itN-NN-<stage>`` in CoScale iteration N."""
    return run.run_dir / "rl" / (f"it{iteration}-{stage.folder}" if iteration else stage.folder)


# --------------------------------------------------------------------------------------------------- steps
def curation_pinned(run: Run) -> bool:
    """Whether the run's curated data is pinned: once training has started (``init_model`` recorded the lineage),
    curation is not run again for this run. Training writes its rollouts into the pool's ledger, which changes the
    scores, the selection and the curriculum shards a re-run of curation would produce, and an RL stage resumed
    on a different shard is refused (``training.rl``); a new run (another ``name``) curates afresh."""
    return run.chain().lineage is not None


def curation(run: Run) -> list[dict[str, Any]]:
    """The curate recipe's stages (``curate.pipeline.run_recipe``), each skipped when its manifest is up to date;
    nothing once the run's curation is pinned (``curation_pinned``)."""
    from curate import pipeline

    if run.recipe.curate is None:
        return []
    if curation_pinned(run):
        run.echo("[chain] curation: pinned (this run has started training; a run with a new name re-curates)")
        return []
    t0 = time.perf_counter()
    results = pipeline.run_recipe(run.recipe.curate, run.ws)
    ran = [r.stage for r in results if not r.skipped]
    run.echo(f"[chain] curation: {len(results)} stage(s), ran {ran or 'none (up to date)'} "
             f"[{time.perf_counter() - t0:.0f} s]")  # fmt: skip
    return [json.loads(json.dumps(r.to_dict(), default=str)) for r in results]


def init_model(run: Run) -> ChainState:
    """The starting model: built (``tiny``, skipped when its card exists), converted (``package:<name>``, cached
    in the workspace) or resolved (folder / hub name)."""
    recipe = run.recipe
    # from here on the run reads only its own copies of the SFT rows and the curriculum (``measure`` builds the
    # curriculum after SFT and pins it then)
    pin_data(run, ("sft",) if recipe.measure is not None else ("sft", "curriculum", "train"))
    run.chain().set_lineage(chain_lineage(run))
    t0 = time.perf_counter()
    if recipe.model == "tiny":
        from training.card import CARD
        from training.tiny import init_tiny

        init_dir = run.run_dir / "init"
        if not (init_dir / CARD).is_file():
            init_tiny(init_dir, recipe.tiny)
        model = str(init_dir)
    elif packaged_name(recipe.model):  # a model shipped in a PyPI package, converted once into the workspace cache
        model = str(model_folder(run.ws, packaged_name(recipe.model)))
    else:
        model = start_model(run)
    pending = None
    if Path(model).exists():  # a hub model is not evaluated before training
        pending = {"step": "init", "model": model, "wall_s": time.perf_counter() - t0}
    return ChainState(model=model, initial=model, pending=pending)


def start_model(run: Run) -> str:
    """The recipe's ``model`` as the chain loads it: a folder (relative to the workspace or where you run), checked
    (``run_folder.check_model``: a damaged ``config.json`` or weights is one line, before curation), or a hub id."""
    local = resolve_path(run.ws, run.recipe.model)
    return run_folder.check_model(local if local.exists() else run.recipe.model)


def sft(run: Run, state: ChainState) -> ChainState:
    """SFT of the current model on the recipe's ``sft.data`` (skipped when ``sft/`` holds a finished run)."""
    if run.recipe.sft is None:
        return state
    data = run.pinned("sft") or resolve_path(run.ws, run.recipe.sft.data)
    return sft_step(run, state, "sft", run.run_dir / "sft", data)


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
    if run.recipe.measure is None or chain.note("measure", "sft") is not None:
        return state
    t0 = time.perf_counter()
    name = measured_name(run)
    ledger_model = run.measured_model(state.model)
    record: dict[str, Any] = {"model": state.model, "ledger_model": ledger_model, "curriculum": name}
    sections = measure_sections(run.recipe, ledger_model, name)

    def run_curate(stage: str) -> None:
        crecipe = curate_recipe(run.recipe, stage, sections[stage])
        result = pipeline.run_stage(stage, run.ws, crecipe, progress=True).to_dict()  # the rollout's progress line
        record[stage] = json.loads(json.dumps(result.get("summary") or {}, default=str))
        run.echo(f"[chain] measure: {stage} [{result['wall_s']:.0f} s]")

    run_curate("rollout")
    with run.ws.lock("pool", run.recipe.pool):  # the pool's scores table is shared: no other run scores meanwhile
        for stage in ("score", "select", "curriculum"):
            run_curate(stage)
    from curate.score.forecast import describe

    for part, fc in (record["select"].get("zero_variance_forecast") or {}).items():
        run.echo(f"[chain] measure: zero-variance groups forecast for the {part}: {describe(fc)}")
    for warning in record["select"].get("warnings") or []:  # e.g. a selection of prompts it never measured
        run.echo(f"[chain] measure: warning: {warning}")
    pinned = pin_data(run, ("curriculum",))
    chain.note("measure", "sft", {**record, "wall_s": round(time.perf_counter() - t0, 1), "pinned": pinned})
    chain.set_lineage(chain_lineage(run))  # now naming the measured curriculum
    return state


def rl_stage(run: Run, state: ChainState, stage: StagePlan) -> ChainState:
    """One RL stage from the current model (skipped when its ``summary.json`` exists; resumes from its last
    checkpoint otherwise); its final model gets the chain's lineage."""
    recipe = run.recipe
    folder = stage_dir(run, stage, state.iteration)
    t0 = time.perf_counter()
    lineage = chain_lineage(run, state.iteration)
    if run_folder.finished(folder, rl.SUMMARY) is None:
        ledger = {"ledger_model": stage.rl.ledger_model or run.ledger_model(folder)}  # unique per run
        cfg = stage_rl(stage.rl, ledger, where=f"stages.{stage.name}")
        follows_rl = state.last_stage is not None and state.model == str(Path(state.last_stage) / "final")
        carried = Path(state.last_stage) / rl.OPTIMIZER if cfg.carry_optimizer and follows_rl else None
        run_step({
            "kind": "rl", "out": str(folder), "model": state.model, "train": str(stage.shard), "config": cfg.to_dict(),
            "home": str(run.ws.root), "pool": recipe.pool, "lineage": lineage,
            "optimizer_from": str(carried) if carried else None,
        }, recipe.launch)  # fmt: skip
    stamp_lineage(folder / "final", lineage)  # no-op when the step wrote it
    compute = run_folder.stage_compute(folder)
    steps = max(compute, default=0)
    pending = {
        "step": rl_step_name(stage, state.iteration), "model": str(folder / "final"), "kind": "rl",
        "stage_dir": str(folder), "wall_s": time.perf_counter() - t0, "rl_steps": steps,
        "offset_step": state.offset_step, "offset_compute": state.offset_compute,
        "compute": state.offset_compute + compute.get(steps, 0),
        "eval_compute": state.offset_compute + compute.get(steps, steps),
    }  # fmt: skip
    return dataclasses.replace(
        state, model=str(folder / "final"), last_stage=str(folder), pending=pending,
        offset_step=state.offset_step + steps, offset_compute=state.offset_compute + compute.get(steps, float(steps)),
    )  # fmt: skip


def redistill(run: Run, state: ChainState) -> ChainState:
    """Re-distillation of the starting model on the last RL stage's correct rollouts (``redistill`` recipe key)."""
    recipe = run.recipe
    if recipe.redistill is None or state.last_stage is None:
        return state
    rd_dir = run.run_dir / "redistill"
    t0 = time.perf_counter()
    lineage = chain_lineage(run, state.iteration)
    from curate.rollout import ledger as rollout_ledger
    from training.sft import METRICS

    if run_folder.finished(rd_dir, METRICS) is None:
        last = Path(state.last_stage)
        ledger_model = json.loads((last / "config.json").read_text()).get("ledger_model") or last.name
        run_step({
            "kind": "redistill", "out": str(rd_dir), "model": state.initial,
            "ledger": str(rollout_ledger.folder(run.ws, recipe.pool, ledger_model)),
            "problems": str(run.ws.table(recipe.pool, "problems")),
            "config": dataclasses.asdict(recipe.redistill), "lineage": lineage,
        }, recipe.launch)  # fmt: skip
    stamp_lineage(rd_dir / "final", lineage)
    pending = {"step": "redistill", "model": str(rd_dir / "final"), "wall_s": time.perf_counter() - t0}
    return dataclasses.replace(state, pending=pending)  # the policy stays the RL model; this one is a by-product


def evaluate_model(run: Run, state: ChainState) -> ChainState:
    """Held-out pass@1 of the model the previous step trained (and of an RL stage's checkpoints, ``eval.every``);
    one ``chain.json`` record; skipped when the record exists."""
    from training.evaluate import append_eval

    p = state.pending
    if p is None:
        return state
    state = dataclasses.replace(state, pending=None)
    chain = run.chain()
    if chain.get(p["step"]) is not None:
        return state
    t0 = time.perf_counter()
    is_rl = p.get("kind") == "rl"
    if is_rl and run.recipe.eval.every:
        folder = Path(p["stage_dir"])
        compute = run_folder.stage_compute(folder)
        every_limit = run.recipe.eval.every_limit if run.recipe.eval.every_limit is not None else run.recipe.eval.limit
        for ckpt in run_folder.checkpoints(folder / run_folder.CHECKPOINTS):
            step = run_folder.checkpoint_step(ckpt)
            if step >= p["rl_steps"]:
                continue
            ev = _eval(ckpt, run, save_as=checkpoint_eval(p["step"], step), others=False, limit=every_limit)
            append_eval(run.run_dir, p["offset_step"] + step, p["offset_compute"] + compute.get(step, step), ev)
            run.echo(f"[chain]   {p['step']} step {step}: pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f}")
    # ``eval.temperatures`` where the chain's comparison reads them: every step but an RL stage a later one follows
    # (the SFT model and the last stage are what ``gain_over_sft`` pairs; a pass ``decide`` stops early has none)
    followed = is_rl and p["step"] != rl_step_name(run.stages()[-1], state.iteration)
    ev = _eval(Path(p["model"]), run, save_as=p["step"], others=not followed)
    extra = {k: p[k] for k in ("rl_steps", "compute", "stage_dir", "offset_step", "offset_compute") if k in p}
    rec = {"step": p["step"], "model": p["model"], "wall_s": round(p["wall_s"] + time.perf_counter() - t0, 1),
           **ev, **extra}  # fmt: skip
    chain.put(rec)
    _card_evaluation(run, p, ev)
    if is_rl:
        append_eval(run.run_dir, p["offset_step"] + p["rl_steps"], p["eval_compute"], rec)
    run.echo(f"[chain] {p['step']:<24} held-out pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f} "
             f"(n={ev['n_problems']}, k={ev['k']})  [{rec['wall_s']:.0f} s]")  # fmt: skip
    return state


# --------------------------------------------------------------------------------------------------- decisions
def _card_evaluation(run: Run, pending: Mapping[str, Any], ev: Mapping[str, Any]) -> None:
    """The held-out result in the evaluated model's card (model-index) and ``lineage.json``: models in this run's
    folder only (a starting model borrowed from elsewhere, e.g. another run's ``sft/final``, is left as it is)."""
    from training.card import LINEAGE, record_evaluation

    model = Path(pending["model"])
    if (model / LINEAGE).is_file() and model.resolve().is_relative_to(run.run_dir.resolve()):  # its own models only
        sec = run.recipe.eval
        result = {k: ev[k] for k in ("pass_at_1", "stderr", "n_problems", "k")}
        how = {"temperature": sec.temperature, "max_new_tokens": sec.max_new_tokens, "split": sec.split}
        record_evaluation(model, {**result, **how, "dataset": run.recipe.pool, "step": pending["step"]})


def decision(fit: Mapping[str, Any] | None, pass_now: float, margin: float) -> dict[str, Any]:
    """The stop/continue rule (pure; see the module docstring). ``fit`` is ``Fit.to_dict()`` or None (no fit)."""
    if not fit:
        return {"action": CONTINUE, "reason": "no sigmoid fit yet (too few evaluations)", "pass_at_1": pass_now}
    a = float(fit["A"])
    gap = a - pass_now
    out = {"A": a, "pass_at_1": pass_now, "gap": gap, "margin": margin}
    if not fit.get("band") or "A" in (fit.get("band_at_edge") or []):  # no band: 3 points, the curve hits them all
        return {**out, "action": CONTINUE, "reason": f"A={a:.3f} is not pinned down (no band, or it reaches the edge)"}
    if gap <= margin:
        return {**out, "action": STOP, "reason": f"A={a:.3f} is within {margin:g} of the pass rate {pass_now:.3f}"}
    return {**out, "action": CONTINUE, "reason": f"A={a:.3f} is {gap:.3f} above the pass rate {pass_now:.3f}"}


def decide(run: Run, state: ChainState, after: str) -> dict[str, Any]:
    """Fit the eval curve up to the current step and apply ``decision``; recorded in ``chain.json`` (a re-run reads
    the recorded decision, so a resumed chain takes the same path)."""
    import polars as pl

    from training.evaluate import read_eval
    from training.scaling import fit_sigmoid

    chain = run.chain()
    done = chain.note("decisions", after)
    if done is not None:
        return done
    margin = run.recipe.decide.stop_margin if run.recipe.decide else 0.0
    curve = read_eval(run.run_dir).filter(pl.col("step") <= state.offset_step)
    pass_now = float(chain.get(after)["pass_at_1"])
    try:
        fit = fit_sigmoid(curve["compute"], curve["pass_at_1"], run.recipe.fit).to_dict()
        fit = {k: fit[k] for k in ("A", "B", "C_mid", "R0", "band", "band_at_edge", "n_fit", "warnings")}
    except (ValueError, RuntimeError) as exc:
        fit = None
        run.echo(f"[chain] decide after {after}: no fit ({exc})")
    rec = chain.note("decisions", after, {**decision(fit, pass_now, margin), "after": after, "points": curve.height,
                                          "fit": fit})  # fmt: skip
    run.echo(f"[chain] decide after {after}: {rec['action']} ({rec['reason']})")
    return rec


# --------------------------------------------------------------------------------------------------- fit + summary
def _chain_metrics(run: Run) -> Path | None:
    """Every RL stage's metrics.parquet on one step (and token) axis, offset by the stages before, with a ``stage``
    column: ``<run>/metrics.parquet``, the learning curves of the whole chain."""
    import polars as pl

    frames = []
    for rec in sorted((s for s in run.chain().steps if "stage_dir" in s), key=lambda s: s["offset_step"]):
        path = Path(rec["stage_dir"]) / "metrics.parquet"
        if path.is_file():
            df = pl.read_parquet(path)
            df = df.with_columns(pl.col("step") + rec["offset_step"], pl.lit(rec["step"]).alias("stage"))
            if "tokens" in df.columns:  # cumulative over the run, as the eval curve's compute axis
                df = df.with_columns(pl.col("tokens") + rec.get("offset_compute", 0.0))
            frames.append(df)
    if not frames:
        return None
    return io.write_parquet(pl.concat(frames, how="diagonal_relaxed").sort("step"), run.run_dir / "metrics.parquet")


def fit_and_plot(run: Run, state: ChainState) -> dict[str, Any]:
    """The sigmoid fit of the whole eval curve (``fit.json``, ``fit.png`` with its extrapolation), the learning
    curves of every RL stage (``training.png``) and the eval curve (``eval.png``). Recomputed on every call (about
    a second): its inputs grow with the run."""
    from training.plots import fit_run, plot_eval, plot_plan, plot_training

    out: dict[str, Any] = {}
    _chain_metrics(run)
    drawn = (plot_training(run.run_dir), plot_eval(run.run_dir), plot_plan(run.run_dir))
    figures = [p for p in drawn if p is not None]
    if (run.run_dir / "eval.parquet").is_file():
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
    """``summary.json``: the run folder, every step, the lineage, decisions, fit, figures (and ``extra``)."""
    chain = run.chain()
    summary: dict[str, Any] = {
        "run_dir": str(run.run_dir),
        "name": run.recipe.name,
        "pool": run.recipe.pool,
        "home": str(run.ws.root),
        "steps": chain.steps,
        "lineage": chain.lineage or chain_lineage(run),
        "decisions": chain.notes.get("decisions", []),
        "coscale": chain.notes.get("coscale", []),
        "final_model": state.model if state is not None else None,
        **dict(fit or {}),
        **dict(extra or {}),
    }
    summary = json.loads(json.dumps(summary, default=str))
    io.write_json(run.run_dir / SUMMARY, summary)
    return summary


# --------------------------------------------------------------------------------------------------- the chain
Call = Callable[..., Any]


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of its finished child processes (a step's own process,
    the checker's workers): what a step costs on a shared machine, where wall time moves with the load."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def direct(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """The default ``call`` of ``run_chain``: run the step here."""
    return fn(*args)


def run_chain(
    recipe: RunRecipe,
    *,
    home: str | Path | None = None,
    out: Path | None = None,
    echo: Callable[[str], None] = print,
    call: Call = direct,
    curate: bool = True,
    lock_timeout: float | None = None,
) -> dict[str, Any]:
    """Run (or resume) the whole chain of ``recipe``; returns the summary (also in ``summary.json``).

    call: ``call(name, fn, *args)`` runs one step (default: here; the Prefect flow makes it a task). curate: run
    the curation step (the flow runs it as its own subflow and passes False). lock_timeout: seconds to wait for the
    run folder's lock and the workspace's (``--lock-timeout``; None: ``$CURATE_LOCK_TIMEOUT``, else 600).
    ``timings`` in the summary: per step, ``wall_s`` inside the step function, ``call_s`` around ``call`` (the
    difference is the caller's overhead) and ``cpu_s``, the CPU it took (``cpu_seconds``; under the Prefect flow,
    what this process and its children took).
    """
    check_launch(recipe)
    run = open_run(recipe, home, out, echo)
    if lock_timeout is not None:  # curation and ``measure`` take the workspace's locks with it too
        run = dataclasses.replace(run, ws=dataclasses.replace(run.ws, lock_timeout=lock_timeout))
    return run_opened(run, call=call, curate=curate, lock_timeout=lock_timeout)


def run_opened(
    run: Run, *, call: Call = direct, curate: bool = True, lock_timeout: float | None = None
) -> dict[str, Any]:
    """``run_chain`` in a run folder already opened (``training.chain.open_run``, after ``check_launch``): the
    Prefect flow opens it once for its curation and training parts. Holds the run folder's lock throughout."""
    with run_lock(run, lock_timeout):
        return _run_steps(run, call, curate)


def _echo_zero_variance(run: Run, waste: Mapping[str, Any]) -> None:
    """The run's zero-variance line: ``measure``'s forecast beside what RL met (nothing before any RL group)."""
    if waste["observed"] is None:
        return
    forecast = waste["forecast"]
    said = f"forecast {forecast['share']:.3f} ± {forecast['stderr']:.3f} (measure), " if forecast else ""
    run.echo(f"[chain] zero-variance groups: {said}observed {waste['observed']:.3f} over {waste['groups']} RL groups")


def _rl_passes(run: Run, step: Call, state: ChainState) -> ChainState:
    """The RL stages in order (the run's pinned curriculum), each evaluated and, with ``decide``, decided on; then
    CoScale iterations while ``decide.coscale_iterations`` allows."""
    recipe = run.recipe
    stages = run.stages()
    if note := sequential_note(stages):
        run.echo(f"[chain] note: {note}")
    while True:
        for stage in stages if state.iteration == 0 else coscale_stages(run, state):
            name = rl_step_name(stage, state.iteration)
            state = step(name, rl_stage, run, state, stage)
            state = step(f"eval {name}", evaluate_model, run, state)
            if recipe.decide is not None and step(f"decide {name}", decide, run, state, name)["action"] == STOP:
                break
        if recipe.decide is None or state.iteration >= recipe.decide.coscale_iterations:
            return state
        state = step(f"it{state.iteration + 1}:measure", coscale_measure, run, state)
        state = step(f"it{state.iteration}:solutions", coscale_solutions, run, state)
        state = step(f"it{state.iteration}:sft", coscale_sft, run, state)
        state = step(f"eval it{state.iteration}:sft", evaluate_model, run, state)


def _run_steps(run: Run, call: Call, curate: bool) -> dict[str, Any]:
    """The order of the steps (``run_opened`` holds the run folder's lock around it)."""
    recipe = run.recipe
    t_run = time.perf_counter()
    timings: list[dict[str, Any]] = []

    def step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        inner: dict[str, float] = {}

        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                inner["wall_s"] = time.perf_counter() - t

        t0, c0 = time.perf_counter(), cpu_seconds()
        with status_file(run.run_dir / RUNNING, step=name):  # what ``training show`` says while it runs
            result = call(name, timed, *args)
        timings.append({"step": name, "wall_s": round(inner.get("wall_s", 0.0), 3),
                        "call_s": round(time.perf_counter() - t0, 3),
                        "cpu_s": round(cpu_seconds() - c0, 1)})  # fmt: skip
        return result

    # 1. curation (a damaged starting model fails first)
    if recipe.model != "tiny":
        start_model(run)
    if curate and recipe.curate is not None:
        step("curation", curation, run)
    from training.evaluate import heldout_problems

    heldout_problems(run.ws, recipe.pool, split=recipe.eval.split, limit=recipe.eval.limit)  # fails before training
    if recipe.measure is None:
        run.stages()  # validated before any model work (with ``measure`` the curriculum is built after SFT)

    # 2. the starting model, 3. SFT, the SFT model's own pass rates over the RL candidates
    state = step("init", init_model, run)
    state = step("eval init", evaluate_model, run, state)
    if recipe.sft is not None:
        state = step("sft", sft, run, state)
        state = step("eval sft", evaluate_model, run, state)
    if recipe.measure is not None:
        state = step("measure", measure, run, state)

    # 4. RL stages, each evaluated and (with ``decide``) decided on; then CoScale iterations
    state = _rl_passes(run, step, state)

    # 5. re-distillation of the starting model on the last stage's correct rollouts
    if recipe.redistill is not None:
        state = step("redistill", redistill, run, state)
        state = step("eval redistill", evaluate_model, run, state)

    # 6. fit and figures, 7. summary
    fit = step("fit", fit_and_plot, run, state)
    gain = gain_over_sft(run)
    if gain is not None:
        _echo_gain(run, gain)
    waste = zero_variance(run)
    _echo_zero_variance(run, waste)
    wall = round(time.perf_counter() - t_run, 1)
    extra = {"wall_s": wall, "timings": timings, "gain_over_sft": gain, "zero_variance": waste}
    return step("summary", write_summary, run, state, fit, extra)
