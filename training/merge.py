"""Weight merging of fine-tuned models of one architecture: linear, TIES, task arithmetic (``training merge``).

Why here: CoScale-RL trains difficulty groups in independent RL runs and has to combine them; re-distillation
(``training.redistill``) is the paper's way, a weight merge is the cheap alternative to compare against (TRAINING.md:
linear and TIES merged two tiny experts well, task arithmetic with weights [1, 1] over-shot). The arithmetic is
``peft.utils.merge_utils`` (no new dependency), applied tensor by tensor over full state dicts read lazily from the
models' safetensors files, so memory stays at one output shard plus one tensor per model.

Methods, with task vectors ``tau_i = theta_i - theta_base``:

- ``linear``: ``sum_i w_i theta_i / sum_i w_i`` (a weighted average; the base is only checked for architecture);
- ``task_arithmetic``: ``theta_base + sum_i w_i tau_i`` (weights as given; default 1 each);
- ``ties``: trim each ``tau_i`` to its ``density`` largest magnitudes, elect a sign per entry
  (``majority_sign_method``), average the agreeing entries weighted by ``w_i`` (divided by the sum of the agreeing
  weights, as mergekit's normalised TIES; peft divides by their count, which scales with unequal weights) and add
  to the base. ``density`` 1.0 (default) trims nothing; the TIES paper keeps the top 20% (``--density 0.2``).

Models must share the architecture (config.json, apart from dtype and bookkeeping keys) and every tensor name and
shape; otherwise ``MergeError`` names the first differences. The output folder takes config, tokenizer and
generation config from the first model and gets a model card (``training.card``).

    training merge runs/g1/final runs/g2/final --base runs/sft/final --method ties --out runs/merged
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate import io
from curate.errors import ConfigError, CurateError


METHODS = ("linear", "ties", "task_arithmetic")
# config.json keys that differ between copies of one architecture without changing it
_VOLATILE = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache"}
_NOT_COPIED = {"model.safetensors.index.json", "README.md", "lineage.json"}
_SKIP_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


class MergeError(CurateError, ValueError):
    """Models cannot be merged: different architectures, tensor names or shapes, or no safetensors weights."""


@dataclass(frozen=True)
class MergeConfig:
    """How to merge (recipe key ``merge``).

    method: one of ``METHODS``. weights: one per model (None: equal; 1 each for task arithmetic). density /
    majority_sign_method: TIES trimming and sign election (``total`` or ``frequency``). max_shard_gb: output
    safetensors shard size.
    """

    method: str = "linear"
    weights: tuple[float, ...] | None = None
    density: float = 1.0
    majority_sign_method: str = "total"
    max_shard_gb: float = 5.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"merge.method must be one of {METHODS}, got {self.method!r}")
        if not 0 < self.density <= 1:
            raise ConfigError(f"merge.density must be in (0, 1], got {self.density}")
        if self.majority_sign_method not in ("total", "frequency"):
            raise ConfigError("merge.majority_sign_method must be 'total' or 'frequency'")
        if self.weights is not None and self.method != "task_arithmetic" and sum(self.weights) <= 0:
            raise ConfigError(f"merge.weights must have a positive sum for {self.method}, got {self.weights}")


# --------------------------------------------------------------------------------------------------- reading
def tensor_files(model_dir: Path) -> dict[str, Path]:
    """``{tensor name: safetensors file}`` of a model folder (one file or a sharded index)."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = io.read_json(index)["weight_map"]
        return {k: model_dir / v for k, v in weight_map.items()}
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise MergeError(f"{model_dir} has no safetensors weights (re-save it with save_pretrained)")
    with safe_open(single, framework="pt") as fh:
        return dict.fromkeys(fh.keys(), single)


def _shapes(files: dict[str, Path]) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    out: dict[str, tuple[int, ...]] = {}
    for path in sorted(set(files.values())):
        with safe_open(path, framework="pt") as fh:
            for key in fh.keys():  # noqa: SIM118 (safe_open is not iterable)
                out[key] = tuple(fh.get_slice(key).get_shape())
    return out


def _config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        raise MergeError(f"{model_dir} is not a model folder (no config.json)")
    return {k: v for k, v in io.read_json(path).items() if k not in _VOLATILE}


def check_compatible(models: Sequence[Path]) -> dict[str, tuple[int, ...]]:
    """Same architecture, tensor names and shapes across ``models``; returns the shapes. Raises ``MergeError``."""
    ref_cfg, ref_shapes = _config(models[0]), _shapes(tensor_files(models[0]))
    for other in models[1:]:
        cfg = _config(other)
        diff = sorted(k for k in set(ref_cfg) | set(cfg) if ref_cfg.get(k) != cfg.get(k))
        if diff:
            details = ", ".join(f"{k}: {ref_cfg.get(k)!r} vs {cfg.get(k)!r}" for k in diff[:5])
            raise MergeError(f"{models[0]} and {other} have different architectures ({details})")
        shapes = _shapes(tensor_files(other))
        if shapes != ref_shapes:
            names = sorted(set(shapes) ^ set(ref_shapes))
            bad = names or sorted(k for k in shapes if shapes[k] != ref_shapes[k])
            raise MergeError(f"{models[0]} and {other} differ in tensors: {bad[:5]}")
    return ref_shapes


# --------------------------------------------------------------------------------------------------- arithmetic
def merge_tensor(base: Any, tensors: list[Any], weights: Sequence[float], cfg: MergeConfig) -> Any:
    """One merged tensor (float32 arithmetic, returned in ``base``'s dtype; non-float tensors come from base)."""
    import torch
    from peft.utils import merge_utils

    if not base.is_floating_point():
        return base
    dtype = base.dtype
    base32 = base.to(torch.float32)
    w = torch.tensor(list(weights), dtype=torch.float32)
    if cfg.method == "linear":
        merged = merge_utils.task_arithmetic([t.to(torch.float32) for t in tensors], w / w.sum())
    elif cfg.method == "task_arithmetic":
        merged = base32 + merge_utils.task_arithmetic([t.to(torch.float32) - base32 for t in tensors], w)
    else:
        taus = [t.to(torch.float32) - base32 for t in tensors]
        if cfg.density < 1:
            taus = [merge_utils.prune(t, cfg.density, method="magnitude") for t in taus]
        stacked = torch.stack(taus, dim=0)
        agree = merge_utils.calculate_majority_sign_mask(stacked, method=cfg.majority_sign_method)
        wv = merge_utils.reshape_weight_task_tensors(stacked, w)
        num, den = (stacked * wv * agree).sum(dim=0), (wv * agree).sum(dim=0)
        merged = base32 + torch.where(den != 0, num / torch.where(den != 0, den, 1.0), 0.0)
    return merged.to(dtype)


def _weights(cfg: MergeConfig, n: int) -> tuple[float, ...]:
    if cfg.weights is None:
        return (1.0,) * n if cfg.method == "task_arithmetic" else (1.0 / n,) * n
    if len(cfg.weights) != n:
        raise ConfigError(f"merge.weights has {len(cfg.weights)} values for {n} models")
    return tuple(float(x) for x in cfg.weights)


# --------------------------------------------------------------------------------------------------- driver
def merge_models(
    models: Sequence[str | Path],
    *,
    base: str | Path | None,
    out_dir: str | Path,
    cfg: MergeConfig = MergeConfig(),
    groups: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Merge ``models`` (over ``base``) into ``out_dir``: safetensors shards + config + tokenizer + card.

    ``base`` is required for ``ties`` and ``task_arithmetic``; for ``linear`` it is optional (checked if given).
    ``groups``: what each model is (one mapping per model with its ``group`` name: CoScale's parallel groups,
    ``training.groups``), written into the card beside each one's share. Returns a summary (method, weights, each
    model's share = its weight over the sum, tensors, parameters).
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    from training.card import write_model_card

    paths = [Path(m) for m in models]
    if len(paths) < 2:
        raise ConfigError("merge needs at least two models")
    if base is None and cfg.method != "linear":
        raise ConfigError(f"merge method {cfg.method!r} needs --base (task vectors are differences to it)")
    base_path = Path(base) if base is not None else None
    weights = _weights(cfg, len(paths))
    shapes = check_compatible([*paths, *([base_path] if base_path is not None else [])])
    files = [tensor_files(p) for p in paths]
    base_files = tensor_files(base_path) if base_path is not None else files[0]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("model*.safetensors"), out_dir / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)
    limit = int(cfg.max_shard_gb * (1 << 30))
    shards: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    size = n_params = 0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The density .* no pruning")
        for key in sorted(shapes):
            with safe_open(base_files[key], framework="pt") as fh:
                b = fh.get_tensor(key)
            ts = []
            for f in files:
                with safe_open(f[key], framework="pt") as fh:
                    ts.append(fh.get_tensor(key))
            merged = merge_tensor(b, ts, weights, cfg).contiguous()
            n_params += merged.numel()
            nbytes = merged.numel() * merged.element_size()
            if current and size + nbytes > limit:
                shards.append(current)
                current, size = {}, 0
            current[key] = merged
            size += nbytes
    shards.append(current)
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    for name, shard in zip(names, shards, strict=True):
        save_file(shard, str(out_dir / name), metadata={"format": "pt"})
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for s in shards for t in s.values())
        weight_map = {k: name for name, s in zip(names, shards, strict=True) for k in s}
        io.write_json(out_dir / "model.safetensors.index.json", {"metadata": {"total_size": total},
                                                                  "weight_map": weight_map})  # fmt: skip
    for f in paths[0].iterdir():  # config, generation config, tokenizer, chat template
        if f.is_file() and f.name not in _NOT_COPIED and not f.name.endswith(_SKIP_SUFFIXES):
            shutil.copy2(f, out_dir / f.name)
    shares = [w / sum(weights) for w in weights] if sum(weights) else list(weights)
    summary = {
        "method": cfg.method,
        "weights": list(weights),
        "shares": shares,
        "models": [str(p) for p in paths],
        "base": None if base_path is None else str(base_path),
        "tensors": len(shapes),
        "parameters": n_params,
        "shards": len(shards),
    }
    write_model_card(
        out_dir,
        kind="merge",
        base_model=str(base_path) if base_path is not None else None,
        data={
            "models": summary["models"],
            "weights": summary["weights"],
            "method": cfg.method,
            **(_group_shares(groups, shares) if groups else {}),
        },
        recipe={"merge": dataclasses.asdict(cfg)},
        metrics={"tensors": len(shapes), "parameters": n_params},
        parents=paths,
    )
    return summary


def _group_shares(groups: Sequence[Mapping[str, Any]], shares: Sequence[float]) -> dict[str, Any]:
    """The card's data of a merge of named groups: each group's share of the merge (``group_shares``) and what each
    group was (``groups``: its model, prompts, steps, rollouts per prompt)."""
    if len(groups) != len(shares):
        raise ConfigError(f"merge: {len(groups)} group descriptions for {len(shares)} models")
    return {
        "group_shares": {str(g["group"]): round(float(w), 6) for g, w in zip(groups, shares, strict=True)},
        "groups": [{**dict(g), "share": float(w)} for g, w in zip(groups, shares, strict=True)],
    }
