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


CHECKPOINTS = "checkpoints"
PREFIX = "checkpoint-"  # the Trainer's checkpoint folder names
FINAL = "final"
SAMPLER_STATE = "sampler_state.json"  # an RL checkpoint's curriculum position (training.grpo_trainer writes it)
TRAINER_STATE = "trainer_state.json"
FILES = "files.json"  # sizes and sha256 of a checkpoint's / final model's files, written after them
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
    problem = check_files(final)
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
    a warning that says what comes next: the previous checkpoint, or, when there is none, step 0 (issue 38.8)."""
    saved = [
        ckpt
        for ckpt in checkpoints(folder)
        if (ckpt / FILES).is_file() and all((ckpt / name).is_file() for name in (*required, TRAINER_STATE))
    ]  # the rest were killed while saving: never complete
    for k in reversed(range(len(saved))):
        ckpt = saved[k]
        problem = check_files(ckpt) or check_weights(ckpt)
        if problem is None:
            return ckpt
        aside = ckpt.with_name(f"bad-{ckpt.name}")
        shutil.rmtree(aside, ignore_errors=True)
        ckpt.rename(aside)
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


def read_files(folder: Path) -> dict[str, dict[str, Any]]:
    """``folder``'s ``files.json`` (``record_files``): ``{file name: {"bytes": n, "sha256": hex}}``. Raises
    ``OSError`` when it is missing, ``ValueError`` when it is not JSON."""
    return json.loads((Path(folder) / FILES).read_text())


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
        aside = final.with_name(f"bad-{final.name}")
        shutil.rmtree(aside, ignore_errors=True)
        final.rename(aside)
        raise NotFinite(
            f"training produced a model with non-finite weights ({problem}); it is not sealed as {final} (set aside "
            f"as {aside.name}); lower the learning rate or check the data, then train again"
        )
    return record_files(final, WEIGHTS)


def check_weights(folder: Path) -> str | None:
    """What is wrong with ``folder``'s safetensors weights, or None: every ``*.safetensors`` file must parse (its
    header, and a size that matches it) and hold only finite floating-point values. Reads each tensor once, through
    safetensors' own reader (memory-mapped, one tensor at a time)."""
    import torch
    from safetensors import SafetensorError, safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                for name in weights.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    tensor = weights.get_tensor(name)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        return f"{path.name}: {name} holds NaN or infinite values"
        except (SafetensorError, OSError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"{path.name} is not a readable safetensors file ({first})"
    return None


def check_files(folder: Path) -> str | None:
    """What is wrong with ``folder``'s files against ``files.json`` (a missing, resized or changed file), or None
    when they match or the folder has no record (written before records existed)."""
    if not (Path(folder) / FILES).is_file():
        return None
    try:
        record = read_files(folder)
    except ValueError:
        return f"{FILES} is unreadable"
    for name, want in record.items():
        path = Path(folder) / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, {want['bytes']} were written"
        if "sha256" in want and file_hash(path) != want["sha256"]:
            return f"{name} changed since it was written"
    return None


def save_callback() -> Any:
    """A transformers ``TrainerCallback`` that writes ``files.json`` into each checkpoint right after the Trainer
    saved it (SFT and RL trainers both take it), so ``last_checkpoint`` can tell a whole checkpoint."""
    from transformers import TrainerCallback

    class RecordCheckpoint(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                record_files(Path(args.output_dir) / f"{PREFIX}{state.global_step}")

    return RecordCheckpoint()


def check_model(model: str | Path) -> str:
    """A step's starting model as transformers should load it: a local model folder, or a hub id. A folder must have
    a ``config.json`` that parses and match its ``files.json`` when it has one (a folder this project sealed: its
    weights were finite then); without a record (a folder downloaded or copied from elsewhere) it must hold a weights
    file (``weight_files``), its safetensors weights must parse and be finite (``check_weights``: one read of the
    weights) and have the shapes of the model its ``config.json`` describes (``check_shapes``: their headers). A
    path that names no folder, and a damaged folder, are an ``InputError`` line here, in the project's words,
    instead of transformers' traceback minutes later (issue 38.5: after curation)."""
    text = str(model)
    path = Path(text).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise InputError(f"{text} is not a model folder (no config.json)")
        problem = check_files(path) or _check_config(path / "config.json")
        if problem is None and not _sealed(path):
            problem = weight_files(path)[1] or check_weights(path) or check_shapes(path)
        if problem is not None:
            raise InputError(f"model folder {text} is damaged: {problem}")
        return str(path)
    if text.startswith((".", "/", "~")) or text.count("/") > 1 or "\\" in text or not text.strip():
        raise InputError(f"model folder {text} does not exist (and it is not a hub id like Qwen/Qwen2.5-Math-1.5B)")
    return text


WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")  # transformers' sharded weights


def weight_files(folder: Path) -> tuple[list[Path], str | None]:
    """A model folder's weight files (every shard its index names, else ``*.safetensors``, else
    ``pytorch_model*.bin``), and what is wrong: no weights at all, or a shard its index names is missing."""
    for name in WEIGHT_INDEXES:
        if (folder / name).is_file():
            try:
                shards = sorted(set(io.read_json(folder / name)["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError):
                return [], f"{name} is not a weights index (no weight_map of tensor -> file)"
            missing = [shard for shard in shards if not (folder / shard).is_file()]
            if missing:
                return [], f"{missing[0]} (named by {name}) is missing"
            return [folder / shard for shard in shards], None
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        return [], "no weights file (model.safetensors, *.safetensors shards with their index, or pytorch_model.bin)"
    return files, None


def check_shapes(folder: Path) -> str | None:
    """What is wrong between ``config.json`` and the safetensors weights, or None: each tensor that the model
    ``config.json`` describes has (built on the meta device: no memory) must have that shape in the weights' headers
    (a config copied from another size, or with ``hidden_size`` edited). Quantized weights are packed in other
    shapes and are not compared; neither are tensors the model does not name (transformers ignores those)."""
    import torch
    from safetensors import SafetensorError, safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(folder))
        if getattr(config, "quantization_config", None):
            return None
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"config.json does not describe a causal language model transformers can build ({first})"
    want = {name: list(t.shape) for name, t in model.state_dict().items()}
    prefix = f"{model.base_model_prefix}."
    for path in (f for f in weight_files(folder)[0] if f.suffix == ".safetensors"):
        try:
            with safe_open(str(path), framework="pt") as weights:
                for key in weights.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    name = next((n for n in (key, prefix + key, key.removeprefix(prefix)) if n in want), None)
                    shape = weights.get_slice(key).get_shape() if name else None
                    if name and list(shape) != want[name]:
                        return (
                            f"config.json does not match the weights: {path.name} holds {key} of shape {list(shape)}, "
                            f"the model config.json describes has {want[name]}"
                        )
        except (SafetensorError, OSError) as exc:
            return f"{path.name} is not a readable safetensors file ({exc})"
    return None


def _check_config(path: Path) -> str | None:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return f"{path.name} is not valid JSON ({exc})"
    return None if isinstance(config, dict) else f"{path.name} is not a JSON object"


def _sealed(folder: Path) -> bool:
    """Whether ``folder`` has a ``files.json`` with content hashes (``seal``), which ``check_files`` verified."""
    try:
        record = read_files(folder)
    except (OSError, ValueError):
        return False
    return bool(record) and all("sha256" in entry for entry in record.values())


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
    found = [p for p in folder.glob(f"{PREFIX}*") if p.name[len(PREFIX) :].isdigit()] if folder.is_dir() else []
    return sorted(found, key=checkpoint_step)


def checkpoint_step(path: Path) -> int:
    """N of ``checkpoint-N``."""
    return int(Path(path).name.split("-")[-1])


def stage_compute(stage_dir: Path) -> dict[int, float]:
    """Cumulative tokens per step of one RL run folder (the compute axis), from its ``metrics.parquet``; the step
    number itself where tokens were not logged."""
    import polars as pl

    path = Path(stage_dir) / "metrics.parquet"
    if not path.is_file():
        return {}
    df = pl.read_parquet(path)
    if "tokens" not in df.columns:
        return {int(s): float(s) for s in df["step"].to_list()}
    return dict(zip(df["step"].cast(int).to_list(), df["tokens"].fill_null(strategy="forward").to_list(), strict=True))
