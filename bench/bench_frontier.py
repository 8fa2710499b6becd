"""A fair test of RL where it should pay: SFT to its plateau, RL at the frontier for as long as it gains,
against iterated RFT and continued SFT at RL's CPU, from the same plateau model within a seed, on the test split.

Per seed, four runs in ``<home>/runs/<arm>-seed<N>``, each a ``training run`` a user can type (``--dry-run``):

1. ``plateau``: the default chain's SFT (``training/recipes/tiny/fastcurl.yaml``) from scratch with its early stop
   (``training.plateau``), no ``measure`` and no RL. Its ``sft/best`` is the plateau model; its validation curve
   and the steps it took are the SFT band.
2. ``rl``: ``training/recipes/tiny/frontier.yaml`` from that model: ``measure`` on ``tiny/rl-frontier`` (8-12
   operations, no traces), the middle there, CISPO at a 256-token context (no answer it trains on is cut), up to
   300 steps, the validation split evaluated every 20 steps per band at T = 0.6 and 1.0: the learning curve.
3. ``rft``: iterated RFT (``training.rft``) from the plateau model on the prompts ``rl`` trained on (its measured
   curriculum), for the CPU-seconds ``rl``'s RL took: RL's information (prompts, checker), sampled again from each
   round's model so that it can climb as RL does.
4. ``sftmore``: SFT continued from the plateau model on the verified traces for as many steps as cost ``rl``'s RL
   CPU (``bench_curation.BASELINE_LR``, cosine; a checkpoint each quarter, the best one chosen on validation).

Each arm's points (``POINTS``: its last model and its best on validation) are then evaluated on the test split, both
bands (``tiny/test`` 3-10 operations and ``tiny/test-frontier`` 8-12, 500 problems x 4 samples), at T = 0.6 and 1.0,
as ``test:<point>`` tables in the arm's ``evals/``. Reported: the SFT band (validation, steps, why it stopped); RL's
learning curve on validation (pass@1 overall and at the frontier against steps, rollouts and CPU-seconds); RL minus
its start and minus each baseline, paired per seed, overall, on 3-8 operations and at the frontier (9-12: longer than
any trace), pooled over seeds with both SEs (``bench_curation.pooled``); the headroom report before RL.

    python bench/bench_frontier.py --seeds 0 1 2 3 4 --home /tmp/bench-frontier --json bench/json/frontier.json
    python bench/bench_frontier.py --report-only --home /tmp/bench-frontier --json bench/json/frontier.json
    python bench/tables.py     # bench/README.md's frontier tables from bench/json/frontier.json

Resumable: a finished run (its ``summary.json``) and a finished test evaluation are read back, an unfinished run is
resumed by its own command, and the report reads whatever has finished (an arm not run yet is "-").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_curation import (
    BASELINE_LR,
    RFT_SETS,
    curriculum_name,
    finished,
    headroom,
    measured_at,
    pooled,
    rate,
    run_dir,
    run_jobs,
    step_cpu,
)

from training import layout, run_folder


ROOT = Path(__file__).resolve().parents[1]
DEFAULT, FRONTIER = "training/recipes/tiny/fastcurl.yaml", "training/recipes/tiny/frontier.yaml"
TEST = "test:"  # the evals/ prefix of an arm's points evaluated on the test split
FRONTIER_OPS = 9  # chains longer than any trace (the traces' longest is 8): the frontier, reported apart
QUARTERS = 4  # continued SFT keeps this many checkpoints evenly over its steps, for its best one on validation


# --------------------------------------------------------------------------------------------------- the arms
def _chain(home: Path, arm: str, seed: int) -> Any:
    from training.chain import Chain

    return Chain(run_dir(home, arm, seed))


def plateau_model(home: Path, seed: int) -> str:
    """The plateau arm's SFT model: the checkpoint its early-stopped SFT chose on validation (``sft/best``)."""
    return _chain(home, "plateau", seed).get(layout.SFT)["model"]


def rl_cpu(home: Path, seed: int) -> float:
    """CPU-seconds of the rl arm's RL stages (``training.runner``'s timings; its ``measure`` not counted: the RFT arm
    trains on the prompts that ``measure`` chose, at no cost to itself)."""
    from training.outcome import read_summary

    return max(1.0, step_cpu(read_summary(run_dir(home, "rl", seed)), layout.first_pass_rl))


def sft_steps_at_rl_cpu(home: Path, seed: int) -> int:
    """SFT steps that cost what the rl arm's RL cost: its CPU over the plateau SFT's CPU per step (the early stop's
    validation points taken out)."""
    from training.outcome import read_summary
    from training.sft import read_metrics

    metrics = read_metrics(run_dir(home, "plateau", seed) / layout.SFT)
    sft_cpu = step_cpu(read_summary(run_dir(home, "plateau", seed)), layout.SFT, exact=True) or metrics["wall_s"]
    sft_cpu -= metrics.get("validation_cpu_s") or 0.0
    return max(QUARTERS, round(rl_cpu(home, seed) / (sft_cpu / metrics["steps"])))


def _plateau_sets(home: Path, seed: int) -> list[str]:
    return ["measure=null", "curriculum=null", "name=tiny-plateau"]


def _rl_sets(home: Path, seed: int) -> list[str]:
    return [f"model={plateau_model(home, seed)}"]


def _rft_sets(home: Path, seed: int) -> list[str]:
    curriculum = curriculum_name(_chain(home, "rl", seed).notes[layout.MEASURE][0])
    return [f"model={plateau_model(home, seed)}", "measure=null", f"curriculum={curriculum}", "name=tiny-frontier-rft",
            f"rft.cpu_budget={rl_cpu(home, seed):.0f}", *RFT_SETS]  # fmt: skip


def _sftmore_sets(home: Path, seed: int) -> list[str]:
    steps = sft_steps_at_rl_cpu(home, seed)
    data = layout.pinned_path(run_dir(home, "plateau", seed), layout.SFT)
    return [
        f"model={plateau_model(home, seed)}",
        f"sft.data={data}",
        f"sft.max_steps={steps}",
        f"sft.learning_rate={BASELINE_LR}",
        f"sft.validation.every={max(1, steps // QUARTERS)}",
        "sft.validation.patience=null",
        "curriculum=null",
        "measure=null",
        "curate_recipe=null",
        "name=tiny-sftmore",
    ]  # fmt: skip  (equal CPU: no early stop)


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm: the recipe its run starts from, the ``--set`` items it adds (read from the runs it ``needs``, which
    must have finished), and the points of its run evaluated on the test split (``points``)."""

    name: str
    recipe: str
    sets: Callable[[Path, int], list[str]]
    needs: tuple[str, ...] = ()


ARMS = {a.name: a for a in (
    Arm("plateau", DEFAULT, _plateau_sets),
    Arm("rl", FRONTIER, _rl_sets, needs=("plateau",)),
    Arm("rft", FRONTIER, _rft_sets, needs=("plateau", "rl")),
    Arm("sftmore", DEFAULT, _sftmore_sets, needs=("plateau", "rl")),
)}  # fmt: skip


def commands(arm: str, home: Path, seed: int) -> list[list[str]]:
    """The arm's ``training run`` at one seed, then its points' test evaluation (what a user types to rerun it)."""
    a = ARMS[arm]
    sets = [f"seed={seed}", *a.sets(home, seed)]
    run = [sys.executable, "-m", "training.cli", "run", "--recipe", a.recipe, "--home", str(home),
           "--out", str(run_dir(home, arm, seed)), *(x for s in sets for x in ("--set", s))]  # fmt: skip
    test = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--home",
        str(home),
        "--test-eval",
        arm,
        "--seeds",
        str(seed),
    ]
    return [run, test]


def tested(home: Path, arm: str, seed: int) -> bool:
    """The arm's run finished and each of its points has its test tables (both temperatures)."""
    from training.outcome import eval_path

    if not finished(home, arm, seed):
        return False
    run = run_dir(home, arm, seed)
    return all(eval_path(run, TEST + p, t).is_file() for p in points(home, arm, seed) for t in (None, 1.0))


def run_all(home: Path, arms: list[str], seeds: list[int], jobs: int) -> None:
    """Every (arm, seed) not yet tested, ``jobs`` at once, each once the runs it needs have been tested; an arm whose
    run fails drops the arms of its seed that need it (``bench_curation.run_jobs``)."""

    def ended(a: str, s: int, code: int, todo: list) -> list:
        if not code:
            return todo
        print(f"    see {home}/logs/{a}-seed{s}.log")
        return [(x, y) for x, y in todo if y != s or a not in ARMS[x].needs]

    todo = [(a, s) for s in seeds for a in arms if not tested(home, a, s)]
    ready = lambda a, s: all(tested(home, n, s) for n in ARMS[a].needs)  # noqa: E731
    run_jobs(todo, ready, lambda a, s: launch(a, home, s), jobs, f"need runs that failed (see {home}/logs)", ended)


def launch(arm: str, home: Path, seed: int) -> subprocess.Popen:
    """The arm's commands in one shell, logged to ``<home>/logs/<arm>-seed<N>.log``; one torch thread each."""
    (home / "logs").mkdir(parents=True, exist_ok=True)
    cmds = commands(arm, home, seed)
    for cmd in cmds:
        print(f"[{time.strftime('%H:%M:%S')}] {arm} seed {seed}: python " + shlex.join(cmd[1:]), flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(home / "logs" / f"{arm}-seed{seed}.log", "a")  # noqa: SIM115 (the child holds it)
    script = " && ".join(shlex.join(c) for c in cmds)
    return subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


# --------------------------------------------------------------------------------------------------- the points
def rl_curve(home: Path, seed: int) -> list[dict[str, Any]]:
    """The rl arm's validation points in step order: ``step``, ``rollouts``, ``cpu_s`` (its ``measure`` first, CPU
    within a stage by steps), ``eval`` (the ``evals/`` name), ``model``, and pass@1 overall and at the frontier at
    T = 0.6 and 1.0 (None where not evaluated). The plateau model is step 0."""
    from training.outcome import checkpoint_eval, read_summary
    from training.rl import read_config

    run, chain = run_dir(home, "rl", seed), _chain(home, "rl", seed)
    summ = read_summary(run) or {"timings": []}
    measure = chain.notes.get(layout.MEASURE) or [{}]
    rollouts = float((measure[0].get("rollout") or {}).get("samples_generated", 0) or 0)
    cpu = step_cpu(summ, layout.MEASURE)
    out = [_point(home, run, layout.INIT, 0, rollouts, cpu, plateau_model(home, seed))]  # its start: the plateau model
    for rec in (r for r in chain.steps if "stage_dir" in r):
        cfg = read_config(Path(rec["stage_dir"])).rl
        per, stage_cpu = cfg.prompts_per_step * cfg.num_generations, step_cpu(summ, rec["step"], exact=True)
        saved = run_folder.checkpoints(Path(rec["stage_dir"]) / layout.CHECKPOINTS)
        ckpts = {layout.checkpoint_step(c): c for c in saved}
        for k in sorted(k for k in ckpts if k < rec["rl_steps"]):
            p = _point(home, run, checkpoint_eval(rec["step"], k), rec["offset_step"] + k, rollouts + k * per,
                       cpu + stage_cpu * k / rec["rl_steps"], str(ckpts[k]))  # fmt: skip
            if p["pass@0.6"] is not None:
                out.append(p)
        rollouts, cpu = rollouts + rec["rl_steps"] * per, cpu + stage_cpu
        end = rec["offset_step"] + rec["rl_steps"]
        out.append(_point(home, run, rec["step"], end, rollouts, cpu, rec["model"]))
    return out


def _point(home: Path, run: Path, name: str, step: int, rollouts: float, cpu: float, model: str) -> dict:
    """One point of ``rl_curve``: its pass@1 from the ``evals/`` table ``name``, overall and at the frontier."""
    from training.outcome import step_table

    point: dict[str, Any] = {"step": step, "rollouts": rollouts, "cpu_s": round(cpu, 1), "eval": name, "model": model}
    ops = problem_ops(home)
    for temp in (None, 1.0):
        t = step_table(run, name, temp)
        at = t.filter(t["problem_id"].is_in([p for p in t["problem_id"] if ops.get(p, 0) >= FRONTIER_OPS])) if (
            t is not None) else None  # fmt: skip
        point[f"pass@{temp or 0.6:g}"] = rate(t) if t is not None else None
        point[f"frontier@{temp or 0.6:g}"] = rate(at) if at is not None and at.height else None
    return point


_OPS: dict[Path, dict[str, int]] = {}


def problem_ops(home: Path) -> dict[str, int]:
    """problem_id -> the chain's operations (``meta.ops``) for the pool's validation and test problems."""
    import polars as pl

    from curate import schema as S

    if home not in _OPS:
        df = pl.read_parquet(home / "pools" / "tiny" / "problems.parquet").filter(pl.col(S.SPLIT) != "train")
        _OPS[home] = dict(zip(df[S.PROBLEM_ID], S.meta_values(df[S.META], "ops"), strict=True))
    return _OPS[home]


def points(home: Path, arm: str, seed: int) -> dict[str, str]:
    """The models of an arm evaluated on the test split, by point: ``start`` (the plateau model), ``end`` (the last
    model: RL's after its last step, RFT's last round, continued SFT's last step, at equal CPU) and ``best`` (the
    one chosen on validation: RL's best evaluated checkpoint at T = 0.6, RFT's best round, continued SFT's chosen
    checkpoint)."""
    chain = _chain(home, arm, seed)
    if arm == "plateau":
        return {"start": chain.get(layout.SFT)["model"]}
    if arm == "rl":
        curve = [p for p in rl_curve(home, seed)[1:] if p["pass@0.6"] is not None]
        best = max(curve, key=lambda p: p["pass@0.6"]) if curve else None
        return {"end": curve[-1]["model"], "best": best["model"]} if curve else {}
    if arm == "rft":
        rounds = chain.note(layout.RFT, layout.ROUNDS) or {}
        step = lambda s: chain.get(s)["model"]  # noqa: E731
        return {"end": step(rounds["last_step"]), "best": step(rounds["best_step"])} if rounds else {}
    return {"end": str(layout.final(run_dir(home, arm, seed) / layout.SFT)), "best": chain.get(layout.SFT)["model"]}


def test_eval(home: Path, arm: str, seed: int) -> None:
    """Each point of an arm on the test split, both bands, 4 samples at T = 0.6 and 1.0 (the frontier recipe's eval
    settings), kept as ``test:<point>`` in the arm's ``evals/``; a point already evaluated is skipped."""
    from curate.config import from_mapping, read_yaml
    from curate.io import Workspace
    from training.evaluate import evaluate, heldout_problems
    from training.outcome import eval_path, keep_eval
    from training.recipe import EvalSection

    section = {**read_yaml(ROOT / FRONTIER)["eval"], "split": "test", "limit": None, "sources": None}
    sec = from_mapping(EvalSection, section, "eval")
    problems = heldout_problems(Workspace(home), "tiny", split="test")
    run = run_dir(home, arm, seed)
    for name, model in points(home, arm, seed).items():
        for temp in (None, 1.0):
            if eval_path(run, TEST + name, temp).is_file():
                continue
            cfg = sec.config() if temp is None else dataclasses.replace(sec.config(), temperature=temp)
            keep_eval(run, TEST + name, evaluate(Path(model), problems, cfg, progress=True), temp)


# --------------------------------------------------------------------------------------------------- the report
COMPARISONS = (  # (name, arm a, point a, arm b, point b): a minus b on the test split, paired per seed
    ("RL - its start (the plateau)", "rl", "end", "plateau", "start"),
    ("RL, best on validation - its start", "rl", "best", "plateau", "start"),
    ("RL - iterated RFT (equal CPU)", "rl", "end", "rft", "end"),
    ("RL - iterated RFT, its best round on validation", "rl", "end", "rft", "best"),
    ("RL - continued SFT (equal CPU)", "rl", "end", "sftmore", "end"),
    ("RL - continued SFT, its best on validation", "rl", "end", "sftmore", "best"),
    ("iterated RFT - the start", "rft", "end", "plateau", "start"),
    ("continued SFT - the start", "sftmore", "end", "plateau", "start"),
)
PARTS = ("all", "3-8 ops", "frontier (9-12 ops)")


def compare(home: Path, seeds: list[int], temperature: float | None) -> dict[str, Any]:
    """Every comparison per seed and pooled, on all test problems, on 3-8 operations and at the frontier."""
    from training.outcome import paired

    ops = problem_ops(home)
    keep = {"all": None, "3-8 ops": {p for p, o in ops.items() if o < FRONTIER_OPS},
            "frontier (9-12 ops)": {p for p, o in ops.items() if o >= FRONTIER_OPS}}  # fmt: skip
    out: dict[str, Any] = {}
    for name, a, pa, b, pb in COMPARISONS:
        out[name] = {}
        for part in PARTS:
            gains = {}
            for s in seeds:
                if tested(home, a, s) and tested(home, b, s):
                    g = paired(run_dir(home, a, s), TEST + pa, TEST + pb, temperature,
                               before_run=run_dir(home, b, s), keep=keep[part])  # fmt: skip
                    if g is not None:
                        gains[s] = g
            out[name][part] = {"per_seed": gains, "pooled": pooled(list(gains.values()))}
    return out


def band(home: Path, seeds: list[int]) -> dict[int, dict[str, Any]]:
    """Per seed, the plateau SFT's chosen point on validation, the steps it took and why it stopped."""
    from curate import io
    from training.outcome import step_table
    from training.sft import read_metrics

    out = {}
    for s in seeds:
        folder = run_dir(home, "plateau", s) / layout.SFT
        if not (folder / layout.VALIDATION).is_file():
            continue
        chosen = io.read_json(folder / layout.VALIDATION)["chosen"]
        metrics = read_metrics(folder) or {}
        stopped = metrics.get("stopped")  # training.sft's record: the early stop's verdict and its sentence
        why = stopped.get("text") if isinstance(stopped, dict) else stopped
        test = step_table(run_dir(home, "plateau", s), TEST + "start")
        out[s] = {"pass_at_1": chosen["pass_at_1"], "stderr": chosen["stderr"], "chosen_step": chosen["step"],
                  "steps": chosen["steps"], "stopped": why, "n": chosen["n_problems"], "k": chosen["k"],
                  "patience": stopped.get("patience") if isinstance(stopped, dict) else None,
                  "test": rate(test) if test is not None else None}  # fmt: skip
    return out


def report(home: Path, seeds: list[int]) -> dict[str, Any]:
    """Prints the band, RL's curve, the comparisons and the headroom; returns them (``--json``)."""
    results: dict[str, Any] = {"band": band(home, seeds)}
    print("\n== SFT to its plateau (validation, the early stop)")
    for s, b in results["band"].items():
        print(f"seed {s}: {b['pass_at_1']:.3f} ± {b['stderr']:.3f} at step {b['chosen_step']} of {b['steps']} "
              f"({b['n']} x {b['k']}); {b['stopped']}")  # fmt: skip
    curves = {s: rl_curve(home, s) for s in seeds if (run_dir(home, "rl", s) / layout.CHAIN).is_file()}
    relative = lambda p: {**p, "model": os.path.relpath(p["model"], home)}  # noqa: E731 (a model, within home)
    results["curve"] = {s: [relative(p) for p in pts] for s, pts in curves.items()}
    print("\n== RL's learning curve (validation pass@1: all / frontier 9-12 ops, at T=0.6 and T=1.0)")
    for s, pts in curves.items():
        for p in pts:
            vals = " ".join("-" if p[k] is None else f"{p[k]:.3f}" for k in ("pass@0.6", "frontier@0.6", "pass@1",
                                                                              "frontier@1"))  # fmt: skip
            print(f"seed {s} step {p['step']:>3}: {p['rollouts']:>7.0f} rollouts {p['cpu_s']:>7.0f} CPU-s  {vals}")
    for temp, label in ((None, "T=0.6"), (1.0, "T=1.0")):
        results[f"comparisons@{label}"] = comps = compare(home, seeds, temp)
        print(f"\n== paired differences on the test split at {label} (pooled over seeds)")
        for name, parts in comps.items():
            cells = "  ".join(f"{part}: {_fmt(c['pooled'])}" for part, c in parts.items())
            print(f"{name:<48} {cells}")
    results["headroom"] = {s: h for s in seeds if finished(home, "rl", s) and (h := headroom(home, "rl", s))}
    return results


def _fmt(g: dict[str, Any] | None) -> str:
    return "-" if not g else f"{g['gain']:+.3f} ± {g['stderr']:.3f} ({g['seeds']} seeds)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--home", default="/tmp/bench-frontier")
    ap.add_argument("--report-only", action="store_true", help="read the finished runs back; train nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the commands of the runs that can start now")
    ap.add_argument("--json", help="write the results here (bench/json/frontier.json: bench/tables.py reads it)")
    ap.add_argument("--test-eval", metavar="ARM", help="evaluate an arm's points on the test split (each arm does)")
    args = ap.parse_args()
    home = Path(args.home).resolve()
    if args.test_eval:
        for s in args.seeds:
            test_eval(home, args.test_eval, s)
        return
    if args.dry_run:
        for a, s in ((a, s) for s in args.seeds for a in args.arms if not tested(home, a, s)):
            if all(tested(home, n, s) for n in ARMS[a].needs):
                print("\n".join(shlex.join(["python", *c[1:]]) for c in commands(a, home, s)))
        return
    if not args.report_only:
        print(f"load average before: {os.getloadavg()}")
        run_all(home, args.arms, args.seeds, args.jobs)
    results = {"measured": measured_at(sys.argv), **report(home, args.seeds)}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
