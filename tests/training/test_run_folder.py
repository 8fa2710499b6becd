"""A step's run folder (training.run_folder): a truncated or damaged checkpoint is set aside and the newest whole
one used (a byte changed in place and a broken header too); a model with non-finite weights is never sealed; a
damaged final model is not trusted; a checkpoint killed mid-save is skipped; weights get the umask's mode.
Checkpoints here are hand-made folders: the rule is about files, not about training."""

from __future__ import annotations

import json
import os
import stat
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from curate.errors import InputError
from training import run_folder as rf


def _weights(path, value=0.5):
    save_file({"w": torch.full((250,), value)}, str(path))  # 1,000 bytes of float32 after the header


def _checkpoint(root, step, record=True, value=0.5):
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    _weights(ckpt / "model.safetensors", value)
    (ckpt / rf.SAMPLER_STATE).write_text("{}")
    (ckpt / rf.TRAINER_STATE).write_text(json.dumps({"global_step": step}))
    if record:  # as the SFT and RL trainers record their checkpoints: through the save callback
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        rf.save_callback().on_save(SimpleNamespace(output_dir=str(root)), state, None)
    return ckpt


def _overwrite(path, offset, data):
    """Change bytes in place: the file keeps its size."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)
    assert path.stat().st_size == size


def test_the_newest_whole_checkpoint_is_used_and_a_damaged_one_set_aside(tmp_path, capsys):
    root = tmp_path / "checkpoints"
    _checkpoint(root, 2)
    newest = _checkpoint(root, 4)
    assert rf.last_checkpoint(root, required=(rf.SAMPLER_STATE,)) == newest
    size = (newest / "model.safetensors").stat().st_size
    with (newest / "model.safetensors").open("r+b") as f:  # truncated after it was written
        f.truncate(10)
    assert rf.last_checkpoint(root, required=(rf.SAMPLER_STATE,)) == root / "checkpoint-2"
    assert not newest.exists() and (root / "bad-checkpoint-4" / "model.safetensors").is_file()
    err = capsys.readouterr().err
    assert f"checkpoint-4 is damaged (model.safetensors has 10 bytes, {size} were written)" in err
    assert "set aside as bad-checkpoint-4, going back to checkpoint-2" in err


def test_a_damaged_only_checkpoint_says_the_stage_starts_again_from_step_0(tmp_path, capsys):
    """Issue 38.8: a damaged only checkpoint said "using the previous checkpoint" when there was none (the stage
    restarted from step 0). One killed while saving (no record) does not count as one to go back to."""
    root = tmp_path / "checkpoints"
    _checkpoint(root, 1, record=False)
    only = _checkpoint(root, 2)
    _overwrite(only / "model.safetensors", 200, b"\xff" * 4)
    assert rf.last_checkpoint(root, required=(rf.SAMPLER_STATE,)) is None
    err = capsys.readouterr().err
    assert "set aside as bad-checkpoint-2, no checkpoint before it: training starts at step 0" in err
    assert "previous checkpoint" not in err and len(err.strip().splitlines()) == 1


def test_bytes_changed_in_place_set_a_checkpoint_aside(tmp_path, capsys):
    """The size is unchanged: only the recorded sha256 tells (issue 30: such a checkpoint resumed SFT into NaN)."""
    root = tmp_path / "checkpoints"
    _checkpoint(root, 2)
    newest = _checkpoint(root, 4)
    _overwrite(newest / "model.safetensors", (newest / "model.safetensors").stat().st_size - 100, b"\x7f" * 8)
    assert rf.last_checkpoint(root) == root / "checkpoint-2"
    err = capsys.readouterr().err
    assert "checkpoint-4 is damaged (model.safetensors changed since it was written)" in err
    assert len(err.strip().splitlines()) == 1 and (root / "bad-checkpoint-4").is_dir()


def test_a_broken_header_or_nan_weights_set_a_checkpoint_aside_without_hashes(tmp_path, capsys):
    """Checkpoints recorded before hashes (sizes only) are still checked by content: the header must parse and the
    weights be finite."""
    root = tmp_path / "checkpoints"
    _checkpoint(root, 2)
    header = _checkpoint(root, 4)
    nan = _checkpoint(root, 6, value=float("nan"))
    for ckpt in (root / "checkpoint-2", header, nan):  # the older record: sizes only
        record = json.loads((ckpt / rf.FILES).read_text())
        (ckpt / rf.FILES).write_text(json.dumps({k: {"bytes": v["bytes"]} for k, v in record.items()}))
    _overwrite(header / "model.safetensors", 8, b"\xff\xfe")  # inside the JSON header
    assert rf.last_checkpoint(root) == root / "checkpoint-2"
    err = capsys.readouterr().err
    assert "checkpoint-6 is damaged (model.safetensors: w holds NaN or infinite values)" in err
    assert "checkpoint-4 is damaged (model.safetensors is not a readable safetensors file" in err


def test_a_model_with_non_finite_weights_is_never_sealed(tmp_path):
    final = tmp_path / "run" / rf.FINAL
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    _weights(final / "model.safetensors", float("inf"))
    with pytest.raises(rf.NotFinite, match=r"non-finite weights \(model.safetensors: w holds NaN or infinite"):
        rf.seal(final)
    assert not final.exists() and not (tmp_path / "run" / "bad-final" / rf.FILES).exists()
    final.mkdir()
    (final / "config.json").write_text("{}")
    _weights(final / "model.safetensors")
    rf.seal(final)
    assert set(json.loads((final / rf.FILES).read_text())) == {"config.json", "model.safetensors"}


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
    save_file({"w": torch.ones(16)}, str(final / "model.safetensors"))
    (final / "README.md").write_text("card")
    rf.record_files(final, rf.WEIGHTS)
    (out / "summary.json").write_text(json.dumps({"steps": 3}))
    assert rf.finished(out, "summary.json") == {"steps": 3}
    (final / "README.md").write_text("a card rewritten with lineage")  # not part of the weights' record
    assert rf.finished(out, "summary.json") == {"steps": 3}
    (final / "model.safetensors").write_bytes(b"x" * 32)
    assert rf.finished(out, "summary.json") is None  # trains again from its last whole checkpoint
    assert not (out / "summary.json").exists() and "damaged" in capsys.readouterr().err
    # issue 45.1: NaN weights with files.json rewritten to match them are damaged too
    save_file({"w": torch.full((16,), float("nan"))}, str(final / "model.safetensors"))
    rf.record_files(final, rf.WEIGHTS)
    (out / "summary.json").write_text(json.dumps({"steps": 3}))
    assert rf.finished(out, "summary.json") is None and "NaN" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"is damaged: model.safetensors: w holds NaN"):
        rf.check_model(final)  # every reader's check (evaluation, rollout, the next step) refuses it too


def test_claim_refuses_a_folder_of_another_run(tmp_path):
    assert rf.bind(tmp_path, "config.json", {"a": 1}) is False
    assert rf.bind(tmp_path, "config.json", {"a": 1}) is True
    with pytest.raises(InputError, match="another config"):
        rf.bind(tmp_path, "config.json", {"a": 2})


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


def test_only_the_tied_embeddings_missing_from_a_checkpoint_are_silenced():
    """A resume loads tied embeddings once, so transformers warns that ``lm_head.weight`` is missing (issue 30.7):
    that line is expected for tied weights and silenced; any other missing key still warns."""
    import logging

    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)  # fmt: skip
    rf.quiet_tied_weights(Qwen2ForCausalLM(config))
    log = logging.getLogger("transformers.trainer")  # where the Trainer logs it (transformers.utils.logging)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    log.addHandler(handler)
    try:
        log.warning("There were missing keys in the checkpoint model loaded: ['lm_head.weight'].")
        log.warning("There were missing keys in the checkpoint model loaded: ['lm_head.weight', 'model.norm.weight'].")
    finally:
        log.removeHandler(handler)
    assert seen == ["There were missing keys in the checkpoint model loaded: ['lm_head.weight', 'model.norm.weight']."]


def test_no_model_folder_or_checkpoint_keeps_the_trainers_pickled_machine_paths(tmp_path):
    """Issue 45.7: ``training_args.bin`` (transformers pickles its TrainingArguments: output_dir, logging_dir) was
    in every checkpoint and model folder. Nothing reads it back; a checkpoint's record and a sealed model drop it."""
    from types import SimpleNamespace as NS

    ckpt = tmp_path / "checkpoints" / "checkpoint-2"
    final = tmp_path / "final"
    for folder in (ckpt, final):
        folder.mkdir(parents=True)
        save_file({"w": torch.ones(4)}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text("{}")
        torch.save({"output_dir": str(tmp_path)}, folder / "training_args.bin")
    rf.save_callback().on_save(NS(output_dir=str(tmp_path / "checkpoints")), NS(is_world_process_zero=True,
                               global_step=2), None)  # fmt: skip
    rf.seal(final)
    for folder in (ckpt, final):
        assert not (folder / "training_args.bin").exists() and "training_args.bin" not in rf.read_files(folder)
        assert rf.check_files(folder) is None
