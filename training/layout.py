"""The run folder as data: every name a ``training run`` writes, the chain's step names, ``chain.json``'s note kinds.

Plain values in (a run folder, a stage's index and name, an iteration), paths and names out: no ``Run``, no
``StagePlan``, so this module sits on the bottom floor of ``training/`` and every other one may read it. No other
module spells a run path or builds or parses a step name (``tests/training/test_layout.py`` walks the modules).

The run folder (``runs/<name>`` under the workspace, unless ``--out``)::

    recipe.json          the resolved recipe the run was made with (written once)
    chain.json           every step (model, pass rate, wall time), the notes by kind (NOTES), the lineage
    run.lock             one writer at a time; running.json: what a live run is doing, how far
    data/                the run's own copy of what it trains on: sft.parquet, train.parquet, curriculum/ (plan.json
                         and its shards), pinned.json (sources and sha256)
    init/                the from-scratch starting model (``tiny``)
    sft/                 the SFT step (a step folder, below); curve.json, validation_problems.parquet (the early
                         stop), validation.json (every point and the choice)
    sft/best/            the checkpoint chosen on validation, sealed: the chain's SFT model
    headroom/            measure's headroom report: headroom.json, headroom*.parquet, headroom.png
    rl/NN-<stage>/       an RL stage (a step folder); NN-<stage>-n<N>/ a later rung of its rollout ladder
    rl/merge-<k>of<K>/   the merge of the first k of K parallel groups, sealed
    rl/itN-.../          the stages and merges of CoScale iteration N
    coscale/itN/         iteration N: solution_pools.parquet, <stage>.parquet (solvable prompts),
                         sft_unsolvable.parquet, sft/
    rft/r<N>/            iterated RFT's round N: data.parquet, sft/
    redistill/           re-distillation of the starting model (a step folder; redistill.parquet)
    evals/               <step>[@T<t>].parquet: each step's per-problem held-out table (a stage's checkpoints as
                         <step>-step<N>), <...>.samples.parquet beside each: every sample
    eval.parquet         the RL eval curve (step, compute, pass_at_1, stderr); fit.json: its sigmoid fit
    metrics.parquet      the RL metrics of every stage on one step axis
    training.png eval.png fit.png plan.png    the figures
    summary.json         the run's summary (every step, lineage, notes, fit, gain over SFT, timings)

A step folder (SFT, RL, re-distillation; ``training.run_folder`` says when it is done)::

    run.json | config.json   its identity (SFT | RL)     metrics.json | summary.json   its result, written last
    checkpoints/checkpoint-N/    Trainer checkpoints (RL: sampler_state.json), each with files.json
    final/               the trained model (card, lineage.json, files.json)
    metrics.parquet      RL: one row per optimizer step; optimizer.pt: Adam's state after the last step
    step.log, step_spec.json, step_result.json   the step's own process: its output, its input, its result

Step names (``chain.json``'s ``steps``, ``evals/``' files): ``init``, ``sft``, ``rl:<stage>`` (``@n<N>``: a later
rung), ``merge:<k>of<K>``, ``redistill``, ``rft``, ``rft:best``; in CoScale iteration N ``itN:`` before them
(``itN:sft``, ``itN:rl:<stage>``). ``parse_step`` reads one back.

>>> rl_step("stage2", 1, n=16), parse_step("it1:rl:stage2@n16").stage, merge_step(2, 3)
('it1:rl:stage2@n16', 'stage2', 'merge:2of3')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from curate import schema as S


# --------------------------------------------------------------------------------------------------- the run folder
RUNS = "runs"  # the workspace's folder of run folders
RECIPE = "recipe.json"
CHAIN = "chain.json"
SUMMARY = "summary.json"  # the run's summary, and an RL stage's result file
LOCK = "run.lock"
RUNNING = "running.json"
DATA = "data"
PINNED = {"curriculum": "curriculum", "train": "train.parquet", "sft": "sft.parquet"}  # data/'s copies
PINNED_RECORD = "pinned.json"
INIT, SFT, RL, REDISTILL, COSCALE, RFT = "init", "sft", "rl", "redistill", "coscale", "rft"  # folders (and steps)
BEST = "best"  # sft/best/
VALIDATION = "validation.json"  # sft/validation.json
HEADROOM = "headroom"
EVALS = "evals"
EVAL_CURVE = "eval.parquet"
METRICS = "metrics.parquet"  # the run's RL metrics of every stage, and an RL stage's own
FIT = "fit.json"
FIGURES = {"training": "training.png", "eval": "eval.png", "fit": "fit.png", "plan": "plan.png"}
# CoScale iteration N's files in coscale/itN/
SOLUTION_POOLS, UNSOLVABLE_SFT = "solution_pools.parquet", "sft_unsolvable.parquet"
RFT_DATA = "data.parquet"  # an RFT round's SFT rows

# --------------------------------------------------------------------------------------------------- a step folder
CHECKPOINTS = "checkpoints"
PREFIX = "checkpoint-"  # the Trainer's checkpoint folder names
FINAL = "final"
SAMPLER_STATE = "sampler_state.json"  # an RL checkpoint's curriculum position
TRAINER_STATE = "trainer_state.json"
SFT_RUN, SFT_METRICS, SFT_QUARANTINE = "run.json", "metrics.json", "quarantine.parquet"
RL_CONFIG, OPTIMIZER = "config.json", "optimizer.pt"  # an RL stage's identity (its result: SUMMARY)
CURVE, PROBLEMS = "curve.json", "validation_problems.parquet"  # SFT's early stop: its points, its problems
REDISTILL_DATA = "redistill.parquet"
STEP_LOG, STEP_SPEC, STEP_RESULT = "step.log", "step_spec.json", "step_result.json"

# ----------------------------------------------------------------------------------------------- chain.json's notes
# each a list of records by name: decide's decisions, CoScale's steps, the rollout ladder's events, the merges of
# parallel groups, measure and its forecast (named by the step they measured: SFT), the context check before RL,
# every step's cost, iterated RFT's rounds
DECISIONS, LADDER, MERGES, MEASURE, FORECAST, CONTEXT, TIMINGS = (
    "decisions", "ladder", "merge", "measure", "forecast", "context", "timings",
)  # fmt: skip
NOTES = (DECISIONS, COSCALE, LADDER, MERGES, MEASURE, FORECAST, CONTEXT, TIMINGS, RFT)
ROUNDS = "rounds"  # the rft note of the rounds as a whole


def run_dir(root: str | Path, name: str) -> Path:
    """``<workspace>/runs/<name>``: where a run lives unless ``--out`` says otherwise."""
    return Path(root) / RUNS / name


def pinned_path(run: str | Path, what: str) -> Path:
    """The run's own copy of ``what`` (``curriculum`` folder, ``train`` or ``sft`` file) under ``data/``."""
    return Path(run) / DATA / PINNED[what]


def stage_folder(index: int, name: str, n: int | None = None) -> str:
    """``NN-<stage>`` (``index`` from 0), ``NN-<stage>-n<N>`` for a later rung of its rollout ladder."""
    return f"{index + 1:02d}-{name}" + (f"-n{n}" if n else "")


def _in_iteration(name: str, iteration: int, sep: str) -> str:
    return f"it{iteration}{sep}{name}" if iteration else name


def stage_dir(run: str | Path, folder: str, iteration: int = 0) -> Path:
    """``rl/NN-<stage>`` in the first pass, ``rl/itN-NN-<stage>`` in CoScale iteration N."""
    return Path(run) / RL / _in_iteration(folder, iteration, "-")


def merge_dir(run: str | Path, count: int, total: int, iteration: int = 0) -> Path:
    """``rl/[itN-]merge-<k>of<K>``: the merge of the first ``count`` of ``total`` parallel groups."""
    return Path(run) / RL / _in_iteration(f"merge-{count}of{total}", iteration, "-")


def coscale_dir(run: str | Path, iteration: int) -> Path:
    """``coscale/itN/``: CoScale iteration N's pools snapshot, restricted shards, SFT rows and SFT run."""
    return Path(run) / COSCALE / f"it{iteration}"


def coscale_shard(folder: str | Path, stage: str) -> Path:
    """A stage's shard restricted to the solvable problems, in ``coscale/itN/``."""
    return Path(folder) / f"{stage}.parquet"


def round_name(r: int) -> str:
    """``r<N>``: RFT round N's folder under ``rft/`` and its ``rft`` note."""
    return f"r{r}"


def rft_dir(run: str | Path, r: int) -> Path:
    return Path(run) / RFT / round_name(r)


def final(folder: str | Path) -> Path:
    """A step folder's trained model."""
    return Path(folder) / FINAL


def checkpoint_name(step: int) -> str:
    """``checkpoint-N``: the Trainer's name of its checkpoint at step N."""
    return f"{PREFIX}{step}"


def checkpoint(folder: str | Path, step: int) -> Path:
    """``checkpoints/checkpoint-N`` of a step folder."""
    return Path(folder) / CHECKPOINTS / checkpoint_name(step)


def checkpoint_step(path: str | Path) -> int | None:
    """N of a ``checkpoint-N`` folder, None for another name."""
    name = Path(path).name
    return int(name[len(PREFIX) :]) if name.startswith(PREFIX) and name[len(PREFIX) :].isdigit() else None


def eval_file(step: str, temperature: float | None = None) -> str:
    """The per-problem table of a step in ``evals/``: ``<step>.parquet`` at the eval temperature, else
    ``<step>@T<temperature>.parquet``."""
    return f"{S.slug(step)}.parquet" if temperature is None else f"{S.slug(step)}@T{temperature:g}.parquet"


def eval_path(run: str | Path, step: str, temperature: float | None = None, *, samples: bool = False) -> Path:
    """Where run folder ``run`` keeps ``step``'s per-problem held-out table (at ``temperature``; None: the eval
    temperature), or with ``samples`` every sample of that evaluation."""
    path = Path(run) / EVALS / eval_file(step, temperature)
    return path.with_suffix(".samples.parquet") if samples else path


def checkpoint_eval(step: str, at: int) -> str:
    """The ``evals/`` name of a stage's checkpoint at its step ``at`` (``rl:stage2`` step 10 -> ``rl_stage2-step10``):
    its per-problem table, for paired comparisons at an early budget."""
    return f"{S.slug(step)}-step{at}"


# --------------------------------------------------------------------------------------------------- step names
_RL, _MERGE = "rl:", "merge:"
_STEP = re.compile(r"(?:it(?P<it>\d+):)?(?:rl:(?P<stage>[^@]+)(?:@n(?P<n>\d+))?|merge:(?P<count>\d+)of(?P<total>\d+))")


def in_iteration(name: str, iteration: int = 0) -> str:
    """A step's name in CoScale iteration N: ``itN:<name>`` (``it1:sft``, ``it1:measure``); the name itself in the
    first pass."""
    return _in_iteration(name, iteration, ":")


def rl_step(stage: str, iteration: int = 0, n: int | None = None) -> str:
    """``rl:<stage>``, ``itN:rl:<stage>`` in CoScale iteration N; ``@n<N>`` for a later rung of its ladder."""
    return in_iteration(f"{_RL}{stage}" + (f"@n{n}" if n else ""), iteration)


def merge_step(count: int, total: int, iteration: int = 0) -> str:
    """The merge of the first ``count`` of ``total`` parallel groups: ``merge:2of3`` (``itN:`` before it)."""
    return in_iteration(f"{_MERGE}{count}of{total}", iteration)


def rft_step(r: int) -> str:
    """RFT round N as a chain step (its ``timings`` name): ``rft:r<N>``."""
    return f"{RFT}:{round_name(r)}"


SOLUTIONS = "solutions"  # CoScale's step after its measure: ``itN:measure``, ``itN:solutions``, ``itN:sft``
RFT_LAST, RFT_BEST = RFT, f"{RFT}:best"  # the chain steps of RFT's last round's model and of its best on validation


@dataclass(frozen=True)
class StepName:
    """A step name read back (``parse_step``): ``kind`` is ``rl`` (``stage``, ``n`` of a later rung), ``merge``
    (``count`` of ``total``) or None (any other step: ``init``, ``sft``, ``rft``, ...); ``iteration`` its CoScale
    iteration (0: the first pass)."""

    name: str
    kind: str | None = None
    iteration: int = 0
    stage: str | None = None
    n: int | None = None
    count: int | None = None
    total: int | None = None

    @property
    def stage_step(self) -> str:
        """An RL rung's stage as its first rung's step name (``rl:g@n16`` -> ``rl:g``); the name itself otherwise."""
        return rl_step(self.stage, self.iteration) if self.kind == RL and self.stage else self.name

    @property
    def label(self) -> str:
        """The name a figure shows: a first-pass RL step without ``rl:`` (``stage1``, ``stage1@n16``)."""
        return self.name.removeprefix(_RL)


def parse_step(name: str) -> StepName:
    """A chain step name read back: its kind, iteration, and an RL step's stage and rung or a merge's counts.

    >>> parse_step("rl:stage1@n16")
    StepName(name='rl:stage1@n16', kind='rl', iteration=0, stage='stage1', n=16, count=None, total=None)
    >>> parse_step("it2:merge:2of3").count, parse_step("sft").kind
    (2, None)
    """
    m = _STEP.fullmatch(str(name))
    if m is None:
        it = re.match(r"it(\d+):", str(name))
        return StepName(str(name), iteration=int(it.group(1)) if it else 0)
    it = int(m["it"] or 0)
    if m["stage"] is not None:
        return StepName(str(name), RL, it, m["stage"], int(m["n"]) if m["n"] else None)
    return StepName(str(name), MERGES, it, count=int(m["count"]), total=int(m["total"]))


def first_pass_rl(name: str) -> bool:
    """Whether a step (or its ``timings`` name) is an RL stage of the first pass, a rung of its ladder included."""
    step = parse_step(name)
    return step.kind == RL and step.iteration == 0


def is_rft_round(name: str) -> bool:
    """Whether a ``timings`` name is an RFT round's (``rft_step``)."""
    return re.fullmatch(rf"{RFT}:r\d+", name) is not None
