"""What real pools hold, from the generator (``curate.ingest.waste``, issue 28): each knob does what it says, at its
rate, without changing the problems it does not touch; curation's stages see and remove it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from curate import config, io, pipeline, verify
from curate import schema as S
from curate.errors import ConfigError, InputError
from curate.ingest.generate import generate, parse_uri
from curate.ingest.waste import step_list, steps
from tests.conftest import REPO


ARITH = dict(family="arith", min_level=1, max_level=1, min_ops=1, max_ops=6)


def _kind(row: dict) -> str | None:
    copy = row.get("waste", {}).get("copy")
    return copy["kind"] if copy else None


def test_without_knobs_the_stream_is_the_clean_one_and_knobs_change_only_their_rows():
    clean = list(generate(300, seed=5, **ARITH))
    assert list(generate(300, seed=5, **ARITH, wrong_gold=0.0, duplicates=0.0)) == clean
    noisy = list(generate(300, seed=5, **ARITH, wrong_gold=0.1, duplicates=0.05, near_duplicates=0.05))
    base = [r for r in noisy if _kind(r) is None]
    assert [r["problem"] for r in base] == [r["problem"] for r in clean]  # copies are added, nothing replaced
    for before, after in zip(clean, base, strict=True):
        assert (after["answer"] == before["answer"]) == ("gold" not in after.get("waste", {}))
    # one knob's draws do not move another's: the same rows get wrong golds with or without copies
    golds = [r["problem"] for r in generate(300, seed=5, **ARITH, wrong_gold=0.1) if "gold" in r.get("waste", {})]
    assert golds == [r["problem"] for r in base if "gold" in r.get("waste", {})]


def test_wrong_golds_are_wrong_and_of_the_kinds_a_model_can_and_cannot_produce():
    rows = list(generate(2000, seed=1, **ARITH, wrong_gold=0.06))
    wrong = [r for r in rows if "gold" in r.get("waste", {})]
    assert 80 < len(wrong) < 160  # 6% of 2,000
    kinds = {r["waste"]["gold"]["kind"] for r in wrong}
    assert kinds == {"early", "slip", "typo"}
    for r in wrong:
        true = r["waste"]["gold"]["true"]
        assert r["answer"] != true
        assert not verify.check(r["solution"], r["answer"]).correct  # the reference solution disagrees with it
        if r["waste"]["gold"]["kind"] == "early":  # the value before the last operation
            start, ops = steps(r["solution"])
            assert r["answer"] == str(step_list(start, ops[:-1])[1])
        if r["waste"]["gold"]["kind"] == "slip":
            assert abs(int(r["answer"]) - int(true)) == 1


def test_teacher_traces_one_per_problem_and_the_wrong_ones_fail_the_checker():
    rows = list(generate(1500, seed=2, **ARITH, teacher_error=0.2))
    assert all(len(r["solutions"]) == 1 for r in rows)
    wrong = [r for r in rows if "trace" in r.get("waste", {})]
    assert 220 < len(wrong) < 380  # 20% of 1,500
    assert {r["waste"]["trace"] for r in wrong} == {"slip", "skip", "early"}
    verdicts = verify.check_batch([r["solutions"][0] for r in rows], [r["answer"] for r in rows])
    for r, v in zip(rows, verdicts, strict=True):
        assert v.correct == ("trace" not in r.get("waste", {})), r
        assert steps(r["solutions"][0]) is not None  # still a well-formed step list: a slip, not garbage


def test_a_teacher_of_k_methods_writes_k_distinct_traces_each_with_its_methods_own_errors():
    """Issue 37: K traces per problem, each in another of the generator's methods, each wrong on its own draw in a way
    its method makes (the rewrite method miscopies operands; the others skip, slip and stop early), and every wrong
    one fails the checker while every right one is the generator's own reference text."""
    from curate.ingest.waste import METHOD_KINDS, METHODS

    rows = list(generate(400, seed=4, **ARITH, teacher_error=0.3, teacher_methods=4, teacher_k=3))
    verdicts = iter(
        verify.check_batch(
            [t for r in rows for t in r["solutions"]], [r["answer"] for r in rows for _ in r["solutions"]]
        )
    )
    kinds: dict[str, set[str]] = {m: set() for m in METHODS}
    for r in rows:
        methods, wrong = r["waste"]["methods"], r["waste"].get("trace") or [None] * 3
        assert len(r["solutions"]) == len(set(r["solutions"])) == len(set(methods)) == 3
        assert r["solution"] == r["solutions"][0]
        for method, kind in zip(methods, wrong, strict=True):
            assert next(verdicts).correct == (kind is None), (method, kind, r)
            if kind:
                kinds[method].add(kind)
    for method in METHODS:
        assert kinds[method] == set(METHOD_KINDS[method]), method  # each method's own kinds, all of them
    assert "copy" in kinds["rewrite"] and "copy" not in kinds["steps"]


def test_a_teacher_of_several_methods_writes_the_generators_own_text_when_right():
    from curate.ingest.generate import generate_problem

    rows = list(generate(200, seed=6, **ARITH, teacher_methods=4))  # one trace per problem, no errors
    used = set()
    for i, r in enumerate(rows):
        reference = generate_problem(i, seed=6, **ARITH)["solutions"]
        assert r["solutions"][0] in reference and len(r["solutions"]) == 1
        used.add(r["waste"]["methods"][0])
    assert used == {"steps", "total", "rewrite", "prose"}  # drawn at random among the four
    with pytest.raises(InputError, match="teacher_k"):
        list(generate(10, seed=6, **ARITH, teacher_methods=2, teacher_k=3))


def test_copies_duplicates_conflicts_and_leaks_say_what_they_copy():
    from curate.ingest.generate import generate_problem

    rows = list(generate(1500, seed=3, **ARITH, duplicates=0.05, near_duplicates=0.05, conflicts=0.5,
                         leak=0.2, leak_seed=9, leak_n=200))  # fmt: skip
    by_id = {S.problem_id(r["problem"]): r for r in rows if _kind(r) is None}
    dup = [r for r in rows if _kind(r) == "duplicate"]
    near = [r for r in rows if _kind(r) == "near_duplicate"]
    leaks = [r for r in rows if _kind(r) == "leak"]
    assert 40 < len(dup) < 120 and 40 < len(near) < 120 and len(leaks) == 40  # exactly 20% of the 200
    for r in dup:
        assert by_id[r["waste"]["copy"]["of"]]["problem"] == r["problem"]
    assert 0 < sum("gold" in r["waste"] for r in dup) < len(dup)  # conflicts: some copies carry another answer
    for r in near:
        original = by_id[r["waste"]["copy"]["of"]]
        assert r["problem"] != original["problem"] and r["answer"] == original["answer"]
        assert r["problem"].split("$")[1] == original["problem"].split("$")[1]  # same expression, reworded
    evaluation = {S.problem_id(p["problem"]): p for p in (generate_problem(i, seed=9, **ARITH) for i in range(200))}
    for r in leaks:
        assert evaluation[r["waste"]["copy"]["of"]]["answer"] == r["answer"]


def test_knobs_from_a_uri_and_from_a_recipe_mapping_are_the_same_source():
    spec = config.from_mapping(
        config.SourceSpec, {"path": "gen://arith?n=5", "gen": {"seed": 2, "wrong_gold": 0.5, "leak_n": 3}}
    )
    assert parse_uri(spec.location) == parse_uri("gen://arith?n=5&seed=2&wrong_gold=0.5&leak_n=3")
    with pytest.raises(ConfigError, match="gen:// sources only"):
        config.from_mapping(config.SourceSpec, {"path": "x.jsonl", "gen": {"n": 3}})
    with pytest.raises(InputError, match="unknown generator option"):
        parse_uri("gen://arith?wrong_golds=0.1")
    with pytest.raises(InputError, match="share in"):
        list(generate(3, seed=0, wrong_gold=1.5))
    with pytest.raises(InputError, match="leak_n"):
        list(generate(3, seed=0, leak=0.5))


@pytest.mark.slow
def test_curation_sees_the_waste_counts_reconcile_and_checked_solutions_drop_the_teacher_slips(tmp_path):
    """Through ingest and solutions: exact copies merged, conflicting copies quarantined, each row's ground truth
    kept in ``meta``; ``recheck`` (the default) drops every wrong teacher trace and keeps every right one."""
    ws = io.Workspace(tmp_path / "ws")
    gen = {"n": 150, "seed": 0, "min_level": 1, "max_level": 1, "min_ops": 1, "max_ops": 4,
           "teacher_error": 0.3, "duplicates": 0.1, "conflicts": 0.5}  # fmt: skip
    recipe = config.recipe_from_mapping({
        "name": "t", "pool": "p", "stages": ["ingest", "select", "solutions"],
        "ingest": {"sources": [{"path": "gen://arith", "name": "teacher", "split": "train", "gen": gen}]},
        "select": {"size": 0, "by": "random", "plots": False}, "solutions": {"k": 1},
    })  # fmt: skip
    results = {r.stage: r for r in pipeline.run_recipe(recipe, ws)}
    ingest = results["ingest"].summary
    problems = io.read_parquet(ws.table("p", "problems"))
    quarantine = io.read_quarantine(ws, "p")
    assert ingest["read"] == ingest["admitted"] + ingest["merged"] + ingest["quarantined"] > 150
    assert ingest["merged"] >= 3  # exact copies became one problem
    assert (quarantine[S.DROP_REASON] == "duplicate_conflict").sum() >= 2
    metas = [json.loads(m) for m in problems[S.META]]
    wrong = {p for p, m in zip(problems[S.PROBLEM_ID], metas, strict=True) if "trace" in m.get("waste", {})}
    assert wrong
    sft = pl.read_parquet(ws.root / "solutions" / "p" / "sft.parquet")
    assert not (set(sft[S.PROBLEM_ID]) & wrong)  # every slip dropped
    solved = set(sft[S.PROBLEM_ID])
    conflicted = set(quarantine.filter(pl.col(S.DROP_REASON) == "duplicate_conflict")[S.PROBLEM_ID].drop_nulls())
    assert set(problems[S.PROBLEM_ID]) - wrong - conflicted <= solved  # and every right one kept


@pytest.mark.slow
def test_readme_quotes_the_raw_sft_sets_waste_as_the_pool_holds_it(tmp_path):
    """Issue 38.4: the README once called the raw SFT set's 13.6% "traces that box a wrong answer"; by the built-in
    pool's ground truth (meta ``waste``) fewer are wrong, and the rest disagree with a wrong gold. The README and
    bench/README.md quote both figures; this recomputes them from the pool the recipe builds (both SFT sources,
    ``tiny/sft`` and ``tiny/sft-long``), so a change to the pool that leaves the prose stale fails here."""
    ws = io.Workspace(tmp_path / "ws")
    recipe = config.load_recipe(REPO / "datasets" / "tiny" / "raw.yaml", {"stages": ["ingest", "solutions"]})
    pipeline.run_recipe(recipe, ws)
    sft = pl.read_parquet(ws.root / "solutions" / "tiny-raw" / "sft.parquet")
    problems = io.read_parquet(ws.table("tiny", "problems")).filter(pl.col(S.PROBLEM_ID).is_in(sft[S.PROBLEM_ID]))
    waste = dict(zip(problems[S.PROBLEM_ID], (json.loads(m).get("waste", {}) for m in problems[S.META]), strict=True))
    against_gold = sft.filter(pl.col(S.VERDICT) != "correct")[S.PROBLEM_ID].to_list()
    wrong = sum("trace" in w for w in waste.values())
    right_under_wrong_gold = sum("trace" not in waste[p] for p in against_gold)
    n, k = sft.height, len(against_gold)
    assert 0 < right_under_wrong_gold < k and 0 < wrong < k < n  # both kinds of waste are there, and they differ
    readme = " ".join((REPO / "README.md").read_text().split())
    assert (
        f"{wrong} of {n:,} are wrong ({wrong / n:.1%}) and {k} ({k / n:.1%}) disagree with their gold, "
        f"{right_under_wrong_gold} of them right traces" in readme
    )
    assert "of traces that box a wrong answer" not in readme
    bench_readme = " ".join((REPO / "bench" / "README.md").read_text().split())
    assert (
        f"{wrong} of {n:,} are wrong, {wrong / n:.1%}, and {k}, {k / n:.1%}, disagree with their gold, "
        f"{right_under_wrong_gold} of them" in bench_readme
    )
