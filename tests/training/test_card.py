"""The model card a user reads beside every model (issue 23, item 13): a Hugging Face card whose front matter parses
(``model-index`` with the held-out pass@1), titled after the run step (not ``final``), with the hub's sections, paths
relative to the workspace (content hashes whole), a usage snippet that runs, and a ``generation_config.json``
without transformers' ``max_length=20``. On the tiny random-init model (CPU, seconds, no network).
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import yaml


EVALUATION = {"pass_at_1": 0.534, "stderr": 0.022, "n_problems": 297, "k": 4, "temperature": 0.6, "split": "test",
              "dataset": "tiny", "step": "sft", "max_new_tokens": 48}  # fmt: skip
SECTIONS = ["## Model description", "## Training data", "## Training procedure", "## Evaluation", "## Usage",
            "## Code version"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from training.tiny import TinyConfig, init_tiny

    return init_tiny(tmp_path_factory.mktemp("card") / "init", TinyConfig(size="tiny", corpus_problems=300,
                                                                          vocab_size=400))  # fmt: skip


def _model_in_run(tmp_path, tiny):
    """A copy of the tiny model as ``<ws>/runs/demo/sft/final`` with a transformers-default generation config."""
    import shutil

    ws = tmp_path / "ws"
    (ws / "pools" / "tiny").mkdir(parents=True)
    model = ws / "runs" / "demo" / "sft" / "final"
    shutil.copytree(tiny, model)
    gen = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**gen, "max_length": 20, "_from_model_config": True}))
    return ws, model


def _front(text: str) -> dict:
    return yaml.safe_load(text.split("---")[1])


def test_card_has_model_index_sections_relative_paths_and_a_usable_generation_config(tmp_path, tiny):
    from training.card import read_lineage, write_model_card

    ws, model = _model_in_run(tmp_path, tiny)
    data = {"pool": "tiny", "selection": str(ws / "selections/tiny/selection.parquet"),
            "source": str(ws / "runs/demo/data/sft.parquet"), "source_sha256": "ab" * 32, "rows": 2000,
            "run": str(ws / "runs/demo"), "recipe_name": "demo"}  # fmt: skip
    card = write_model_card(model, kind="sft", base_model=str(tiny), data=data, recipe={"sft": {"max_length": 256}},
                            metrics={"train_loss_last": 0.4}, evaluation=EVALUATION)  # fmt: skip
    text = card.read_text()

    front = _front(text)
    assert front["library_name"] == "transformers" and "sft" in front["tags"]
    (result,) = front["model-index"][0]["results"]
    assert result["metrics"][0]["type"] == "pass@1" and result["metrics"][0]["value"] == 0.534
    assert result["dataset"] == {"name": "tiny", "type": "tiny", "split": "test"}
    assert front["model-index"][0]["name"] == "demo / sft"
    assert re.search(r"^# demo / sft$", text, re.M)  # not "# final"
    assert [line for line in text.splitlines() if line.startswith("## ")] == SECTIONS
    assert "| tiny | test | 0.534 | 0.022 | 297 | 4 | 0.6 |" in text
    assert str(tmp_path) not in text  # no absolute path of this machine
    assert "| selection | selections/tiny/selection.parquet |" in text and "ab" * 32 in text
    assert read_lineage(model)["evaluation"]["pass_at_1"] == 0.534

    gen = json.loads((model / "generation_config.json").read_text())
    assert "max_length" not in gen and "_from_model_config" not in gen
    assert gen["max_new_tokens"] == 48  # the evaluation's budget
    config = json.loads((model / "config.json").read_text())
    assert gen["eos_token_id"] == config["eos_token_id"] and gen["pad_token_id"] == config["pad_token_id"]


def test_lineage_json_names_workspace_paths_and_hub_ids_and_reads_back_where_the_folder_is(tmp_path, tiny):
    """``lineage.json`` holds no path of the machine it was made on (issue 38.13: every one was absolute): files of
    the workspace by their path in it, a model in the Hugging Face cache by its hub id; ``read_lineage`` gives them
    back absolute, under the workspace the folder is in now, so the chain's own checks still match."""
    import shutil

    from training.card import read_lineage, write_model_card
    from training.step import stamp_lineage

    ws, model = _model_in_run(tmp_path, tiny)
    init = ws / "runs" / "demo" / "init"
    shutil.copytree(tiny, init)
    for path in ("selections/tiny/selection.parquet", "runs/demo/data/sft.parquet"):
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_bytes(b"x")
    data = {
        "pool": "tiny",
        "selection": str(ws / "selections/tiny/selection.parquet"),
        "source": str(ws / "runs/demo/data/sft.parquet"),
        "run": str(ws / "runs/demo"),
        "recipe_name": "demo",
    }
    snapshot = "/home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/4a1b"
    write_model_card(model, kind="sft", base_model=str(init), data=data,
                     recipe={"sft": {"model": str(init), "teacher": snapshot}}, metrics={})  # fmt: skip
    text = (model / "lineage.json").read_text()
    assert str(tmp_path) not in text and "/home/u" not in text
    stored = json.loads(text)
    assert stored["base_model"] == stored["sources"][0] == "runs/demo/init"
    assert stored["data"]["selection"] == "selections/tiny/selection.parquet" and stored["data"]["run"] == "runs/demo"
    assert stored["recipe"]["sft"] == {"model": "runs/demo/init", "teacher": "Qwen/Qwen2.5-0.5B"}
    assert stored["parents"][0]["kind"] == "init"  # the base model's lineage, embedded
    assert read_lineage(model)["data"] == data
    assert not stamp_lineage(model, data)  # the chain's absolute lineage is what the folder already says

    moved = tmp_path / "elsewhere"
    shutil.move(ws, moved)
    back = read_lineage(moved / "runs" / "demo" / "sft" / "final")
    assert back["base_model"] == str(moved / "runs/demo/init") and back["data"]["run"] == str(moved / "runs/demo")


def test_usage_snippet_runs_from_the_workspace_without_length_warnings(tmp_path, tiny, monkeypatch, caplog):
    from transformers.utils import logging as hf_logging

    from training.card import write_model_card

    ws, model = _model_in_run(tmp_path, tiny)
    card = write_model_card(model, kind="sft", base_model=None, data={"run": str(ws / "runs/demo")}, recipe={},
                            metrics={}, evaluation=EVALUATION)  # fmt: skip
    snippet = re.search(r"```python\n(.*?)```", card.read_text(), re.S).group(1)
    assert "'runs/demo/sft/final'" in snippet and "apply_chat_template" in snippet
    monkeypatch.chdir(ws)  # the snippet's path is relative to the workspace
    hf_logging.enable_propagation()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exec(compile(snippet, "usage", "exec"), {})
    finally:
        hf_logging.disable_propagation()
    said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "max_length" in m or "max_new_tokens" in m], said


def test_record_evaluation_adds_the_result_to_an_existing_card_and_the_card_loads_in_huggingface_hub(tmp_path, tiny):
    from training.card import read_lineage, record_evaluation, write_model_card

    ws, model = _model_in_run(tmp_path, tiny)
    write_model_card(model, kind="sft", base_model="Qwen/Qwen2.5-0.5B-Instruct", data={"run": str(ws / "runs/demo")},
                     recipe={}, metrics={"steps": 3})  # fmt: skip
    before = (model / "README.md").read_text()
    assert "model-index" not in _front(before) and "No held-out evaluation recorded" in before
    assert _front(before)["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    record_evaluation(model, EVALUATION)
    lineage = read_lineage(model)
    assert lineage["evaluation"]["pass_at_1"] == 0.534 and lineage["metrics"] == {"steps": 3}
    hub = pytest.importorskip("huggingface_hub")
    card = hub.ModelCard.load(model / "README.md")
    (ev,) = card.data.eval_results
    assert (ev.metric_type, ev.metric_value, ev.dataset_split) == ("pass@1", 0.534, "test")
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B-Instruct"


def test_cards_state_what_was_checked_downstream_carry_hub_metadata_and_print_no_python_values(tmp_path, tiny):
    """Issue 30.5 / 30.10: an SFT model trained on rows half of which box a wrong answer says so with the share,
    and so does the RL model trained from it; the front matter (``huggingface_hub.ModelCard``) has the licence
    (Apache-2.0 for a model made from scratch), the language and the pool's Hub datasets; the task is the pool's
    (arithmetic chains here, not "math word problems"); no ``None`` and no 16-digit floats."""
    hub = pytest.importorskip("huggingface_hub")

    from training.card import write_model_card

    ws, sft = _model_in_run(tmp_path, tiny)
    sources = [{"name": "gen/sft", "path": "gen://arith?early=0.5"}, {"name": "gsm8k/test", "path": "/d/gsm8k/t.json"}]
    (ws / "pools" / "tiny" / "sources.json").write_text(json.dumps(sources))
    run = {"pool": "tiny", "run": str(ws / "runs/demo"), "recipe_name": "demo"}
    answers = {"rows": 7466, "verdicts": {"correct": 3733, "wrong": 3700, "no_answer": 33}}
    write_model_card(sft, kind="sft", base_model=None, data={**run, "answers": answers, "dropped": {}},
                     recipe={"sft": {"learning_rate": 0.002, "warmup_ratio": 0.1 + 0.2, "report_to": None}},
                     metrics={"train_loss_last": 0.41234567890123, "resumed_from": None})  # fmt: skip
    rl = ws / "runs" / "demo" / "rl" / "01-stage1" / "final"
    write_model_card(rl, kind="rl", base_model=str(sft), data=run, recipe={}, metrics={"steps": 40},
                     evaluation=EVALUATION)  # fmt: skip
    for folder, who in ((sft, "these training rows"), (rl, "the rows its `sft` ancestor trained on")):
        card = hub.ModelCard.load(folder / "README.md")
        assert f"The answers of {who} are NOT verified: 3,700 of 7,466 (49.6%) box an answer" in card.text
        assert "verified solutions" not in card.text and "math word problems" not in card.text
        assert "Task: arithmetic chains from curate-rl's generator (gen://arith); math problems from gsm8k/test" in (
            card.text
        )
        assert (card.data.license, card.data.language, card.data.datasets) == ("apache-2.0", ["en"], ["openai/gsm8k"])
        assert "None" not in card.text and not re.search(r"\d\.\d{6,}", card.text), card.text
    sft_text = (sft / "README.md").read_text()
    assert "| train_loss_last | 0.4123 |" in sft_text and "| resumed_from | n/a |" in sft_text
    assert "warmup_ratio: 0.3\n" in sft_text and "report_to: null" in sft_text
