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
   ``eval.every`` steps are evaluated after the stage. With ``groups: parallel`` (a ``bands`` plan's default) each
   stage starts from the pass's starting model instead and the groups so far are merged after each; with
   ``rl.ladder`` (a ``bands`` plan's ``stop_rule``) a stage whose training reward plateaus continues as its next
   rung with N doubled, lr/N kept (``training.groups``, ``training.ladder``);
   With ``rft``, iterated rejection-sampling fine-tuning on those stages' prompts instead (``training.rft``);
5. ``evaluate_model`` after every training step (pass@1 as mean@k with its standard error, ``split: test`` only;
   also at ``eval.temperatures``), the result in the model's card;
6. ``decide`` after every RL stage when the recipe has ``decide`` (below);
7. ``redistill`` (optional ``redistill``): SFT of the starting model on the last stage's correct RL rollouts;
8. ``fit_and_plot``: the ScaleRL sigmoid fit over (compute, pass rate) of the RL steps, its advice and figures;
9. ``write_summary``: ``summary.json``, with RL's paired gain over SFT and the zero-variance waste (``report``).

Steps 8 and 9, and what a run bought (the evals' tables, the paired gain, the waste, the chain's metrics), live in
``training.outcome``, which the Prefect flow and the benchmarks read a run through.

Every step takes a ``Run`` (recipe, workspace, run folder) first. The training steps (``sft``, ``choose``, ``measure``,
``rl_stage``, ``merge_groups``, ``evaluate_model``, the CoScale steps, ``redistill``, ...) also take the ``ChainState``
the previous step returned (the current model, RL step and compute offsets, the model waiting for its evaluation), some
with arguments of their own (``rl_stage`` its stage), and return the next state. The others return what they found
instead: ``curation`` (the run alone) its stages' results, ``init_model`` (the run alone) the first state,
``next_rung`` the next rung of a stage or None, ``decide`` its decision, ``fit_and_plot`` the fit and ``write_summary``
the summary. ``run_chain`` calls them in order through a ``call(name, fn, *args)`` hook: by default a plain call; the
Prefect flow (``flows/training.py``) passes one that runs each call as a task, so the CLI and the flow run the same
steps and the same control flow. What is done is read back from the run folder (``chain.json``, each training step's
own completion file), never from the caller, so a re-run after a failure resumes at the failed step (an RL stage from
its last checkpoint, ``training.rl``).

The decision (recipe key ``decide``, ``DecideSection``): after each RL stage's evaluation the sigmoid is fitted to
the eval curve so far (every RL evaluation of the run, cumulative compute). The chain **stops** the current pass
when the fitted asymptote A is pinned down (it has an error band, which takes at least four points, and the band
does not reach the grid edge) and lies within ``stop_margin``
of the pass rate just measured: more compute on the same data buys almost nothing. Otherwise (no fit yet, A not
pinned down, or A above the current pass rate by more than the margin) it **continues** with the next stage. When
a pass ends (all stages, or a stop), a **CoScale iteration** follows while ``coscale_iterations`` allows
(CoScale-RL §2.2, one iteration = re-measure, scale data, RL again: ``training.coscale``).

The run folder (``runs/<name>`` under the workspace unless ``--out``): its one picture, every name in it and the
step names are in ``training.layout``. summary.json's ``gain_over_sft`` pairs the last RL model with the SFT model
on their ``evals/`` tables (gain, paired SE, z, per ``eval.by`` group and temperature).

Lineage: every model folder the chain trains (SFT, RL stages, re-distillation) gets the chain's lineage in its card
and ``lineage.json`` (``chain_lineage``: pool, selection, curriculum, solutions table, resolved recipe, run folder;
the card adds the code version). ``training show RUN`` prints the chain.

Where the rest lives: the recipe and its checks in ``training.recipe``, the stages of the plan in
``training.plan``, what the run bought in ``training.outcome``, run state, the one-process-per-step runner and
lineage in ``training.chain``, whether a step's folder is done in ``training.run_folder``. Keep scripts that import
this module under ``if __name__ == "__main__":`` (the answer checker's spawn workers re-import the main module).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from curate import io
from curate.progress import status_file
from training import layout, rl, run_folder
from training.chain import ChainState, Run, chain_lineage, check_launch, open_run, pin_data, run_lock, sft_step
from training.choose import choose_sft
from training.coscale import coscale_measure, coscale_sft, coscale_solutions, coscale_stages
from training.groups import PARALLEL, from_base, group_mode, group_record, merge_groups, merge_name, next_rung
from training.measure import forecast_waste, measure
from training.outcome import checkpoint_eval, fit_and_plot, keep_eval, report, write_summary
from training.packaged import model_folder, packaged_name
from training.plan import (
    StagePlan,
    context_fit,
    fit_lines,
    measured_answers,
    reference_answers,
    rl_step_name,
    sequential_note,
    stage_ids,
)
from training.recipe import RunRecipe, resolve_path, stage_rl
from training.rft import rft_rounds
from training.step import RUNNING, run_step, stamp_lineage


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
        limit = sec.init_limit if save_as == layout.INIT and sec.init_limit is not None else sec.limit
    heldout = heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=limit, sources=sec.sources)
    result = evaluate(model_dir, heldout, sec.config(limit), progress=True)
    out = {k: result[k] for k in ("pass_at_1", "stderr", "n_problems", "k", "warning", "sampler") if k in result}
    if save_as is None:
        return out
    keep_eval(run.run_dir, save_as, result)
    start = run.recipe.sft is None and run.recipe.model != "tiny"  # a start SFT'd elsewhere: RL's baseline
    if others and (save_as != layout.INIT or start):  # at other temperatures (a from-scratch model scores 0 at any)
        for temperature in sec.temperatures:
            cfg = dataclasses.replace(sec.config(limit), temperature=temperature)
            other = evaluate(model_dir, heldout, cfg, progress=True)
            keep_eval(run.run_dir, save_as, other, temperature)
            out.setdefault("at_temperature", {})[str(temperature)] = {k: other[k] for k in ("pass_at_1", "stderr")}
    return out


def stage_dir(run: Run, stage: StagePlan, iteration: int = 0) -> Path:
    """``rl/NN-<stage>`` in the first pass, ``rl/itN-NN-<stage>`` in CoScale iteration N."""
    return layout.stage_dir(run.run_dir, stage.folder, iteration)


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
    return [io.jsonable(r.to_dict()) for r in results]


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

        init_dir = run.run_dir / layout.INIT
        if not (init_dir / CARD).is_file():
            init_tiny(init_dir, recipe.tiny)
        model = str(init_dir)
    elif packaged_name(recipe.model):  # a model shipped in a PyPI package, converted once into the workspace cache
        model = str(model_folder(run.ws, packaged_name(recipe.model)))
    else:
        model = start_model(run)
    pending = None
    if Path(model).exists():  # a hub model is not evaluated before training
        pending = {"step": layout.INIT, "model": model, "wall_s": time.perf_counter() - t0}
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
    return sft_step(run, state, layout.SFT, run.run_dir / layout.SFT, data, early_stop=True)


def choose(run: Run, state: ChainState) -> ChainState:
    """With ``sft.validation``, the SFT model is its best checkpoint on the validation split (``training.choose``;
    its own step, so its evaluations are not counted as SFT's compute)."""
    return choose_sft(run, state, run.run_dir / layout.SFT)


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
        follows_rl = state.last_stage is not None and state.model == str(layout.final(state.last_stage))
        carried = Path(state.last_stage) / rl.OPTIMIZER if cfg.carry_optimizer and follows_rl else None
        if stage.resume:  # a rung of the rollout ladder: exactly where the previous rung stopped, Adam included
            carried = Path(stage.resume) / rl.OPTIMIZER
        run_step({
            "kind": "rl", "out": str(folder), "model": state.model, "train": str(stage.shard), "config": cfg.to_dict(),
            "home": str(run.ws.root), "pool": recipe.pool, "lineage": lineage,
            "optimizer_from": str(carried) if carried else None, "continue_from": stage.resume,
        }, recipe.launch)  # fmt: skip
    stamp_lineage(layout.final(folder), lineage)  # no-op when the step wrote it
    compute = run_folder.stage_compute(folder)
    steps = max(compute, default=0)
    pending = {
        "step": rl_step_name(stage, state.iteration), "model": str(layout.final(folder)), "kind": "rl",
        "stage_dir": str(folder), "wall_s": time.perf_counter() - t0, "rl_steps": steps,
        "offset_step": state.offset_step, "offset_compute": state.offset_compute,
        "compute": state.offset_compute + compute.get(steps, 0),
        "eval_compute": state.offset_compute + compute.get(steps, steps),
    }  # fmt: skip
    return dataclasses.replace(
        state, model=str(layout.final(folder)), last_stage=str(folder), pending=pending,
        offset_step=state.offset_step + steps, offset_compute=state.offset_compute + compute.get(steps, float(steps)),
    )  # fmt: skip


def redistill(run: Run, state: ChainState) -> ChainState:
    """Re-distillation of the starting model on the last RL stage's correct rollouts (``redistill`` recipe key)."""
    recipe = run.recipe
    if recipe.redistill is None or state.last_stage is None:
        return state
    rd_dir = run.run_dir / layout.REDISTILL
    t0 = time.perf_counter()
    lineage = chain_lineage(run, state.iteration)
    from curate.rollout import ledger as rollout_ledger
    from training.sft import METRICS

    if run_folder.finished(rd_dir, METRICS) is None:
        last = Path(state.last_stage)
        ledger_model = rl.read_config(last).identity.get("ledger_model") or last.name
        run_step({
            "kind": "redistill", "out": str(rd_dir), "model": state.initial,
            "ledger": str(rollout_ledger.folder(run.ws, recipe.pool, ledger_model)),
            "problems": str(run.ws.table(recipe.pool, "problems")),
            "config": dataclasses.asdict(recipe.redistill), "lineage": lineage,
        }, recipe.launch)  # fmt: skip
    stamp_lineage(layout.final(rd_dir), lineage)
    pending = {"step": layout.REDISTILL, "model": str(layout.final(rd_dir)), "wall_s": time.perf_counter() - t0}
    return dataclasses.replace(state, pending=pending)  # the policy stays the RL model; this one is a by-product


def evaluate_model(run: Run, state: ChainState, last: bool = True, curve: bool = True) -> ChainState:
    """Held-out pass@1 of the model the previous step trained (and of an RL stage's checkpoints, ``eval.every``);
    one ``chain.json`` record; skipped when the record exists (a rerun prints the recorded line, marked done, so
    every step reports). ``last``: False for an RL stage (or merge) a later one of the pass follows (``_rl_pass``
    knows): it is not evaluated at ``eval.temperatures``. ``curve``: False for a model that is not the pass's (a
    later parallel group's own, ``training.groups``): recorded, but not on the eval curve, checkpoints unevaluated."""
    from training.evaluate import append_eval

    p = state.pending
    if p is None:
        return state
    state = dataclasses.replace(state, pending=None)
    chain = run.chain()
    if (done := chain.get(p["step"])) is not None:
        _echo_heldout(run, done, " (done)")
        return state
    t0 = time.perf_counter()
    is_rl, on_curve = p.get("kind") == "rl", curve and "eval_compute" in p  # an RL stage's model or a merge
    if is_rl and curve and run.recipe.eval.every:
        folder = Path(p["stage_dir"])
        compute = run_folder.stage_compute(folder)
        every_limit = run.recipe.eval.every_limit if run.recipe.eval.every_limit is not None else run.recipe.eval.limit
        for ckpt in run_folder.checkpoints(folder / run_folder.CHECKPOINTS):
            step = run_folder.checkpoint_step(ckpt)
            if step >= p["rl_steps"]:
                continue
            others = run.recipe.eval.every_temperatures
            ev = _eval(ckpt, run, save_as=checkpoint_eval(p["step"], step), others=others, limit=every_limit)
            append_eval(run.run_dir, p["offset_step"] + step, p["offset_compute"] + compute.get(step, step), ev)
            run.echo(f"[chain]   {p['step']} step {step}: pass@1 = {ev['pass_at_1']:.3f} ± {ev['stderr']:.3f}")
    # ``eval.temperatures`` where the chain's comparison reads them: every step but an RL stage a later one follows
    # (the SFT model and the last stage are what ``gain_over_sft`` pairs; a pass ``decide`` stops early has none)
    ev = _eval(Path(p["model"]), run, save_as=p["step"], others=last or "eval_compute" not in p)
    extra = {k: p[k] for k in ("rl_steps", "compute", "stage_dir", "offset_step", "offset_compute") if k in p}
    rec = {"step": p["step"], "model": p["model"], "wall_s": round(p["wall_s"] + time.perf_counter() - t0, 1),
           **ev, **extra, **({} if curve else {"curve": False})}  # fmt: skip
    chain.put(rec)
    _card_evaluation(run, p, ev)
    if on_curve:
        append_eval(run.run_dir, p["offset_step"] + p["rl_steps"], p["eval_compute"], rec)
    _echo_heldout(run, rec)
    return state


def _echo_heldout(run: Run, rec: Mapping[str, Any], note: str = "") -> None:
    """A step's held-out line: ``[chain] sft   held-out pass@1 = 0.631 ± 0.027 (n=300, k=4)  [359 s]``."""
    run.echo(f"[chain] {rec['step']:<24} held-out pass@1 = {rec['pass_at_1']:.3f} ± {rec['stderr']:.3f} "
             f"(n={rec['n_problems']}, k={rec['k']})  [{rec['wall_s']:.0f} s]{note}")  # fmt: skip


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
    done = chain.note(layout.DECISIONS, after)
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
    rec = chain.note(layout.DECISIONS, after, {**decision(fit, pass_now, margin), "after": after,
                                               "points": curve.height, "fit": fit})  # fmt: skip
    run.echo(f"[chain] decide after {after}: {rec['action']} ({rec['reason']})")
    return rec


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
    what this process and its children took), each summed over every invocation of the run (``add_timing``).
    """
    check_launch(recipe)
    run = open_run(recipe, home, out, echo)
    if lock_timeout is not None:  # curation and ``measure`` take the workspace's locks with it too
        run = dataclasses.replace(run, ws=dataclasses.replace(run.ws, lock_timeout=lock_timeout))
    return run_opened(run, call=call, curate=curate, lock_timeout=lock_timeout)


def add_timing(run: Run, name: str, now: dict[str, float]) -> dict[str, Any]:
    """A step's cost over every invocation of the run: this one's ``wall_s``, ``call_s`` and ``cpu_s`` added to what
    the chain's ``timings`` note holds for the step, and written back. A resumed run's summary then says what its
    steps cost in all (a step done in an earlier invocation adds ~0 here), where it once said 0 for every step done
    before the resume (bench_curation's equal-CPU baselines divided by that 0). A step killed before it ended adds
    nothing: its CPU up to the kill is not counted."""
    chain = run.chain()
    before = chain.note(layout.TIMINGS, name) or {}
    total = {k: round(float(before.get(k, 0.0)) + v, 3 if k != "cpu_s" else 1) for k, v in now.items()}
    total["invocations"] = int(before.get("invocations", 0)) + 1
    chain.note(layout.TIMINGS, name, total)
    return total


def run_opened(
    run: Run, *, call: Call = direct, curate: bool = True, lock_timeout: float | None = None
) -> dict[str, Any]:
    """``run_chain`` in a run folder already opened (``training.chain.open_run``, after ``check_launch``): the
    Prefect flow opens it once for its curation and training parts. Holds the run folder's lock throughout."""
    with run_lock(run, lock_timeout):
        return _run_steps(run, call, curate)


def _rl_passes(run: Run, step: Call, state: ChainState) -> ChainState:
    """The RL stages of the run's pinned curriculum (``_rl_pass``); then CoScale iterations while
    ``decide.coscale_iterations`` allows."""
    recipe = run.recipe
    stages = run.stages()
    context_fit_note(run, state, stages)
    mode = group_mode(recipe, stages)
    if note := sequential_note(stages, mode):
        run.echo(f"[chain] note: {note}")
    while True:
        todo = stages if state.iteration == 0 else coscale_stages(run, state)
        state = _rl_pass(run, step, state, todo, mode == PARALLEL)
        if recipe.decide is None or state.iteration >= recipe.decide.coscale_iterations:
            return state
        state = step(layout.in_iteration(layout.MEASURE, state.iteration + 1), coscale_measure, run, state)
        state = step(layout.in_iteration(layout.SOLUTIONS, state.iteration), coscale_solutions, run, state)
        sft_name = layout.in_iteration(layout.SFT, state.iteration)
        state = step(sft_name, coscale_sft, run, state)
        state = step(f"eval {sft_name}", evaluate_model, run, state)


def context_fit_note(run: Run, state: ChainState, stages: list[StagePlan]) -> list[dict[str, Any]]:
    """Before the first RL step, per stage, the share of its prompts whose measured answers (``measure``'s samples
    of the starting model, else its tokens of their reference solutions; ``training.plan.context_fit``) exceed its
    context: one line each, a warning where a stage would truncate the band it trains; kept as the ``context`` note
    of ``chain.json``."""
    if not stages:
        return []
    measured = run.chain().note(layout.MEASURE, layout.SFT)
    model = measured["ledger_model"] if measured else run.measured_model(state.model)
    answers, what = measured_answers(run.ws, run.recipe.pool, model), "measured"
    if not answers:  # no sample of the starting model: its tokens of the prompts' reference solutions
        ids = sorted({pid for stage in stages for pid in stage_ids(stage)})
        answers, what = reference_answers(run.ws, run.recipe.pool, state.model, ids), "reference"
    fits = context_fit(stages, answers)
    for line in fit_lines(fits, what):
        run.echo(f"[chain] {line}")
    run.chain().note(layout.CONTEXT, layout.RL, {"model": model, "answers": what, "stages": fits})
    return fits


def _rl_pass(run: Run, step: Call, state: ChainState, todo: list[StagePlan], parallel: bool) -> ChainState:
    """One pass over the stages ``todo``, each with the rungs of its rollout ladder (``training.groups.next_rung``),
    each rung evaluated and, with ``decide``, decided on (a stop ends the pass). ``parallel``: every stage is an
    independent run from the pass's starting model, and the groups trained so far are merged after each from the
    second on (``training.groups``: the merge is the pass's model; a later group's own evaluations are off the
    eval curve)."""
    base, groups = state, []
    for stage in todo:
        start = state = from_base(state, base) if parallel else state
        rung: StagePlan | None = stage
        while rung is not None:
            name, trained = rl_step_name(rung, state.iteration), rung
            state = step(name, rl_stage, run, state, rung)
            rung = step(f"ladder {name}", next_rung, run, state, rung) if rung.rl.ladder else None
            last = rung is None and stage is todo[-1] and not (parallel and len(todo) > 1)  # else the merge is
            curve = not (parallel and groups)
            state = step(f"eval {name}", evaluate_model, run, state, last, curve)
            if curve and _stops(run, step, state, name):
                return state
        if parallel:
            groups.append(group_record(trained, state, state.offset_step - start.offset_step))
            if len(groups) > 1:
                name = merge_name(len(groups), len(todo), state.iteration)
                state = step(name, merge_groups, run, state, base.model, groups, len(todo))
                state = step(f"eval {name}", evaluate_model, run, state, stage is todo[-1])
                if _stops(run, step, state, name):
                    return state
    return state


def _rft(run: Run, step: Call, state: ChainState) -> ChainState:
    """Iterated RFT's rounds (``training.rft``), then its last round's model evaluated (step ``rft``) and its best
    round on validation (``rft:best``) where that is another."""
    state, best = rft_rounds(run, step, state)
    state = step("eval rft", evaluate_model, run, state)
    if best is not None:
        step("eval rft:best", evaluate_model, run, dataclasses.replace(state, pending=best))
    return state


def _stops(run: Run, step: Call, state: ChainState, name: str) -> bool:
    """``decide`` after step ``name`` (with the recipe's ``decide``): whether it stops the pass."""
    return run.recipe.decide is not None and step(f"decide {name}", decide, run, state, name)["action"] == STOP


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
        now = {"wall_s": inner.get("wall_s", 0.0), "call_s": time.perf_counter() - t0, "cpu_s": cpu_seconds() - c0}
        timings.append({"step": name, **add_timing(run, name, now)})
        return result

    # 1. curation (a damaged starting model fails first)
    if recipe.model != "tiny":
        start_model(run)
    if curate and recipe.curate is not None:
        step("curation", curation, run)
    from training.evaluate import heldout_problems

    ev = recipe.eval
    heldout_problems(run.ws, recipe.pool, split=ev.split, limit=ev.limit, sources=ev.sources)  # fails before training
    if (valid := recipe.sft.validation if recipe.sft is not None else None) is not None:  # so does the choice's
        heldout_problems(run.ws, recipe.pool, split=valid.split, limit=valid.limit, sources=ev.sources)
    if recipe.measure is None:
        run.stages()  # validated before any model work (with ``measure`` the curriculum is built after SFT)

    # 2. the starting model, 3. SFT, the SFT model's own pass rates over the RL candidates
    state = step(layout.INIT, init_model, run)
    state = step("eval init", evaluate_model, run, state)
    if recipe.sft is not None:
        state = step(layout.SFT, sft, run, state)
        state = step("choose sft", choose, run, state)
        state = step("eval sft", evaluate_model, run, state)
    if recipe.measure is not None:
        state = step("measure", measure, run, state)
        state = step("forecast", forecast_waste, run, state)

    # 4. RL stages, each evaluated and (with ``decide``) decided on; then CoScale iterations. With ``rft``, iterated
    # rejection-sampling fine-tuning on their prompts instead: its last round's model and its best on validation
    state = _rft(run, step, state) if recipe.rft is not None else _rl_passes(run, step, state)

    # 5. re-distillation of the starting model on the last stage's correct rollouts
    if recipe.redistill is not None:
        state = step(layout.REDISTILL, redistill, run, state)
        state = step("eval redistill", evaluate_model, run, state)

    # 6. fit and figures, 7. summary
    fit = step("fit", fit_and_plot, run, state)
    extra = {"wall_s": round(time.perf_counter() - t_run, 1), "timings": timings, **report(run)}
    return step("summary", write_summary, run, state, fit, extra)
