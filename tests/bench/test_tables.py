"""``bench/tables.py`` (issue 39.3): the measured tables of README.md and bench/README.md are rendered from the JSON
the benchmarks wrote, so a figure in the docs cannot drift from what the code printed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str):
    """``bench/<name>.py`` as a module (``bench/`` is a folder of scripts, not a package)."""
    sys.path.insert(0, str(ROOT / "bench"))  # bench_methods imports bench_curation
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_in_the_docs_is_what_its_json_says():
    assert _bench("tables").main(["--check"]) == 0


def test_a_table_is_rendered_from_a_benchmarks_report_and_a_hand_edit_is_undone(tmp_path):
    tables, curation = _bench("tables"), _bench("bench_curation")

    def gain(x: float) -> dict:
        return {"gain": x, "stderr": 0.01, "z": x / 0.01, "n_problems": 300, "after_rate": 0.6, "before_rate": 0.6 - x}

    per_seed = {0: gain(0.1), 1: gain(0.2)}
    comps = {name: {"per_seed": per_seed, "pooled": curation.pooled(list(per_seed.values()))}
             for name, *_ in curation.COMPARISONS}  # fmt: skip
    comps["RL - rejection-sampling FT (equal CPU)"] = {"per_seed": {}, "pooled": None}  # an arm the grid left out
    headroom = {"prompts": 600, "middle": 0.45, "ceiling": 0.35, "wrong_golds": 20, "flagged": 30, "recall": 0.5,
                "precision": 0.33, "by_reason": {"gold_consensus": {"flagged": 22, "right": 3},
                                                 "gold_vs_reference": {"flagged": 8, "right": 7}},
                "forecast": 0.33, "observed": 0.321, "start": 0.727}  # fmt: skip
    report = {"measured": curation.measured_at(["bench/bench_curation.py", "--seeds", "0", "1"]), "test": 300,
              "comparisons@T=0.6": comps, "comparisons@T=1.0": {}, "headroom": {"curated-seed0": headroom,
              "curated-seed1": None}}  # fmt: skip
    (tmp_path / "curation.json").write_text(json.dumps(report))  # as --json writes it (seeds become strings)
    doc = "intro\n<!-- table: curation -->\nhand-edited: +0.999\n<!-- /table: curation -->\nafter\n"
    out = tables.update(doc, folder=tmp_path)
    assert "+0.999" not in out and out.startswith("intro\n<!-- table: curation -->\n") and out.endswith("after\n")
    row = "| curated - raw, equal RL steps | +0.150 ± 0.007 (seeds ± 0.050) | not evaluated | +0.100, +0.200 |"
    assert row in out.splitlines()
    assert "`python bench/bench_curation.py --seeds 0 1`" in out
    assert "| RL - rejection-sampling FT (equal CPU) | not run in this grid | | |" in out.splitlines()
    assert tables.update(out, folder=tmp_path) == out  # rendering is idempotent
    before_rl = tables.render("curation-headroom", tmp_path).splitlines()  # a run's line; a run without one: none
    assert [line for line in before_rl if line.startswith("| curated-seed0 |")] == [
        "| curated-seed0 | 0.727 | 45.0% of 600 | +0.350 | 10/30 (gold_consensus 3/22, gold_vs_reference 7/8; recall "
        "0.50 of 20) | 0.330 | 0.321 | -0.009 |"
    ] and not any(line.startswith("| curated-seed1 |") for line in before_rl)
    missing = tables.update(doc.replace("curation", "methods"), folder=tmp_path)
    assert "Not measured on the current default yet: `python bench/bench_methods.py" in missing
