"""What curation and RL buy on the built-in pool, honestly: the raw pool against the curated pipeline, and
RL against the cheap baselines that use the same checker. Five seeds by default; every arm a ``training run``.

The pool (``datasets/tiny/recipe.yaml``) holds what real pools hold: wrong gold answers, exact and near copies, leaks
of the test split, an SFT source whose teacher is wrong 9% of the time, and a pass-rate spread from always to never
solved. Per seed, from the same from-scratch model (``training init-tiny`` with the seed):

1. ``curated``: ``training/recipes/tiny/fastcurl.yaml``, the project's defaults end to end (checks, decontamination,
   dedup, verified solutions, ``measure``, DES selection, the curriculum sampler with ScaleRL's filters, CISPO
   through FastCuRL's four stages: 40 RL steps of 256 rollouts).
2. ``raw``: ``training/recipes/tiny/raw.yaml``, what a user gets without this project: SFT on every teacher trace,
   then TRL's defaults over every row of the RL pool (uniform, no filters), 60 RL steps of 256 rollouts, evaluated
   every 10: at 40 steps it has the curated arm's RL steps, at 60 also the rollouts curated spends in ``measure``.
3. ``sftmore``: the curated SFT model (the checkpoint its SFT chose on validation, the model its RL started from),
   SFT continued on the same verified solutions for the CPU-seconds the curated arm's RL took (the cheapest baseline
   with the same checker: no rollouts at all), at a quarter of the first SFT's peak lr, cosine to 0 over those steps
   (a stable schedule: at a constant lr checkpoints 100 steps apart swung by 0.1-0.25). Reported at the equal-CPU
   point (its last model, ``sft-final``) and at the best of 4 checkpoints, chosen on the validation split.
4. ``rft``: rejection-sampling fine-tuning: the curated SFT model fine-tuned on its own samples that the checker
   verified, the very rollouts ``measure`` drew on the RL pool's selected prompts (``datasets/tiny/rft.yaml``), for
   the same CPU-seconds; reported as ``sftmore`` is.
5. ``rlopt``: RL from SFT at its plateau: the curated recipe's ``measure`` and RL, started from ``sftmore``'s model
   chosen on validation (where continued SFT flattened out) instead of the curated SFT model. Its headroom report
   says what RL has left once SFT is done, and its end against its start is RL's gain there.
6. ``rft-iter``: iterated RFT (``training.rft``) from rlopt's start, on the prompts rlopt's RL trained on (its
   curriculum), for the CPU-seconds rlopt's RL took; reported at its last round and at its best round on validation.

Reported per seed and pooled over seeds (the mean of per-seed paired differences, SE = sqrt(sum of variances) / n):
held-out pass@1 (300 test problems x k = 4) at T = 0.6 and at the rollouts' T = 1.0; curated minus raw at equal RL
steps and at equal rollouts; rollouts and CPU-seconds for curated to reach raw's final accuracy; RL minus each
baseline; kept-group fractions; the forecast share of zero-variance groups against the observed one; the test
split's leaked problems apart from its clean ones; and the mode decomposition (the share of samples that write as
many steps as the chain has operations, and the accuracy among those) before and after, per arm.

    python bench/bench_curation.py --seeds 0 1 2 3 4 --jobs 2 --home /tmp/bench-curation \
        --json bench/json/curation.json --quote bench/json/curation-quote.json
    python bench/bench_curation.py --report-only --home /tmp/bench-curation --json /tmp/curation.json
    python bench/tables.py     # bench/README.md's tables (and README.md's headline) from bench/json/

Finished runs are read back; a rerun only trains what is missing. The ``__main__`` guard is required (the answer
checker spawns workers that re-import this script).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training import layout


ROOT = Path(__file__).resolve().parents[1]
CURATED, RAW = "training/recipes/tiny/fastcurl.yaml", "training/recipes/tiny/raw.yaml"
RFT_RECIPE = "datasets/tiny/rft.yaml"
NO_SAMPLES = 3  # the rft arm's exit code when the SFT model has no verified sample to fine-tune on
ARMS = ("curated", "raw", "sftmore", "rft", "rlopt", "rft-iter")
START = {"rlopt": "sftmore", "rft-iter": "sftmore"}  # an arm that starts from another arm's chosen SFT model (its
WAITS = {**START, "rft-iter": "rlopt"}  # "sft" point is that one); the arm whose finished run an arm needs
RFT_SETS = ["rft.rounds=20", "rft.rollout={max_tokens: 240, hf: {batch_size: 64, threads: 1}}", "rft.sft={max_length"
            ": 256, weight_decay: 0.1, torch_threads: 1, gradient_checkpointing: false}"]  # fmt: skip
BASELINE_LR = 5.0e-4  # continuing SFT from a trained model: a quarter of the first SFT's peak (validation: README)
_STEP = re.compile(r"^(Add|Subtract|Multiply by) \$", re.MULTILINE)
BEST_EVERY = 4  # a baseline keeps this many checkpoints evenly over its steps, for its best one on validation
FINAL_STEP = "sft-final"
EXTRA: dict[str, list[str]] = {"all": [], "raw": [], "curated": []}  # --set / --raw-set / --curated-set items


def run_dir(home: Path, arm: str, seed: int) -> Path:
    return layout.run_dir(home, f"{arm}-seed{seed}")


def finished(home: Path, arm: str, seed: int) -> bool:
    return (run_dir(home, arm, seed) / layout.SUMMARY).is_file()


def summary(home: Path, arm: str, seed: int) -> dict[str, Any]:
    from training.outcome import read_summary

    return read_summary(run_dir(home, arm, seed))


def chain(home: Path, arm: str, seed: int) -> Any:
    """The run's ``chain.json`` (``training.chain.Chain``: its steps and notes)."""
    from training.chain import Chain

    return Chain(run_dir(home, arm, seed))


def rl_records(home: Path, arm: str, seed: int) -> list[dict[str, Any]]:
    """The run's RL stage records (``chain.json``), in the order they trained."""
    return [r for r in chain(home, arm, seed).steps if "rl_steps" in r]


def step_cpu(summ: dict[str, Any], prefix: str | Callable[[str], bool], exact: bool = False) -> float:
    """CPU seconds of the chain steps (``training.runner`` timings) whose name starts with ``prefix`` (``exact``: is
    it), or for which it says True (``layout.first_pass_rl``: every RL stage and rung of the first pass)."""
    chosen = prefix if callable(prefix) else lambda step: step == prefix if exact else step.startswith(prefix)
    return sum(t.get("cpu_s", 0.0) for t in summ["timings"] if chosen(t["step"]))


# --------------------------------------------------------------------------------------------------- the arms
def baseline_steps(home: Path, seed: int) -> int:
    """SFT steps that cost what the curated arm's RL cost: its RL stages' CPU-seconds over its SFT's per step."""
    from training.sft import read_metrics

    s = summary(home, "curated", seed)
    metrics = read_metrics(run_dir(home, "curated", seed) / layout.SFT)
    sft_cpu = step_cpu(s, layout.SFT, exact=True)
    if not sft_cpu:  # a run resumed by code older than training.runner.add_timing: its summary lost the SFT step's
        sft_cpu = metrics["wall_s"]  # CPU; the training loop's wall time (one thread, at least its CPU) stands in
        print(f"    curated seed {seed}: its summary has no CPU for sft (resumed); SFT's training wall time stands in")
    sft_cpu -= metrics.get("validation_cpu_s") or 0.0  # the early stop's validation points (training.plateau)
    return max(1, round(step_cpu(s, layout.first_pass_rl) / (sft_cpu / metrics["steps"])))


def sft_model(home: Path, arm: str, seed: int) -> str:
    """The SFT model an arm's RL started from: its chain's ``sft`` record (``sft/best``, the checkpoint chosen on the
    validation split, when the recipe has ``sft.validation``; else ``sft/final``)."""
    return chain(home, arm, seed).get(layout.SFT)["model"]


def evaluate_final(run: Path, home: Path) -> None:
    """A baseline's last SFT model (``sft/final``: the equal-CPU point) on the held-out split with the run's own
    eval settings (its ``recipe.json``), kept as ``evals/sft-final.parquet``: its chain evaluated the checkpoint it
    chose on validation instead."""
    from curate.config import from_mapping
    from curate.io import Workspace
    from training.chain import read_recipe
    from training.evaluate import evaluate, heldout_problems
    from training.outcome import keep_eval
    from training.recipe import EvalSection

    recipe = read_recipe(run)
    sec = from_mapping(EvalSection, recipe["eval"], "eval")
    problems = heldout_problems(Workspace(home), recipe["pool"], split=sec.split, limit=sec.limit, sources=sec.sources)
    for temperature in (None, *sec.temperatures):  # as the chain evaluates a last model: at each temperature
        cfg = sec.config(sec.limit)
        cfg = cfg if temperature is None else dataclasses.replace(cfg, temperature=temperature)
        keep_eval(run, FINAL_STEP, evaluate(layout.final(run / layout.SFT), problems, cfg, progress=True), temperature)


def measured(home: Path, seed: int) -> tuple[str, str]:
    """The curated run's ``measure``: the ledger model its rollouts went to, and the selection it made."""
    note = chain(home, "curated", seed).notes[layout.MEASURE][0]
    return note.get("ledger_model", note["model"]), note["select"]["selection"]  # the ledger's name for the model


def commands(arm: str, home: Path, seed: int) -> list[list[str]]:
    """The CLI commands of one arm at one seed (what a user types to rerun it)."""
    extra = EXTRA["all"] + EXTRA.get(arm, [])
    out = ["--home", str(home), "--out", str(run_dir(home, arm, seed)), "--json", "--set", f"seed={seed}"]
    out += [x for item in extra for x in ("--set", item)]
    py = [sys.executable, "-m"]
    if arm == "curated":  # evaluated every 5 RL steps too: the curve ScaleRL's fit reads (bench_methods.py)
        return [[*py, "training.cli", "run", "--recipe", CURATED, *out, "--set", "eval.every=5"]]
    if arm == "raw":
        return [[*py, "training.cli", "run", "--recipe", RAW, *out]]
    if arm in START:  # the curated recipe's measure and RL from another arm's chosen SFT model; rft-iter: iterated
        sets = [f"model={sft_model(home, START[arm], seed)}", "sft=null", f"name=tiny-{arm}"]  # RFT instead, on the
        if arm == "rft-iter":  # prompts rlopt's RL trained on (its measured curriculum), for that RL's CPU-seconds
            cpu = step_cpu(summary(home, "rlopt", seed), layout.first_pass_rl)
            note = chain(home, "rlopt", seed).notes[layout.MEASURE][0]
            sets += ["measure=null", f"curriculum={curriculum_name(note)}", f"rft.cpu_budget={max(cpu, 1):.0f}",
                     *RFT_SETS]  # fmt: skip
        return [[*py, "training.cli", "run", "--recipe", CURATED, *out, *(x for s in sets for x in ("--set", s))]]
    base = run_dir(home, "curated", seed)
    data = str(layout.pinned_path(base, "sft"))
    cmds = []
    if arm == "rft":
        model, selection = measured(home, seed)
        data = str(home / "solutions" / f"rft-seed{seed}" / "sft.parquet")
        curate = str(Path(sys.executable).with_name("curate"))  # the environment's `curate` command
        cmds.append([curate, "run", "--recipe", RFT_RECIPE, "--home", str(home), "--set",
                     f"solutions.models=[{model}]", "--set", f"solutions.selection={selection}", "--set",
                     f"solutions.name=rft-seed{seed}"])  # fmt: skip
        check = f"import polars as pl, sys; sys.exit(0 if pl.read_parquet({data!r}).height else {NO_SAMPLES})"
        cmds.append([sys.executable, "-c", check])  # a model that solved nothing leaves nothing to fine-tune on
    steps = baseline_steps(home, seed)
    sets = [f"model={sft_model(home, 'curated', seed)}", f"sft.data={data}", f"sft.max_steps={steps}",
            f"sft.learning_rate={BASELINE_LR}", f"sft.validation.every={max(1, steps // BEST_EVERY)}",
            "sft.validation.patience=null",  # equal CPU: a baseline trains all its steps (no early stop)
            "curriculum=null", "measure=null", "curate_recipe=null", f"name=tiny-{arm}"]  # fmt: skip
    cmds.append([*py, "training.cli", "run", "--recipe", CURATED, *out, *(x for s in sets for x in ("--set", s))])
    cmds.append([sys.executable, str(Path(__file__).resolve()), "--home", str(home), "--eval-final",
                 str(run_dir(home, arm, seed))])  # fmt: skip
    return cmds


def curriculum_name(note: dict[str, Any]) -> str:
    """The name of the curriculum a run's ``measure`` built, from its ``chain.json`` note (which keeps the whole
    curriculum record: name, stages, split counts)."""
    curriculum = note["curriculum"]
    return curriculum["name"] if isinstance(curriculum, dict) else curriculum


def launch(arm: str, home: Path, seed: int) -> subprocess.Popen:
    """The arm's commands in one shell, logged; one torch thread each."""
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    cmds = commands(arm, home, seed)
    for cmd in cmds:
        print(f"[{time.strftime('%H:%M:%S')}] {arm} seed {seed}: python " + " ".join(cmd[1:]), flush=True)
    script = " && ".join(shlex.join(cmd) for cmd in cmds)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(logs / f"{arm}-seed{seed}.log", "w")  # noqa: SIM115 (the child holds it)
    return subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def run_jobs(
    todo: list[tuple[str, int]], ready: Callable[[str, int], bool], start: Callable[[str, int], subprocess.Popen],
    jobs: int, stuck: str, ended: Callable[[str, int, int, list], list] | None = None,
) -> dict[str, float]:  # fmt: skip
    """``(arm, seed)`` runs, ``jobs`` at once, each once ``ready(arm, seed)``: ``start`` launches one (a Popen), and
    ``ended(arm, seed, exit code, todo)`` hears of each end and returns what is left to do (it may drop the runs that
    needed a failed one). Raises ``SystemExit`` with ``stuck`` when nothing can start. Returns CPU seconds per run
    (every process it started). The Popen objects are kept: one dropped while its process runs is reaped by the next
    Popen (subprocess's _cleanup), and os.wait4 would then never see that run end."""
    todo, running, cpu = list(todo), {}, {}
    while todo or running:
        ready_now = [(a, s) for a, s in todo if ready(a, s)]
        while ready_now and len(running) < jobs:
            a, s = ready_now.pop(0)
            todo.remove((a, s))
            proc = start(a, s)
            running[proc.pid] = (a, s, time.perf_counter(), proc)
        if not running:
            raise SystemExit(f"nothing can start: {todo} {stuck}")
        pid, status, usage = os.wait4(-1, 0)
        a, s, t0, proc = running.pop(pid)
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        cpu[f"{a}-seed{s}"] = usage.ru_utime + usage.ru_stime
        print(f"[{time.strftime('%H:%M:%S')}] {a} seed {s}: exit {code}, {(time.perf_counter() - t0) / 60:.1f} min "
              f"wall, {cpu[f'{a}-seed{s}'] / 60:.1f} CPU-min, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        if ended is not None:
            todo = ended(a, s, code, todo)
    return cpu


def run_all(home: Path, arms: list[str], seeds: list[int], jobs: int) -> dict[str, float]:
    """Every (arm, seed) not finished, ``jobs`` at once; the baselines of a seed wait for its curated run.
    Returns CPU seconds per run (every process it started)."""

    def ended(a: str, s: int, code: int, todo: list) -> list:
        if a == "rft" and code == NO_SAMPLES:
            print("    the SFT model has no verified sample on the RL prompts: nothing to fine-tune on")
        elif code:
            print(f"    see {home}/logs/{a}-seed{s}.log")
            if a == "curated":
                return [(x, y) for x, y in todo if y != s or x == "raw"]
        return todo

    todo = [(a, s) for s in seeds for a in arms if not finished(home, a, s)]
    ready = lambda a, s: a in ("curated", "raw") or finished(home, WAITS.get(a, "curated"), s)  # noqa: E731
    return run_jobs(todo, ready, lambda a, s: launch(a, home, s), jobs, "wait for curated runs that failed", ended)


# --------------------------------------------------------------------------------------------------- the tables
def table(home: Path, arm: str, seed: int, step: str | None, temperature: float | None = None) -> Any:
    """A chain step's per-problem held-out table (``training.outcome.step_table``), or None."""
    from training.outcome import step_table

    return step_table(run_dir(home, arm, seed), step, temperature)


def rate(t: Any) -> float:
    return float(t.filter(t["scored"])["mean"].mean())


def pooled(gains: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mean of per-seed paired differences with two errors: ``stderr``, the problems' sampling error (sqrt of the
    summed per-seed variances / n: what the paired SE of each seed carries), and ``seed_stderr``, the spread of the
    per-seed differences (their SD / sqrt(n)), which also holds how much the models differ from seed to seed; a
    claim needs both."""
    if not gains:
        return None
    n = len(gains)
    mean = sum(g["gain"] for g in gains) / n
    se = math.sqrt(sum(g["stderr"] ** 2 for g in gains)) / n
    spread = math.sqrt(sum((g["gain"] - mean) ** 2 for g in gains) / (n - 1)) / math.sqrt(n) if n > 1 else None
    return {"gain": mean, "stderr": se, "z": mean / se if se else 0.0, "seeds": n, "seed_stderr": spread}


def fmt(g: dict[str, Any] | None) -> str:
    if not g:
        return "-"
    seeds = f"; over seeds ± {g['seed_stderr']:.3f}" if g.get("seed_stderr") is not None else ""
    return f"{g['gain']:+.3f} ± {g['stderr']:.3f} (z {g['z']:+.1f}{seeds})"


def steps_of(home: Path, arm: str, seed: int) -> dict[str, str]:
    """The named points of an arm: ``sft`` and ``end`` (its last model); ``atN``: the model after N RL steps (stage
    ends, and checkpoints evaluated inside a stage: raw's ``at40``, curated's ``at10..at40``); ``groupsK``: the
    pass's model after K of its stages (CoScale-RL's difficulty groups: the merge of the first K parallel groups,
    or the K-th group's last rung in a sequential pass). A later parallel group's own model (``curve: false`` in
    ``chain.json``, ``training.groups``) is not the pass's: it names no point."""
    from training.outcome import checkpoint_eval, eval_path

    rl = [r for r in rl_records(home, arm, seed) if r.get("curve", True)]
    out = {"sft": layout.SFT, "end": rl[-1]["step"] if rl else layout.SFT}
    if not rl and eval_path(run_dir(home, arm, seed), FINAL_STEP).is_file():
        out.update(end=FINAL_STEP, best=layout.SFT)  # a baseline: its equal-CPU last model, its choice on validation
    if rft := chain(home, arm, seed).note(layout.RFT, layout.ROUNDS):  # iterated RFT: last round, best on validation
        out.update(end=rft["last_step"], best=rft["best_step"])
    groups: list[str] = []
    for r in rl:  # stage ends (a merge: 0 steps of its own), and checkpoints evaluated inside a stage (eval.every)
        out[f"at{r['offset_step'] + r['rl_steps']}"] = r["step"]
        out[group_point(r["step"], groups)] = r["step"]
        for k in range(1, r["rl_steps"]):
            if eval_path(run_dir(home, arm, seed), checkpoint_eval(r["step"], k)).is_file():
                out[f"at{r['offset_step'] + k}"] = checkpoint_eval(r["step"], k)
    return out


def group_point(step: str, groups: list[str]) -> str:
    """``groupsK`` for a pass's model at chain step ``step``: a merge of the first K parallel groups
    (``merge:2of3``), else a stage (or a rung of it, ``rl:<stage>@n16``) whose stage is the K-th of ``groups`` (the
    stages seen so far, in order; appended to)."""
    parsed = layout.parse_step(step)
    if parsed.kind == layout.MERGES:
        return f"groups{parsed.count}"
    stage = parsed.stage_step
    if stage not in groups:
        groups.append(stage)
    return f"groups{groups.index(stage) + 1}"


def held_out(home: Path) -> tuple[Any, set[str]]:
    """The test problems (problem_id, ops) and the ids of those with a copy in a training source (leaked)."""
    import polars as pl

    from curate import schema as S

    problems = pl.read_parquet(home / "pools" / "tiny" / "problems.parquet")
    copies = [(w or {}).get("copy") or {} for w in S.meta_values(problems[S.META], "waste")]
    leaked = {c["of"] for c in copies if c.get("kind") == "leak"}
    ops = pl.Series("ops", S.meta_values(problems[S.META], "ops"), dtype=pl.Int64)
    test = problems.with_columns(ops).filter(pl.col("split") == "test").select("problem_id", "ops")
    return test, leaked & set(test["problem_id"])


def headroom(home: Path, arm: str, seed: int) -> dict[str, Any] | None:
    """What an arm's ``measure`` said before RL (``<run>/headroom/``, ``curate.score.headroom``): the share of the
    RL pool in the middle and the ceiling over it; its suspected wrong golds against the pool's planted ones (meta
    ``waste.gold``) among the measured prompts, per reason (recall and precision); and the zero-variance forecast
    from fresh samples against what RL met (the summary's ``zero_variance``)."""
    import polars as pl

    from curate import schema as S
    from curate.score.headroom import read_report

    report = read_report(run_dir(home, arm, seed) / layout.HEADROOM)
    if report is None:
        return None
    measured, suspects = set(report["prompts"][S.PROBLEM_ID]), report["suspects"]
    problems = pl.read_parquet(home / "pools" / "tiny" / "problems.parquet")
    golds = [(w or {}).get("gold") for w in S.meta_values(problems[S.META], "waste")]
    wrong = {p for p, g in zip(problems[S.PROBLEM_ID], golds, strict=True) if g} & measured
    flagged = set(suspects[S.PROBLEM_ID])
    by_reason = {}
    for reason, ids in suspects.group_by("reason").agg(pl.col(S.PROBLEM_ID)).iter_rows():
        by_reason[reason] = {"flagged": len(ids), "right": len(set(ids) & wrong)}
    totals = report["summary"]["totals"]
    waste = summary(home, arm, seed).get("zero_variance") or {}
    return {"prompts": totals["prompts"], "middle": totals["rl"] / totals["prompts"], "ceiling": totals["rl_ceiling"],
            "wrong_golds": len(wrong), "flagged": len(flagged), "recall": len(flagged & wrong) / len(wrong) if wrong
            else None, "precision": len(flagged & wrong) / len(flagged) if flagged else None, "by_reason": by_reason,
            "forecast": (waste.get("forecast") or {}).get("share"), "observed": waste.get("observed")}  # fmt: skip


def print_headroom(home: Path, seeds: list[int]) -> dict[str, Any]:
    """``headroom`` of each run that measured its start before RL (``curated``, ``rlopt``), printed; returned by run
    (``curated-seed0``), each with ``start``: its starting SFT model's held-out pass@1 (T = 0.6)."""
    print(
        "\n== before RL (measure's headroom report): the RL pool's middle, the ceiling over it, the suspected wrong "
        "golds against the planted ones, the zero-variance forecast from fresh samples against what RL met"
    )
    out: dict[str, Any] = {}
    for arm, seed in ((a, s) for a in ("curated", "rlopt") for s in seeds if finished(home, a, s)):
        h = headroom(home, arm, seed)
        if not h:
            continue
        src = START.get(arm, arm)
        out[f"{arm}-seed{seed}"] = h = {**h, "start": rate(table(home, src, seed, steps_of(home, src, seed)["sft"]))}
        gap = h["observed"] - h["forecast"] if h["forecast"] is not None and h["observed"] is not None else None
        right = sum(r["right"] for r in h["by_reason"].values())
        print(f"{arm} seed {seed}: start {h['start']:.3f}; middle {h['middle']:.1%} of {h['prompts']} prompts, "
              f"ceiling +{h['ceiling']:.3f}; {h['flagged']} suspects, {right} of them wrong golds (recall "
              f"{h['recall'] or 0:.2f} of {h['wrong_golds']}, precision {h['precision'] or 0:.2f}; by reason "
              f"{h['by_reason']}); zero-variance forecast {h['forecast']} vs "
              f"observed {h['observed']}" + (f" (off by {gap:+.3f})" if gap is not None else ""))  # fmt: skip
    return out


def modes(home: Path, arm: str, seed: int, step: str, test: Any, temperature: float | None = None) -> dict:
    """The share of samples that write one step per operation of the chain (finished), and the accuracy among
    those, from the evaluation's samples (``<step>.samples.parquet``)."""
    import polars as pl

    from training.outcome import step_table

    s = step_table(run_dir(home, arm, seed), step, temperature, samples=True)
    if s is None:
        return {}
    s = s.join(test, on="problem_id")
    s = s.with_columns(pl.Series("steps", [len(_STEP.findall(c or "")) for c in s["completion"]]))
    done = s.filter(pl.col("steps") == pl.col("ops"))
    return {"finished": done.height / s.height, "acc_finished": float(done["correct"].mean()) if done.height else 0.0,
            "acc_unfinished": float(s.filter(pl.col("steps") != pl.col("ops"))["correct"].mean() or 0.0)}  # fmt: skip


# --------------------------------------------------------------------------------------------------- the report
def paired(
    home: Path, seed: int, a: tuple[str, str | None], b: tuple[str, str | None], temperature: float | None = None,
    keep: set[str] | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """Arm ``a``'s step minus arm ``b``'s (each ``(arm, step)``) on the same problems at one seed
    (``training.outcome.paired``), optionally on ``keep`` only; None when either was not evaluated."""
    from training import outcome

    (arm_a, step_a), (arm_b, step_b) = a, b
    return outcome.paired(run_dir(home, arm_a, seed), step_a, step_b, temperature,
                          before_run=run_dir(home, arm_b, seed), keep=keep)  # fmt: skip


COMPARISONS = (  # (name, arm a, point a, arm b, point b): a minus b, paired per seed
    ("curated - raw, equal RL steps", "curated", "end", "raw", "same_steps"),
    ("curated - raw, equal rollouts (raw 60 = 40 + measure)", "curated", "end", "raw", "end"),
    ("curated SFT - raw SFT (verified traces vs all)", "curated", "sft", "raw", "sft"),
    ("curated RL - its SFT", "curated", "end", "curated", "sft"),
    ("raw RL - its SFT", "raw", "end", "raw", "sft"),
    ("RL - SFT continued (equal CPU)", "curated", "end", "sftmore", "end"),
    ("RL - rejection-sampling FT (equal CPU)", "curated", "end", "rft", "end"),
    ("RL - SFT continued, its best checkpoint on validation", "curated", "end", "sftmore", "best"),
    ("RL - rejection-sampling FT, its best checkpoint on validation", "curated", "end", "rft", "best"),
    ("SFT continued - its SFT", "sftmore", "end", "curated", "sft"),
    ("rejection-sampling FT - its SFT", "rft", "end", "curated", "sft"),
    ("RL from SFT's plateau - its start (SFT continued, chosen on validation)", "rlopt", "end", "sftmore", "best"),
    ("RL - iterated RFT (equal CPU)", "rlopt", "end", "rft-iter", "end"),
    ("RL - iterated RFT, its best round on validation", "rlopt", "end", "rft-iter", "best"),
)


def curve(home: Path, arm: str, seed: int, sft_run: str | None = None) -> list[tuple[float, float, float]]:
    """(rollouts, CPU-seconds, pass@1): the SFT model at 0, then after ``measure``'s rollouts and CPU (the same
    pass rate), then each evaluated RL point. CPU within a stage is interpolated by steps. ``sft_run``: the arm
    whose SFT model this one starts from (``bench_methods.py``'s arms borrow one), else its own. In a parallel pass
    (``training.groups``) every group's rollouts count, but a later group's own model is not a point (``curve:
    false``); a merge spends no rollouts and is the pass's model (its CPU counts)."""
    from training.outcome import checkpoint_eval
    from training.rl import read_config

    s = summary(home, arm, seed)
    note = chain(home, arm, seed).notes.get(layout.MEASURE) or [{}]
    start_rollouts = float((note[0].get("rollout") or {}).get("samples_generated", 0) or 0)
    start_cpu = step_cpu(s, layout.MEASURE)
    sft = rate(table(home, sft_run or arm, seed, "sft"))
    pts = [(0.0, 0.0, sft), (start_rollouts, start_cpu, sft)]  # the SFT model needs no rollouts
    rollouts, cpu = start_rollouts, start_cpu
    for rec in rl_records(home, arm, seed):
        on_curve, stage_cpu = rec.get("curve", True), step_cpu(s, rec["step"], exact=True)
        if "stage_dir" in rec:  # an RL stage or a rung of its ladder (a merge has no stage folder, no rollouts)
            cfg = read_config(Path(rec["stage_dir"])).rl
            per = cfg.prompts_per_step * cfg.num_generations
            for k in range(1, rec["rl_steps"] if on_curve else 0):  # checkpoints evaluated inside (eval.every)
                t = table(home, arm, seed, checkpoint_eval(rec["step"], k))
                if t is not None:
                    pts.append((rollouts + k * per, cpu + stage_cpu * k / rec["rl_steps"], rate(t)))
            rollouts += rec["rl_steps"] * per
        cpu += stage_cpu
        if on_curve:
            pts.append((rollouts, cpu, rate(table(home, arm, seed, rec["step"]))))
    return sorted(pts)


def to_target(
    home: Path, seed: int, arm: str = "curated", target: str = "raw", sft_run: str | None = None,
    target_sft: str | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """Rollouts and CPU-seconds ``arm`` needed to reach ``target``'s final held-out pass@1 (linear between
    evaluations; a run's ``measure`` counted first), against the target's own; None if a run is missing.
    ``sft_run`` / ``target_sft``: the arm whose SFT model ``arm`` / ``target`` starts from, where it borrowed one
    (``curve``)."""
    if not (finished(home, arm, seed) and finished(home, target, seed)):
        return None
    goal, mine = curve(home, target, seed, target_sft), curve(home, arm, seed, sft_run)
    out: dict[str, Any] = {"target": goal[-1][2], "target_rollouts": goal[-1][0], "target_cpu_s": goal[-1][1]}
    for (x0, c0, y0), (x1, c1, y1) in itertools.pairwise(mine):
        if y1 >= out["target"]:
            f = 0.0 if y1 == y0 or y0 >= out["target"] else (out["target"] - y0) / (y1 - y0)
            out.update(rollouts=x0 + f * (x1 - x0), cpu_s=c0 + f * (c1 - c0))
            ratio = out["rollouts"] / out["target_rollouts"] if out["target_rollouts"] else None
            cpu_ratio = out["cpu_s"] / out["target_cpu_s"] if out["target_cpu_s"] else None
            return {**out, "rollout_ratio": ratio, "cpu_ratio": cpu_ratio}
    return {**out, "rollouts": None, "best": max(y for _, _, y in mine)}


def arm_row(home: Path, arm: str, seed: int, test: Any) -> dict[str, Any]:
    """One run's figures: pass@1 at each temperature, kept groups, the waste forecast and observation, CPU, modes."""
    s = summary(home, arm, seed)
    names = steps_of(home, arm, seed)
    row: dict[str, Any] = {"steps": names, "cpu_s": round(sum(t.get("cpu_s", 0.0) for t in s["timings"]), 1)}
    for point in ("sft", "end"):  # an arm started from another's chosen SFT model: that model is its "sft"
        src = START.get(arm, arm) if point == "sft" else arm
        step = (names if src == arm else steps_of(home, src, seed))[point]
        for temp in (None, 1.0):
            t = table(home, src, seed, step, temp)
            if t is not None:
                row[f"{point}@{temp or 0.6:g}"] = rate(t)
        row[f"modes_{point}"] = modes(home, src, seed, step, test)
    row["zero_variance"] = s.get("zero_variance")
    return row


def point(home: Path, arm: str, seed: int, name: str) -> str | None:
    """A named point's chain step (``steps_of``); ``same_steps``: the arm after as many RL steps as the seed's
    curated arm took in all (None when it was not evaluated there)."""
    if name == "same_steps":
        name = f"at{sum(r['rl_steps'] for r in rl_records(home, 'curated', seed))}"
    return steps_of(home, arm, seed).get(name)


def compare(home: Path, seeds: list[int], keep: set[str] | None = None, temperature: float | None = None) -> dict:
    out = {}
    for name, a, pa, b, pb in COMPARISONS:
        gains = {}
        for seed in seeds:
            if finished(home, a, seed) and finished(home, b, seed):
                g = paired(home, seed, (a, point(home, a, seed, pa)), (b, point(home, b, seed, pb)), temperature, keep)
                if g is not None:
                    gains[seed] = g
        out[name] = {"per_seed": gains, "pooled": pooled(list(gains.values()))}
    return out


def print_comparisons(title: str, comps: dict[str, Any]) -> None:
    print(f"\n== {title}")
    for name, c in comps.items():
        seeds_txt = "; ".join(f"s{s} {g['gain']:+.3f}±{g['stderr']:.3f}" for s, g in c["per_seed"].items())
        print(f"{name:<55} pooled {fmt(c['pooled']):<28} [{seeds_txt}]")


def report(home: Path, seeds: list[int], cpu: dict[str, float]) -> dict[str, Any]:
    """Prints every table; returns everything (``--json``)."""
    test, leaked = held_out(home)
    clean = set(test["problem_id"]) - leaked
    rows = {f"{a}-seed{s}": arm_row(home, a, s, test) for s in seeds for a in ARMS if finished(home, a, s)}
    print(f"\n== every run (held-out pass@1, {test.height} test problems x 4; load now {os.getloadavg()[0]:.1f})")
    print("run             | SFT T=.6 | SFT T=1 | end T=.6 | end T=1 | zero-variance groups: forecast / observed | "
          "chain CPU-min | run CPU-min")  # fmt: skip
    for key, r in rows.items():
        zv = r.get("zero_variance") or {}
        fc = zv.get("forecast")
        seen = zv.get("observed")
        waste = (f"{fc['share']:.3f} ± {fc['stderr']:.3f}" if fc else "-") + " / " + (f"{seen:.3f}" if seen else "-")
        print(f"{key:<15} | {r.get('sft@0.6', float('nan')):.3f}    | {r.get('sft@1', float('nan')):.3f}   | "
              f"{r.get('end@0.6', float('nan')):.3f}    | {r.get('end@1', float('nan')):.3f}   | {waste:<41} | "
              f"{r['cpu_s'] / 60:>13.1f} | {cpu.get(key, 0) / 60:>11.1f}")  # fmt: skip
    results: dict[str, Any] = {"runs": rows, "leaked": sorted(leaked), "test": test.height}
    for temp, label in ((None, "T=0.6"), (1.0, "T=1.0")):
        results[f"comparisons@{label}"] = comps = compare(home, seeds, temperature=temp)
        print_comparisons(f"paired differences at {label} ({test.height} problems; pooled over seeds)", comps)
    results["clean"] = compare(home, seeds, keep=clean)
    results["leaked_only"] = compare(home, seeds, keep=leaked)
    for name, part in (("clean", clean), ("leaked_only", leaked)):
        picked = {k: v for k, v in results[name].items() if k.startswith(("curated - raw", "curated SFT"))}
        print_comparisons(f"the same on the {len(part)} {name.replace('_only', '')} test problems", picked)
    print("\n== rollouts and CPU for curated to reach raw's final pass@1 (T=0.6; curated counts measure first)")
    results["to_target"] = {}
    for seed in seeds:
        t = to_target(home, seed)
        if t is None:
            continue
        results["to_target"][seed] = t
        if t.get("rollouts") is None:
            print(f"seed {seed}: raw {t['target']:.3f} not reached (curated's best {t['best']:.3f})")
        else:
            print(f"seed {seed}: raw {t['target']:.3f} at {t['target_rollouts']:.0f} rollouts, "
                  f"{t['target_cpu_s']:.0f} CPU-s; curated at {t['rollouts']:.0f} rollouts "
                  f"({t['rollout_ratio']:.2f}x), {t['cpu_s']:.0f} CPU-s ({t['cpu_ratio']:.2f}x)")  # fmt: skip
    results["headroom"] = print_headroom(home, seeds)
    print("\n== modes at T=0.6: share of samples that finish the chain (one step per operation), accuracy among them")
    for key, r in rows.items():
        before, after = r.get("modes_sft") or {}, r.get("modes_end") or {}
        if before and after:
            print(f"{key:<15} finished {before['finished']:.3f} -> {after['finished']:.3f}; accuracy among finished "
                  f"{before['acc_finished']:.3f} -> {after['acc_finished']:.3f}")  # fmt: skip
    return results


def measured_at(argv: list[str]) -> dict[str, Any]:
    """When, with what command and at which commit a report was made (the tables print it: ``bench/tables.py``)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%d"), "command": shlex.join(["python", *argv]),
            "commit": commit.stdout.strip() or None, "load": round(os.getloadavg()[0], 1)}  # fmt: skip


def quote(results: dict[str, Any], seeds: list[int], arms: Sequence[str] = ARMS) -> dict[str, Any]:
    """What ``./scripts/demo`` prints after its run: each seed's figures per arm that ran (T = 0.6) and the pooled
    comparisons, with the date and the command that measured them (``--arms`` in it where not every arm ran)."""
    runs = results["runs"]
    per_seed = {arm: {s: {p: runs[f"{arm}-seed{s}"].get(f"{p}@0.6") for p in ("sft", "end")}
                      for s in seeds if f"{arm}-seed{s}" in runs} for arm in ARMS}  # fmt: skip
    quoted = [name for name, *_ in COMPARISONS if name.startswith(("curated - raw", "curated RL", "RL - ", "RL from"))]
    pooled = {name: g for name in quoted if (g := results["comparisons@T=0.6"][name]["pooled"])}
    command = "python bench/bench_curation.py --seeds " + " ".join(map(str, seeds))
    if sorted(arms) != sorted(ARMS):
        command += " --arms " + " ".join(a for a in ARMS if a in arms)
    per_seed = {arm: figures for arm, figures in per_seed.items() if figures}
    return {"date": time.strftime("%Y-%m-%d"), "command": command, "test": results["test"], "per_seed": per_seed,
            "pooled": pooled}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--home", default="/tmp/bench-curation")
    ap.add_argument("--report-only", action="store_true", help="read the finished runs back; train nothing")
    ap.add_argument("--json", help="write the results here (bench/json/curation.json: bench/tables.py reads it)")
    ap.add_argument("--quote", help="write the summary ./scripts/demo quotes here (bench/json/curation-quote.json)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every training run (a shorter grid)")
    ap.add_argument("--raw-set", action="append", default=[], help="KEY=VALUE for the raw arm's training run only")
    ap.add_argument("--curated-set", action="append", default=[], help="KEY=VALUE for the curated arm's run only")
    ap.add_argument("--eval-final", help="RUN: evaluate a baseline run's last SFT model (each baseline arm does)")
    args = ap.parse_args()
    if args.eval_final:
        evaluate_final(Path(args.eval_final), Path(args.home).resolve())
        return

    from curate import io as curate_io

    EXTRA.update(all=args.set, raw=args.raw_set, curated=args.curated_set)
    home = Path(args.home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    cpu_file = home / "cpu.json"
    cpu = curate_io.read_json(cpu_file) if cpu_file.is_file() else {}
    if not args.report_only:
        print(f"load average before: {os.getloadavg()}")
        cpu.update(run_all(home, args.arms, args.seeds, args.jobs))
        cpu_file.write_text(json.dumps(cpu, indent=1))
        print(f"load average after: {os.getloadavg()}")
    results = {"measured": measured_at(sys.argv), **report(home, args.seeds, cpu)}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    if args.quote:
        Path(args.quote).write_text(json.dumps(quote(results, args.seeds, args.arms), indent=1) + "\n")


if __name__ == "__main__":
    main()
