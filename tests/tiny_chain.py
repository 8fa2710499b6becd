"""The small curate + training recipes the chain tests share (tests/training/test_runner.py, the Prefect flow test).

A 40-problem level-1 arithmetic pool with an 8-problem test split, no embeddings, a FastCuRL curriculum and 2
solutions per problem; the tiny model, one SFT epoch, CISPO stages of a few steps. ``train`` entries override or add
top-level keys of the training recipe (``stages``, ``rl``, ``eval``, ``decide``, ...).

    recipe = write_tiny_chain(tmp_path, name="chain", stages={"stage1": {"max_steps": 2}})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_tiny_chain(tmp_path: Path, rl_source: bool = False, unchecked_teacher: bool = False, **train: Any) -> Path:
    """Write ``curate.yaml`` and ``train.yaml`` into ``tmp_path``; return the training recipe's path.

    rl_source: add a second training source ``t/rl`` (longer chains) that the SFT selection leaves out, for the
    ``measure`` step's RL candidates. unchecked_teacher: the SFT source is a teacher's traces, every one wrong
    (``gen://...&teacher_error=1.0``), kept unchecked (``solutions.recheck: false``): the no-curation baseline's
    SFT data, where a card must say what was not checked."""
    curate_recipe = tmp_path / "curate.yaml"
    eval_split = (train.get("eval") or {}).get("split", "test")  # the held-out source is the split the run evaluates
    teacher = "&min_ops=2&max_ops=3&teacher_error=1.0" if unchecked_teacher else ""
    rl = [{"path": "gen://arith?n=30&seed=2&max_level=1&min_ops=2&max_ops=3", "name": "t/rl", "split": "train"}]
    curate_recipe.write_text(yaml.safe_dump({
        "name": "t", "pool": "t", "seed": 0,
        "stages": ["ingest", "score", "select", "curriculum", "solutions"],
        "ingest": {"sources": [
            {"path": f"gen://arith?n=40&seed=0&max_level=1{teacher}", "name": "t/train", "split": "train"},
            {"path": "gen://arith?n=8&seed=1&max_level=1", "name": "t/eval", "split": eval_split},
            *(rl if rl_source else []),
        ]},
        "score": {"use_embeddings": False},
        "select": {"size": 24, "name": "t", "plots": False, "clusters": 1, "sources": ["t/train"]},
        "curriculum": {"name": "t", "plan": "fastcurl", "selection": "t"},
        "solutions": {"k": 2, "selection": "t",
                      **({"recheck": False, "near_duplicate": 1.0} if unchecked_teacher else {})},
    }))  # fmt: skip
    recipe = {
        "name": "chain", "pool": "t", "model": "tiny", "curate_recipe": str(curate_recipe), "curriculum": "t",
        "tiny": {"size": "tiny", "corpus_problems": 300, "vocab_size": 400},
        "sft": {"data": "solutions/t/sft.parquet", "learning_rate": 1e-3, "epochs": 1, "per_device_batch_size": 8,
                "max_length": 256, "gradient_checkpointing": False},
        "rl": {"loss_type": "cispo", "learning_rate": 1e-4, "num_generations": 2, "prompts_per_step": 2,
               "save_steps": 1, "gradient_checkpointing": False, "max_prompt_length": None},
        "plan_fields": ["max_response_length"], "scale": {"context": 1 / 128},
        "stages": {"stage1": {"max_steps": 2}, "stage2": {"max_steps": 2, "max_completion_length": 96}},
        "only_stages": ["stage1", "stage2"],
        "eval": {"k": 2, "limit": 8, "init_limit": 4, "max_new_tokens": 48, "every": 1},
    }  # fmt: skip
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump({**recipe, **train}))
    return path
