"""What `training run` prints and `training show` reports (issue 23, item 11): SFT prints one compact progress line
per logging step on stderr (no raw log dicts), the chain's fit line is one readable summary (not JSON cut at 300
characters), and `training show` prints a table of steps, the paired gain, a fit line and the lineage as short
`key: value` lines (`--json` keeps everything). On a literal demo-shaped run folder (tests/training/demo_run.py)
and the tiny random-init model (CPU, seconds, no network).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from tests.training.demo_run import write_demo_run


REPO = Path(__file__).resolve().parents[2]


def test_show_prints_a_step_table_the_gain_a_fit_line_and_short_lineage(tmp_path, capsys):
    from training.cli import main
    from training.plots import fit_run
    from training.scaling import FitConfig

    ws = tmp_path / "ws"
    run = write_demo_run(ws)
    fit_run(run, FitConfig(compute_unit="tokens"), plot=False)
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.split()[:2] == ["step", "pass@1"] for line in lines)  # the table's header
    assert any(line.split()[:7] == ["sft", "0.534", "±", "0.022", "297", "4", "8.4"] for line in lines)
    assert any(line.split()[:2] == ["rl:stage4", "0.521"] and line.endswith("rl/04-stage4/final") for line in lines)
    assert "rl:stage4 - sft on the same 297 problems: -0.013 ± 0.011 (paired SE), z = -1.2" in out
    (fit_line,) = [line for line in lines if line.startswith("fit: ")]
    assert fit_line.startswith("fit: fit uninformative: A=0.530 [0.515, 1.000]; 4x the compute (") and "{" not in out
    assert "  selection: selections/tiny/selection.parquet" in lines and "  run: runs/tiny-fastcurl" in lines
    assert max(len(line) for line in lines) < 300
    assert main(["show", str(run), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["fit"]["fit"]["A"] == 0.53 and payload["fit"]["advice"]["verdict"] == "fit uninformative"
    assert payload["lineage"]["run"] == str(run) and payload["gain_over_sft"]["z"] == -1.2


def test_show_of_a_model_folder_prints_key_value_lines(tmp_path, capsys):
    from training.card import write_model_card
    from training.cli import main

    ws = tmp_path / "ws"
    (ws / "pools").mkdir(parents=True)
    model = ws / "runs" / "demo" / "rl" / "01-stage1" / "final"
    source = str(ws / "runs/demo/data/curriculum/stage1.parquet")
    write_model_card(
        model, kind="rl", base_model=str(ws / "runs/demo/sft/final"),
        data={"pool": "tiny", "source": source, "run": str(ws / "runs/demo")},
        recipe={"rl": {"learning_rate": 3e-5, "sampler": {"policy": "scalingrl", "phi": [0.0, 0.5]}}},
        metrics={"steps": 15}, evaluation={"pass_at_1": 0.514, "stderr": 0.021, "n_problems": 297, "k": 4},
    )  # fmt: skip
    assert main(["show", str(model)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for want in ("made by: rl from runs/demo/sft/final on ", "held-out pass@1: 0.514 ± 0.021 (297 problems, k=4)",
                 "  source: runs/demo/data/curriculum/stage1.parquet", "  rl.sampler.policy: scalingrl",
                 "  rl.sampler.phi: [0.0, 0.5]", "  steps: 15"):  # fmt: skip
        assert any(line.startswith(want) for line in lines), want
    assert max(len(line) for line in lines) < 200


def test_sft_prints_one_compact_line_per_logging_step_and_no_log_dicts(tmp_path, capfd):
    from curate.ingest.generate import generate
    from curate.prompts import sft_row
    from training.sft import SFTRunConfig, train_sft
    from training.tiny import TinyConfig, init_tiny

    model = init_tiny(tmp_path / "init", TinyConfig(size="tiny", corpus_problems=300, vocab_size=400))
    problems = list(generate(8, seed=0, family="arith", min_level=1, max_level=1))
    pl.DataFrame([sft_row(p["problem"], p["solution"]) for p in problems]).write_parquet(tmp_path / "sft.parquet")
    capfd.readouterr()
    cfg = SFTRunConfig(learning_rate=1e-3, epochs=2.0, per_device_batch_size=4, max_length=256, logging_steps=1,
                       warmup_ratio=0.0, torch_threads=1, save_steps=100)  # fmt: skip
    metrics = train_sft(cfg, model=str(model), data=tmp_path / "sft.parquet", out_dir=tmp_path / "run")
    out, err = capfd.readouterr()
    assert "{'loss'" not in out + err and "'train_runtime'" not in out + err  # transformers' PrinterCallback is gone
    progress = [line for line in err.splitlines() if line.startswith("sft step ")]
    assert len(progress) == metrics["steps"] == 4
    assert progress[0].startswith("sft step 1/4: loss=") and " lr=" in progress[0]
    assert any(line.startswith("sft done: 4 steps, mean loss=") for line in err.splitlines())


def test_the_chain_prints_the_fit_as_one_readable_line(tmp_path):
    from curate import io
    from training.chain import Run
    from training.outcome import fit_and_plot
    from training.recipe import load_recipe

    run_dir = write_demo_run(tmp_path / "ws")
    echoed: list[str] = []
    recipe = load_recipe(REPO / "training" / "recipes" / "tiny" / "fastcurl.yaml")
    out = fit_and_plot(Run(recipe, io.Workspace(tmp_path / "ws"), run_dir, echoed.append), None)
    (line,) = [e for e in echoed if e.startswith("[chain] fit")]
    assert line == f"[chain] fit: {out['fit']['advice']['summary']}"
    assert line.startswith("[chain] fit: fit uninformative: A=0.530 [0.515, 1.000]; 4x the compute (")
    assert "tokens" in line and "{" not in line and len(line) < 300
    assert {Path(p).name for p in out["figures"]} >= {"eval.png", "training.png", "fit.png"}


def test_show_of_a_running_run_says_what_runs_and_how_far(tmp_path, capsys):
    """Issue 30.8: ``training show`` on a live run names the running step and its progress (an evaluation's
    done/total, rate and time left; a training step's last ``step N/M`` line); a status left by a killed run
    names the step it stopped in."""
    import os
    import subprocess
    import sys
    import time

    from training.cli import main

    run = write_demo_run(tmp_path / "ws")
    status = {"step": "eval rl:stage2", "pid": os.getpid(), "started_at": time.time() - 200,
              "bar": {"description": "eval 02-stage2", "done": 480, "total": 1200, "unit": "samples",
                      "elapsed_s": 150.0}}  # fmt: skip
    (run / "running.json").write_text(json.dumps(status))
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"running \(pid \d+\): eval rl:stage2 for 3 min 2\d s", out), out
    assert "eval 02-stage2: 480/1,200 samples (3.2/s, ~3 min 45 s left)" in out
    log = run / "rl" / "03-stage3" / "step.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("loading\nrl step 10/40: loss=0.1\nrl step 12/40: loss=0.09 reward=0.5\n")
    (run / "running.json").write_text(json.dumps({**status, "step": "rl:stage3", "bar": None, "log": str(log)}))
    assert main(["show", str(run)]) == 0
    assert re.search(r"rl:stage3 for 3 min 2\d s; training step 12 of 40", capsys.readouterr().out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run / "running.json").write_text(json.dumps({**status, "pid": int(dead.stdout)}))
    assert main(["show", str(run)]) == 0
    assert "not running: the last run stopped during eval rl:stage2" in capsys.readouterr().out
