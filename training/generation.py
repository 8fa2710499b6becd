"""A model folder's ``generation_config.json``, fit for ``model.generate(**inputs)``: how long an answer may be
(``max_new_tokens``, from the model's lineage), every stop id and the pad id, and no ``max_length`` left at
transformers' default of 20. ``training.card`` writes it with every card; ``training.packaged`` for a converted model.
It reads the model's own ``config.json`` and tokenizer files, never transformers (no import)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curate import io


GENERATION_CONFIG = "generation_config.json"
DEFAULT_MAX_NEW_TOKENS = 1024  # when neither the evaluation nor the recipe says how long an answer may be


def max_new_tokens(lineage: Mapping[str, Any]) -> int:
    """How long an answer may be: the evaluation's generation budget, else the RL stage's completion length, else
    the SFT row length, else ``DEFAULT_MAX_NEW_TOKENS``."""
    recipe = lineage.get("recipe") or {}
    candidates = [
        (lineage.get("evaluation") or {}).get("max_new_tokens"),
        (recipe.get("rl") or {}).get("max_completion_length"),
        *((recipe.get(k) or {}).get("max_length") for k in ("sft", "redistill")),
    ]
    return next((int(c) for c in candidates if isinstance(c, int | float) and c > 0), DEFAULT_MAX_NEW_TOKENS)


def write_generation_config(model_dir: str | Path, new_tokens: int) -> Path | None:
    """Make ``generation_config.json`` fit for ``model.generate(**inputs)``: ``max_new_tokens`` (capped at the
    model's context), every stop id (the config's and the tokenizer's end-of-turn token), the pad id, and no
    ``max_length`` left at transformers' default of 20. None for a folder without ``config.json`` (no model).
    Weights and ``config.json`` (what ``files.json`` records) are never touched."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        return None
    config = io.read_json(model_dir / "config.json")
    path = model_dir / GENERATION_CONFIG
    gen = io.read_json(path) if path.is_file() else {}
    tokens = _special_token_ids(model_dir)
    eos: list[int] = []
    for ids in (gen.get("eos_token_id"), config.get("eos_token_id"), tokens.get("eos_token")):
        for i in ids if isinstance(ids, list) else [ids]:
            if isinstance(i, int) and i not in eos:
                eos.append(i)
    pad = next((i for i in (gen.get("pad_token_id"), config.get("pad_token_id"), tokens.get("pad_token"))
                if isinstance(i, int)), eos[0] if eos else None)  # fmt: skip
    gen.pop("_from_model_config", None)  # edited: transformers must not rebuild it from config.json
    if gen.get("max_length") == 20:
        gen.pop("max_length")
    limit = config.get("max_position_embeddings")
    gen["max_new_tokens"] = min(int(new_tokens), int(limit)) if isinstance(limit, int) else int(new_tokens)
    if eos:
        gen["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    if pad is not None:
        gen["pad_token_id"] = pad
    return io.write_json(path, gen)


def _special_token_ids(model_dir: Path) -> dict[str, int]:
    """``{"eos_token": id, "pad_token": id}`` from the saved tokenizer's files (no transformers import)."""
    cfg_path, tok_path = model_dir / "tokenizer_config.json", model_dir / "tokenizer.json"
    if not cfg_path.is_file() or not tok_path.is_file():
        return {}
    cfg = io.read_json(cfg_path)
    tok = io.read_json(tok_path)
    vocab = {t["content"]: t["id"] for t in tok.get("added_tokens") or []}
    model_vocab = (tok.get("model") or {}).get("vocab")
    out = {}
    for key in ("eos_token", "pad_token"):
        text = cfg.get(key)
        text = text.get("content") if isinstance(text, Mapping) else text
        ident = vocab.get(text) if text else None
        if ident is None and isinstance(model_vocab, Mapping) and text:
            ident = model_vocab.get(text)
        if isinstance(ident, int):
            out[key] = ident
    return out
