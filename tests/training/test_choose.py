"""``training.choose``: which SFT checkpoint the chain keeps, and when it says that checkpoint is no optimum."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from training.choose import best_point, still_rising


def _points(*rates: float, every: int = 500) -> list[dict]:
    return [{"step": every * (i + 1), "pass_at_1": r, "stderr": 0.03} for i, r in enumerate(rates)]


def test_the_best_checkpoint_is_the_highest_and_the_later_on_a_tie():
    assert best_point(_points(0.3, 0.6, 0.6, 0.5))["step"] == 1500


def test_a_validation_curve_still_rising_at_the_last_step_is_named_and_a_plateau_is_not():
    """Measured: seed 1's curve 0.53, 0.59, 0.62 at 2,000-3,000 steps was still rising (continued SFT took it to
    0.76), so the chain warns; a curve that peaked earlier, or is flat at its end, does not."""
    rising = _points(0.04, 0.07, 0.26, 0.53, 0.59, 0.62)
    assert still_rising(rising, 500)["step"] == 2500
    assert still_rising(_points(0.04, 0.53, 0.70, 0.62), 500) is None  # peaked before the end
    assert still_rising(_points(0.04, 0.53, 0.62, 0.62), 500) is None  # flat at the end
    assert still_rising(_points(0.5, 0.6), 500) is None  # too few points to call it a trend
    final = [*rising, {"step": 3001, "pass_at_1": 0.63, "stderr": 0.03}]  # the final model, a step after a checkpoint
    assert still_rising(final, 500)["step"] == 2500


# --------------------------------------------------------------------------------------------------- damaged models
def _model(folder: Path, value: float, step: int | None = None) -> Path:
    """A small model folder as the SFT step leaves one: weights, config, card; a checkpoint (``step``) recorded
    (``files.json``, ``trainer_state.json``), else sealed as the final model."""
    import torch
    from safetensors.torch import save_file

    from training import run_folder
    from training.card import write_model_card

    folder.mkdir(parents=True)
    save_file({"w": torch.full((64,), value)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    write_model_card(folder, kind="sft", base_model=None, data={}, recipe={}, metrics={})
    if step is None:
        run_folder.seal(folder)
    else:
        (folder / run_folder.TRAINER_STATE).write_text(json.dumps({"global_step": step}))
        run_folder.record_files(folder)
    return folder


def _sft_folder(tmp_path: Path) -> tuple[Path, Any]:
    """``sft/`` with checkpoints at steps 2 and 4 and the final model at 6, and the run around it."""
    from curate import io
    from training.chain import Run
    from training.recipe import recipe_from_mapping

    out = tmp_path / "ws" / "runs" / "r" / "sft"
    for step, value in ((2, 0.2), (4, 0.4)):
        _model(out / "checkpoints" / f"checkpoint-{step}", value, step)
    _model(out / "final", 0.6)
    (out / "metrics.json").write_text(json.dumps({"steps": 6}))
    recipe = recipe_from_mapping({"name": "r", "pool": "p", "sft": {"data": "x.parquet", "validation": {
        "every": 2, "k": 1, "limit": 4}}})  # fmt: skip
    lines: list[str] = []
    return out, (Run(recipe, io.Workspace(tmp_path / "ws"), out.parent, lines.append), lines)


def _fake_eval(monkeypatch, seen: list[str]) -> None:
    """Validation pass@1 peaks at checkpoint-4; every evaluation is recorded in ``seen``."""
    import polars as pl

    import training.evaluate as evaluate_mod

    def fake(model_dir, problems, cfg, **kw):
        seen.append(Path(model_dir).name)
        return {"pass_at_1": 0.5 if Path(model_dir).name == "checkpoint-4" else 0.2, "stderr": 0.1, "n_problems": 4,
                "k": 1}  # fmt: skip

    monkeypatch.setattr(evaluate_mod, "evaluate", fake)
    monkeypatch.setattr(evaluate_mod, "heldout_problems", lambda *a, **kw: pl.DataFrame({"problem_id": ["a"]}))


def _nan_with_matching_record(folder: Path) -> None:
    """The issue's NaN case: the weights' bytes hold NaN, and ``files.json`` was rewritten to match them."""
    import torch
    from safetensors.torch import save_file

    from training import run_folder

    save_file({"w": torch.full((64,), float("nan"))}, str(folder / "model.safetensors"))
    run_folder.record_files(folder, run_folder.WEIGHTS)


def test_a_damaged_checkpoint_is_skipped_with_one_line_before_the_choice(tmp_path, monkeypatch):
    """Issue 45.1: a damaged checkpoint before the choice was an 89-line traceback from ``_evaluate_points``. It is
    set aside with one line, never evaluated, and the choice is made among the whole ones."""
    from training.chain import ChainState
    from training.choose import choose_sft

    out, (run, lines) = _sft_folder(tmp_path)
    _nan_with_matching_record(out / "checkpoints" / "checkpoint-2")
    seen: list[str] = []
    _fake_eval(monkeypatch, seen)
    state = choose_sft(run, ChainState(model=str(out / "final"), initial="init"), out)
    assert seen == ["checkpoint-4", "final"] and state.model == str(out / "best")
    warned = [line for line in lines if "damaged" in line]
    assert len(warned) == 1 and "checkpoint-2" in warned[0] and "NaN" in warned[0]
    assert (out / "checkpoints" / "bad-checkpoint-2").is_dir()


@pytest.mark.parametrize("damage", ["random", "nan", "zeroed"])
def test_a_damaged_chosen_model_is_set_aside_and_chosen_again_from_whole_checkpoints(tmp_path, monkeypatch, damage):
    """Issue 45.1: a damaged ``sft/best`` (same-size random bytes, NaN bytes with ``files.json`` rewritten to match,
    zeroed bytes) was used as is. The rerun's choice checks it: one line, set aside as ``bad-best``, written again
    from the recorded points whose checkpoints are whole, nothing evaluated again; evaluation refuses it meanwhile."""
    from curate.errors import InputError
    from training import run_folder
    from training.chain import ChainState
    from training.choose import choose_sft
    from training.evaluate import EvalConfig, evaluate

    out, (run, lines) = _sft_folder(tmp_path)
    seen: list[str] = []
    _fake_eval(monkeypatch, seen)
    state = ChainState(model=str(out / "final"), initial="init")
    choose_sft(run, state, out)
    weights = out / "best" / "model.safetensors"
    whole = weights.read_bytes()
    if damage == "nan":
        _nan_with_matching_record(out / "best")
    else:
        size = weights.stat().st_size
        weights.write_bytes(whole[:-256] + (os.urandom(256) if damage == "random" else bytes(256)))
        assert weights.stat().st_size == size
    problems = pl.DataFrame({"problem_id": ["a"], "problem": ["1+1"], "answer": ["2"]})
    monkeypatch.undo()
    with pytest.raises(InputError, match=r"model folder .*best is damaged"):  # evaluation never samples it
        evaluate(out / "best", problems, EvalConfig(k=1))
    seen.clear()
    lines.clear()
    _fake_eval(monkeypatch, seen)
    again = choose_sft(run, state, out)
    assert seen == [] and again.model == str(out / "best")
    assert [line for line in lines if "damaged" in line] == [lines[0]] and "set aside as bad-best" in lines[0]
    assert weights.read_bytes() == whole and run_folder.damage(out / "best") is None
    assert (out / "bad-best").is_dir()


def test_validation_json_names_the_candidates_relative_to_the_sft_folder(tmp_path, monkeypatch):
    """Issue 45.7: ``sft/validation.json`` kept the absolute paths of the machine that chose; a copied workspace then
    named the original's checkpoints. They are kept relative to ``sft/`` and read back under it; an old record with
    absolute paths reads as it is."""
    from training.chain import ChainState
    from training.choose import VALIDATION, choose_sft, read_validation

    out, (run, _) = _sft_folder(tmp_path)
    _fake_eval(monkeypatch, [])
    choose_sft(run, ChainState(model=str(out / "final"), initial="init"), out)
    text = (out / VALIDATION).read_text()
    assert str(tmp_path) not in text
    assert [p["model"] for p in json.loads(text)["points"]] == ["checkpoints/checkpoint-2", "checkpoints/checkpoint-4",
                                                                "final"]  # fmt: skip
    assert read_validation(out)["points"][1]["model"] == str(out / "checkpoints" / "checkpoint-4")
    old = {**json.loads(text), "points": [{"step": 6, "model": "/elsewhere/sft/final", "pass_at_1": 0.2}]}
    (out / VALIDATION).write_text(json.dumps(old))
    assert read_validation(out)["points"][0]["model"] == "/elsewhere/sft/final"
