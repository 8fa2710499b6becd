"""`training init-tiny`: a random-init Qwen2 + tokenizer for the built-in task that loads offline and generates."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml


def test_init_tiny_loads_generates_and_has_card(tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curate.prompts import build_prompt, user_message
    from training.card import read_lineage
    from training.cli import main

    out = tmp_path / "tiny"
    umask = os.umask(0o022)
    try:
        assert main(["init-tiny", str(out), "--size", "tiny", "--seed", "3", "--json"]) == 0
    finally:
        os.umask(umask)
    printed = json.loads(capsys.readouterr().out)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes["model.safetensors"] == 0o644 and set(modes.values()) == {0o644}  # the umask's, as every file's
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert printed["parameters"] == sum(p.numel() for p in model.parameters()) < 500_000

    # the chat template, special tokens and digit splitting the SFT and RL stages rely on
    prompt = build_prompt(tok, user_message("Compute $12 + 7$."))
    assert prompt.startswith("<|im_start|>user\nCompute $12 + 7$.") and prompt.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>" and tok.eos_token_id != tok.pad_token_id
    assert tok.tokenize("12345") == ["1", "2", "3", "4", "5"]
    assert tok.decode(tok("Start with $9$.\n\\boxed{-7}")["input_ids"]) == "Start with $9$.\n\\boxed{-7}"

    enc = tok([prompt], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=6, do_sample=False)
    assert gen.shape[1] > enc["input_ids"].shape[1]  # random weights, but it runs end to end

    lineage = read_lineage(out)
    assert lineage["kind"] == "init" and lineage["base_model"] is None
    assert lineage["recipe"]["tiny"]["seed"] == 3
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "transformers" and "base_model" not in front
    assert front["license"] == "apache-2.0"  # curate-rl's: a model made from scratch


@pytest.mark.slow
def test_init_tiny_seed_changes_weights_not_tokenizer(tmp_path):
    from transformers import AutoModelForCausalLM

    from training.tiny import TinyConfig, init_tiny

    a = init_tiny(tmp_path / "a", TinyConfig(size="tiny", seed=0))
    b = init_tiny(tmp_path / "b", TinyConfig(size="tiny", seed=1))
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    wa = AutoModelForCausalLM.from_pretrained(a).state_dict()
    wb = AutoModelForCausalLM.from_pretrained(b).state_dict()
    assert any(not wa[k].equal(wb[k]) for k in wa)


def test_init_tiny_rejects_unknown_size(tmp_path, capsys):
    from training.cli import main

    assert main(["init-tiny", str(tmp_path / "x"), "--size", "huge"]) == 2
    assert "unknown tiny model size" in capsys.readouterr().err


def test_model_card_front_matter_lineage_and_code_version(tmp_path):
    import pytest
    import yaml

    from training.card import read_lineage, write_model_card

    parent = tmp_path / "parent"
    write_model_card(parent, kind="sft", base_model="Qwen/Qwen2.5-0.5B-Instruct", data={"rows": 3}, recipe={},
                     metrics={})  # fmt: skip
    card = write_model_card(
        tmp_path / "m",
        kind="redistill",
        base_model=str(parent),
        data={"selection": "math-1500", "curriculum": "fastcurl", "solutions": "solutions.parquet", "rows": 40},
        recipe={"learning_rate": 1e-5, "epochs": 2},
        metrics={"train_loss_last": 0.25},
    )
    text = card.read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert front["library_name"] == "transformers" and "redistill" in front["tags"]
    assert "base_model" not in front  # a local folder is not a hub id
    assert yaml.safe_load((parent / "README.md").read_text().split("---")[1])["base_model"] == (
        "Qwen/Qwen2.5-0.5B-Instruct"
    )
    for needle in ("| selection | math-1500 |", "| curriculum | fastcurl |", "| rows | 40 |", "learning_rate: 1.0e-05",
                   "| train_loss_last | 0.25 |", "curate-rl "):  # fmt: skip
        assert needle in text
    lineage = read_lineage(tmp_path / "m")
    assert lineage["parents"][0]["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"  # the chain back to the hub model
    assert lineage["code"]["curate_rl"] and "git_commit" in lineage["code"]
    with pytest.raises(FileNotFoundError, match=r"lineage\.json"):
        read_lineage(tmp_path)
