"""A training step's run folder: is it done, is it the same run, its last good checkpoint, its records.

Every training step (``training sft``, ``training rl``, re-distillation) writes one folder of the same shape::

    <identity file>    what makes the run (config, model, data hashes): a rerun with another identity is refused
    checkpoints/checkpoint-N/   Trainer checkpoints (plus the step's own files, e.g. the RL sampler state) and
                       files.json, written last: every file's size and sha256
    final/             the trained model, its card and lineage; files.json for the weights and config
    <result file>      written last: a folder with it (and a whole ``final/``) is done, and a rerun returns it

The SFT and RL steps answer "skip, resume or refuse?" through these functions, so the rule is written once. A
checkpoint or final model is used only when its files match ``files.json`` (sizes and sha256) and its weights are
finite: a truncated or damaged newest checkpoint (a changed byte too, or a header safetensors cannot parse) is set
aside (renamed ``bad-checkpoint-N``) with a warning and the newest whole one is used; a damaged ``final/`` makes the
step train again from its last whole checkpoint instead of being trusted. A model with non-finite weights is never
sealed as ``final/`` (``seal``): the step fails with one line and the folder is set aside as ``bad-final``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from curate import io
from curate.errors import CurateError, InputError
from curate.manifest import file_hash
from curate.rollout import model_check
from training import layout


# the one model check, shared with ``curate rollout``; the steps call it as ``run_folder.check_model``
FILES = model_check.FILES
check_files, check_weights, check_model = model_check.check_files, model_check.check_weights, model_check.check_model
check_shapes, weight_files, damage = model_check.check_shapes, model_check.weight_files, model_check.damage
read_files = model_check.read_files

# the step folder's names (``training.layout``): checkpoints/checkpoint-N/, final/, an RL checkpoint's curriculum
# position (training.grpo_trainer writes it), the Trainer's state
CHECKPOINTS, PREFIX, FINAL = layout.CHECKPOINTS, layout.PREFIX, layout.FINAL
SAMPLER_STATE, TRAINER_STATE = layout.SAMPLER_STATE, layout.TRAINER_STATE
# transformers' Trainer pickles its TrainingArguments here (output_dir, logging_dir: this machine's paths) and never
# reads it back (a resume reads trainer_state.json, the optimizer, scheduler and RNG states): dropped from every
# checkpoint and final model before its record (``drop_machine_files``)
MACHINE_FILES = ("training_args.bin",)
WEIGHTS = ("*.safetensors", "*.bin", "config.json")  # what ``final/``'s record covers (the card may rewrite the rest)


def bind(out_dir: Path, identity_file: str, identity: Mapping[str, Any], *, extra: Mapping[str, Any] | None = None,
          write: bool = True) -> bool:  # fmt: skip
    """Bind ``out_dir`` to this run's identity: refuse a folder holding another run (``InputError`` naming
    ``--out``), else write ``identity`` (plus ``extra``) when it is new. Returns whether the folder held this run
    already. (Not a ledger claim: ``curate.rollout.ledger`` claims sample indices.)"""
    saved = read_identity(out_dir, identity_file)
    if saved is not None:
        if {k: saved.get(k) for k in identity} != dict(identity):
            raise InputError(
                f"{out_dir} holds a run with another config, model or data; use a new --out folder "
                "(or delete it to start over)"
            )
        return True
    if write:
        io.write_json(Path(out_dir) / identity_file, io.jsonable({**identity, **dict(extra or {})}))
    return False


def read_identity(out_dir: Path, identity_file: str) -> dict[str, Any] | None:
    """What ``bind`` recorded in ``out_dir``'s identity file (the run's identity plus its ``extra``), None before
    it did. A step's own reader gives it its types (``training.rl.read_config``)."""
    path = Path(out_dir) / identity_file
    return json.loads(path.read_text()) if path.is_file() else None


def finished(out_dir: Path, result_file: str) -> dict[str, Any] | None:
    """The recorded result of a finished run (its ``result_file`` and a whole ``final/`` exist), else None. A
    ``final/`` whose files do not match its record is reported and the run counts as not finished."""
    out_dir = Path(out_dir)
    result, final = out_dir / result_file, out_dir / FINAL
    if not (result.is_file() and (final / "config.json").is_file()):
        return None
    problem = damage(final)  # its weights too: a record rewritten to match NaN bytes matches
    if problem is not None:
        _warn(f"{final} is damaged ({problem}); training it again from the last whole checkpoint")
        result.unlink()
        return None
    return json.loads(result.read_text())


def last_checkpoint(folder: Path, required: Sequence[str] = ()) -> Path | None:
    """The newest whole checkpoint in ``folder``: ``checkpoint-N`` with ``files.json`` (written after everything
    else), every file of ``required``, every file matching its record (size and sha256) and finite weights. A kill
    during a save leaves no record (skipped, the previous one is used); a checkpoint whose files no longer match
    (truncated, or bytes changed in place) or whose weights are not finite is set aside as ``bad-checkpoint-N`` with
    a warning that says what comes next: the previous checkpoint, or, when there is none, step 0."""
    saved = [
        ckpt
        for ckpt in checkpoints(folder)
        if (ckpt / FILES).is_file() and all((ckpt / name).is_file() for name in (*required, TRAINER_STATE))
    ]  # the rest were killed while saving: never complete
    for k in reversed(range(len(saved))):
        ckpt = saved[k]
        problem = damage(ckpt)
        if problem is None:
            return ckpt
        aside = set_aside(ckpt)
        then = f"going back to {saved[k - 1].name}" if k else "no checkpoint before it: training starts at step 0"
        _warn(f"{ckpt} is damaged ({problem}); set aside as {aside.name}, {then}")
    return None


def at_end(checkpoint: Path | None) -> bool:
    """Whether ``checkpoint`` holds its run's last step (its ``trainer_state.json``: ``global_step`` has reached
    ``max_steps``). transformers resumes such a checkpoint by training one step past the end before it checks (a
    20-step run resumed at step 20 ends at step 21), so the SFT and RL steps take their final model from it instead
    of resuming (``trainer_state``)."""
    if checkpoint is None:
        return False
    state = trainer_state(checkpoint)
    return bool(state.max_steps) and state.global_step >= state.max_steps


def trainer_state(checkpoint: Path) -> Any:
    """The transformers ``TrainerState`` a checkpoint recorded (its step, log history): what a trainer that
    finishes from a checkpoint at its end (``at_end``) reports instead of training."""
    from transformers import TrainerState

    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE))


def record_files(folder: Path, patterns: Sequence[str] = ("*",)) -> Path:
    """Write ``folder/files.json``: the size and sha256 of every file matching ``patterns``, after they are written.
    Checkpoints are hashed too, on the training path: a size catches a truncated file, not bytes changed in place
    (which once resumed SFT into a NaN model). The cost is one read of the checkpoint: measured on the H100 box, a
    Qwen2.5-1.5B-shaped checkpoint of transformers' Trainer (fp32 weights and AdamW moments, 18.5 GB) took 16-17 s
    to hash (1.1 GB/s) next to 18-22 s to save, once every ``save_steps`` (the GPU recipe saves every 40 RL steps,
    each minutes of GPU work); the tiny model's checkpoint hashes in milliseconds.
    Files the writer left private (safetensors writes weights 0600) get the mode the umask gives other files
    (``io.public_mode``)."""
    folder = Path(folder)
    record = {}
    for path in sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file() and p.name != FILES}):
        io.public_mode(path)
        record[path.name] = {"bytes": path.stat().st_size, "sha256": file_hash(path)}
    return io.write_json(folder / FILES, record)


class NotFinite(CurateError):
    """Training produced non-finite weights: the model is not sealed as final (the CLI prints one line, exit 1)."""

    exit_code = 1


def seal(final: Path) -> Path:
    """Seal a trained model folder as final: its weights must be finite, then ``files.json`` records the weights and
    config (size and sha256). A folder with a NaN or infinite weight is set aside as ``bad-final`` and ``NotFinite``
    is raised instead: a diverged run must never hand a NaN model to the next step (or to a user) as finished."""
    final = Path(final)
    problem = check_weights(final)
    if problem is not None:
        aside = set_aside(final)
        raise NotFinite(
            f"training produced a model with non-finite weights ({problem}); it is not sealed as {final} (set aside "
            f"as {aside.name}); lower the learning rate or check the data, then train again"
        )
    drop_machine_files(final)
    return record_files(final, WEIGHTS)


def drop_machine_files(folder: Path) -> None:
    """Remove the files of ``MACHINE_FILES`` from a model folder or checkpoint: no machine path in a model."""
    for name in MACHINE_FILES:
        (Path(folder) / name).unlink(missing_ok=True)


def set_aside(folder: Path) -> Path:
    """Rename a damaged model folder or checkpoint ``bad-<name>`` (replacing an older one), so no reader takes it
    again and its bytes stay for a look; returns the new path."""
    folder = Path(folder)
    aside = folder.with_name(f"bad-{folder.name}")
    shutil.rmtree(aside, ignore_errors=True)
    folder.rename(aside)
    return aside


def save_callback() -> Any:
    """A transformers ``TrainerCallback`` that writes ``files.json`` into each checkpoint right after the Trainer
    saved it (SFT and RL trainers both take it), so ``last_checkpoint`` can tell a whole checkpoint."""
    from transformers import TrainerCallback

    class RecordCheckpoint(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                saved = Path(args.output_dir) / layout.checkpoint_name(state.global_step)
                drop_machine_files(saved)
                record_files(saved)

    return RecordCheckpoint()


def load_tokenizer(model: str, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(model)``; a hub id that cannot be loaded (offline, unknown, gated) is one
    ``InputError`` line naming it."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, **kwargs)
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load model {model!r}: {first}") from None


_TIED: set[str] = set()  # names of tied parameters (``quiet_tied_weights``) of the models trained in this process


def quiet_tied_weights(model: Any) -> None:
    """Silence transformers' resume warning "There were missing keys in the checkpoint model loaded:
    ['lm_head.weight']" when every key it names is a tied parameter of ``model`` (a second name for a tensor the
    checkpoint holds once, as ``save_pretrained`` writes tied embeddings): nothing is missing then, and the resumed
    run is bit for bit the uninterrupted one. Any other missing or unexpected key still warns."""
    import logging

    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if first.setdefault(id(param), name) != name:
            _TIED.add(name)
    trainer_log = logging.getLogger("transformers.trainer")
    if not any(isinstance(f, _TiedKeysFilter) for f in trainer_log.filters):
        trainer_log.addFilter(_TiedKeysFilter())


class _TiedKeysFilter:
    """A ``logging`` filter: drops the missing-keys warning when it names tied parameters only (``_TIED``)."""

    def filter(self, record: Any) -> bool:
        import ast
        import re

        found = re.search(r"missing keys in the checkpoint model loaded: (\[.*\])", record.getMessage())
        if found is None:
            return True
        try:
            keys = ast.literal_eval(found.group(1))
        except (ValueError, SyntaxError):
            return True
        return not (keys and set(keys) <= _TIED)


def _warn(message: str) -> None:
    from curate.progress import log

    log(f"warning: {message}")


def checkpoints(folder: Path) -> list[Path]:
    """Every ``checkpoint-N`` folder under ``folder`` in step order."""
    folder = Path(folder)
    found = [p for p in folder.glob(f"{PREFIX}*") if checkpoint_step(p) is not None] if folder.is_dir() else []
    return sorted(found, key=checkpoint_step)


checkpoint_step = layout.checkpoint_step  # N of ``checkpoint-N``


def stage_compute(stage_dir: Path) -> dict[int, float]:
    """Cumulative tokens per step of one RL run folder (the compute axis), from its ``metrics.parquet``; the step
    number itself where tokens were not logged."""
    import polars as pl

    path = Path(stage_dir) / layout.METRICS
    if not path.is_file():
        return {}
    df = pl.read_parquet(path)
    if "tokens" not in df.columns:
        return {int(s): float(s) for s in df["step"].to_list()}
    return dict(zip(df["step"].cast(int).to_list(), df["tokens"].fill_null(strategy="forward").to_list(), strict=True))
