"""SFT trained to its plateau: the early-stop rule on the validation curve, and the callback that applies it.

A fixed SFT step count ended the default recipe's SFT while validation still rose (seed 0 0.010, 0.083,
0.337, 0.550, 0.627, 0.693 at steps 500-3,000; continued SFT flattened at 0.743 some 1,500-2,000 steps later).
With ``sft.validation.patience`` (``training.recipe.SFTValidation``) the SFT step instead evaluates each checkpoint
on the validation split as it is saved (every ``sft.validation.every`` steps), and stops once the best point has
not been beaten by more than ``min_delta`` of its paired standard error for ``patience`` evaluations
(``should_stop``); ``sft.max_steps`` becomes a cap. ``training.choose`` then keeps the best checkpoint, as before.

The paired SE: every point is scored on the same validation problems with the same per-problem sampling seeds
(``training.evaluate``), so the gain of a point over the best so far has the SE of its per-problem differences
(``training.evaluate.paired_gain``), a fraction of either point's own SE (which mostly measures how hard the
problems are). "The best so far" is the last point that beat the one before it by more than that margin: a curve
that creeps up by less than one SE per evaluation still counts as rising once its gains add up past the margin,
and a lucky point does not hide behind a slightly higher one.

``EarlyStop`` is what the SFT step's own process needs (the chain writes it into the step's spec); ``callback``
is the transformers ``TrainerCallback`` that takes the points and sets ``control.should_training_stop``; every
point goes to ``<out>/curve.json`` as it is taken (``read_curve``), with its per-problem scores, so a killed run
resumes with the points it had (``catch_up``: a checkpoint saved but not yet evaluated is evaluated then; none is
evaluated twice, none is lost).
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.config import from_mapping
from curate.manifest import file_hash
from training import layout, run_folder
from training.evaluate import EvalConfig, evaluate, paired_gain


# <sft out>/curve.json: the validation points taken during training; validation_problems.parquet: the validation
# problems, pinned when the run starts
CURVE, PROBLEMS = layout.CURVE, layout.PROBLEMS
POINT_KEYS = ("step", "model", "pass_at_1", "stderr", "n_problems", "k")  # what sft/validation.json keeps of each


@dataclass(frozen=True)
class Verdict:
    """What ``should_stop`` says about a validation curve.

    stop: the rule says stop. best: the step of the best point (the last that beat its predecessor best by more
    than ``min_delta`` paired SEs; the first point to begin with). waited: evaluations since then without such a
    gain. gain / stderr: the last point's paired gain over the best and its SE (None when the last is the best).
    """

    stop: bool
    best: int
    waited: int
    gain: float | None = None
    stderr: float | None = None


def per_problem(point: Mapping[str, Any]) -> pl.DataFrame:
    """A point's per-problem scores as ``paired_gain`` takes them (problem_id, mean, scored)."""
    scores = point["per_problem"]
    return pl.DataFrame({S.PROBLEM_ID: scores[S.PROBLEM_ID], "mean": scores["mean"]}).with_columns(scored=True)


def should_stop(points: Sequence[Mapping[str, Any]], patience: int, min_delta: float = 1.0) -> Verdict:
    """The early-stop rule: stop once ``patience`` evaluations in a row brought no gain over the best point by more
    than ``min_delta`` times the gain's paired SE. ``points``: the validation points in step order, each with
    ``step`` and ``per_problem`` (``{"problem_id": [...], "mean": [...]}``, the same problems at every point).

    A gain must beat ``min_delta`` SEs and be positive (two identical curves, SE 0, are no gain). The best is the
    anchor of the comparison (module docstring), so the window restarts only at a real gain.
    """
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience}")
    if not points:
        raise ValueError("should_stop needs at least one validation point")
    best, waited, last = points[0], 0, None
    for point in points[1:]:
        last = paired_gain(per_problem(point), per_problem(best))
        if last["gain"] > 0 and last["gain"] > min_delta * last["stderr"]:
            best, waited, last = point, 0, None
        else:
            waited += 1
    gain, se = (None, None) if last is None else (last["gain"], last["stderr"])
    return Verdict(stop=waited >= patience, best=int(best["step"]), waited=waited, gain=gain, stderr=se)


def margin(min_delta: float) -> str:
    """``min_delta`` in words: "its paired SE", "1.5x its paired SE", "zero"."""
    return "zero" if min_delta == 0 else "its paired SE" if min_delta == 1 else f"{min_delta:g}x its paired SE"


def why_stopped(verdict: Verdict, points: Sequence[Mapping[str, Any]], cap: int, patience: int,
                min_delta: float) -> dict[str, Any]:  # fmt: skip
    """Why training ended, for the chain's line and the card: ``rule`` is ``plateau`` (the rule stopped it) or
    ``cap`` (it reached ``sft.max_steps``), ``rising`` whether the last evaluation was itself a gain over the best by
    more than the margin, ``text`` the sentence.

    >>> pts = [{"step": 500, "pass_at_1": 0.1}, {"step": 1000, "pass_at_1": 0.4}, {"step": 1500, "pass_at_1": 0.4}]
    >>> print(*why_stopped(Verdict(True, 1000, 1), pts, 3000, 1, 1.0)["text"].split(": "), sep="\\n")
    stopped at step 1500 of at most 3000
    no gain over the best (step 1000, pass@1 0.400) by more than its paired SE in 1 evaluation
    >>> rising = why_stopped(Verdict(False, 1500, 0), pts, 1500, 3, 1.0)
    >>> rising["rule"], rising["rising"], rising["text"].split(":")[0]
    ('cap', True, 'hit the step cap (1500) while still rising')
    """
    last = int(points[-1]["step"])
    best = next(p for p in points if int(p["step"]) == verdict.best)
    at = f"the best (step {verdict.best}, pass@1 {best['pass_at_1']:.3f})"
    s = "" if patience == 1 else "s"
    rising = not verdict.stop and verdict.waited == 0 and len(points) > 1
    if verdict.stop:
        rule, text = "plateau", (f"stopped at step {last} of at most {cap}: no gain over {at} by more than "
                                 f"{margin(min_delta)} in {patience} evaluation{s}")  # fmt: skip
    elif rising:
        rule, text = "cap", (f"hit the step cap ({cap}) while still rising: the last evaluation gained more than "
                             f"{margin(min_delta)} over the best before it")  # fmt: skip
    else:
        rule, text = "cap", (f"hit the step cap ({cap}) with {verdict.waited} of {patience} evaluation{s} without "
                             f"a gain over {at} by more than {margin(min_delta)}")  # fmt: skip
    return {"rule": rule, "rising": rising, "step": last, "cap": cap, "best": verdict.best, "waited": verdict.waited,
            "patience": patience, "min_delta": min_delta, "text": text}  # fmt: skip


# --------------------------------------------------------------------------------------------------- the SFT step
@dataclass(frozen=True)
class EarlyStop:
    """What the SFT step's process needs to take validation points while it trains and stop by the rule (the chain
    builds it from ``sft.validation`` and ``eval``; ``training.sft.train_sft(validation=...)`` takes it).

    problems: a Parquet file of the validation problems (problem_id, problem, answer[, ...]), pinned in the run
    folder so a resumed run scores the same problems. eval: how each point is evaluated (k, temperature, token
    budget). patience / min_delta: ``should_stop``'s. split: the split's name, for the lines it prints."""

    problems: str
    eval: EvalConfig
    patience: int
    min_delta: float = 1.0
    split: str = "validation"

    def to_spec(self) -> dict[str, Any]:
        """The JSON a step's spec carries (``from_spec`` reads it back)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> EarlyStop:
        """``to_spec``'s JSON back as an ``EarlyStop``."""
        return cls(**{**spec, "eval": from_mapping(EvalConfig, spec["eval"], "sft.validation")})

    def identity(self) -> dict[str, Any]:
        """What decides where training stops, for the SFT run's fingerprint: the problems' content, the sampling
        and the rule (device, threads and batch size only change how fast it gets there)."""
        ev = {k: getattr(self.eval, k) for k in ("k", "temperature", "top_p", "max_new_tokens", "seed", "limit")}
        return {"problems": file_hash(Path(self.problems)), "eval": ev, "patience": self.patience,
                "min_delta": self.min_delta}  # fmt: skip


def read_curve(out_dir: str | Path) -> dict[str, Any] | None:
    """``<out>/curve.json`` (the points an SFT run with ``EarlyStop`` took, in step order), or None."""
    path = Path(out_dir) / CURVE
    return io.read_json(path) if path.is_file() else None


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the checker's workers), as
    ``training.runner.cpu_seconds`` counts a step: the evaluations' share of the SFT step's CPU."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def take_point(early: EarlyStop, checkpoint: Path, step: int) -> dict[str, Any]:
    """Evaluate one checkpoint on the validation problems: a point of the curve (``POINT_KEYS`` plus the
    per-problem scores, CPU and wall seconds). The training process's random state and torch threads are put back
    afterwards: the evaluation seeds torch per batch, and a model with dropout would otherwise train on from
    another state than a run resumed from this checkpoint (which restores the state saved before the evaluation).
    Measured on the tiny model: the stopped run's weights equal a plain run's at that step, and a resumed run's."""
    import numpy as np
    import torch

    problems = io.read_parquet(Path(early.problems))
    threads, py_state, np_state = torch.get_num_threads(), random.getstate(), np.random.get_state()
    cpu, wall = _cpu_s(), time.perf_counter()
    try:
        with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []):
            result = evaluate(checkpoint, problems, early.eval)
    finally:
        torch.set_num_threads(threads)
        random.setstate(py_state)
        np.random.set_state(np_state)
    scored = result["per_problem"].filter(pl.col("scored"))
    scores = {S.PROBLEM_ID: scored[S.PROBLEM_ID].to_list(), "mean": scored["mean"].to_list()}
    return {"step": step, "model": str(checkpoint), **{k: result[k] for k in POINT_KEYS[2:]},
            "cpu_s": round(_cpu_s() - cpu, 2), "wall_s": round(time.perf_counter() - wall, 2),
            "per_problem": scores}  # fmt: skip


def point_line(point: Mapping[str, Any], verdict: Verdict, early: EarlyStop) -> str:
    """The line the SFT step prints after each point: ``sft validation at step 1500: pass@1 0.337 ± 0.035; the best
    is step 1500; 0 of 3 evaluations without a gain over it by more than its paired SE``."""
    return (f"sft {early.split} at step {point['step']}: pass@1 {point['pass_at_1']:.3f} ± {point['stderr']:.3f}; "
            f"the best is step {verdict.best}; {verdict.waited} of {early.patience} evaluations without a gain over "
            f"it by more than {margin(early.min_delta)}")  # fmt: skip


class Curve:
    """The points of one SFT run (``<out>/curve.json``), written after each new one."""

    def __init__(self, out_dir: Path, early: EarlyStop) -> None:
        self.path, self.early = Path(out_dir) / CURVE, early
        self.points: list[dict[str, Any]] = list((read_curve(out_dir) or {}).get("points") or [])

    def steps(self) -> set[int]:
        return {int(p["step"]) for p in self.points}

    def add(self, checkpoint: Path, step: int) -> Verdict:
        """Take the point of ``checkpoint`` (unless it is there already), record it, print its line."""
        if step not in self.steps():
            point = take_point(self.early, checkpoint, step)
            self.points = sorted([*self.points, point], key=lambda p: int(p["step"]))
            io.write_json(self.path, {"points": self.points, "split": self.early.split})
            print(point_line(point, self.verdict(), self.early), file=sys.stderr, flush=True)
        return self.verdict()

    def verdict(self) -> Verdict:
        return should_stop(self.points, self.early.patience, self.early.min_delta)

    def stopped(self) -> bool:
        """Whether the points so far say stop (a run killed after the rule stopped it, before its final model)."""
        return bool(self.points) and self.verdict().stop

    def keep_until(self, step: int) -> None:
        """Forget points past ``step`` (the checkpoint a resumed run starts from): training takes them again."""
        kept = [p for p in self.points if int(p["step"]) <= step]
        if len(kept) != len(self.points):
            self.points = kept
            io.write_json(self.path, {"points": self.points, "split": self.early.split})


def catch_up(out_dir: Path, early: EarlyStop, last: Path | None) -> Curve:
    """The curve of a run about to (re)start from checkpoint ``last``: its recorded points up to that step, plus a
    point for each whole checkpoint up to it that has none (killed between its save and its evaluation)."""
    curve = Curve(out_dir, early)
    upto = run_folder.checkpoint_step(last) if last is not None else 0
    curve.keep_until(upto)
    for checkpoint in run_folder.checkpoints(Path(out_dir) / run_folder.CHECKPOINTS):
        step = run_folder.checkpoint_step(checkpoint)
        if step <= upto and step not in curve.steps() and (checkpoint / run_folder.FILES).is_file():
            curve.add(checkpoint, step)
    return curve


def callback(curve: Curve) -> Any:
    """A transformers ``TrainerCallback`` that takes a validation point of each checkpoint as it is saved (after
    ``run_folder.save_callback`` sealed it) and stops training by the rule (``control.should_training_stop``).
    Several processes: the main one evaluates, and its decision is broadcast so that all of them stop together."""
    from transformers import TrainerCallback

    class StopAtPlateau(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            stop = False
            if state.is_world_process_zero:
                checkpoint = Path(args.output_dir) / layout.checkpoint_name(state.global_step)
                stop = curve.add(checkpoint, state.global_step).stop
            if args.world_size > 1:
                from accelerate.utils import broadcast_object_list

                stop = broadcast_object_list([stop])[0]
            if stop:
                control.should_training_stop = True
            return control

    return StopAtPlateau()
