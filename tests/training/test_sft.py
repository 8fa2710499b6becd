"""`training sft`: TRL SFTTrainer on conversational solution rows, on a random-init tiny model (CPU, seconds).

What a user relies on: the loss on the solutions goes down and the weights change, only completion tokens carry
labels, over-length rows are quarantined (not truncated), a re-run resumes from the last checkpoint or skips a
finished run, the result is a loadable model folder with a card, and packing is refused without flash-attention.
"""

from __future__ import annotations

import json
import logging
import shutil

import polars as pl
import pytest


MAX_LENGTH = 160


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from training.tiny import TinyConfig, init_tiny

    return init_tiny(tmp_path_factory.mktemp("sft") / "init", TinyConfig(size="tiny", corpus_problems=500))


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory):
    """16 level-1 arithmetic reference solutions + one row far over MAX_LENGTH tokens; ``verdict`` as a solutions
    export writes it, 4 rows labelled ``wrong`` (as ``recheck: false`` exports them)."""
    from curate.ingest.generate import generate
    from curate.prompts import sft_row

    problems = list(generate(16, seed=0, family="arith", min_level=1, max_level=1))
    rows = [{**sft_row(p["problem"], p["solution"]), "problem_id": f"p{i}", "verdict": "correct" if i % 4 else "wrong"}
            for i, p in enumerate(problems)]  # fmt: skip
    long = problems[0]["solution"] * 20
    rows.append({**sft_row(problems[0]["problem"], long), "problem_id": "long", "verdict": "correct"})
    path = tmp_path_factory.mktemp("data") / "sft.parquet"
    pl.DataFrame(rows).write_parquet(path)
    return path


def _completion_nll(model_dir, path) -> float:
    """Mean per-token NLL of the completions of the (short) rows in ``path``, prompt tokens masked."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    total, count = 0.0, 0
    for row in pl.read_parquet(path).filter(pl.col("problem_id") != "long").to_dicts():
        p = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        p_ids = tok(p, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([tok(full, add_special_tokens=False)["input_ids"]])
        labels = ids.clone()
        labels[0, : len(p_ids)] = -100
        with torch.no_grad():
            n = int((labels[0, 1:] != -100).sum())
            total += float(model(input_ids=ids, labels=labels).loss) * n
            count += n
    return total / count


def _cfg(**kw):
    from training.sft import SFTRunConfig

    base = dict(learning_rate=3e-3, epochs=3.0, per_device_batch_size=4, max_length=MAX_LENGTH, save_steps=4,
                logging_steps=1, warmup_ratio=0.0, torch_threads=1)  # fmt: skip
    return SFTRunConfig(**{**base, **kw})


@pytest.mark.slow
def test_sft_trains_on_solutions_quarantines_long_rows_and_resumes(tiny, rows_file, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from training.card import read_lineage
    from training.cli import main
    from training.sft import train_sft

    out = tmp_path / "run"
    metrics = train_sft(_cfg(), model=str(tiny), data=rows_file, out_dir=out)

    # trained: the solutions' loss fell and the weights moved
    assert metrics["steps"] == 12 and metrics["rows"] == 17 and metrics["rows_trained"] == 16
    assert metrics["train_loss_last"] < metrics["train_loss_first"]
    assert _completion_nll(out / "final", rows_file) < _completion_nll(tiny, rows_file) - 0.5
    before = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    after = AutoModelForCausalLM.from_pretrained(out / "final").state_dict()
    assert before.keys() == after.keys() and all(not before[k].equal(after[k]) for k in before)

    # the over-length row is quarantined with its reason, never truncated into the training set
    q = pl.read_parquet(out / "quarantine.parquet")
    assert q["problem_id"].to_list() == ["long"] and q["drop_reason"].to_list() == ["too_long"]
    assert q["tokens"][0] > MAX_LENGTH and metrics["dropped"] == {"too_long": 1}
    assert json.loads((out / "metrics.json").read_text())["train_loss_last"] == metrics["train_loss_last"]

    # the model folder carries its lineage
    lineage = read_lineage(out / "final")
    assert lineage["kind"] == "sft" and lineage["base_model"] == str(tiny)
    assert lineage["data"]["rows"] == 16 and lineage["data"]["dropped"] == {"too_long": 1}
    # what was checked about the rows it trained on (issue 30.5): measured from their verdicts, never "verified"
    assert lineage["data"]["answers"] == {"rows": 16, "verdicts": {"correct": 12, "wrong": 4}}
    card = (out / "final" / "README.md").read_text()
    assert "NOT verified: 4 of 16 (25.0%) box an answer" in card and "verified solutions" not in card
    assert lineage["parents"][0]["kind"] == "init"  # the init model's own lineage is embedded
    assert "## Training data" in (out / "final" / "README.md").read_text()
    assert not (out / "checkpoints" / "README.md").exists()  # TRL's stub card: "fine-tuned version of [None]"

    # a finished run is skipped by the same command; a different config on the same folder is refused
    capsys.readouterr()
    args = ["sft", "--model", str(tiny), "--data", str(rows_file), "--out", str(out), "--json"]
    sets = ["--set", "learning_rate=3e-3", "--set", "epochs=3.0", "--set", "per_device_batch_size=4",
            "--set", f"max_length={MAX_LENGTH}", "--set", "save_steps=4", "--set", "logging_steps=1",
            "--set", "warmup_ratio=0.0", "--set", "torch_threads=1"]  # fmt: skip
    assert main(args + sets) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] is True
    assert main([*args, *sets, "--set", "learning_rate=1e-3"]) == 2
    assert "another config, model or data" in capsys.readouterr().err

    # crash after the last checkpoint (final model and metrics lost): the re-run resumes instead of restarting
    shutil.rmtree(out / "final")
    (out / "metrics.json").unlink()
    again = train_sft(_cfg(), model=str(tiny), data=rows_file, out_dir=out)
    assert again["resumed_from"].endswith("checkpoint-12") and again["steps"] == 12
    assert (out / "final" / "config.json").is_file()


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _same(a, b) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_checkpoint_damaged_in_place_is_set_aside_and_the_final_model_is_the_uninterrupted_one(
    tiny, rows_file, tmp_path, capfd
):
    """Issue 30.1 and 30.3. Random bytes inside the newest checkpoint's weights (same size): the rerun sets it aside
    with one warning line, resumes from the previous checkpoint and ends with the uninterrupted run's model, bit for
    bit. A truncated final model at the end of training is rebuilt from the last checkpoint without training past
    the end (2.5 epochs: transformers resumed such a checkpoint into step 11 of 10)."""
    from training.sft import train_sft

    cfg = _cfg(epochs=2.5)  # 4 steps per epoch: 10 steps, checkpoints 8 and 10 kept
    ref = train_sft(cfg, model=str(tiny), data=rows_file, out_dir=tmp_path / "ref")
    assert ref["steps"] == 10
    out = tmp_path / "run"
    shutil.copytree(tmp_path / "ref", out)
    shutil.rmtree(out / "final")  # killed after its last checkpoint, which was then damaged in place
    (out / "metrics.json").unlink()
    weights = out / "checkpoints" / "checkpoint-10" / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as f:
        f.seek(size // 2)
        f.write(bytes(range(7, 7 + 64)))
    assert weights.stat().st_size == size
    capfd.readouterr()

    warned: list[str] = []  # what transformers' Trainer warns (its handler may write to an earlier test's stderr)
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warned.append(record.getMessage())
    logging.getLogger("transformers.trainer").addHandler(handler)
    try:
        again = train_sft(cfg, model=str(tiny), data=rows_file, out_dir=out)
    finally:
        logging.getLogger("transformers.trainer").removeHandler(handler)
    err = capfd.readouterr().err
    damaged = [line for line in err.splitlines() if "damaged" in line]
    assert len(damaged) == 1 and "checkpoint-10 is damaged" in damaged[0] and "bad-checkpoint-10" in damaged[0]
    assert not [w for w in warned if "missing keys" in w]  # tied embeddings load once: no warning (issue 30.7)
    assert again["resumed_from"].endswith("checkpoint-8") and again["steps"] == 10
    # the loss mean of a resumed run covers the steps it trained, and says which (issue 38.8)
    assert ref["train_loss_mean_steps"] == [1, 10] and again["train_loss_mean_steps"] == [9, 10]
    assert _same(_weights(out / "final"), _weights(tmp_path / "ref" / "final"))

    with (out / "final" / "model.safetensors").open("r+b") as f:  # the final model truncated after the run
        f.truncate(100)
    third = train_sft(cfg, model=str(tiny), data=rows_file, out_dir=out)
    assert third["steps"] == 10 and third["resumed_from"].endswith("checkpoint-10")
    assert third["train_loss_mean"] is None and third["train_loss_mean_steps"] is None  # nothing was trained
    assert not (out / "checkpoints" / "checkpoint-11").exists()
    assert _same(_weights(out / "final"), _weights(tmp_path / "ref" / "final"))
    assert json.loads((out / "metrics.json").read_text())["steps"] == 10


def test_only_completion_tokens_carry_labels(tiny, rows_file, tmp_path):
    from transformers import AutoTokenizer

    from training.sft import build_trainer, split_rows

    tok = AutoTokenizer.from_pretrained(tiny)
    kept, dropped = split_rows(pl.read_parquet(rows_file), tok, MAX_LENGTH)
    assert kept.height == 16 and dropped.height == 1
    trainer = build_trainer(_cfg(model=str(tiny)), tok, kept.head(3), tmp_path / "ckpt")
    for example, row in zip(trainer.train_dataset, kept.head(3).to_dicts(), strict=True):
        ids, labels = example["input_ids"], example["labels"]
        prompt = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
        assert all(lab == -100 for lab in labels[:n_prompt])  # the prompt is never trained
        assert labels[n_prompt:] == ids[n_prompt:]  # every completion token is
        trained = tok.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])
        assert trained == row["completion"][0]["content"] + "<|im_end|>\n"  # including the stop token


def test_packing_refused_without_flash_attention(tiny, rows_file, tmp_path):
    import torch

    from curate.errors import ConfigError
    from training.sft import flash_attention_available, train_sft

    if torch.cuda.is_available() and flash_attention_available():
        pytest.skip("flash-attention present: packing is allowed here")
    with pytest.raises(ConfigError, match="flash-attention"):
        train_sft(_cfg(packing=True), model=str(tiny), data=rows_file, out_dir=tmp_path / "p")
    assert not (tmp_path / "p").exists()  # refused before any work


def test_config_is_strict():
    from curate.errors import ConfigError
    from training.sft import load_config

    assert load_config({"learning_rate": 1e-4}, {"epochs": 3}).epochs == 3.0
    assert load_config({"learning_rate": "1e-5"}).learning_rate == 1e-5  # how PyYAML reads `1e-5`
    with pytest.raises(ConfigError, match="learning_rat"):
        load_config({"learning_rat": 1e-4})
    with pytest.raises(ConfigError):
        load_config({"epochs": 0})
