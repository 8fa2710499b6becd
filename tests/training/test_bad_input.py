"""Bad training input is one line in the project's words and exit 2, never a traceback (issues 23.7, 24.5)."""

from __future__ import annotations

import polars as pl
import pytest
import yaml

from training.cli import main


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("name", ["curve.csv", "curve.jsonl", "curve.parquet"])
def test_fit_on_an_empty_file(tmp_path, capsys, name):
    path = tmp_path / name
    if name.endswith(".parquet"):
        pl.DataFrame({"compute": [], "pass_at_1": []}).write_parquet(path)
    else:
        path.write_text("")
    assert main(["fit", str(path), "--no-plot"]) == 2
    assert _one_line(capsys).startswith(f"error: {path}:")


def test_reward_on_an_empty_file(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text("\n\n")
    assert main(["reward", str(tmp_path / "c.jsonl")]) == 2
    assert "the file is empty" in _one_line(capsys)


def test_a_model_folder_that_does_not_exist_is_not_called_a_hub_id(tmp_path, capsys):
    rows = tmp_path / "sft.parquet"
    pl.DataFrame({"prompt": ["x"], "completion": ["y"]}).write_parquet(rows)
    args = ["sft", "--model", "runs/nothere/final", "--data", str(rows), "--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert "model folder runs/nothere/final does not exist" in _one_line(capsys)
    assert main(["rl", "--model", str(tmp_path), "--train", str(rows), "--out", str(tmp_path / "r")]) == 2
    assert "is not a model folder (no config.json)" in _one_line(capsys)


def _model_folder(folder, hidden_size: int = 8):
    """A small model folder as one downloaded from a hub holds it: config.json and model.safetensors, no files.json."""
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=32, hidden_size=hidden_size, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)  # fmt: skip
    config.save_pretrained(folder)
    save_file(Qwen2ForCausalLM(config).state_dict(), str(folder / "model.safetensors"))  # no progress bar
    return folder


def test_missing_sft_and_rl_inputs(tmp_path, capsys):
    model = _model_folder(tmp_path / "m")
    assert (
        main(["sft", "--model", str(model), "--data", str(tmp_path / "no.parquet"), "--out", str(tmp_path / "o")]) == 2
    )
    assert "not found" in _one_line(capsys)
    assert (
        main(["rl", "--model", str(model), "--train", str(tmp_path / "no.parquet"), "--out", str(tmp_path / "r")]) == 2
    )
    assert "train file" in _one_line(capsys)


def test_a_damaged_model_is_refused_by_eval(tmp_path, capsys):
    from training.run_folder import record_files

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"w" * 100)
    record_files(tmp_path, ("*.safetensors", "config.json"))
    (tmp_path / "model.safetensors").write_bytes(b"w" * 10)
    assert main(["eval", str(tmp_path), "--pool", "p", "--home", str(tmp_path / "ws")]) == 2
    assert "is damaged: model.safetensors has 10 bytes" in _one_line(capsys)


def _damaged_models(tmp_path):
    """Model folders a user may hand ``model:`` (no ``files.json``): a damaged config.json, a weights header damaged
    in place, NaN weights."""
    import torch
    from safetensors.torch import save_file

    folders = {}
    for name in ("config", "header", "nan"):
        folder = folders[name] = tmp_path / name
        folder.mkdir()
        config = '{"model_type": "qwen2"}'
        (folder / "config.json").write_text(config[:-1] if name == "config" else config)  # truncated JSON
        save_file({"w": torch.full((4,), float("nan") if name == "nan" else 1.0)}, str(folder / "model.safetensors"))
    with (folders["header"] / "model.safetensors").open("r+b") as f:
        f.seek(9)
        f.write(b"\xff\xfe")
    return folders


def test_a_damaged_model_folder_is_one_line(tmp_path, capsys):
    """Issue 30.2: a damaged config.json or damaged weights were transformers' tracebacks."""
    rows = tmp_path / "sft.parquet"
    pl.DataFrame({"prompt": ["x"], "completion": ["y"]}).write_parquet(rows)
    models = _damaged_models(tmp_path)
    expected = {"config": "config.json is not valid JSON", "header": "model.safetensors is not a readable safetensors",
                "nan": "model.safetensors: w holds NaN or infinite values"}  # fmt: skip
    for name, folder in models.items():
        assert main(["sft", "--model", str(folder), "--data", str(rows), "--out", str(tmp_path / "o")]) == 2
        err = _one_line(capsys)
        assert f"model folder {folder} is damaged: {expected[name]}" in err, err
        assert main(["eval", str(folder), "--pool", "p", "--home", str(tmp_path / "ws")]) == 2
        assert expected[name] in _one_line(capsys)


def test_training_run_checks_its_model_folder_before_curation(tmp_path, capsys):
    from tests.tiny_chain import write_tiny_chain

    model = _damaged_models(tmp_path)["config"]
    recipe = write_tiny_chain(tmp_path, model=str(model))
    assert main(["run", "--recipe", str(recipe), "--home", str(tmp_path / "ws")]) == 2
    assert f"model folder {model} is damaged: config.json is not valid JSON" in _one_line(capsys)
    assert not (tmp_path / "ws" / "pools").exists()  # nothing curated: the model is checked first


def test_a_model_folder_without_weights_or_with_another_config_is_one_line_before_curation(tmp_path, capsys):
    """Issue 38.5: a model folder without the project's files.json (downloaded or copied) with no weights file, or
    with a config.json that does not match its weights (hidden_size doubled), was a raw traceback 62-102 s in, after
    curation. Both are one line at load, exit 2, before anything is curated."""
    import json

    from tests.tiny_chain import write_tiny_chain

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((_model_folder(tmp_path / "ok") / "config.json").read_text())
    wider = _model_folder(tmp_path / "wider")
    config = json.loads((wider / "config.json").read_text())
    (wider / "config.json").write_text(json.dumps({**config, "hidden_size": 16}))
    expected = {
        empty: "is damaged: no weights file (model.safetensors",
        wider: "is damaged: config.json does not match the weights: model.safetensors holds lm_head.weight of "
        "shape [32, 8], the model config.json describes has [32, 16]",
    }
    for model, message in expected.items():
        home = tmp_path / f"ws-{model.name}"
        home.mkdir()
        recipe = write_tiny_chain(home, model=str(model))
        assert main(["run", "--recipe", str(recipe), "--home", str(home)]) == 2
        assert message in _one_line(capsys)
        assert not (home / "pools").exists()  # nothing curated: the model is checked first
        assert main(["eval", str(model), "--pool", "p", "--home", str(home)]) == 2
        assert message in _one_line(capsys)


def test_every_verb_fails_through_run_app_alone(tmp_path, capsys):
    """One home for error printing (issue 31.2): no verb catches its own errors; each user error is a ``CurateError``
    that ``curate.console.run_app`` prints as one line with exit 2."""
    import inspect

    import training.cli
    from curate import io

    assert "except " not in inspect.getsource(training.cli)  # no `except X:` of its own
    model = _model_folder(tmp_path / "model")
    io.write_parquet(pl.DataFrame({"problem_id": ["a"], "problem": ["1+1"], "answer": ["2"], "split": ["train"]}),
                     tmp_path / "ws" / "pools" / "p" / "problems.parquet")  # fmt: skip
    (tmp_path / "one.csv").write_text("compute,pass_at_1\n1,0.5\n")
    evaluate = ("eval", str(model), "--pool", "p", "--home", str(tmp_path / "ws"))
    cases = {
        ("init-tiny", str(tmp_path / "t"), "--size", "huge"): "tiny.size: unknown tiny model size 'huge'",
        ("merge", str(model), str(model), "--weights", "0.5,x", "--out", str(tmp_path / "o")): "merge.weights[1]",
        ("eval", str(model), "--pool", "p", "--home", str(tmp_path / "ws")): "pool 'p' has no 'test' problems",
        (*evaluate, "--split", "train", "--source", "gone"): "no 'train' problems from sources ['gone'] (its 'train' "
        "sources: none)",
        ("fit", str(tmp_path / "one.csv"), "--no-plot"): "need at least 2 (compute, pass rate) points",
    }
    for args, message in cases.items():
        assert main(list(args)) == 2
        assert message in _one_line(capsys), args


def test_bad_sft_data_is_one_line_before_the_model_is_built(tmp_path, capsys):
    """Issue 38.6: SFT data with 0 rows, without prompt/completion, or not Parquet was found 4-5 minutes in, inside
    the SFT step (its traceback echoed). `training run` now checks it when it pins it, before the starting model is
    built or evaluated; `training sft` before it loads the model. One line, exit 2."""
    from curate import io
    from tests.tiny_model import problems_frame

    home = tmp_path / "ws"
    pool = problems_frame([("Compute 1 + 1.", "2")], split="test")
    io.write_parquet(pool, home / "pools" / "p" / "problems.parquet")
    row = {"prompt": [[{"role": "user", "content": "1+1"}]], "completion": [[{"role": "assistant", "content": "2"}]]}
    bad = {"empty.parquet": "has no rows", "columns.parquet": "has no prompt and no completion column",
           "text.parquet": "is not a Parquet file"}  # fmt: skip
    pl.DataFrame(row).head(0).write_parquet(tmp_path / "empty.parquet")
    pl.DataFrame({"question": ["1+1"], "answer": ["2"]}).write_parquet(tmp_path / "columns.parquet")
    (tmp_path / "text.parquet").write_text('{"prompt": "1+1", "completion": "2"}\n')
    for name, message in bad.items():
        data = tmp_path / name
        recipe = tmp_path / f"{name}.yaml"
        recipe.write_text(yaml.safe_dump({"name": name, "pool": "p", "model": "tiny", "sft": {"data": str(data)}}))
        assert main(["run", "--recipe", str(recipe), "--home", str(home)]) == 2
        assert f"sft.data {data} {message}" in _one_line(capsys)
        assert not (home / "runs" / name / "init").exists()  # no model was built
        assert main(["sft", "--data", str(data), "--out", str(tmp_path / "o"), "--model", "nothere/x"]) == 2
        assert f"SFT data {data} {message}" in _one_line(capsys)


def test_training_run_recipe_errors_before_any_work(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: r\npool: p\nrl: {learning_rate: 1e-4\n")  # unclosed mapping
    assert main(["run", "--recipe", str(bad), "--home", str(tmp_path / "ws")]) == 2
    err = _one_line(capsys)
    assert f"{bad}:4:1: not valid YAML" in err  # the file, line and column where the parser gave up
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"name": "r", "pool": "p", "curriculum": "c", "curate_recipe": "nope.yaml"}))
    for key in ("rl.learnin_rate=1e-4", "stages.stage2.max_stepz=3", "eval.kk=2", "sft.data=x", "sft.lr=1"):
        assert main(["run", "--recipe", str(good), "--home", str(tmp_path / "ws"), "--set", key]) == 2
        assert _one_line(capsys).startswith("error:")
    assert not (tmp_path / "ws" / "runs").exists()  # nothing was written: the recipe failed before any work


def test_a_misplaced_key_names_its_section_and_rl_sampler_seed_has_one_rule_everywhere(tmp_path, capsys):
    """Issue 38.8: a top-level `report_to` got no hint that it belongs under rl./sft.; `rl.sampler.seed` in a recipe
    was overwritten by rl.seed without a word, while the same key under `stages.<name>` or in `training rl` was
    rejected. One validator (RLConfig.check_mapping) now serves every path."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "r", "pool": "p", "train": "x.parquet"}))
    cases = {
        "report_to=tensorboard": "unknown key 'report_to' in recipe: it is a section's setting: sft.report_to, "
        "rl.report_to (stages.<name>.report_to: one RL stage's)",
        "rl.sampler.seed=5": "set rl.seed, not rl.sampler.seed (the curriculum takes the stage's seed)",
        "stages.stage1.sampler.seed=5": "set stages.stage1.seed, not stages.stage1.sampler.seed",
    }
    for key, message in cases.items():
        assert main(["run", "--recipe", str(recipe), "--home", str(tmp_path / "ws"), "--set", key]) == 2
        assert message in _one_line(capsys), key
    args = ["rl", "--model", "x/y", "--train", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "o")]
    assert main([*args, "--set", "sampler.seed=5"]) == 2
    assert "set rl.seed, not rl.sampler.seed" in _one_line(capsys)
    assert not (tmp_path / "ws" / "runs").exists()


def test_what_failed_after_curation_sft_and_measure_fails_at_load_naming_the_key(tmp_path, capsys, monkeypatch):
    """Issues 30.6 and 31.1 on the demo's recipe (its curriculum is built by ``measure``, after SFT): a misspelled
    stage under ``stages:`` or in ``only_stages``, a tracker that is not installed, and ``eval.every`` that is not a
    multiple of ``rl.num_iterations`` each failed minutes in (after curation, SFT and measure, or inside the first RL
    step's process); now each is one line naming the key, before any work."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if "tensorboard" in name else real(name))
    recipe = "training/recipes/tiny/fastcurl.yaml"
    cases = {
        ("stages.stage5.max_steps=1",): "unknown key 'stage5' (did you mean 'stage4'?) in stages (the stages of",
        ("only_stages=[stage1, stag2]",): "only_stages: 'stag2' (did you mean 'stage2'?) is not a stage of",
        ("rl.report_to=tensorboard",): "rl.report_to: tensorboard is not installed: pip install -e '.[trackers]'",
        ("sft.report_to=tensorbord",): "sft.report_to: unknown tracker 'tensorbord' (did you mean 'tensorboard'?)",
        ("stages.stage2.report_to=tensorboard",): "stages.stage2.report_to: tensorboard is not installed",
        ("eval.every=5", "rl.num_iterations=2"): "eval.every (5) must be a multiple of rl.num_iterations (2)",
        ("eval.every=4", "stages.stage3.num_iterations=3"): "eval.every (4) must be a multiple of "
        "stages.stage3.num_iterations (3)",
    }
    for sets, message in cases.items():
        args = ["run", "--recipe", recipe, "--home", str(tmp_path / "ws")]
        assert main([*args, *(a for s in sets for a in ("--set", s))]) == 2
        assert message in _one_line(capsys), sets
    assert not (tmp_path / "ws").exists()  # before any work


def test_the_multi_gpu_recipe_without_deepspeed_says_which_extra_to_install(tmp_path, capsys, monkeypatch):
    import importlib.util
    import os
    import sys
    from pathlib import Path

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # accelerate
    recipe = "training/recipes/qwen2.5-math-1.5b/fastcurl.yaml"
    assert main(["run", "--recipe", recipe, "--home", str(tmp_path / "ws")]) == 2
    assert "pip install -e '.[gpu,multigpu]'" in _one_line(capsys)
    assert not (tmp_path / "ws").exists()  # before any work


def test_settings_that_failed_after_sft_fail_at_load_naming_their_section(tmp_path, capsys):
    """Issue 45.2 on the demo's recipe: ``sft.validation.split=bogus`` failed after the whole SFT (and the corrected
    recipe was then refused on the same folder), a ``rl.micro_batch_size`` that does not divide the completions per
    step failed after SFT and ``measure``, and ``split=train``, ``band=-1``, ``reference=2.0`` and curriculum bins
    outside [0, 1] were accepted. Each is one line naming its key, before any work."""
    recipe = "training/recipes/tiny/fastcurl.yaml"
    cases = {
        "sft.validation.split=bogus": "sft.validation.split: pool 'tiny' will have no 'bogus' problems (its curate "
        "recipe's sources give test, train, validation)",
        "sft.validation.split=train": "sft.validation.split: choosing the SFT model on the train split",
        "sft.validation.band=-1": "sft.validation.band must be in [0, 1]",
        "sft.validation.reference=2.0": "sft.validation.reference must be a pass@1 in [0, 1]",
        "measure.curriculum.bins=[-1, 0.5, 3]": "error: measure.curriculum.bins must be >= 2 increasing pass-rate "
        "edges in [0, 1]",
        "rl.micro_batch_size=3": "rl.micro_batch_size (3) must divide the completions per step, rl.prompts_per_step "
        "x rl.num_generations = 256",
        "stages.stage4.micro_batch_size=96": "stages.stage4.micro_batch_size (96) must divide",
    }
    for key, message in cases.items():
        assert main(["run", "--recipe", recipe, "--home", str(tmp_path / "ws"), "--set", key]) == 2
        assert message in _one_line(capsys), key
    assert not (tmp_path / "ws").exists()  # before any work
