"""`training reward` scores a file through the TRL reward adapter (local file, real math-verify in workers)."""

from __future__ import annotations

import json
import re

import pytest


def test_training_reward_on_jsonl(tmp_path, capsys):
    from training.cli import main

    path = tmp_path / "c.jsonl"
    rows = [
        {"completion": "so the answer is \\boxed{\\frac{1}{2}}", "answer": "0.5"},
        {"completion": "\\boxed{3}", "answer": "4"},
        {"completion": "I don't know", "answer": ["7", "7.0"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["reward", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"rows": 3, "scored": 3, "skipped_unreadable_gold": 0, "mean_reward": round(1 / 3, 4)}
    assert main(["reward", str(tmp_path / "missing.jsonl")]) == 2


def test_run_json_prints_only_json_on_stdout(tmp_path, capsys, monkeypatch):
    """``training run --json``: the chain's ``[chain]`` lines go to stderr, stdout parses as JSON (issue 23.8)."""
    import json

    import yaml

    from training import runner
    from training.cli import main

    def fake_chain(recipe, *, home, out, echo, **_):
        echo("[chain] sft                      held-out pass@1 = 0.500 ± 0.010")
        return {"run_dir": str(tmp_path / "run"), "wall_s": 1.0, "steps": []}

    monkeypatch.setattr(runner, "run_chain", fake_chain)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "r", "pool": "p", "train": "x.parquet", "rl": {"loss_type": "cispo"}}))
    assert main(["run", "--recipe", str(recipe), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["wall_s"] == 1.0 and "[chain] sft" in captured.err


# RST markup, module paths (training.rl.RLConfig) and class names of the code, none of which a user can type
INTERNAL = re.compile(r"``|:class:|\b(?:curate|training|flows)\.[a-z_]+\.\w|\b\w+Config\b|RunRecipe|Workspace\.")


def _helps() -> dict[str, str]:
    """Every ``--help`` of both CLIs (the apps and each verb), rendered wide as a pipe or a log would get it."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from curate.cli import app as curate_app
    from training.cli import app as training_app

    out = {}
    for name, app in (("curate", curate_app), ("training", training_app)):
        for verb in ["", *get_command(app).commands]:
            result = CliRunner().invoke(app, [*([verb] if verb else []), "--help"], env={"COLUMNS": "240"})
            assert result.exit_code == 0, (name, verb, result.output)
            out[f"{name} {verb}".strip()] = result.output
    return out


def test_help_texts_show_no_rst_markup_or_internal_names():
    """Issue 30.10: `--help` showed ``double backticks`` and "Config keys: see training.rl.RLConfig". Each verb says
    what its settings are; `training rl` and `training sft` list every key their --config and --set take."""
    import dataclasses

    from training.rl import RLConfig
    from training.sft import SFTRunConfig

    helps = _helps()
    shown = {verb: INTERNAL.findall(text) for verb, text in helps.items() if INTERNAL.search(text)}
    assert not shown, shown
    for verb, config in (("training rl", RLConfig), ("training sft", SFTRunConfig)):
        text = " ".join(helps[verb].split())
        for key in (f.name for f in dataclasses.fields(config)):
            family = f"{key.split('_')[0]}_*" if key.startswith("vllm_") else f"{key}.*"
            assert re.search(rf"\b{key}\b", text) or family in text, (verb, key)


def test_rl_settings_are_listed_from_the_fields_metadata():
    """``RLConfig`` keeps each setting's help and choices in its field's metadata, as TRL's ``GRPOConfig`` does;
    ``training rl --help`` lists the settings from it and the config checks its choices against it. A field without
    a one-line help, a field the screen leaves out, or a choice it does not show or check fails."""
    import dataclasses

    from typer.testing import CliRunner

    from curate.config import CHOICES, HELP
    from curate.errors import ConfigError
    from training.cli import app
    from training.rl import RLConfig

    result = CliRunner().invoke(app, ["rl", "--help"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    rows: dict[str, str] = {}
    for line in result.output.split("\nSettings:\n")[1].splitlines():
        if re.match(r"  \S", line):
            key, _, text = line.strip().partition(" ")
            rows[key] = text.strip()
        elif line.strip():
            rows[key] += " " + line.strip()
    fields = dataclasses.fields(RLConfig)
    assert len(rows) == len(fields), sorted(set(rows) - {f.name for f in fields})
    for f in fields:
        text = f.metadata.get(HELP)
        assert text and "\n" not in text and len(text) <= 120, (f.name, text)
        row = rows.get(f.name) or rows.get(f"{f.name}.*")
        assert row is not None and row.startswith(" ".join(text.split())), (f.name, row)
        for choice in f.metadata.get(CHOICES, ()):
            assert choice in row, (f.name, choice)
        if f.metadata.get(CHOICES):
            with pytest.raises(ConfigError, match=rf"rl\.{f.name}"):
                RLConfig(**{f.name: "no-such-choice"})


def _training_commands() -> list[str]:
    from tests.help_screens import commands
    from training.cli import app

    return commands(app)


@pytest.mark.parametrize("name", _training_commands())
def test_every_help_screen_fits_80_columns_whole(name, capsys, monkeypatch):
    """At 80 columns (issue 38.15): every ``[default: X]`` shown (Rich's markup ate them), option names whole,
    paragraphs wrapped to the width, no ``<bool>`` on flags."""
    from tests.help_screens import WIDTH, help_problems
    from training.cli import app

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    assert help_problems(app, name, capsys) == []


def test_help_examples_are_what_the_commands_take(capsys, monkeypatch):
    """``eval``'s install hint names the extra (Rich's markup printed ``pip install -e '.'``), and ``run``'s
    ``--set`` example is a key a training recipe takes (``learning_rate`` alone is one of ``sft``'s and ``rl``'s)."""
    from curate.config import parse_overrides
    from tests.help_screens import render
    from training.cli import app
    from training.recipe import load_recipe

    monkeypatch.setenv("COLUMNS", "80")
    assert "pip install -e '.[gpu]'" in " ".join(render(app, "eval", capsys).split())
    (example,) = re.findall(r"--set (\S+=\S+?)\.?\s", render(app, "run", capsys))
    recipe = load_recipe("training/recipes/tiny/fastcurl.yaml", parse_overrides([example]))
    assert recipe.rl.learning_rate == 1e-4


@pytest.mark.slow  # a Python that imports transformers and datasets
def test_off_a_terminal_the_libraries_progress_bars_stay_out_of_the_log(monkeypatch, tmp_path):
    """The demo's log was mostly transformers' and datasets' tqdm bars ("Loading weights", "Writing model shards",
    "Tokenizing train dataset"), one line of carriage returns each (issue 38.10): both CLIs turn them off when
    stderr is not a terminal, through the environment the training steps' processes inherit."""
    import os
    import subprocess
    import sys

    from curate.progress import LIBRARY_BARS
    from training.cli import main

    for name in LIBRARY_BARS:
        monkeypatch.delenv(name, raising=False)
    assert main(["--version"]) == 0  # pytest's stderr is no terminal
    assert all(os.environ[name] == "1" for name in LIBRARY_BARS)
    check = ("import datasets; from transformers.utils import logging; "
             "print(logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled())")  # fmt: skip
    step = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=os.environ.copy())
    assert step.stdout.split() == ["False", "False"], step.stderr[-2000:]


@pytest.mark.slow  # imports TRL
def test_rl_on_cpu_does_not_ask_for_pinned_memory(tmp_path):
    """On CPU, TRL's default ``dataloader_pin_memory`` made torch warn at every RL stage (issue 38.10)."""
    import torch

    from training.rl import grpo_args, load_rl_config

    args = grpo_args(load_rl_config(None, ["num_generations=2", "prompts_per_step=2"]), tmp_path, 1)
    assert args.dataloader_pin_memory is torch.cuda.is_available()


def test_rough_edges_of_run_and_show_are_one_line_that_says_what_to_do(tmp_path, capsys):
    """Issue 45.8: ``training run`` on a curation recipe named a key, not the verb to use; ``training show`` of a
    missing path did not say it does not exist; a folder as ``sft.data`` was "not found"."""
    from curate.errors import InputError
    from training.chain import check_sft_data
    from training.cli import main

    assert main(["run", "--recipe", "datasets/tiny/recipe.yaml"]) == 2
    err = capsys.readouterr().err
    assert "is a curation recipe" in err and "use `curate run --recipe datasets/tiny/recipe.yaml`" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["show", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nonexistent'} does not exist" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InputError, match=r"is a folder: give its Parquet file of prompt/completion rows"):
        check_sft_data(tmp_path, "sft.data")


def test_show_of_a_copied_run_lists_its_paths_relative_to_the_copy(tmp_path, capsys):
    """Issue 45.8: a run folder copied with its workspace listed the original's absolute paths under "paths
    relative to the workspace"; they are the copy's, relative, and the original workspace is named once."""
    import shutil

    from tests.training.demo_run import write_demo_run
    from training.cli import main

    original = tmp_path / "original"
    run = write_demo_run(original)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    shutil.rmtree(original)  # another machine
    assert main(["show", str(copy / run.relative_to(original))]) == 0
    out = capsys.readouterr().out
    lineage = out.split("lineage (paths relative to")[1].split("\n\n")[0]
    assert str(original) not in lineage.replace(f"recorded as paths in {original},", "")
    assert "  run: runs/tiny-fastcurl" in lineage and "  selection: selections/tiny/selection.parquet" in lineage
    assert f"(recorded as paths in {original}, where the run was made" in lineage
    assert str(original) not in out.split("lineage (")[0]  # the step table's models too


def test_the_demo_says_quoted_figures_move_with_the_cpu_and_the_recipe_quotes_its_own_run():
    """Issue 45.8: ``scripts/demo`` printed the benchmark's "seed 0 0.727 -> 0.737" right under the user's own seed-0
    result with no word that figures move with the CPU; the recipe's comment quoted a stale "0.92 at 3,000"."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    demo = (root / "scripts" / "demo").read_text()
    quote = demo.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]  # the demo's quoting script, as it runs
    out = subprocess.run([sys.executable, "-c", quote, str(root / "bench/json/curation-quote.json")],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    lines = out.splitlines()
    assert lines[0].startswith("[demo] quoted, not rerun:") and "figures move with the CPU" in lines[1]
    recipe = (root / "training/recipes/tiny/fastcurl.yaml").read_text()
    readme = (root / "README.md").read_text()
    assert "0.92 at 3,000" not in recipe and "0.743 at 3,000" in recipe
    assert "validation pass@1 at step 3000: 0.743" in readme  # the run the comment quotes
