"""A step's run folder (training.run_folder): a truncated or damaged checkpoint is set aside and the newest whole
one used; a damaged final model is not trusted; a checkpoint killed mid-save is skipped; weights get the umask's
mode. Checkpoints here are hand-made folders: the rule is about files, not about training."""

from __future__ import annotations

import json
import os
import stat

import pytest

from curate.errors import InputError
from training import run_folder as rf


def _checkpoint(root, step, record=True, weights=b"w" * 1000):
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(weights)
    (ckpt / rf.SAMPLER_STATE).write_text("{}")
    (ckpt / rf.TRAINER_STATE).write_text(json.dumps({"global_step": step}))
    if record:
        rf.record_files(ckpt)
    return ckpt


def test_the_newest_whole_checkpoint_is_used_and_a_damaged_one_set_aside(tmp_path, capsys):
    root = tmp_path / "checkpoints"
    _checkpoint(root, 2)
    newest = _checkpoint(root, 4)
    assert rf.last_checkpoint(root, required=(rf.SAMPLER_STATE,)) == newest
    with (newest / "model.safetensors").open("r+b") as f:  # truncated after it was written
        f.truncate(10)
    assert rf.last_checkpoint(root, required=(rf.SAMPLER_STATE,)) == root / "checkpoint-2"
    assert not newest.exists() and (root / "bad-checkpoint-4" / "model.safetensors").is_file()
    assert "checkpoint-4 is damaged (model.safetensors has 10 bytes, 1000 were written)" in capsys.readouterr().err


def test_a_truncated_trainer_state_and_a_killed_save_are_never_used(tmp_path):
    root = tmp_path / "checkpoints"
    _checkpoint(root, 2)
    broken = _checkpoint(root, 4)
    (broken / rf.TRAINER_STATE).write_text('{"global_st')  # truncated JSON: same name, other bytes
    _checkpoint(root, 6, record=False)  # killed after the Trainer's files, before the record: never complete
    assert rf.last_checkpoint(root) == root / "checkpoint-2"
    assert (root / "checkpoint-6").is_dir()  # incomplete, not damaged: left for the run to overwrite


def test_a_damaged_final_model_is_not_a_finished_run(tmp_path, capsys):
    out = tmp_path / "run"
    final = out / rf.FINAL
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (final / "model.safetensors").write_bytes(b"x" * 64)
    (final / "README.md").write_text("card")
    rf.record_files(final, rf.WEIGHTS)
    (out / "summary.json").write_text(json.dumps({"steps": 3}))
    assert rf.finished(out, "summary.json") == {"steps": 3}
    (final / "README.md").write_text("a card rewritten with lineage")  # not part of the weights' record
    assert rf.finished(out, "summary.json") == {"steps": 3}
    (final / "model.safetensors").write_bytes(b"x" * 32)
    assert rf.finished(out, "summary.json") is None  # trains again from its last whole checkpoint
    assert not (out / "summary.json").exists() and "damaged" in capsys.readouterr().err


def test_claim_refuses_a_folder_of_another_run(tmp_path):
    assert rf.claim(tmp_path, "config.json", {"a": 1}) is False
    assert rf.claim(tmp_path, "config.json", {"a": 1}) is True
    with pytest.raises(InputError, match="another config"):
        rf.claim(tmp_path, "config.json", {"a": 2})


def test_private_weights_get_the_umask_mode(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"w")
    weights.chmod(0o600)  # as safetensors writes them
    old = os.umask(0o022)
    try:
        rf.record_files(tmp_path, rf.WEIGHTS)
    finally:
        os.umask(old)
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644
