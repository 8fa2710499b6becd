"""Each method's share of what curation buys, on the built-in pool with waste: leave-one-out arms,
each paired against its reference arm (``VERSUS``: the curated arm unless named), and one row per paper claim.

Every arm is a ``training run`` (printed, so each reruns from the CLI), in the same workspace as
``bench/bench_curation.py``'s runs, at equal RL compute, evaluated every 10 RL steps. Most arms are the curated arm
(``training/recipes/tiny/fastcurl.yaml``, the project's defaults; 40 steps of 256 rollouts) with one part replaced,
from the curated arm's SFT model within a seed (``--set model=<the SFT model its chain chose on validation>
--set sft=null``, ``bench_curation.sft_model``: its ``measure`` rollouts are in the ledger and are reused), except
``unverified``, which is about the SFT data: it starts from the raw arm's chosen SFT model (every teacher trace,
with the curated recipe's SFT settings and seed: the same SFT step, so it is borrowed, not trained again).

- ScalingRL: ``random`` (a uniform 300 of the measured candidates, no filters) and ``full`` (every measured
  candidate, no solved / zero-variance filter) in place of the DES selection of 300;
- the curriculum sampler: ``uniform`` (a random permutation per epoch; no zero-variance skip, no
  no-positive-resampling) in place of the scalingrl policy with ScaleRL's filters;
- verified solutions: ``unverified`` (SFT on every teacher trace, ``solutions/tiny-raw``: the raw arm's SFT model),
  the rest curated (``measure`` of that model, DES selection, the sampler);
- decontamination: ``nodecon`` (the RL selection keeps the test split's reworded copies); reported on the leaked
  test problems and on the clean ones apart, so the inflation shows;
- dedup: ``nodedup`` (the RL selection keeps near duplicates);
- FastCuRL: ``single`` (one 40-step stage over every prompt at the largest context, 384 tokens, the lr decayed
  linearly) against the staged plan, compared at equal RL completion tokens too, with the truncation rate;
- CoScale-RL's RL stage (``training/recipes/tiny/coscale.yaml``: a ``bands`` plan's difficulty groups, each an
  independent run from the SFT model, merged; the rollout ladder, N doubled with lr/N kept when a group's reward
  plateaus; 3 x 13 steps x 256 rollouts at the first rung): ``coscale`` (the recipe as it is, against the curated
  arm), ``coscale-fixed`` (``plan_fields=[max_response_length,kl]``: no ladder, N fixed, equal rollouts) and
  ``coscale-seq`` (``groups=sequential``: each group from the previous one's model, no merge), both against
  ``coscale``, compared at the end (the pass's final model: the merge for parallel groups) and after 2 of its
  groups;
- CoScale-RL's P x K at equal SFT rows: ``pk1`` (6,000 SFT problems x 1 teacher trace in the generator's four
  methods, tail 60 x 1) and ``pxk`` (1,500 x 4 traces, one per method, tail 15 x 4; ``solutions.k: 4``), each its
  own chain from the seed's from-scratch model (SFT chosen on validation, ``measure``, the curated RL), each on its
  own pool curated by a recipe this script writes into ``<home>/recipes/`` (``pk_recipe``: the built-in pool's,
  with only the SFT sources' size and teacher and ``solutions.k`` changed, and its own pool, selection and set
  names); ``pxk`` against ``pk1``, at the SFT model and at the end, with the SFT rows each trained on;
- ScaleRL's fit: the sigmoid fitted on the first half (by RL tokens) of the curated arm's eval curve (every 5 steps),
  extrapolated to its end, against the measured end and the "no further gain" baseline.

Per arm, per seed and pooled (the mean of per-seed paired differences, SE = sqrt(sum of variances) / n, and the
seed-to-seed SE): held-out pass@1 (300 test problems x 4 at T = 0.6) minus its reference arm's, early and at the
end; rollouts and CPU-seconds to reach the reference's end (where reached); the kept-group fraction; the truncation
rate. Then ``CLAIMS``: a row per paper claim (METHODS.md) with the paper's number, ours (the method minus its
absence, both SEs), and a verdict by ``verdict``'s rule, each with its reason.

    python bench/bench_curation.py --seeds 0 1 2 --home /tmp/bench-curation --arms curated raw   # the base runs
    python bench/bench_methods.py --seeds 0 1 2 --jobs 2 --home /tmp/bench-curation --json bench/json/methods.json
    python bench/bench_methods.py --report-only --home /tmp/bench-curation --json /tmp/methods.json
    python bench/tables.py     # bench/README.md's tables (and README.md's headline) from bench/json/

Finished runs are read back; a rerun trains only what is missing and draws ``<home>/methods.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench_curation import (
    CURATED,
    ROOT,
    finished,
    fmt,
    held_out,
    measured_at,
    paired,
    pooled,
    rate,
    run_dir,
    sft_model,
    step_cpu,
    steps_of,
    summary,
    table,
    to_target,
)

from training import layout


EARLY = 10  # the early budget: RL steps (of 40)
BUDGETS = (2e5, 5e5, 1e6)  # RL completion tokens at which FastCuRL's staged and one-stage arms are compared
COSCALE = "training/recipes/tiny/coscale.yaml"  # CoScale-RL's RL stage on the built-in pool
POOL_RECIPE = "datasets/tiny/recipe.yaml"  # the built-in pool, which the P x K arms' recipes copy
NO_FILTERS = ("measure.select.drop_solved=false", "measure.select.drop_zero_variance=false")
ARMS: dict[str, tuple[str, tuple[str, ...]]] = {  # name -> (claim, --set items over its recipe)
    "random": ("ScalingRL", ("measure.select.by=random", *NO_FILTERS)),
    "full": ("ScalingRL", ("measure.select.size=0", *NO_FILTERS)),
    "uniform": ("sampler", ("rl.policy=uniform", "rl.sampler.zero_variance_skip=false",
                            "rl.sampler.no_positive_resampling=false")),
    "unverified": ("verified solutions", ()),  # the model: sft_arm
    "nodecon": ("decontamination", ("measure.select.drop_contaminated=false",)),
    "nodedup": ("dedup", ("measure.select.drop_duplicates=false",)),
    "single": ("FastCuRL", ("only_stages=[stage2]", "stages.stage2.max_steps=40",
                            "stages.stage2.max_completion_length=384", "stages.stage2.learning_rate=1.0e-4",
                            "stages.stage2.warmup_steps=5", "stages.stage2.lr_scheduler_type=linear")),
    "coscale": ("CoScale-RL", ()),  # COSCALE as it is: parallel groups, merged, the ladder
    "coscale-fixed": ("rollout ladder", ("plan_fields=[max_response_length,kl]",)),  # no ladder: N = 8 throughout
    "coscale-seq": ("groups + merge", ("groups=sequential",)),
    "pk1": ("mixed-method teacher", ()),  # its own chain: commands, pk_recipe
    "pxk": ("P x K", ()),
}  # fmt: skip
WHAT = {  # what replaces the part, as the tables say it (bench/tables.py)
    "random": "a random 300 of the measured candidates", "full": "the whole measured pool",
    "uniform": "uniform sampling, no filters", "unverified": "SFT on every teacher trace",
    "nodecon": "the RL selection keeps the test split's reworded copies", "nodedup": "near-duplicates kept",
    "single": "one stage at the largest context (384)",
    "coscale": "CoScale-RL's difficulty groups from the SFT model, merged, with the rollout ladder",
    "coscale-fixed": "a fixed N at equal rollouts (no ladder)",
    "coscale-seq": "the groups one after another, no merge",
    "pk1": "6,060 SFT problems x 1 trace in the generator's four methods (its own chain)",
    "pxk": "1,515 SFT problems x 4 traces, one per method (its own chain)",
}  # fmt: skip
RECIPE = {"coscale": COSCALE, "coscale-fixed": COSCALE, "coscale-seq": COSCALE}  # else CURATED
VERSUS = {"coscale-fixed": "coscale", "coscale-seq": "coscale", "pxk": "pk1"}  # arm -> its reference, else curated
SFT_FROM = {"unverified": "raw"}  # arm -> the bench_curation arm whose SFT model it starts from (else curated)
FROM_SCRATCH = {"pk1": (6000, 60, 1), "pxk": (1500, 15, 4)}  # own chains: (SFT problems, tail problems, traces each)
EVERY = {"single": 5}  # eval.every: stage ends (10 steps) give the early budget; the one-stage arm needs a curve
# the early point of an arm and of its reference (``steps_of``'s names), else f"at{EARLY}"; None: there is none
EARLY_AT: dict[str, str | None] = {"coscale": None, "coscale-fixed": "groups2", "coscale-seq": "groups2",
                                   "pk1": "sft", "pxk": "sft"}  # fmt: skip
EARLY_LABEL = {f"at{EARLY}": f"after {EARLY} RL steps", "groups2": "after 2 of the groups", "sft": "the SFT model",
               None: "none in common (CoScale-RL's groups against FastCuRL's stages)"}  # fmt: skip


class Claim(NamedTuple):
    """A paper's claim (METHODS.md) as the claims table's row (``claims``). ``arm``: the arm that tests it (None:
    not testable here; ``fit``: ScaleRL's fit); ``sign``: +1 when the arm holds the method (ours = arm minus its
    reference), -1 when the arm leaves it out (ours = the reference minus the arm); ``expect``: what reproducing
    it means (``verdict``: ``better``, ``no worse``, ``equal``); ``part``: the test problems it is scored on
    (``leaked``: the decontamination arm's inflation); ``reason``: what the test is, and where it differs from the
    paper's."""

    claim: str
    paper: str
    arm: str | None
    sign: int
    expect: str
    reason: str
    part: str | None = None


CLAIMS = (
    Claim("ScalingRL: a DES-selected subset trains as well as the whole pool",
          "1.5K of 220K prompts, results comparable to full-data training (§1.1)", "full", -1, "no worse",
          "DES's 300 against every measured candidate (no solved or zero-variance filter) at equal RL steps; our "
          "pool has 600 prompts, so this tests whether the choice loses anything, not a 150x cut"),
    Claim("ScalingRL: DES beats a random subset", "each DES factor helps; its sampling beats random (§1.5; no "
          "number retrieved)", "random", -1, "better", "a uniform 300 of the measured candidates, no filters"),
    Claim("ScalingRL: less data trains faster", "13 days -> 4 hours on 8 x A800 (§1.1)", None, 0, "better",
          "the saving comes from fewer epochs over a 220K pool; every arm here trains 40 steps over a 600-prompt "
          "pool, so RL time is fixed by the step budget, not by the pool's size"),
    Claim("ScaleRL: zero-variance filtering and No-Positive-Resampling", "part of the recipe that moves "
          "efficiency, not the asymptote (§4.1; no separate number)", "uniform", -1, "better",
          "uniform sampling without either filter at equal RL steps; the kept-group column shows the share of "
          "groups with signal"),
    Claim("FastCuRL: staged context", "8K -> 16K -> 24K -> 16K beats DeepScaleR with ~50% of its steps (860 "
          "against 1,750; §3.1)", "single", -1, "better",
          "one 40-step stage at the largest context (384 tokens) against the four stages at equal RL steps (equal "
          "tokens: the arms' table); answers here fit in 128-256 tokens, so the context rarely binds"),
    Claim("ScaleRL: the sigmoid fitted on a run's first half predicts the rest", "a 100K GPU-hour run followed "
          "the curve fitted on its first 50K (§4.1)", "fit", 1, "equal",
          "the curated arm's curve (every 5 RL steps) fitted on its first half by RL tokens (R0 = the SFT model), "
          "extrapolated to its end, against the measured end; a flat curve is predicted by any fit"),
    Claim("CoScale-RL: its RL stage", "an average 3.76 accuracy improvement on four benchmarks (points or x: "
          "ambiguous; §2.1)", "coscale", 1, "better",
          "3 difficulty groups from the SFT model as independent CISPO runs, merged (linear; the paper merges by "
          "re-distillation), with the rollout ladder, against FastCuRL's stages at equal rollouts (9,984 against "
          "10,240) from the same SFT model; the paper's figure is its whole loop over GRPO on a 0.5B model"),
    Claim("CoScale-RL: more rollouts per prompt stabilise RL", "N doubled when a group plateaus, lr/N kept "
          "(§2.1-2.2; no number)", "coscale-fixed", -1, "better",
          "the ladder (N 8 -> 16 -> 32 on a plateau of the training reward) against N = 8 throughout, at equal "
          "rollouts per group; early: after 2 of the groups"),
    Claim("CoScale-RL: independent group runs, merged", "one RL run per difficulty group, merged, keeps "
          "compute efficiency and avoids forgetting (§2.2; no number)", "coscale-seq", -1, "better",
          "the same groups as independent runs from the SFT model, merged, against one after another from the "
          "previous group's model, no merge; early: after 2 of the groups"),
    Claim("CoScale-RL: K solutions per problem", "90 problems x 20 solutions against 1,800 x 1 at the same "
          "batch and epochs (§2.3; scored on seen problems)", "pxk", 1, "better",
          "1,515 problems x 4 teacher traces (one per method) against 6,060 x 1, each its own chain from scratch "
          "(SFT, measure, RL), scored on held-out problems; early: the SFT model; equal rows up to what the checks "
          "dropped (the SFT rows beside)"),
    Claim("Decontamination", "6% of MATH-500 has a copy in DeepScaleR (ANALYSIS.md §4): a leaked test problem "
          "inflates the score", "nodecon", 1, "better",
          "RL with the test split's reworded copies left in the selection, scored on the leaked test problems "
          "only: the inflation decontamination removes (the clean problems: the arms' table)", "leaked"),
    Claim("Verified solutions", "9% of a distilled set's traces are wrong (simpleRL's 800 CoTs): SFT on "
          "verified ones", "unverified", -1, "better",
          "SFT on every teacher trace (the raw arm's SFT model: wrong traces, and right ones under a wrong gold), "
          "then the curated RL"),
    Claim("Dedup", "3.0% exact and 4.0% near duplicates in DeepScaleR-40K", "nodedup", -1, "better",
          "the RL selection keeps near duplicates, at equal RL steps: a copy spends a prompt slot on a problem "
          "already there"),
)  # fmt: skip


def versus(arm: str) -> str:
    """The arm ``arm`` is paired against (``VERSUS``)."""
    return VERSUS.get(arm, "curated")


def sft_arm(arm: str) -> str:
    """The arm whose SFT model (and its held-out table) this arm starts from: its own for the P x K arms
    (``FROM_SCRATCH``). ``unverified`` fine-tunes on every teacher trace with the curated recipe's SFT settings and
    seed: that is the raw arm's SFT step (the same data, settings, seed and from-scratch model; bench_curation.py's
    raw recipe), so it borrows that model."""
    return arm if arm in FROM_SCRATCH else SFT_FROM.get(arm, "curated")


def pk_recipe(home: Path, arm: str) -> Path:
    """The curate recipe of a P x K arm, ``<home>/recipes/tiny-<arm>.yaml``: the built-in pool's
    (``POOL_RECIPE``) with the SFT sources' size and teacher (``teacher_methods: 4``, ``teacher_k``: the traces
    per problem, each in another method) and ``solutions.k`` changed, and the pool, the SFT selection and the
    solution set named ``tiny-<arm>`` (selections and exports are workspace-wide: the arms never share a table).
    Rewritten only when its content changes (a rerun's curation is then skipped as done)."""
    import yaml

    problems, tail, k = FROM_SCRATCH[arm]
    name, data = f"tiny-{arm}", yaml.safe_load((ROOT / POOL_RECIPE).read_text())
    sizes = {"tiny/sft": problems, "tiny/sft-long": tail}
    for source in data["ingest"]["sources"]:
        if source["name"] in sizes:
            source["gen"].update(n=sizes[source["name"]], teacher_methods=4, teacher_k=k)
    data.update(name=name, pool=name)
    data["select"]["name"] = name
    data["solutions"].update(selection=name, name=name, k=k)
    text = (
        f"# Written by bench/bench_methods.py (pk_recipe) from {POOL_RECIPE}: {problems} + {tail} SFT problems "
        f"x {k} teacher trace(s) in the generator's four methods.\n"
    ) + yaml.safe_dump(data, sort_keys=False)
    path = home / "recipes" / f"{name}.yaml"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def commands(arm: str, home: Path, seed: int) -> list[str]:
    """``training run`` of one arm at one seed (what a user types to rerun it). The P x K arms write their curate
    recipe first (``pk_recipe``); the others start from the SFT model their arm's chain chose."""
    sets = [f"seed={seed}", "eval.temperatures=[]", f"eval.every={EVERY.get(arm, 10)}", *ARMS[arm][1]]
    if arm in FROM_SCRATCH:
        name = f"tiny-{arm}"
        sets += [f"curate_recipe={pk_recipe(home, arm)}", f"pool={name}", f"sft.data=solutions/{name}/sft.parquet",
                 f"name={name}"]  # fmt: skip
    else:
        sets += [f"model={sft_model(home, sft_arm(arm), seed)}", "sft=null"]
    cmd = [sys.executable, "-m", "training.cli", "run", "--recipe", RECIPE.get(arm, CURATED), "--home", str(home),
           "--out", str(run_dir(home, arm, seed)), "--json"]  # fmt: skip
    return cmd + [x for s in sets for x in ("--set", s)]


def ready(home: Path, arm: str, seed: int) -> bool:
    """Whether a run can start: a P x K arm at once, another once the run whose SFT model it starts from has
    finished (``bench_curation.py``'s, which may be running beside this)."""
    return arm in FROM_SCRATCH or finished(home, sft_arm(arm), seed)


def run_all(home: Path, arms: list[str], seeds: list[int], jobs: int) -> dict[str, float]:
    """Every (arm, seed) not finished, ``jobs`` at once, each once it is ``ready``."""
    todo = [(a, s) for a in arms for s in seeds if not finished(home, a, s)]  # arm by arm: a cut grid has whole arms
    running: dict[int, tuple[str, int, float, subprocess.Popen]] = {}  # Popen kept: bench_curation.run_jobs says why
    cpu: dict[str, float] = {}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    (home / "logs").mkdir(parents=True, exist_ok=True)
    while todo or running:
        waiting = [(a, s) for a, s in todo if ready(home, a, s)]
        if not waiting and not running:
            print(f"[{time.strftime('%H:%M:%S')}] waiting for bench_curation.py's runs of seeds "
                  f"{sorted({s for _, s in todo})}", flush=True)  # fmt: skip
            time.sleep(60)
            continue
        while waiting and len(running) < jobs:
            a, s = waiting.pop(0)
            todo.remove((a, s))
            cmd = commands(a, home, s)
            print(f"[{time.strftime('%H:%M:%S')}] {a} seed {s}: python " + " ".join(cmd[1:]), flush=True)
            log = open(home / "logs" / f"{a}-seed{s}.log", "w")  # noqa: SIM115 (the child holds it)
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[proc.pid] = (a, s, time.perf_counter(), proc)
        pid, status, usage = os.wait4(-1, 0)
        a, s, t0, proc = running.pop(pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu[f"{a}-seed{s}"] = usage.ru_utime + usage.ru_stime
        print(f"[{time.strftime('%H:%M:%S')}] {a} seed {s}: exit {os.waitstatus_to_exitcode(status)}, "
              f"{(time.perf_counter() - t0) / 60:.1f} min wall, {cpu[f'{a}-seed{s}'] / 60:.1f} CPU-min, load "
              f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    return cpu


# --------------------------------------------------------------------------------------------------- the report
def figures(home: Path, arm: str, seed: int) -> dict[str, Any]:
    """Rollouts, completion tokens, kept-group fraction and truncation of a run's RL stages."""
    import polars as pl

    m = pl.read_parquet(run_dir(home, arm, seed) / layout.METRICS)
    s = summary(home, arm, seed)
    return {"tokens": float(m["tokens"].max()), "kept_group_frac": float(m["kept_group_frac"].mean()),
            "truncation_rate": float(m["truncation_rate"].mean()), "rl_cpu_s": step_cpu(s, layout.first_pass_rl),
            "zero_variance": s.get("zero_variance")}  # fmt: skip


def at_tokens(home: Path, arm: str, seed: int, budgets: tuple[float, ...]) -> list[float]:
    """Held-out pass@1 at equal RL completion tokens, interpolated on the run's eval curve (SFT at 0 tokens)."""
    import numpy as np

    from training.evaluate import read_eval

    ev = read_eval(run_dir(home, arm, seed)).sort("compute")
    xs = [0.0, *ev["compute"].to_list()]
    ys = [rate(table(home, sft_arm(arm), seed, layout.SFT)), *ev["pass_at_1"].to_list()]
    return [float(np.interp(b, xs, ys, right=np.nan)) for b in budgets]


def fit_first_half(home: Path, seed: int, arm: str = "curated") -> dict[str, Any] | None:
    """ScaleRL's sigmoid on the first half (by RL tokens) of an arm's eval curve, R0 = its SFT model at 0 tokens,
    extrapolated to the last evaluation: prediction, band, measured, and the "no further gain" baseline."""
    import polars as pl

    from training.evaluate import read_eval
    from training.scaling import FitConfig, extrapolate, extrapolate_band, fit_sigmoid

    ev = read_eval(run_dir(home, arm, seed)).sort("step")
    if ev.height < 4:
        return None
    r0 = rate(table(home, sft_arm(arm), seed, layout.SFT))
    end = ev.row(-1, named=True)
    half = ev.filter(pl.col("compute") <= end["compute"] / 2)
    flat = half.row(-1, named=True)["pass_at_1"]
    out: dict[str, Any] = {"seed": seed, "arm": arm, "r0": r0, "points": half.height, "measured": end["pass_at_1"],
                           "measured_se": end["stderr"], "flat_error": end["pass_at_1"] - flat}  # fmt: skip
    try:
        fit = fit_sigmoid([0.0, *half["compute"].to_list()], [r0, *half["pass_at_1"].to_list()],
                          FitConfig(r0=r0, skip_frac=0.0, compute_unit="tokens", min_points=3))  # fmt: skip
    except (ValueError, RuntimeError) as exc:
        return {**out, "error": str(exc)}
    lo, hi = extrapolate_band(fit, end["compute"])
    pred = float(extrapolate(fit, end["compute"]))
    return {**out, "A": fit.A, "prediction": pred, "band": [float(lo[0]), float(hi[0])],
            "inside": bool(lo[0] <= end["pass_at_1"] <= hi[0]), "error": end["pass_at_1"] - pred}  # fmt: skip


def compare_at(home: Path, arm: str, seeds: list[int], at: str, keep: set[str] | None = None) -> dict[str, Any]:
    """``arm`` minus its reference (``versus``) at the point ``at`` of both (``steps_of``), paired per seed (on
    ``keep`` only, when given) and pooled over the seeds where both finished and both have that point."""
    ref, gains = versus(arm), {}
    for seed in (s for s in seeds if finished(home, arm, s) and finished(home, versus(arm), s)):
        mine, theirs = steps_of(home, arm, seed).get(at), steps_of(home, ref, seed).get(at)
        g = paired(home, seed, (arm, mine), (ref, theirs), keep=keep) if mine and theirs else None
        if g is not None:
            gains[seed] = g
    return {"per_seed": gains, "pooled": pooled(list(gains.values()))}


def sft_rows(home: Path, arm: str, seed: int) -> dict[str, Any]:
    """The SFT rows a P x K arm trained on (its run's pinned copy, ``data/sft.parquet``) and the traces its solution
    set's distinctness check dropped (``solutions_quarantine.parquet``: duplicate, near_duplicate)."""
    import polars as pl

    from curate import schema as S
    from curate.io import Workspace

    name = f"tiny-{arm}"
    rows = pl.read_parquet(layout.pinned_path(run_dir(home, arm, seed), "sft")).height
    q = Workspace(home).solution_set_dir(name, name) / "solutions_quarantine.parquet"
    drops = pl.read_parquet(q)[S.DROP_REASON].value_counts() if q.is_file() else None
    dropped = {r: n for r, n in (drops.iter_rows() if drops is not None else ()) if "duplicate" in r}
    return {"rows": rows, "distinct_dropped": dropped}


def arm_rows(home: Path, arm: str, seeds: list[int], cpu: dict[str, float], split: dict[str, set]) -> dict:
    """One arm against its reference (``versus``): early (``EARLY_AT``) and end differences per seed and pooled,
    figures per seed (with the SFT rows of a P x K arm), and (the decontamination arm) the end difference on the
    leaked and on the clean test problems apart."""
    early = EARLY_AT.get(arm, f"at{EARLY}")
    rows: dict[str, Any] = {"claim": ARMS[arm][0], "what": WHAT[arm], "versus": versus(arm), "per_seed": {}}
    rows["early"] = {**(compare_at(home, arm, seeds, early) if early else {"per_seed": {}, "pooled": None}),
                     "at": early, "label": EARLY_LABEL[early]}  # fmt: skip
    rows["end"] = {**compare_at(home, arm, seeds, "end"), "at": "end", "label": "the last model"}
    for seed in (s for s in seeds if finished(home, arm, s)):
        ref = versus(arm)
        rows["per_seed"][seed] = f = {**figures(home, arm, seed), "cpu_s": cpu.get(f"{arm}-seed{seed}"),
                                      "to_reference_end": to_target(home, seed, arm, ref, sft_arm(arm), sft_arm(ref)),
                                      "command": " ".join(commands(arm, home, seed)[1:])}  # fmt: skip
        if arm in FROM_SCRATCH:
            f["sft_rows"] = sft_rows(home, arm, seed)
    if arm == "nodecon":
        for name, keep in split.items():
            rows[name] = compare_at(home, arm, seeds, "end", keep)
    return rows


def print_fit(f: dict[str, Any]) -> None:
    if "A" not in f:
        print(f"seed {f['seed']}: {f['error']}")
        return
    print(f"seed {f['seed']}: A {f['A']:.3f}, predicted {f['prediction']:.3f} [{f['band'][0]:.3f}, "
          f"{f['band'][1]:.3f}], measured {f['measured']:.3f} ± {f['measured_se']:.3f}: "
          f"{'inside' if f['inside'] else 'OUTSIDE'}, error {f['error']:+.3f} (no further gain: "
          f"{f['flat_error']:+.3f})")  # fmt: skip


def kept_and_truncation(figs: list[dict[str, Any]]) -> tuple[float, float]:
    """The mean kept-group fraction and truncation rate over runs' ``figures`` (NaN without any run)."""
    if not figs:
        return float("nan"), float("nan")
    n = len(figs)
    return sum(f["kept_group_frac"] for f in figs) / n, sum(f["truncation_rate"] for f in figs) / n


def print_sft_rows(results: dict[str, Any]) -> None:
    """The P x K arms' SFT rows per seed: equal rows is the comparison's premise, and pxk's distinctness check may
    drop some of a problem's four traces."""
    arms = [a for a in FROM_SCRATCH if a in results["arms"]]
    if not arms:
        return
    print("\n== SFT rows of the P x K arms (the pinned sft.parquet of each run; distinct traces dropped)")
    for arm in arms:
        for seed, f in results["arms"][arm]["per_seed"].items():
            rows = f["sft_rows"]
            print(f"{arm} seed {seed}: {rows['rows']} rows; dropped as (near-)duplicates: "
                  f"{rows['distinct_dropped'] or 'none'}")  # fmt: skip
    note = rows_note(results, "pxk")
    if note:
        print(note)


def rows_note(results: dict[str, Any], arm: str) -> str:
    """A P x K arm's SFT rows against its reference's (the claims row says them): the first seed of each, the
    ratio, and the traces the arm's distinctness check dropped; empty unless both ran."""
    mine, ref = (results["arms"].get(a, {}).get("per_seed") or {} for a in (arm, versus(arm)))
    if not (mine and ref):
        return ""
    a, b = (next(iter(x.values()))["sft_rows"] for x in (mine, ref))
    dropped = sum(a["distinct_dropped"].values())
    return (f"SFT rows: {arm} {a['rows']:,}, {versus(arm)} {b['rows']:,} ({a['rows'] / b['rows']:.3f}x); {arm}'s "
            f"distinctness check dropped {dropped:,} trace(s)")  # fmt: skip


Z = 2.0  # |z| on the problems' paired SE that makes a difference real (with every seed agreeing in its sign)
REPRODUCES, DOES_NOT, NOT_TESTABLE, NOT_MEASURED = "reproduces", "does not", "not testable here", "not measured"


def verdict(g: dict[str, Any] | None, per_seed: list[float], expect: str) -> tuple[str, str]:
    """The claims table's rule, on ours (the method minus its absence, ``pooled`` over seeds) and each seed's
    difference: a difference is real when |z| >= ``Z`` on the problems' paired SE and every seed has its sign, else
    it is within noise. ``better``: reproduces when real and positive; does not otherwise ("the opposite" when real
    and negative). ``no worse``: does not only when real and negative. ``equal`` (a prediction against what was
    measured): does not when real. Returns (verdict, why)."""
    if not g:
        return NOT_MEASURED, ""
    agree = sum(x * g["gain"] > 0 for x in per_seed)
    real = abs(g["z"]) >= Z and agree == len(per_seed)
    stats = f"z {g['z']:+.1f} on the paired SE, {agree} of {len(per_seed)} seeds with its sign"
    if expect == "equal":
        return (DOES_NOT, f"off: {stats}") if real else (REPRODUCES, f"within noise: {stats}")
    if real and g["gain"] < 0:
        return DOES_NOT, f"{'the opposite' if expect == 'better' else 'worse'}: {stats}"
    if real or expect == "no worse":
        return REPRODUCES, f"{'better' if real else 'within noise'}: {stats}"
    return DOES_NOT, f"within noise: {stats}"


def oriented(block: dict[str, Any], sign: int) -> tuple[dict[str, Any] | None, list[float]]:
    """A comparison (``compare_at``) turned into the method minus its absence: (pooled, each seed's difference)."""
    p = block["pooled"]
    g = {**p, "gain": sign * p["gain"], "z": sign * p["z"]} if p else None
    return g, [sign * x["gain"] for x in block["per_seed"].values()]


def fit_claim(fits: list[dict[str, Any]]) -> dict[str, Any]:
    """ScaleRL's fit as a claims row: the measured end minus the prediction per seed (``fit_first_half``), pooled
    with the measured ends' sampling errors; not testable when the curve is flat (the end within ``Z`` SE of R0,
    the SFT model: any fit, and "no further gain", predicts a flat end)."""
    done = [f for f in fits if "prediction" in f]
    if not done:
        return {"verdict": NOT_MEASURED, "why": "no curated run with 4 evaluations or more (eval.every=5)"}
    err = pooled([{"gain": f["error"], "stderr": f["measured_se"]} for f in done])
    moved = pooled([{"gain": f["measured"] - f["r0"], "stderr": f["measured_se"]} for f in done])
    assert err is not None and moved is not None
    flat = sum(f["flat_error"] for f in done) / len(done)
    extra = (f"; the end inside the fit's band on {sum(f['inside'] for f in done)} of {len(done)} seeds; "
             f"'no further gain' errs by {flat:+.3f}")  # fmt: skip
    per = [f["error"] for f in done]
    if abs(moved["z"]) < Z:
        why = f"the curve is flat: RL moved the model by {moved['gain']:+.3f} ± {moved['stderr']:.3f}"
        return {"end": err, "end_per_seed": per, "verdict": NOT_TESTABLE, "why": why + extra}
    v, why = verdict(err, per, "equal")
    return {"end": err, "end_per_seed": per, "verdict": v, "why": why + extra}


def claims(results: dict[str, Any]) -> list[dict[str, Any]]:
    """A row per ``CLAIMS`` entry: the paper's claim and number, our test (which arms, which way round), ours at the
    end and early with both SEs, the verdict (``verdict``) and its reasons; without its measurement, why."""
    out = []
    for c in CLAIMS:
        row: dict[str, Any] = {**c._asdict(), "end": None, "early": None}
        arms = results["arms"].get(c.arm or "")
        if c.arm is None:
            row.update(test="-", verdict=NOT_TESTABLE, why="")
        elif c.arm == "fit":
            row.update(test="the curated arm's first half against its end", **fit_claim(results["fit"]))
        else:
            a, b = (c.arm, versus(c.arm)) if c.sign > 0 else (versus(c.arm), c.arm)
            row["test"] = f"`{a}` - `{b}`" + (f", the {c.part} test problems" if c.part else "")
            block = (arms or {}).get(c.part or "end")
            if not block or not block["pooled"]:
                why = (f"`{c.arm}` was not in this report's --arms" if arms is None
                       else f"no seed where `{c.arm}` and `{versus(c.arm)}` both finished")  # fmt: skip
                row.update(verdict=NOT_MEASURED, why=why)
            else:
                end, per = oriented(block, c.sign)
                early = None if c.part else oriented(arms["early"], c.sign)[0]
                v, why = verdict(end, per, c.expect)
                why = "; ".join(x for x in (why, rows_note(results, c.arm) if c.arm in FROM_SCRATCH else "") if x)
                row.update(end=end, end_per_seed=per, early=early, early_label=arms["early"]["label"], verdict=v,
                           why=why)  # fmt: skip
        out.append(row)
    return out


def print_claims(rows: list[dict[str, Any]]) -> None:
    print("\n== the claims (ours: the method minus its absence, held-out pass@1, paired, pooled over seeds)")
    for r in rows:
        early = f"; early ({r['early_label']}) {fmt(r['early'])}" if r.get("early") else ""
        print(f"{r['claim']}: {r['test']} end {fmt(r['end'])}{early} -> {r['verdict']}"
              + (f" ({r['why']})" if r["why"] else ""))  # fmt: skip


def report(home: Path, arms: list[str], seeds: list[int], cpu: dict[str, float]) -> dict[str, Any]:
    """Every arm against its reference, per seed and pooled; FastCuRL per token; the fit; a row per claim (printed)."""
    test, leaked = held_out(home)
    split = {"leaked": leaked, "clean": set(test["problem_id"]) - leaked}
    results: dict[str, Any] = {"arms": {}, "fit": [], "per_token": {}}
    print(f"\n== every arm minus its reference (held-out pass@1, {test.height} problems x 4 at T=0.6, paired)")
    print("arm           | against  | claim                | early                    | end                      | "
          "kept  | trunc")  # fmt: skip
    base = results["curated"] = [figures(home, "curated", s) for s in seeds if finished(home, "curated", s)]
    if base:  # the reference's own kept-group fraction and truncation, for the columns below
        kept, trunc = kept_and_truncation(base)
        print(f"{'curated':<13} | {'':<8} | {'(the reference)':<20} | {'':<24} | {'':<24} | {kept:.3f} | {trunc:.3f}")
    for arm in arms:
        rows = results["arms"][arm] = arm_rows(home, arm, seeds, cpu, split)
        kept, trunc = kept_and_truncation(list(rows["per_seed"].values()))
        print(f"{arm:<13} | {rows['versus']:<8} | {rows['claim']:<20} | {fmt(rows['early']['pooled']):<24} | "
              f"{fmt(rows['end']['pooled']):<24} | {kept:.3f} | {trunc:.3f}")  # fmt: skip
        for name in ("leaked", "clean"):
            if name in rows:
                print(f"{'':<13}   on the {len(split[name])} {name} test problems: end {fmt(rows[name]['pooled'])}")
    print_sft_rows(results)
    print("\n== FastCuRL per training token: pass@1 at equal RL completion tokens (interpolated, mean of seeds)")
    for arm in ("curated", "single"):
        per = [at_tokens(home, arm, s, BUDGETS) for s in seeds if finished(home, arm, s)]
        if per:
            results["per_token"][arm] = mean = [sum(x) / len(per) for x in zip(*per, strict=True)]
            print(f"{arm:<8} " + " | ".join(f"{b / 1e3:.0f}K: {x:.3f}" for b, x in zip(BUDGETS, mean, strict=True)))
    print("\n== ScaleRL's fit on the first half of the curated arm's curve, extrapolated to its end")
    for seed in (s for s in seeds if finished(home, "curated", s)):
        f = fit_first_half(home, seed)
        if f is not None:
            results["fit"].append(f)
            print_fit(f)
    results["claims"] = claims(results)
    print_claims(results["claims"])
    return results


def plot(results: dict[str, Any], path: Path) -> None:
    """Each arm's end difference against its reference (per seed dots, the pooled mean with +-2 paired SE), and
    FastCuRL's pass@1 at equal RL tokens (staged against one stage)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.8))
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    arms = [a for a, r in results["arms"].items() if r["end"]["pooled"]]
    for i, arm in enumerate(arms):
        end = results["arms"][arm]["end"]
        ax.plot([g["gain"] for g in end["per_seed"].values()], [i] * len(end["per_seed"]), "o", color="0.6", ms=4)
        p = end["pooled"]
        ax.errorbar(p["gain"], i, xerr=2 * p["stderr"], fmt="D", color="C0", capsize=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(arms)), [f"{a} - {results['arms'][a]['versus']} ({results['arms'][a]['claim']})"
                                     for a in arms])  # fmt: skip
    ax.set_xlabel("held-out pass@1, arm minus its reference, at the end (grey: seeds; blue: pooled ± 2 SE)")
    for arm, ys in results["per_token"].items():
        bx.plot(BUDGETS, ys, "o-", label=arm)
    bx.set_xlabel("RL completion tokens")
    bx.set_ylabel("held-out pass@1 (mean of seeds)")
    bx.set_title("FastCuRL: staged (curated) vs one stage", fontsize=10)
    bx.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--home", default="/tmp/bench-curation")
    ap.add_argument("--report-only", action="store_true", help="read the finished runs back; train nothing")
    ap.add_argument("--json", help="write the results here (bench/json/methods.json: bench/tables.py reads it)")
    args = ap.parse_args()
    from curate import io

    home = Path(args.home).resolve()
    cpu_file = home / "cpu-methods.json"
    cpu = io.read_json(cpu_file) if cpu_file.is_file() else {}
    if not args.report_only:
        print(f"load average before: {os.getloadavg()}")
        cpu.update(run_all(home, args.arms, args.seeds, args.jobs))
        cpu_file.write_text(json.dumps(cpu, indent=1))
        print(f"load average after: {os.getloadavg()}")
    results = {"measured": measured_at(sys.argv), **report(home, args.arms, args.seeds, cpu)}
    plot(results, home / "methods.png")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
