"""How ``training run`` trains a pass's RL stages: CoScale-RL's independent groups and merge, and its rollout ladder.

A pass is the plan's stages in order (``training.runner._rl_pass`` drives it; CoScale-RL: METHODS.md §2.2):

- ``groups`` (recipe key; ``group_mode``): ``sequential`` trains each stage from the previous stage's model (what
  FastCuRL's context stages need); ``parallel`` trains each stage as an independent run from the pass's starting
  model (``from_base``: the SFT model in the first pass, fresh Adam), and after every group from the second on
  merges the groups trained so far (``merge_groups``: ``training.merge``, the recipe's ``merge`` method; the
  merged model's card gives each group's share and the method). The default is what the plan says: a ``bands``
  plan marks its difficulty groups ``parallel``. The merged model is the pass's model: the chain evaluates it,
  compares it with SFT (``gain_over_sft``) and continues from it.
- the rollout ladder (``rl.ladder``, ``training.ladder``): a stage's segment stops when its training reward
  plateaus; ``next_rung`` then builds the next rung of the stage (N x factor, lr/N kept, the budget left, from the
  checkpoint where the segment stopped), records in ``chain.json`` (note ``ladder``) where and why N doubled, and
  says in one line when the ladder is exhausted or the stage's budget is spent.

The eval curve (``eval.parquet``, what the sigmoid fit reads) holds the models the chain would deliver at that
compute: every model of a sequential pass; in a parallel pass the first group's models and then each merge of the
groups so far (a later group's own models are evaluated and recorded in ``chain.json`` with ``curve: false``,
but they are not the pass's model). Compute and steps add up over every group (all were spent).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from curate.errors import InputError
from training import layout, rl, run_folder
from training.chain import ChainState, Run, chain_lineage
from training.ladder import event_line
from training.plan import StagePlan, rl_step_name
from training.recipe import RunRecipe, stage_rl
from training.step import stamp_lineage


PARALLEL, SEQUENTIAL = "parallel", "sequential"
LADDER, MERGES = layout.LADDER, layout.MERGES  # the chain.json note kinds of the ladder's events and of the merges


def group_mode(recipe: RunRecipe, stages: Sequence[StagePlan]) -> str:
    """``parallel`` or ``sequential``: the recipe's ``groups``, else parallel when the plan marks every stage an
    independent run (a ``bands`` plan)."""
    if recipe.groups is not None:
        return recipe.groups
    return PARALLEL if stages and all(s.parallel for s in stages) else SEQUENTIAL


def from_base(state: ChainState, base: ChainState) -> ChainState:
    """The state a parallel group starts from: the pass's starting model, no previous stage (fresh Adam), the
    step and compute offsets of everything spent so far."""
    return dataclasses.replace(state, model=base.model, last_stage=None, pending=None)


# --------------------------------------------------------------------------------------------------- the ladder
def next_rung(run: Run, state: ChainState, stage: StagePlan) -> StagePlan | None:
    """The next rung of ``stage`` after it trained (its folder is ``state.last_stage``), or None when the stage is
    done: no ladder, no event (it ran its budget), the ladder exhausted, or the budget spent. Records the event in
    ``chain.json`` (note ``ladder``, named by the rung's chain step) and echoes it."""
    cfg = stage.rl.ladder
    if cfg is None or state.last_stage is None:
        return None
    folder = Path(state.last_stage)
    summary = run_folder.finished(folder, rl.SUMMARY) or {}
    event = (summary.get("ladder") or {}).get("event")
    if event is None:
        return None
    done = int(summary["steps"])
    steps = 0 if event["exhausted"] else cfg.next_steps(stage.rl.max_steps, done, event["n_from"], event["n_to"])
    name = rl_step_name(stage, state.iteration)
    rung = None
    if steps > 0:
        changes = {"num_generations": event["n_to"], "learning_rate": event["lr_to"], "max_steps": steps,
                   "warmup_steps": 0}  # fmt: skip
        rung = dataclasses.replace(stage, rl=stage_rl(stage.rl, changes, where=f"stages.{stage.name}"),
                                   rung=stage.rung + 1, resume=str(_cut_checkpoint(folder, done)))  # fmt: skip
    outcome = ("the group ends" if event["exhausted"]
               else f"next rung {rl_step_name(rung, state.iteration)}: {steps} steps" if rung is not None
               else "the stage's budget is spent: the group ends")  # fmt: skip
    chain, line = run.chain(), f"[chain] ladder {name}: {event_line(event)}; {outcome}"
    if chain.note(LADDER, name) is not None:  # recorded by an earlier run: said again, as every step reports
        run.echo(f"{line} (done)")
    else:
        chain.note(LADDER, name, {
            "group": stage.name, "rung": stage.rung, "run_step": state.offset_step, "event": event,
            "rule": dataclasses.asdict(cfg), "signal": (summary.get("ladder") or {}).get("signal"),
            "budget": {"counts": cfg.budget, "max_steps": stage.rl.max_steps, "done": done, "next_steps": steps,
                       "prompts_per_step": stage.rl.prompts_per_step},
            "next": rl_step_name(rung, state.iteration) if rung is not None else None, "outcome": outcome,
        })  # fmt: skip
        run.echo(line)
    return rung


def _cut_checkpoint(folder: Path, step: int) -> Path:
    """The checkpoint where a rung stopped (saved at its event's step): the next rung starts from it."""
    ckpt = layout.checkpoint(folder, step)
    if not (ckpt / run_folder.SAMPLER_STATE).is_file():
        raise InputError(f"{ckpt} is missing: the next rung of the rollout ladder starts from it (train the stage "
                         "again: delete its folder)")  # fmt: skip
    return ckpt


# --------------------------------------------------------------------------------------------------- the merge
def group_record(stage: StagePlan, state: ChainState, steps: int) -> dict[str, Any]:
    """What the merge needs of a parallel group once its last rung trained: its name, model, prompts, the steps it
    trained over its rungs and its last N."""
    return {"group": stage.name, "model": state.model, "rows": stage.rows, "steps": steps,
            "n": stage.rl.num_generations, "stage_dir": state.last_stage}  # fmt: skip


merge_name = layout.merge_step  # the chain step of the merge of the first k of K parallel groups: ``merge:2of3``


def merge_groups(run: Run, state: ChainState, base: str, groups: list[dict[str, Any]], total: int) -> ChainState:
    """Merge the parallel groups trained so far (``groups``, from ``group_record``) over the pass's starting model
    ``base`` with the recipe's ``merge`` (``training.merge.merge_models``; skipped when the merged folder is whole):
    ``rl/[itN-]merge-<k>of<total>``, its card naming each group's share and the method. Returns the state with the
    merged model as the current one, waiting for its evaluation at the compute spent so far."""
    from training.merge import MergeConfig, merge_models

    cfg = run.recipe.merge or MergeConfig()
    name = merge_name(len(groups), total, state.iteration)
    folder = layout.merge_dir(run.run_dir, len(groups), total, state.iteration)
    t0 = time.perf_counter()
    chain = run.chain()
    note = chain.note(MERGES, name)
    whole = (folder / run_folder.FILES).is_file() and run_folder.check_files(folder) is None
    if note is None or not whole:  # the note is written after the sealed folder: with it, the merge is done
        summary = merge_models([g["model"] for g in groups], base=base, out_dir=folder, cfg=cfg, groups=groups)
        run_folder.seal(folder)
        shares = dict(zip([g["group"] for g in groups], summary["shares"], strict=True))
        note = chain.note(MERGES, name, {"method": cfg.method, "shares": shares, "base": base, "groups": groups,
                                         "model": str(folder)})  # fmt: skip
        shown = ", ".join(f"{g} {w:.3g}" for g, w in shares.items())
        run.echo(f"[chain] {name}: {cfg.method} merge of {len(groups)} independent group(s) over {base} ({shown})")
    stamp_lineage(folder, chain_lineage(run, state.iteration))
    pending = {
        "step": name, "model": str(folder), "kind": "merge", "wall_s": time.perf_counter() - t0, "rl_steps": 0,
        "offset_step": state.offset_step, "offset_compute": state.offset_compute,
        "compute": state.offset_compute, "eval_compute": state.offset_compute,
    }  # fmt: skip
    return dataclasses.replace(state, model=str(folder), pending=pending)
