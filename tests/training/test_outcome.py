"""What a run bought, read back (issue 39): two steps paired on the same held-out problems (within a run and across
runs, as the benchmarks compare arms), and each run record through its one typed reader."""

from __future__ import annotations

import ast
from pathlib import Path

import polars as pl
import pytest

from curate import schema as S


REPO = Path(__file__).resolve().parents[2]


def _table(means: list[float]) -> dict:
    ids = [f"p{i}" for i in range(len(means))]
    return {"per_problem": pl.DataFrame({S.PROBLEM_ID: ids, "mean": means, "scored": [True] * len(means)})}


def test_paired_compares_two_steps_of_a_run_or_a_step_of_another_run_on_the_same_problems(tmp_path):
    from training.outcome import eval_path, keep_eval, paired, step_table

    run, other = tmp_path / "run", tmp_path / "other"
    keep_eval(run, "sft", _table([0.0, 0.5, 1.0, 0.5]))
    keep_eval(run, "rl:stage2", _table([0.5, 0.5, 1.0, 1.0]))
    keep_eval(run, "rl:stage2", _table([0.0, 0.0, 1.0, 1.0]), temperature=1.0)
    keep_eval(other, "sft", _table([0.0, 0.0, 0.0, 0.0]))
    assert eval_path(run, "rl:stage2").name == "rl_stage2.parquet" and step_table(run, "rl:stage2").height == 4
    gain = paired(run, "rl:stage2", "sft")
    assert gain["gain"] == pytest.approx(0.25) and gain["n_problems"] == 4 and gain["before_rate"] == 0.5
    assert paired(run, "rl:stage2", "sft", 1.0) is None  # SFT was not evaluated at T=1
    assert paired(run, "rl:stage2", None) is None and step_table(run, "rl:stage9") is None
    across = paired(run, "rl:stage2", "sft", before_run=other)  # one arm against another arm's step
    assert across["gain"] == pytest.approx(0.75) and across["before_rate"] == 0.0
    assert paired(run, "rl:stage2", "sft", keep={"p0", "p1"})["gain"] == pytest.approx(0.25)
    assert paired(run, "rl:stage2", "sft", keep={"p0"}) is None  # fewer than two problems: no paired SE


def test_a_stage_config_reads_back_as_the_rl_config_and_identity_it_was_bound_to(tmp_path):
    from training import run_folder
    from training.rl import CONFIG, RLConfig, read_config, run_identity

    train = tmp_path / "stage1.parquet"
    pl.DataFrame({"prompt": ["1+1"], "answer": ["2"], "problem_id": ["a"]}).write_parquet(train)
    cfg = RLConfig(loss_type="dapo", prompts_per_step=3, num_generations=4, policy="scalingrl", seed=7)
    assert read_config(tmp_path / "rl") is None  # not started
    identity = run_identity(cfg, "runs/r/sft/final", train, "tiny", "r-stage1")
    run_folder.bind(tmp_path / "rl", CONFIG, identity, extra={"run_id": "rl-x", "world_size": 1})
    read = read_config(tmp_path / "rl")
    assert read.rl == cfg and read.rl.sampler.seed == 7
    assert read.identity["ledger_model"] == "r-stage1" and read.identity["run_id"] == "rl-x"


def test_a_summary_and_a_fit_read_back_through_their_readers(tmp_path):
    from tests.training.demo_run import write_demo_run
    from training.outcome import read_summary
    from training.plots import read_fit

    run = write_demo_run(tmp_path / "ws")
    assert read_summary(run)["gain_over_sft"]["after"] == "rl:stage4"
    assert read_summary(tmp_path) is None and read_fit(run) is None


# Where a run's records may be parsed: each one's reader, beside its writer (issue 39.2). Anything else reads them
# through these; JSON another tool wrote goes through ``curate.io.read_json``.
READERS = {
    "training/chain.py": {"Chain.__init__", "read_recipe", "read_pinned"},
    "training/step.py": {"step_record"},
    "training/outcome.py": {"read_summary"},
    "training/run_folder.py": {"read_identity", "finished"},
    "training/plots.py": {"read_fit"},
    "training/sft.py": {"read_metrics"},
    "training/card.py": {"read_lineage"},
    "training/packaged.py": {"read_source"},
    "training/grpo_trainer.py": {"CurateGRPOTrainer.load_sampler_state"},
    "bench/bench_select.py": {"bench_lines", "verb_summary"},
    "bench/tables.py": {"render"},
}


def _json_reads(path: Path) -> set[str]:
    """The functions of ``path`` that call ``json.loads`` or ``json.load``, as ``Class.method`` or ``function``."""
    found: set[str] = set()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{where}.{child.name}" if where else child.name
            if isinstance(child, ast.Call) and ast.unparse(child.func) in ("json.loads", "json.load"):
                found.add(where or "<module>")
            visit(child, name)

    visit(ast.parse(path.read_text()), "")
    return found


def test_a_run_record_is_parsed_only_by_its_reader():
    """Issue 39.2: 30 raw JSON reads in training/ and 16 in bench/ (a stage's config.json parsed in 5 places,
    chain.json by hand 5 times in bench_curation.py)."""
    seen = {}
    for folder in ("training", "flows", "bench"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if reads := _json_reads(path):
                seen[str(path.relative_to(REPO))] = reads
    assert seen == READERS
