"""Iterated rejection-sampling fine-tuning (recipe key ``rft``): the baseline that uses exactly RL's information.

RFT is SFT on the model's own samples of RL's prompts that the answer checker verified: the prompts and
the checker RL trains with, no reward model, no gradient through the samples. Run once it is a one-step baseline;
iterated, each round samples from the model the last round made, so it can climb as RL does. In place of the RL
stages, for each round ``r`` of ``rft.rounds`` (``rft_round``, chain step ``rft:r<r>``):

1. sample: ``curate rollout`` of the current model over the RL stages' prompts (the union of their shards, written
   as the run's own selection ``rft.<run tag>``), ``rft.n`` samples each, into the pool's ledger under the
   model's workspace-relative name, as ``measure`` samples the SFT model;
2. keep: the verified samples (``verified``: correct by the checker, not cut at the token cap, identical
   completions of a prompt once, at most ``rft.per_prompt`` per prompt), as SFT rows in ``rft/r<r>/data.parquet``;
3. fine-tune the current model on them (``training.sft``, in a fresh process: ``rft/r<r>/sft/final``, with its
   card and the chain's lineage plus the round, its data and its parent model);
4. evaluate that model on ``rft.split`` (validation): the round's record (``chain.json`` note ``rft`` ``r<r>``).

Rounds stop at ``rft.rounds``, when the rounds so far took ``rft.cpu_budget`` CPU-seconds (the chain's ``timings``
of the ``rft:r*`` steps, summed over every invocation), or when a model has no verified sample left to learn from.
The chain keeps the last round's model (the policy, evaluated as step ``rft``) and the best round on validation
(``rft:best`` when it is another one); the ``rft`` note ``rounds`` says which and why the rounds stopped.

Resuming: a round with its record is done and never redone. A round killed midway runs again from where it
stopped: the ledger holds every sample already drawn (``curate rollout`` draws only the missing ones, never a
duplicate), the round's data is rebuilt from that ledger, and the fine-tune resumes from its last checkpoint
(``training.sft``; a finished one is skipped).

    # the default chain (SFT, measure) with iterated RFT in place of its RL, for at most 1,400 CPU-seconds of rounds
    training run --recipe training/recipes/tiny/fastcurl.yaml --set rft.rounds=10 --set rft.cpu_budget=1400
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.errors import InputError
from training import layout, run_folder
from training.chain import ChainState, Run, chain_lineage
from training.step import run_step


RFT = layout.RFT  # the run folder's rounds (rft/r<N>/) and the chain's note kind
DATA = layout.RFT_DATA  # a round's SFT rows
LAST, BEST = layout.RFT_LAST, layout.RFT_BEST  # the chain steps of the last round's model, of the best on validation


def verified(samples: pl.DataFrame, prompts: set[str] | None = None, per_prompt: int = 4) -> pl.DataFrame:
    """The samples an RFT round fine-tunes on (pure): correct by the checker, finished (a completion cut at the token
    cap is not a whole solution, even with the right answer in it), of ``prompts`` (None: any), identical
    completions of a prompt once, at most ``per_prompt`` per prompt in sample order (the samples are independent
    draws: the first ones are a fair pick). Returns ``problem_id``, ``completion``, ``sample_idx``, by problem."""
    ok = pl.col(S.CORRECT).fill_null(False) & pl.col(S.COMPLETION).is_not_null()
    if S.FINISH_REASON in samples.columns:
        ok &= pl.col(S.FINISH_REASON).fill_null("stop") != "length"
    df = samples.filter(ok)
    if prompts is not None:
        df = df.filter(pl.col(S.PROBLEM_ID).is_in(sorted(prompts)))
    return (
        df.sort([S.PROBLEM_ID, S.SAMPLE_IDX])
        .unique([S.PROBLEM_ID, S.COMPLETION], keep="first", maintain_order=True)
        .group_by(S.PROBLEM_ID, maintain_order=True)
        .head(per_prompt)
        .select(S.PROBLEM_ID, S.COMPLETION, S.SAMPLE_IDX)
    )


def selection_name(run: Run) -> str:
    """The selection of the RL stages' prompts that every RFT round samples: ``rft.<run tag>``."""
    return f"{RFT}.{run.tag}"


def prompts(run: Run) -> set[str]:
    """The RL stages' prompts (the union of their shards' problem ids), written once as ``selection_name``'s
    ``selection.parquet`` for ``curate rollout --selection``."""
    ids: set[str] = set()
    for stage in run.stages():
        ids |= set(pl.read_parquet(stage.shard, columns=[S.PROBLEM_ID])[S.PROBLEM_ID].to_list())
    if not ids:
        raise InputError("rft: the RL stages have no prompts to sample")
    path = run.ws.selection_dir(selection_name(run)) / "selection.parquet"
    if not path.is_file():
        io.write_parquet(pl.DataFrame({S.PROBLEM_ID: sorted(ids)}), path)
    return ids


def round_dir(run: Run, r: int) -> Path:
    return layout.rft_dir(run.run_dir, r)


def rft_round(run: Run, state: ChainState, r: int) -> ChainState:
    """Round ``r`` from the current model (module docstring): sample, keep the verified, fine-tune, validate;
    recorded as the ``rft`` note ``r<r>`` and skipped once recorded. A model with no verified sample is recorded as
    such (``stopped``), the state's model unchanged."""
    from curate import pipeline
    from curate.rollout import ledger
    from training.recipe import curate_recipe, rft_rollout
    from training.sft import METRICS

    chain, sec = run.chain(), run.recipe.rft
    done = chain.note(RFT, layout.round_name(r))
    if done is not None:
        return state if done.get("stopped") else dataclasses.replace(state, model=done["model"])
    t0, folder = time.perf_counter(), round_dir(run, r)
    ids = prompts(run)
    name = run.measured_model(state.model)
    section = rft_rollout(run.recipe, name, selection_name(run))
    sampled = pipeline.run_stage("rollout", run.ws, curate_recipe(run.recipe, "rollout", section), progress=True)
    cols = [S.PROBLEM_ID, S.SAMPLE_IDX, S.COMPLETION, S.CORRECT, S.FINISH_REASON]
    samples = ledger.read(run.ws, run.recipe.pool, name, columns=cols)
    samples = samples.filter((pl.col(S.SAMPLE_IDX) < sec.n) & pl.col(S.PROBLEM_ID).is_in(sorted(ids)))
    kept = verified(samples, ids, sec.per_prompt)
    record: dict[str, Any] = {"start": state.model, "ledger_model": name, "prompts": len(ids),
                              "samples": samples.height, "sampled_s": sampled.wall_s,
                              "correct": int(samples[S.CORRECT].fill_null(False).sum()), "rows": kept.height,
                              "solved_prompts": kept[S.PROBLEM_ID].n_unique()}  # fmt: skip
    if kept.height == 0:
        run.echo(f"[chain] rft round {r}: no verified sample of {len(ids)} prompts x {sec.n}: nothing to learn from")
        chain.note(RFT, layout.round_name(r), {**record, "stopped": "no verified sample"})
        return state
    data = folder / DATA
    if not data.is_file():
        io.write_parquet(_sft_rows(run, kept, section.get("instruction")), data)
    out = folder / layout.SFT
    if run_folder.finished(out, METRICS) is None:
        lineage = {**chain_lineage(run), "rft_round": r, "rft_data": str(data), "rft_parent": state.model,
                   "rft_samples": {"ledger_model": name, "n": sec.n, "per_prompt": sec.per_prompt}}  # fmt: skip
        run_step({"kind": "sft", "out": str(out), "model": state.model, "data": str(data), "card": "rft",
                  "config": dataclasses.asdict(sec.sft), "lineage": lineage}, run.recipe.launch)  # fmt: skip
    model = str(out / run_folder.FINAL)
    ev = _validate(run, model)
    record = {**record, "model": model, **ev, "wall_s": round(time.perf_counter() - t0, 1)}
    chain.note(RFT, layout.round_name(r), record)
    run.echo(f"[chain] rft round {r}: {record['rows']} verified samples of {record['solved_prompts']} of "
             f"{len(ids)} prompts ({record['correct']} correct of {record['samples']}); {sec.split} pass@1 "
             f"{ev['pass_at_1']:.3f} ± {ev['stderr']:.3f}  [{record['wall_s']:.0f} s]")  # fmt: skip
    return dataclasses.replace(state, model=model)


def _sft_rows(run: Run, kept: pl.DataFrame, instruction: str | None) -> pl.DataFrame:
    """The SFT rows of the kept samples (``curate.prompts.sft_row``: the rollout's user turn, the completion)."""
    from curate.prompts import INSTRUCTION, sft_row

    problems = io.read_parquet(run.ws.table(run.recipe.pool, "problems")).select(S.PROBLEM_ID, S.PROBLEM)
    joined = kept.join(problems.unique(S.PROBLEM_ID), on=S.PROBLEM_ID, how="inner")
    cols = joined.select(S.PROBLEM_ID, S.COMPLETION, S.SAMPLE_IDX, S.PROBLEM)
    rows = [{**sft_row(p, c, instruction or INSTRUCTION), S.PROBLEM_ID: pid, S.SAMPLE_IDX: idx}
            for pid, c, idx, p in cols.iter_rows()]  # fmt: skip
    return pl.DataFrame(rows)


def _validate(run: Run, model: str) -> dict[str, Any]:
    """A round's model on ``rft.split`` (``limit`` x ``k``, the ``eval`` section's temperature and tokens)."""
    from training.evaluate import evaluate, heldout_problems

    sec = run.recipe.rft
    problems = heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=sec.limit,
                                sources=run.recipe.eval.sources)  # fmt: skip
    cfg = dataclasses.replace(run.recipe.eval.config(sec.limit), k=sec.k)
    result = evaluate(model, problems, cfg, progress=True)
    return {k: result[k] for k in ("pass_at_1", "stderr", "n_problems", "k")}


def spent(run: Run) -> float:
    """CPU-seconds the RFT rounds took so far, over every invocation (the chain's ``timings`` of ``rft:r*``)."""
    return sum(float(t.get("cpu_s", 0.0)) for t in run.chain().notes.get(layout.TIMINGS, [])
               if layout.is_rft_round(t["name"]))  # fmt: skip


Step = Callable[..., Any]


def rft_rounds(run: Run, step: Step, state: ChainState) -> tuple[ChainState, dict[str, Any] | None]:
    """The rounds (``step(name, fn, *args)`` runs each as a chain step, ``training.runner``), while rounds, the CPU
    budget and verified samples last. Returns the state with the last round's model pending its evaluation (step
    ``rft``), and the best round's pending evaluation (step ``rft:best``) when it is another round (else None)."""
    from training.evaluate import heldout_problems

    sec = run.recipe.rft
    heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=sec.limit, sources=run.recipe.eval.sources)
    start, stopped = state, f"{sec.rounds} rounds"
    for r in range(1, sec.rounds + 1):
        if run.chain().note(RFT, layout.round_name(r)) is None and sec.cpu_budget is not None and r > 1:
            used = spent(run)
            if used >= sec.cpu_budget:
                stopped = f"the CPU budget: {used:.0f} of {sec.cpu_budget:.0f} CPU-s after {r - 1} rounds"
                break
        state = step(layout.rft_step(r), rft_round, run, state, r)
        if (run.chain().note(RFT, layout.round_name(r)) or {}).get("stopped"):
            stopped = f"round {r} had no verified sample"
            break
    rounds = [
        n for r in range(1, sec.rounds + 1) if (n := run.chain().note(RFT, layout.round_name(r))) and "model" in n
    ]
    if not rounds:
        raise InputError(f"rft: {start.model} has no verified sample on the RL prompts: nothing to fine-tune on")
    best = max(reversed(rounds), key=lambda n: n["pass_at_1"])  # the later round on a tie
    note = {"rounds": [n["name"] for n in rounds], "last": rounds[-1]["name"], "best": best["name"],
            "last_step": LAST, "best_step": LAST if best is rounds[-1] else BEST, "stopped": stopped,
            "cpu_s": round(spent(run), 1), "cpu_budget": sec.cpu_budget}  # fmt: skip
    run.chain().note(RFT, layout.ROUNDS, note)
    run.echo(f"[chain] rft: {len(rounds)} round(s), stopped by {stopped}; {sec.split} pass@1 by round "
             + ", ".join(f"{n['name']} {n['pass_at_1']:.3f}" for n in rounds)
             + f"; the best: {best['name']}, the last: {rounds[-1]['name']}")  # fmt: skip
    state = dataclasses.replace(state, model=rounds[-1]["model"], pending={"step": LAST, "model": rounds[-1]["model"],
                                                                          "wall_s": 0.0})  # fmt: skip
    other = None if best is rounds[-1] else {"step": BEST, "model": best["model"], "wall_s": 0.0}
    return state, other
