"""``bench/bench_methods.py``'s own logic on stub runs, in seconds (as ``test_bench_curation.py`` does for its
script): the commands each arm types (CoScale-RL's arms from the SFT model the curated chain chose, the P x K arms'
own chains and the curate recipes they write), the pairing of each arm with its reference (``VERSUS``), the records
of a parallel pass (a merge has no stage folder and no steps of its own; a later group's own model is off the curve),
and the claims table: the verdict rule, and the rows rendered by ``bench/tables.py`` from the JSON the report
writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from curate import io
from curate import schema as S
from tests.bench.test_bench_curation import _pool, _table, finished_run


ROOT = Path(__file__).resolve().parents[2]
QUARANTINE = "solutions_quarantine"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench(monkeypatch):
    """``bench/bench_methods.py`` as a module (``bench_curation``, which it imports, loaded first)."""
    curation = _module("bench_curation")
    monkeypatch.setitem(sys.modules, "bench_curation", curation)
    curation.EXTRA.update(all=[], raw=[], curated=[])
    module = _module("bench_methods")
    monkeypatch.setitem(sys.modules, "bench_methods", module)
    return module


def _sets(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]


def test_each_new_arm_runs_what_a_user_types(bench, tmp_path, monkeypatch):
    """CoScale-RL's arms start from the SFT model the curated chain chose on validation (``sft/best``, not
    ``sft/final``), on coscale.yaml with the ladder off or the groups sequential; the P x K arms are their own chains
    on pools of their own, whose curate recipes change only the SFT sources' size and teacher and the set's K, at
    equal planned SFT rows. Every command's recipe loads (``training.recipe.load_recipe``: a wrong key fails)."""
    from curate.config import parse_overrides
    from training.recipe import load_recipe

    monkeypatch.chdir(ROOT)  # the recipes name the curate recipe relative to the repository, as the runs start there
    home = tmp_path / "h"
    assert not bench.ready(home, "coscale", 3) and bench.ready(home, "pk1", 3)  # pk1 waits for nothing
    finished_run(home, "curated", 3, 0.4, 0.6, (2, 2))
    finished_run(home, "raw", 3, 0.3, 0.45, (6,))
    assert bench.ready(home, "coscale", 3)
    chosen = str(home / "runs/curated-seed3/sft/best")
    for arm, extra in (("coscale", ()), ("coscale-fixed", ("plan_fields=[max_response_length,kl]",)),
                       ("coscale-seq", ("groups=sequential",))):  # fmt: skip
        cmd = bench.commands(arm, home, 3)
        assert cmd[cmd.index("--recipe") + 1] == bench.COSCALE and cmd[cmd.index("--out") + 1].endswith(f"{arm}-seed3")
        sets = _sets(cmd)
        assert {f"model={chosen}", "sft=null", "seed=3", "eval.every=10", *extra} <= set(sets)
        assert not any(s.startswith("plan_fields") for s in sets) if arm != "coscale-fixed" else True
        recipe = load_recipe(bench.COSCALE, parse_overrides(sets))
        assert recipe.sft is None and ("ladder" in recipe.plan_fields) == (arm != "coscale-fixed")
        assert recipe.groups == ("sequential" if arm == "coscale-seq" else None)  # None: the plan's (parallel)
    assert f"model={home / 'runs/raw-seed3/sft/best'}" in _sets(bench.commands("unverified", home, 3))
    assert bench.versus("coscale") == "curated" and bench.versus("coscale-fixed") == bench.versus("coscale-seq")
    assert bench.versus("coscale-seq") == "coscale" and bench.versus("pxk") == "pk1"

    base = yaml.safe_load((ROOT / bench.POOL_RECIPE).read_text())
    rows = {}
    for arm, (n, tail, k) in (("pk1", (6000, 60, 1)), ("pxk", (1500, 15, 4))):
        name, sets = f"tiny-{arm}", _sets(bench.commands(arm, home, 3))
        path = home / "recipes" / f"{name}.yaml"
        assert {f"curate_recipe={path}", f"pool={name}", f"sft.data=solutions/{name}/sft.parquet"} <= set(sets)
        assert not any(s.startswith(("model=", "sft=")) for s in sets)  # from scratch: SFT, measure, RL
        written = yaml.safe_load(path.read_text())
        sources = {s["name"]: s for s in written["ingest"]["sources"]}
        assert (sources["tiny/sft"]["gen"]["n"], sources["tiny/sft-long"]["gen"]["n"]) == (n, tail)
        for source in ("tiny/sft", "tiny/sft-long"):
            assert (sources[source]["gen"]["teacher_methods"], sources[source]["gen"]["teacher_k"]) == (4, k)
        assert (written["pool"], written["select"]["name"], written["solutions"]["name"]) == (name, name, name)
        assert written["solutions"]["selection"] == name and written["solutions"]["k"] == k
        for source in written["ingest"]["sources"]:  # the rest is the built-in pool's
            gen = {key: v for key, v in source["gen"].items() if key not in ("n", "teacher_methods", "teacher_k")}
            original = next(s for s in base["ingest"]["sources"] if s["name"] == source["name"])
            assert gen == {key: v for key, v in original["gen"].items() if key != "n"}
        assert {
            key: v for key, v in written.items() if key not in ("name", "pool", "ingest", "select", "solutions")
        } == {key: v for key, v in base.items() if key not in ("name", "pool", "ingest", "select", "solutions")}
        recipe = load_recipe(bench.CURATED, parse_overrides(sets))
        assert recipe.pool == recipe.curate.pool == name and recipe.sft.data == f"solutions/{name}/sft.parquet"
        rows[arm] = (n + tail) * k
    assert rows["pk1"] == rows["pxk"] == 6060  # equal SFT rows before the checks


SHIFTS = {  # per-problem offsets (mean 0) per run, so that two runs' paired differences vary by problem
    "a": [0.05, -0.05, 0.0, 0.1, -0.1, 0.0],
    "b": [-0.05, 0.05, 0.1, -0.1, 0.0, 0.0],
}


def chain_run(home: Path, arm: str, seed: int, records: list[tuple], shift: str = "a", sft: float | None = None):
    """A run folder as ``training run`` leaves it, from ``records``: (step, RL steps, N, pass rate, kind), kind
    ``rl`` (on the eval curve), ``hidden`` (a later parallel group's own model: ``curve: false``) or ``merge`` (no
    stage folder, no steps of its own). ``sft``: the run's own SFT model's pass rate (a chain from scratch), with
    the SFT rows it pinned; else it started from another run's model, as CoScale-RL's arms do."""
    run = home / "runs" / f"{arm}-seed{seed}"
    rates = lambda r: [r + d for d in SHIFTS[shift]]  # noqa: E731
    steps: list[dict] = []
    if sft is not None:
        steps.append({"step": "sft", "model": str(run / "sft" / "best")})
        _table(run, "sft", rates(sft))
        io.write_parquet(pl.DataFrame({"prompt": ["p"] * 12, "completion": ["c"] * 12}), run / "data" / "sft.parquet")
    timings, metrics, offset = [{"step": "measure", "cpu_s": 30.0}], [], 0
    for i, (name, n_steps, n, rate, kind) in enumerate(records, 1):
        rec = {"step": name, "rl_steps": n_steps, "offset_step": offset}
        if kind != "merge":
            folder = run / "rl" / f"{i:02d}"
            io.write_json(folder / "config.json", {"rl": {"prompts_per_step": 2, "num_generations": n}})
            rec["stage_dir"] = str(folder)
            metrics.append({"step": offset + n_steps, "tokens": 100.0 * (offset + n_steps), "kept_group_frac": 0.5,
                            "truncation_rate": 0.0, "stage": name})  # fmt: skip
        if kind == "hidden":
            rec["curve"] = False
        steps.append(rec)
        _table(run, name, rates(rate))
        timings.append({"step": name, "cpu_s": 10.0 * n_steps or 1.0})
        offset += n_steps
    io.write_parquet(pl.DataFrame(metrics), run / "metrics.parquet")
    io.write_json(run / "chain.json", {"steps": steps, "notes": {}})
    io.write_json(run / "summary.json", {"timings": timings, "zero_variance": None})
    return run


PARALLEL = [("rl:g1", 4, 8, 0.50, "rl"), ("rl:g2", 4, 8, 0.20, "hidden"), ("merge:2of3", 0, 0, 0.55, "merge"),
            ("rl:g3", 4, 8, 0.20, "hidden"), ("merge:3of3", 0, 0, 0.60, "merge")]  # fmt: skip
SEQUENTIAL = [
    ("rl:g1", 4, 8, 0.50, "rl"),
    ("rl:g2", 2, 8, 0.45, "rl"),
    ("rl:g2@n16", 1, 16, 0.48, "rl"),
    ("rl:g3", 4, 8, 0.75, "rl"),
]  # fmt: skip  (g2's ladder doubled N after 2 steps: 1 step at 16)


def test_a_parallel_pass_is_read_by_its_merges_and_a_sequential_one_by_its_groups(bench, tmp_path):
    """A parallel pass's end is its last merge, ``groups2`` the merge of two groups; a later group's own model names
    no point and is no point on the rollout curve, though its rollouts count (before, ``curve`` raised KeyError
    'stage_dir' on the merge record); a sequential pass's ``groups2`` is its second group's last rung."""
    curation = sys.modules["bench_curation"]
    home = tmp_path / "h"
    finished_run(home, "curated", 0, 0.4, 0.6, (2, 2))
    chain_run(home, "coscale", 0, PARALLEL)
    chain_run(home, "coscale-seq", 0, SEQUENTIAL)
    points = curation.curve(home, "coscale", 0, sft_run="curated")
    assert [(x, y) for x, _, y in points[2:]] == [(64.0, pytest.approx(0.5)), (128.0, pytest.approx(0.55)),
                                                  (192.0, pytest.approx(0.6))]  # fmt: skip
    assert points[-1][1] == pytest.approx(30 + 3 * 40 + 2 * 1.0)  # measure, three groups, two merges
    seq_points = curation.curve(home, "coscale-seq", 0, sft_run="curated")
    assert [x for x, _, _ in seq_points[2:]] == [64.0, 96.0, 128.0, 192.0]  # the rung: 1 step x 2 x 16
    par, seq = curation.steps_of(home, "coscale", 0), curation.steps_of(home, "coscale-seq", 0)
    assert (par["end"], par["groups1"], par["groups2"]) == ("merge:3of3", "rl:g1", "merge:2of3")
    assert "rl:g2" not in par.values() and "rl:g3" not in par.values() and par["at8"] == "merge:2of3"
    assert (seq["end"], seq["groups2"], seq["groups3"], seq["at7"]) == ("rl:g3", "rl:g2@n16", "rl:g3", "rl:g2@n16")

    target = curation.to_target(home, 0, "coscale-seq", "coscale", "curated", "curated")
    assert (target["target"], target["target_rollouts"]) == (pytest.approx(0.6), 192.0)  # the last merge
    assert target["rollouts"] == pytest.approx(128 + 64 * (0.6 - 0.48) / (0.75 - 0.48))  # within its third group


def _sft_set(home: Path, arm: str, drops: dict[str, int]) -> None:
    """A P x K arm's solution set's quarantine table: ``drops`` candidates per reason."""
    reasons = [r for r, n in drops.items() for _ in range(n)]
    frame = pl.DataFrame({S.PROBLEM_ID: ["p"] * len(reasons), S.DROP_REASON: reasons})
    io.write_parquet(frame, home / "pools" / f"tiny-{arm}" / "solutions" / f"tiny-{arm}" / f"{QUARANTINE}.parquet")


def test_each_arm_is_paired_with_its_reference_and_each_claim_gets_its_verdict(bench, tmp_path, capsys):
    """Two seeds: coscale against curated at the end only (no common early point), coscale-fixed and coscale-seq
    against coscale at the end and after 2 groups, pxk against pk1 at the SFT model and the end, with the SFT rows
    and the traces the distinctness check dropped; a claims row per claim with the verdict the rule gives, a row
    whose arms did not run saying so; the JSON as ``--json`` writes it renders the claims table."""
    home = tmp_path / "h"
    _pool(home)
    fixed = [(n, s, k, r - 0.03 if kind != "hidden" else r, kind) for n, s, k, r, kind in PARALLEL]
    for seed in (0, 1):
        run = finished_run(home, "curated", seed, 0.4, 0.6, (2, 2))
        io.write_parquet(pl.DataFrame({"step": [2, 4], "tokens": [200.0, 400.0], "kept_group_frac": [0.6, 0.6],
                                       "truncation_rate": [0.0, 0.0]}), run / "metrics.parquet")  # fmt: skip
        chain_run(home, "coscale", seed, PARALLEL)
        chain_run(home, "coscale-fixed", seed, fixed, shift="b")  # the ladder's groups 0.03 better
        chain_run(home, "coscale-seq", seed, SEQUENTIAL, shift="b")
        chain_run(home, "pk1", seed, [("rl:stage1", 4, 8, 0.40, "rl")], sft=0.35)
        chain_run(home, "pxk", seed, [("rl:stage1", 4, 8, 0.60, "rl")], shift="b", sft=0.55)
    _sft_set(home, "pxk", {"near_duplicate": 3, "wrong_answer": 5})
    arms = ["coscale", "coscale-fixed", "coscale-seq", "pk1", "pxk"]
    results = bench.report(home, arms, [0, 1], {})
    out = capsys.readouterr().out

    rows = results["arms"]
    assert [rows[a]["versus"] for a in arms] == ["curated", "coscale", "coscale", "curated", "pk1"]
    assert rows["coscale"]["end"]["pooled"]["gain"] == pytest.approx(0.0)  # 0.60 against curated's 0.60
    assert rows["coscale"]["early"]["pooled"] is None and rows["coscale"]["early"]["at"] is None
    assert rows["coscale-seq"]["end"]["pooled"]["gain"] == pytest.approx(0.75 - 0.60)  # rl:g3 - merge:3of3
    assert rows["coscale-seq"]["early"]["pooled"]["gain"] == pytest.approx(0.48 - 0.55)  # g2's rung - merge:2of3
    assert rows["coscale-fixed"]["early"]["pooled"]["gain"] == pytest.approx(-0.03)
    assert rows["pxk"]["early"]["pooled"]["gain"] == pytest.approx(0.2) and rows["pxk"]["early"]["label"] == (
        "the SFT model")  # fmt: skip
    assert rows["pxk"]["end"]["pooled"]["gain"] == pytest.approx(0.2) and set(rows["pxk"]["end"]["per_seed"]) == {0, 1}
    assert rows["pxk"]["per_seed"][0]["sft_rows"] == {"rows": 12, "distinct_dropped": {"near_duplicate": 3}}
    assert rows["coscale-seq"]["per_seed"][1]["to_reference_end"]["target"] == pytest.approx(0.6)
    assert "pxk seed 0: 12 rows; dropped as (near-)duplicates: {'near_duplicate': 3}" in out
    assert "SFT rows: pxk 12, pk1 12 (1.000x); pxk's distinctness check dropped 3 trace(s)" in out

    claims = {c["arm"]: c for c in results["claims"]}
    assert len(results["claims"]) == len(bench.CLAIMS)
    assert claims["pxk"]["verdict"] == "reproduces" and claims["pxk"]["test"] == "`pxk` - `pk1`"
    assert claims["coscale-seq"]["verdict"] == "does not" and claims["coscale-seq"]["why"].startswith("the opposite")
    assert claims["coscale-seq"]["test"] == "`coscale` - `coscale-seq`"  # the method (merge) minus its absence
    assert claims["coscale-seq"]["end"]["gain"] == pytest.approx(-(0.75 - 0.60))
    assert claims["coscale-fixed"]["end"]["gain"] == pytest.approx(0.03)  # the ladder's edge, within noise:
    assert claims["coscale-fixed"]["verdict"] == "does not" and claims["coscale-fixed"]["why"].startswith("within")
    assert claims["coscale"]["verdict"] == "does not" and claims["coscale"]["why"].startswith("within noise")
    assert claims["full"]["verdict"] == "not measured" and "not in this report's --arms" in claims["full"]["why"]
    assert claims[None]["verdict"] == "not testable here"
    assert "== the claims" in out and "-> reproduces" in out

    tables = _module("tables")
    (tmp_path / "methods.json").write_text(json.dumps(results, indent=1, default=str))  # as main writes it
    doc = tables.update("<!-- table: claims -->\n<!-- /table: claims -->\n", folder=tmp_path)
    lines = doc.splitlines()
    pxk = next(line for line in lines if "`pxk` - `pk1`" in line)
    assert "| reproduces |" in pxk and "+0.200 ±" in pxk and "(seeds ± 0.000)" in pxk and "(the SFT model)" in pxk
    assert "SFT rows: pxk 12, pk1 12" in pxk
    assert any("| not measured |" in line and "`full` was not in this report's --arms" in line for line in lines)
    assert any("13 days -> 4 hours" in line and "| not testable here |" in line for line in lines)
    methods = tables.update("<!-- table: methods -->\n<!-- /table: methods -->\n", folder=tmp_path)
    assert any("`coscale-seq`" in line and "| `coscale` |" in line for line in methods.splitlines())


def test_the_verdict_rule(bench):
    """Real: |z| >= 2 on the paired SE and every seed with the sign; then a claim that the method is better
    reproduces (or finds the opposite); within noise it does not; 'no worse' fails only on a real loss; a
    prediction ('equal') fails on a real error; and ScaleRL's fit is not testable on a flat curve."""

    def g(gain, se):
        return {"gain": gain, "stderr": se, "z": gain / se, "seeds": 3, "seed_stderr": 0.01}

    assert bench.verdict(g(0.05, 0.01), [0.04, 0.05, 0.06], "better")[0] == "reproduces"
    assert bench.verdict(g(-0.05, 0.01), [-0.04, -0.05, -0.06], "better") == (
        "does not", "the opposite: z -5.0 on the paired SE, 3 of 3 seeds with its sign")  # fmt: skip
    assert bench.verdict(g(0.05, 0.01), [0.1, 0.1, -0.05], "better")[1].startswith("within noise")  # seeds disagree
    assert bench.verdict(g(0.01, 0.01), [0.01, 0.01, 0.01], "better")[0] == "does not"
    assert bench.verdict(g(0.01, 0.01), [0.01, 0.01, 0.01], "no worse")[0] == "reproduces"
    assert bench.verdict(g(-0.05, 0.01), [-0.05] * 3, "no worse")[0] == "does not"
    assert bench.verdict(g(0.05, 0.01), [0.05] * 3, "equal")[0] == "does not"
    assert bench.verdict(None, [], "better")[0] == "not measured"

    def fit(seed, measured, prediction, r0=0.5):
        return {"seed": seed, "r0": r0, "measured": measured, "measured_se": 0.01, "prediction": prediction,
                "error": measured - prediction, "inside": abs(measured - prediction) < 0.02,
                "flat_error": measured - r0}  # fmt: skip

    flat = bench.fit_claim([fit(0, 0.505, 0.5), fit(1, 0.495, 0.5)])
    assert flat["verdict"] == "not testable here" and flat["why"].startswith("the curve is flat")
    assert bench.fit_claim([fit(0, 0.7, 0.705), fit(1, 0.7, 0.69)])["verdict"] == "reproduces"
    off = bench.fit_claim([fit(0, 0.7, 0.6), fit(1, 0.72, 0.6)])
    assert off["verdict"] == "does not" and "inside the fit's band on 0 of 2 seeds" in off["why"]
    assert bench.fit_claim([{"seed": 0, "error": "too few points"}])["verdict"] == "not measured"
