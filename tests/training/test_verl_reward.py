"""The verl custom reward (``training/verl_reward.py``) on rows of a real selection's ``verl.parquet``.

verl's default reward raises ``NotImplementedError`` for curated ``data_source`` names; the selection's card gives
the flags that point verl at ``compute_score`` instead. Here a small pool is ingested, scored and selected, its
``verl.parquet`` is read the way verl reads it (``datasets`` parquet loader), and ``compute_score`` is called with
verl's keyword arguments: the same verdicts as the answer checker, every gold form accepted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from curate import verify
from curate.config import IngestConfig, SourceSpec


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def verl_rows(ws, tmp_path):
    """Rows of ``verl.parquet`` of a selection (by problem text), and the selection folder."""
    from curate.ingest import stage as ingest_stage
    from curate.score import stage as score_stage
    from curate.select import stage as select_stage
    from datasets import load_dataset

    rows = [
        {"problem": "What is 6 times 7?", "answer": "42"},
        {"problem": "Write one half as a fraction.", "answer": ["\\frac{1}{2}", "0.5"]},
        {"problem": "How fast is the train?", "answer": "12 km/h"},
    ]
    path = tmp_path / "toy" / "train.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ingest_stage.ingest(ws, "toy", IngestConfig(sources=(SourceSpec(path=str(path)),)))
    score_stage.score_pool(ws, "toy", score_stage.ScoreConfig(use_embeddings=False), progress=False)
    select_stage.select_pool(ws, "toy", select_stage.SelectConfig(size=0, plots=False), name="toy", progress=False)
    out = ws.selection_dir("toy")
    data = load_dataset("parquet", data_files=str(out / "verl.parquet"), split="train")
    by_problem = {r["prompt"][0]["content"].split("?")[0].split(".")[0]: r for r in data}
    return by_problem, out


def _score(row: dict, response: str) -> float:
    from training.verl_reward import compute_score

    return compute_score(
        data_source=row["data_source"],
        solution_str=response,
        ground_truth=row["reward_model"]["ground_truth"],
        extra_info=row["extra_info"],
    )


def test_compute_score_on_verl_rows_of_a_selection(verl_rows):
    rows, _ = verl_rows
    times = rows["What is 6 times 7"]
    assert times["data_source"] == "toy/train"  # a name verl's default reward does not know
    assert _score(times, "6 * 7 = 42, so the answer is \\boxed{42}.") == 1.0
    assert _score(times, "I think it is \\boxed{48}.") == 0.0
    assert _score(times, "no final answer here") == 0.0
    half = rows["Write one half as a fraction"]
    assert half["extra_info"]["answer_alternatives"] == ["\\frac{1}{2}", "0.5"]
    assert _score(half, "\\boxed{0.5}") == 1.0 and _score(half, "\\boxed{\\frac{2}{4}}") == 1.0
    assert _score(rows["How fast is the train"], "It goes \\boxed{12} km per hour.") == 1.0
    # the same judgement as the checker curation's pass rates come from
    assert _score(times, "\\boxed{42}") == verify.reward_of(verify.check("\\boxed{42}", "42"))


def test_compute_score_signature_and_fallbacks():
    from training.verl_reward import compute_score

    assert compute_score("any", "\\boxed{5}", "5") == 1.0  # extra_info is optional
    assert compute_score("any", "\\boxed{5}", "5", {"answer_alternatives": []}, reward_kwarg=1) == 1.0
    assert compute_score("any", "\\boxed{5}", None) == 0.0 and compute_score("any", "\\boxed{5}", "  ") == 0.0
    assert isinstance(compute_score("any", "\\boxed{5}", "6"), float)


def test_card_gives_the_exact_verl_flags_for_this_file(verl_rows):
    _, out = verl_rows
    card = (out / "README.md").read_text(encoding="utf-8")
    m = re.search(r"custom_reward_function\.path=(.+) custom_reward_function\.name=(\w+)", card)
    assert m, card
    assert str(REPO) not in card and str(out) not in card  # no path of this machine (issue 30.10): portable
    # the path is a shell command that finds the file where curate-rl is installed: run it as a user would
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # the venv's python
    found = subprocess.run(["bash", "-c", f"echo {m.group(1)}"], env=env, capture_output=True, text=True, check=True)
    path, name = Path(found.stdout.strip()), m.group(2)
    assert path == REPO / "training" / "verl_reward.py" and path.is_file()
    # verl loads the file by path (importlib.util.spec_from_file_location), not as a package module
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert getattr(module, name)("src", "\\boxed{42}", "42") == 1.0
