"""Is a model folder whole? The one check every reader of a model runs before it loads one.

A folder this project wrote (a checkpoint, a sealed ``final/`` or ``sft/best``) carries ``files.json``: the size and
sha256 of its files, written after them (``training.run_folder.record_files``). ``check_files`` compares the folder
with it, ``check_weights`` reads the safetensors weights (they must parse and be finite), ``check_model`` adds the
config and, for a folder from elsewhere, the weight files and their shapes. It lives here, below both the rollout
stage and ``training``, so ``curate rollout --model`` and every training step check a model the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from curate import io
from curate.errors import InputError
from curate.manifest import file_hash


FILES = "files.json"  # sizes and sha256 of a checkpoint's / final model's files, written after them


def read_files(folder: Path) -> dict[str, dict[str, Any]]:
    """``folder``'s ``files.json`` (``record_files``): ``{file name: {"bytes": n, "sha256": hex}}``. Raises
    ``OSError`` when it is missing, ``ValueError`` when it is not JSON."""
    return json.loads((Path(folder) / FILES).read_text())


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


def check_model(model: str | Path) -> str:
    """A model as transformers should load it, checked where it is read (the training steps, the SFT chooser,
    held-out evaluation, ``curate rollout --model``, ``training eval``): a local model folder, or a hub id. A folder
    must have a ``config.json`` that parses, match its ``files.json`` when it has one (a folder this project sealed
    or a checkpoint it recorded: sizes and sha256) and hold finite weights (``check_weights``: one read of the
    weights, since a record rewritten to match NaN bytes matches as well as a whole one). Without a
    record (a folder downloaded or copied from elsewhere) it must also hold a weights file (``weight_files``) of
    the shapes its ``config.json`` describes (``check_shapes``: their headers). A path that names no folder, and a
    damaged folder, are an ``InputError`` line here, in the project's words, instead of transformers' traceback
    minutes later (after curation) or a sampling error on NaN logits."""
    text = str(model)
    path = Path(text).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise InputError(f"{text} is not a model folder (no config.json)")
        problem = check_files(path) or _check_config(path / "config.json")
        if problem is None and not _sealed(path):
            problem = weight_files(path)[1] or check_shapes(path)
        problem = problem or check_weights(path)
        if problem is not None:
            raise InputError(f"model folder {text} is damaged: {problem}")
        return str(path)
    if text.startswith((".", "/", "~")) or text.count("/") > 1 or "\\" in text or not text.strip():
        raise InputError(f"model folder {text} does not exist (and it is not a hub id like Qwen/Qwen2.5-Math-1.5B)")
    return text


def damage(folder: Path) -> str | None:
    """What is wrong with a model folder or checkpoint this project recorded, or None when it is whole: its files
    against ``files.json`` (``check_files``), then its weights (``check_weights``: parse, finite)."""
    return check_files(folder) or check_weights(folder)


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
