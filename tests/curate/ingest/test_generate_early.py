"""gen://arith's ``early`` teacher: the built-in RL task's SFT data (a share of traces stop one operation early)."""

from __future__ import annotations

from curate import verify
from curate.ingest.generate import generate, generate_problem, parse_uri, stopped_early


def test_early_adds_a_premature_trace_and_changes_no_problem():
    plain = list(generate(200, seed=3, family="arith", min_level=1, max_level=1, min_ops=2, max_ops=4))
    early = list(generate(200, seed=3, family="arith", min_level=1, max_level=1, min_ops=2, max_ops=4, early=0.5))
    assert [(p["problem"], p["answer"]) for p in plain] == [(p["problem"], p["answer"]) for p in early]
    with_trace = [p for p in early if len(p["solutions"]) == 2]
    assert 60 < len(with_trace) < 140  # about half
    for p in early:
        assert p["solutions"][0] == p["solution"]  # the full step list first
    p = with_trace[0]
    full, premature = p["solutions"]
    assert premature == stopped_early(full) and premature.count("\n") == full.count("\n") - 1
    verdicts = verify.check_batch([full, premature], [p["answer"], p["answer"]])
    assert [v.correct for v in verdicts] == [True, False]  # the checker catches it (curate solutions drops it)
    assert parse_uri("gen://arith?n=5&early=0.25")["early"] == 0.25


def test_the_chain_length_is_recorded():
    p = generate_problem(0, seed=0, family="arith", level=1, min_ops=3, max_ops=3)
    assert p["ops"] == 3


def test_solutions_recheck_false_keeps_the_unverified_traces_and_true_drops_them(tmp_path):
    """The built-in task's SFT set: ``recheck: false`` exports both traces (verdicts recorded); the default checks
    every answer and drops the premature one."""
    import polars as pl

    from curate import config, io, pipeline
    from curate import schema as S

    ws = io.Workspace(tmp_path / "ws")
    base = {"name": "t", "pool": "p", "stages": ["ingest", "solutions"],
            "ingest": {"sources": [{"path": "gen://arith?n=12&seed=0&max_level=1&min_ops=2&max_ops=3&early=1.0",
                                    "name": "teacher", "split": "train"}]}}  # fmt: skip
    kept = {}
    for recheck in (False, True):
        name = f"recheck-{recheck}"
        recipe = config.recipe_from_mapping({**base, "solutions": {
            "k": 2, "recheck": recheck, "near_duplicate": 1.0, "name": name}})  # fmt: skip
        pipeline.run_recipe(recipe, ws)
        rows = pl.read_parquet(ws.root / "solutions" / name / "sft.parquet")
        kept[recheck] = rows.height
        if not recheck:
            assert rows.height == 24  # 12 problems x (step list + premature trace)
    table = pl.read_parquet(ws.table("p", "solutions"))
    assert kept[True] == 12 and set(table[S.VERDICT]) == {"correct"}  # checked: the premature traces are dropped
