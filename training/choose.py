"""The SFT model at its validation optimum, not at its last step.

Where SFT stops decides what RL and every baseline start from. The last step is not the best one: a model may have
memorized its traces by then, or (with scarce traces) still sit on a false plateau. With ``sft.validation``
(``training.recipe.SFTValidation``) the SFT step keeps a checkpoint every ``every`` steps; ``choose_sft`` evaluates
each and the final model on the validation split (never the test split the run reports on), takes the best (the
later one on a tie), and makes it the chain's SFT model: ``sft/best/``, a copy of the final folder (tokenizer,
card, lineage) holding the chosen checkpoint's weights, sealed, its card saying which step was chosen and why.
``sft/validation.json`` keeps every point (``read_validation``). The choice is made once: a rerun reads it back.
With ``sft.validation.patience`` SFT took the points itself as it trained and stopped at its plateau
(``training.plateau``): they are read from ``sft/curve.json`` instead of evaluated again, and the chain says why
training stopped (``validation.json``'s ``stopped``, the card's "SFT stopped at step ..." line).

A chosen model far below the validation pass@1 the recipe records (``reference`` - ``band``) gets one warning line:
the SFT step landed outside the band its recipe was chosen in (e.g. the same seed on another CPU memorized its
traces, 0.238 where the README printed 0.631), so what follows will not match the recipe's figures.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from curate import io
from curate.errors import InputError
from training import layout, run_folder
from training.chain import ChainState, Run


BEST, VALIDATION = layout.BEST, layout.VALIDATION  # sft/best/: the chosen model; sft/validation.json: every point


def read_validation(out_dir: str | Path) -> dict[str, Any] | None:
    """``sft/validation.json`` (``choose_sft`` writes it once the choice is made), or None. Each point's model is
    kept relative to the SFT folder (``checkpoints/checkpoint-500``, ``final``: a copied workspace names its own
    folders) and read back as a path there; a record written with absolute paths reads as it is."""
    path = Path(out_dir) / VALIDATION
    if not path.is_file():
        return None
    record = io.read_json(path)
    for point in record.get("points") or []:
        point["model"] = str(Path(out_dir) / point["model"])  # an absolute path stays itself
    return record


def _write_validation(out_dir: Path, record: dict[str, Any]) -> None:
    """``sft/validation.json`` with every point's model relative to ``out_dir`` (``read_validation``)."""
    points = [{**p, "model": _relative(Path(p["model"]), out_dir)} for p in record["points"]]
    io.write_json(out_dir / VALIDATION, {**record, "points": points})


def _relative(path: Path, folder: Path) -> str:
    return str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)


def best_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The highest pass@1, the later step on a tie.

    >>> best_point([{"step": 5, "pass_at_1": 0.4}, {"step": 10, "pass_at_1": 0.4}, {"step": 15, "pass_at_1": 0.3}])
    {'step': 10, 'pass_at_1': 0.4}
    """
    return max(points, key=lambda p: (p["pass_at_1"], p["step"]))


def still_rising(points: list[dict[str, Any]], every: int) -> dict[str, Any] | None:
    """The point ``every`` or more steps before the last, when the last point is the best and the last three points
    (a checkpoint a few steps before the final one left out) rise one after another: validation was still rising
    when SFT stopped, so the chosen model is the best seen, not an optimum (a continued-SFT baseline will gain on
    it). None otherwise.

    >>> pts = [{"step": 500, "pass_at_1": 0.5}, {"step": 1000, "pass_at_1": 0.55}, {"step": 1500, "pass_at_1": 0.6}]
    >>> still_rising(pts, 500)["step"], still_rising(pts[1:], 500), still_rising([*pts, {**pts[1], "step": 2000}], 500)
    (1000, None, None)
    """
    last = points[-1]
    earlier = [p for p in points if p["step"] <= last["step"] - every][-2:]
    if len(earlier) < 2 or best_point(points)["step"] != last["step"]:
        return None
    rates = [p["pass_at_1"] for p in (*earlier, last)]
    return earlier[-1] if rates[0] < rates[1] < rates[2] else None


def _evaluate_points(run: Run, out_dir: Path) -> list[dict[str, Any]]:
    """Validation pass@1 of every kept checkpoint and of the final model (its step: the run's last)."""
    from training.evaluate import evaluate, heldout_problems
    from training.sft import read_metrics

    sec, ev = run.recipe.sft.validation, run.recipe.eval
    problems = heldout_problems(run.ws, run.recipe.pool, split=sec.split, limit=sec.limit, sources=ev.sources)
    cfg = dataclasses.replace(ev.config(sec.limit), k=sec.k)
    last = int(read_metrics(out_dir)["steps"])
    candidates = {run_folder.checkpoint_step(c): c for c in run_folder.checkpoints(out_dir / run_folder.CHECKPOINTS)}
    candidates[last] = out_dir / run_folder.FINAL  # the final model stands for its step's checkpoint
    points = []
    for step in sorted(candidates):
        if not _whole(run, candidates[step]):
            continue
        result = evaluate(candidates[step], problems, cfg, progress=True)
        points.append({"step": step, "model": str(candidates[step]),
                       **{k: result[k] for k in ("pass_at_1", "stderr", "n_problems", "k")}})  # fmt: skip
        run.echo(f"[chain] sft: {sec.split} pass@1 at step {step}: {result['pass_at_1']:.3f} ± {result['stderr']:.3f}")
    if not points:
        raise InputError(f"{out_dir}: no whole checkpoint or final model to choose the SFT model from; delete the "
                         "folder to train SFT again")  # fmt: skip
    return points


def _training_points(run: Run, out_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
    """The validation points SFT took while it trained (``training.plateau``, with ``sft.validation.patience``),
    each echoed as ``_evaluate_points`` echoes its own, and why training stopped (``plateau.why_stopped``, from the
    SFT step's metrics); None when SFT took none (no early stop: ``_evaluate_points`` evaluates after training)."""
    from training.plateau import POINT_KEYS, read_curve
    from training.sft import read_metrics

    curve = read_curve(out_dir)
    if curve is None or not curve.get("points"):
        return None
    points = [{k: p[k] for k in POINT_KEYS} for p in curve["points"]]
    for p in points:
        run.echo(f"[chain] sft: {curve['split']} pass@1 at step {p['step']}: {p['pass_at_1']:.3f} ± {p['stderr']:.3f}")
    return points, (read_metrics(out_dir) or {}).get("stopped")


def _whole(run: Run, model: Path) -> bool:
    """Whether a candidate of the choice is whole (``run_folder.damage``: its ``files.json``, finite weights). A
    damaged checkpoint is set aside (``bad-checkpoint-N``) with one line and never evaluated or chosen
    (unchecked, NaN weights were an 89-line sampling traceback, zeroed bytes a quietly worse model)."""
    problem = run_folder.damage(model) if (model / "config.json").is_file() else "it is missing"
    if problem is None:
        return True
    if layout.checkpoint_step(model) is not None and model.is_dir():
        run.echo(f"[chain] warning: {model} is damaged ({problem}); set aside as "
                 f"{run_folder.set_aside(model).name}, not a candidate")  # fmt: skip
    else:
        run.echo(f"[chain] warning: {model} is damaged ({problem}); not a candidate")
    return False


def _write_best(out_dir: Path, chosen: dict[str, Any], choice: dict[str, Any]) -> Path:
    """``sft/best/``: the final folder with the chosen checkpoint's weights, sealed, its card saying so."""
    from training.card import record_choice

    best, tmp = out_dir / BEST, out_dir / f".{BEST}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(out_dir / run_folder.FINAL, tmp)
    source = Path(chosen["model"])
    if source != out_dir / run_folder.FINAL:
        for pattern in ("*.safetensors", "*.bin"):  # the weights; config, tokenizer and card are the final's
            for old in tmp.glob(pattern):
                old.unlink()
            for path in source.glob(pattern):
                shutil.copy2(path, tmp / path.name)
    record_choice(tmp, choice)
    run_folder.seal(tmp)
    shutil.rmtree(best, ignore_errors=True)
    tmp.rename(best)
    return best


def choose_sft(run: Run, state: ChainState, out_dir: Path) -> ChainState:
    """With ``sft.validation``, the chain's SFT model becomes the best checkpoint on the validation split
    (``sft/best``; module docstring); the state's model and its pending evaluation follow. Without it, nothing."""
    sec = run.recipe.sft.validation if run.recipe.sft is not None else None
    if sec is None:
        return state
    record = read_validation(out_dir)
    best = out_dir / BEST
    if record is not None and (best / run_folder.FILES).is_file() and (problem := run_folder.damage(best)):
        run.echo(f"[chain] warning: {best} is damaged ({problem}); set aside as {run_folder.set_aside(best).name}, "
                 "choosing again from the whole checkpoints")  # fmt: skip
    if record is None or not (best / run_folder.FILES).is_file():
        # points already evaluated are not evaluated again: a damaged choice is made again from the whole ones
        points = [p for p in record["points"] if _whole(run, Path(p["model"]))] if record is not None else []
        stopped = record.get("stopped") if record is not None else None
        if not points:
            points, stopped = _training_points(run, out_dir) or (_evaluate_points(run, out_dir), None)
            points = [p for p in points if _whole(run, Path(p["model"]))]
        if not points:
            raise InputError(f"{out_dir}: no whole SFT checkpoint or final model to choose from: train SFT again")
        chosen = best_point(points)
        choice = {"split": sec.split, "step": chosen["step"], "steps": points[-1]["step"], "candidates": len(points),
                  **{k: chosen[k] for k in ("pass_at_1", "stderr", "n_problems", "k")},
                  **({"stopped": stopped["text"]} if stopped else {})}  # fmt: skip
        _write_best(out_dir, chosen, choice)
        record = {"points": points, "chosen": choice, "reference": sec.reference, "band": sec.band,
                  "stopped": stopped}  # fmt: skip
        _write_validation(out_dir, record)
    choice, stopped = record["chosen"], record.get("stopped")
    if stopped:
        run.echo(f"[chain] sft: {stopped['text']}")
    run.echo(f"[chain] sft: step {choice['step']} of {choice['steps']} chosen on the {choice['split']} split "
             f"(pass@1 {choice['pass_at_1']:.3f} ± {choice['stderr']:.3f}, the best of "
             f"{choice['candidates']})")  # fmt: skip
    if sec.reference is not None and choice["pass_at_1"] < sec.reference - sec.band:
        run.echo(f"[chain] warning: the SFT model's {choice['split']} pass@1 {choice['pass_at_1']:.3f} is far below "
                 f"the {sec.reference:.3f} its recipe's settings reached when they were chosen (band {sec.band}): "
                 "this seed, on this machine, landed outside the recipe's band, and what follows will not match "
                 "its figures")  # fmt: skip
    rising = still_rising(record["points"], sec.every)
    if rising is not None and (stopped or {}).get("rule") != "plateau":  # the rule saw no gain beyond its noise
        run.echo(
            f"[chain] warning: {choice['split']} pass@1 was still rising at the last step ({rising['step']}: "
            f"{rising['pass_at_1']:.3f}, {choice['steps']}: {choice['pass_at_1']:.3f}): the SFT model is the "
            "best seen, not an optimum; more sft.max_steps may pay, and continued SFT will gain on it"
        )
    model = str(out_dir / BEST)
    pending = {**(state.pending or {}), "model": model}
    return dataclasses.replace(state, model=model, pending=pending if state.pending else None)
