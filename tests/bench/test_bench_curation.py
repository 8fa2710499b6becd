"""``bench/bench_curation.py`` end to end, shortened (issue 28): the four arms of one seed run through the CLI on a
small version of the built-in pool, and the report records every comparison, the time to target, the waste forecast
against the observed and the modes. What it asserts is that the comparison is recorded, never its sign."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


ROOT = Path(__file__).resolve().parents[2]


def small_recipes(tmp_path: Path) -> tuple[Path, Path]:
    """The built-in curate recipe and its raw variant with every source cut to a few dozen problems."""
    data = yaml.safe_load((ROOT / "datasets" / "tiny" / "recipe.yaml").read_text())
    sizes = {"tiny/sft": 60, "tiny/rl": 40, "tiny/validation": 8, "tiny/test": 8}
    for source in data["ingest"]["sources"]:
        source["gen"]["n"] = sizes[source["name"]]
        if "leak_n" in source["gen"]:
            source["gen"]["leak_n"] = 8
    curated = tmp_path / "recipe.yaml"
    curated.write_text(yaml.safe_dump(data))
    raw = yaml.safe_load((ROOT / "datasets" / "tiny" / "raw.yaml").read_text())
    raw_path = tmp_path / "raw.yaml"
    raw_path.write_text(yaml.safe_dump({**raw, "base": str(curated)}))
    return curated, raw_path


@pytest.mark.slow
@pytest.mark.timeout(1800)  # four small chains, each ~1 minute alone; several times that on a busy box
def test_the_four_arms_run_from_the_cli_and_every_comparison_is_recorded(tmp_path):
    curated, raw = small_recipes(tmp_path)
    home, out = tmp_path / "h", tmp_path / "results.json"
    short = [
        f"curate_recipe={curated}", "tiny.size=tiny", "tiny.corpus_problems=300", "tiny.vocab_size=400",
        "sft.max_steps=4", "eval.k=1", "eval.limit=8", "eval.init_limit=2", "eval.max_new_tokens=24",
    ]  # fmt: skip
    curated_only = [
        "measure.rollout.n=2", "measure.rollout.max_tokens=24", "measure.select.size=8",
        "measure.select.drop_zero_variance=false", "measure.select.drop_solved=false", "stages.stage1.max_steps=1",
        "stages.stage2.max_steps=1", "stages.stage3.max_steps=1", "stages.stage4.max_steps=1",
    ]  # fmt: skip
    raw_only = [f"curate_recipe={raw}", "rl.max_steps=6", "eval.every=2"]  # 4 = the curated arm's RL steps
    cmd = [sys.executable, "bench/bench_curation.py", "--seeds", "0", "--jobs", "2", "--home", str(home),
           "--json", str(out)]  # fmt: skip
    for flag, items in (("--set", short), ("--curated-set", curated_only), ("--raw-set", raw_only)):
        cmd += [x for s in items for x in (flag, s)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert {"curated-seed0", "raw-seed0", "sftmore-seed0"} <= set(results["runs"])
    # the tiny untrained model solves nothing, so rejection sampling has nothing to fine-tune on: said, not failed
    assert "rft-seed0" in results["runs"] or "no verified sample on the RL prompts" in done.stdout
    for temperature in ("T=0.6", "T=1.0"):  # a stage's checkpoints are evaluated at T=0.6 only
        comps = results[f"comparisons@{temperature}"]
        for name in (
            *(("curated - raw, equal RL steps",) if temperature == "T=0.6" else ()),
            "curated - raw, equal rollouts (raw 60 = 40 + measure)",
            "RL - SFT continued (equal CPU)",
            "curated SFT - raw SFT (verified traces vs all)",
        ):
            assert comps[name]["pooled"]["seeds"] == 1 and "stderr" in comps[name]["pooled"], name
    assert results["to_target"]["0"]["target"] is not None
    curated_run = results["runs"]["curated-seed0"]
    assert curated_run["zero_variance"]["forecast"]["rollouts"] == 8 and curated_run["zero_variance"]["groups"] > 0
    assert {"finished", "acc_finished"} <= set(curated_run["modes_end"])
    assert (home / "solutions" / "rft-seed0" / "sft.parquet").is_file()  # the model's own verified samples (none)
    for line in ("== paired differences at T=0.6", "== rollouts and CPU for curated to reach raw's final", "== modes"):
        assert line in done.stdout
