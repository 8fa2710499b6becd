"""A curriculum plan (``curate curriculum``'s ``plan.json``) plus a training recipe -> fully specified RL stages.

Pure and torch-free, so a recipe is checked in milliseconds before any model is loaded. Each plan stage carries the
paper's settings (FastCuRL: context 8K -> 16K -> 24K -> 16K, rollouts per prompt, prompt batch, steps, KL and
entropy coefficients, learning rate, temperature). A recipe decides which of those it follows (``plan_fields``),
may shrink them to the model at hand (``scale``: a tiny CPU model cannot use a 24K context), and sets anything
else per stage (``stages.<name>``). Precedence, lowest first (every layer through ``training.recipe.stage_rl``,
so a stage's settings are one validated ``RLConfig`` from here to the step's process):

    RLConfig defaults < recipe ``rl`` < plan fields (scaled) < recipe ``stages.<stage name>`` < the run's settings
    (``RunRecipe.run_settings``: ``eval.every``)

The recipe's own sections are checked when it loads (``training.recipe``); the plan's stage names and values are
checked here, as soon as the curriculum exists, before the first stage trains. So is whether each stage's context
fits what it trains on (``context_fit``: the share of its prompts whose measured answers, the ledger's samples of the
model ``measure`` sampled, are longer than its ``max_completion_length``; ``fit_lines`` says it per stage).

>>> plan = {"stages": [{"stage": "stage1", "shard": "stage1.parquet", "rows": 10, "n": 8, "prompt_batch": 128,
...     "steps": 160, "max_response_length": 8192, "use_kl_loss": True, "kl_loss_coef": 0.001}]}
>>> scale = PlanScale(context=1 / 128, max_prompts_per_step=4)
>>> s = rl_stages(plan, Path("c"), RLConfig(loss_type="cispo"), scale=scale)
>>> s[0].rl.max_completion_length, s[0].rl.prompts_per_step, s[0].rl.beta
(64, 4, 0.001)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate import io
from curate.errors import ConfigError, InputError
from training import layout
from training.recipe import PLAN_FIELDS, PLAN_TO_RL, PlanScale, RunRecipe, resolve_path, stage_rl
from training.rl import RLConfig


@dataclass(frozen=True)
class StagePlan:
    """One RL stage ready to train: its name, shard, row count and its validated ``RLConfig``; ``parallel``: the
    plan marks it an independent run from the base model (CoScale-RL's difficulty groups, ``bands``). ``rung``:
    its rung of the rollout ladder (0: the stage as planned; a later rung is built by ``training.groups.next_rung``
    with its N and lr), ``resume``: the checkpoint where the previous rung stopped (it continues from there)."""

    index: int
    name: str
    shard: Path
    rows: int
    rl: RLConfig
    parallel: bool = False
    rung: int = 0
    resume: str | None = None

    @property
    def folder(self) -> str:
        """``NN-<stage>``, and ``NN-<stage>-n<N>`` for a later rung of its rollout ladder."""
        return layout.stage_folder(self.index, self.name, self.rl.num_generations if self.rung else None)


def _plan_values(entry: Mapping[str, Any], fields: Sequence[str], scale: PlanScale) -> dict[str, Any]:
    """The ``RLConfig`` values of one plan stage for the recipe's ``plan_fields``, scaled (``_scaled``); ``kl`` is
    beta = kl_loss_coef when use_kl_loss, else 0."""
    out: dict[str, Any] = {}
    for key in fields:
        if key == "kl":
            if "use_kl_loss" in entry or "kl_loss_coef" in entry:
                out["beta"] = float(entry.get("kl_loss_coef", 0.0)) if entry.get("use_kl_loss", True) else 0.0
            continue
        if key == "ladder":
            if rule := _plan_ladder(entry, scale):
                out["ladder"] = rule
            continue
        if key not in PLAN_TO_RL:
            raise ConfigError(f"plan_fields: unknown field {key!r}; known: {list(PLAN_FIELDS)}")
        if entry.get(key) is not None:
            out[PLAN_TO_RL[key]] = _scaled(key, entry[key], scale)
    return out


def _plan_ladder(entry: Mapping[str, Any], scale: PlanScale) -> dict[str, Any]:
    """The ``rl.ladder`` keys a plan stage gives (a ``bands`` plan's ``stop_rule`` and ``ladder``, written by
    ``curate.curriculum.stage.bands_plan``): factor, the top rung (capped like ``n``), the patience (in the plan's
    steps, scaled like ``steps``), the collapse drop and the reward window. Empty for a stage without a ladder."""
    stop, ladder = entry.get("stop_rule") or {}, entry.get("ladder") or {}
    patience, n_max = stop.get("plateau_patience") or ladder.get("patience"), ladder.get("n_max")
    rule = {
        "factor": ladder.get("factor"),
        "n_max": _scaled("n", n_max, scale) if n_max else None,
        "patience": _scaled("steps", patience, scale) if patience else None,
        "collapse_drop": stop.get("collapse_drop"),
        "window": stop.get("window"),
    }
    return {k: v for k, v in rule.items() if v is not None}


def _scaled(key: str, value: Any, scale: PlanScale) -> Any:
    """A plan value shrunk to the model at hand: context and prompt length by their factors (at least
    ``min_context`` tokens), steps by theirs (at least 1), prompts per step and rollouts capped."""
    if key == "max_response_length":
        return max(scale.min_context, round(value * scale.context))
    if key == "max_prompt_length":
        return max(scale.min_context, round(value * scale.prompt_length))
    if key == "steps":
        return max(1, math.ceil(value * scale.steps))
    if key == "prompt_batch" and scale.max_prompts_per_step:
        return min(value, scale.max_prompts_per_step)
    if key == "n" and scale.max_num_generations:
        return min(value, scale.max_num_generations)
    return value


def rl_stages(
    plan: Mapping[str, Any],
    plan_dir: Path,
    base: RLConfig | None = None,
    *,
    fields: Sequence[str] = PLAN_FIELDS,
    scale: PlanScale = PlanScale(),
    per_stage: Mapping[str, Mapping[str, Any]] | None = None,
    only: Sequence[str] | None = None,
    run: Mapping[str, Any] | None = None,
) -> list[StagePlan]:
    """The plan's stages in order as ``StagePlan`` records (see the module docstring for the precedence).

    only: train just these stage names (in plan order). run: the run's settings on every stage, last
    (``RunRecipe.run_settings``). Raises ``ConfigError`` for an unknown stage name in ``per_stage``/``only``, a
    stage without a shard, or any invalid RL setting.
    """
    entries = list(plan.get("stages") or [])
    if not entries:
        raise ConfigError(f"{plan_dir}/plan.json has no stages")
    names = [str(e.get("stage") or e.get("name")) for e in entries]
    per_stage = dict(per_stage or {})
    unknown = sorted(set(per_stage) - set(names)) + sorted(set(only or ()) - set(names))
    if unknown:
        raise ConfigError(f"stage name(s) {unknown} are not in the plan's stages {names}")
    out = []
    for i, (name, entry) in enumerate(zip(names, entries, strict=True)):
        if only and name not in only:
            continue
        if not entry.get("shard"):
            raise ConfigError(f"plan stage {name!r} has no shard")
        layers = (_plan_values(entry, fields, scale), per_stage.get(name), run)
        cfg = stage_rl(base or RLConfig(), *layers, where=f"stages.{name}")
        rows = int(entry.get("rows") or 0)
        out.append(StagePlan(i, name, Path(plan_dir) / entry["shard"], rows, cfg, bool(entry.get("parallel"))))
    return out


def sequential_note(stages: Sequence[StagePlan], mode: str = "sequential") -> str | None:
    """What ``training run`` does with stages its plan marks parallel (a ``bands`` plan) when the recipe trains
    them in ``sequential`` mode (``groups: sequential``): one after another, each from the previous stage's model,
    where CoScale-RL runs each difficulty group from the base model and merges them (``training.groups``). None when
    no stage is marked parallel or they are trained as the plan says."""
    parallel = [s.name for s in stages if s.parallel]
    if not parallel or mode != "sequential":
        return None
    return (
        f"plan stages {parallel} are marked independent runs from the base model (CoScale-RL's groups); "
        "the recipe's `groups: sequential` trains them one after another, each from the previous stage's model"
    )


def single_stage(
    train: Path, base: RLConfig | None = None, name: str = "rl", run: Mapping[str, Any] | None = None
) -> list[StagePlan]:
    """One RL stage over one prompt file (a selection's ``trl.parquet`` or a shard), no plan."""
    return [StagePlan(0, name, Path(train), 0, stage_rl(base or RLConfig(), run))]


def plan_stages(recipe: RunRecipe, ws: io.Workspace, pinned: Path | None = None) -> list[StagePlan]:
    """The RL stages of ``recipe`` in workspace ``ws``: its curriculum's ``plan.json`` through ``rl_stages``, or one
    stage over ``train``; from ``pinned`` (a run's own copy of its curriculum folder or train file) when given.
    Raises ``InputError`` when the curriculum has no plan yet."""
    if recipe.train:
        return single_stage(pinned or resolve_path(ws, recipe.train), recipe.rl, run=recipe.run_settings())
    from curate.curriculum.stage import PLAN, read_plan

    folder = pinned or ws.curriculum_dir(recipe.curriculum)
    plan = read_plan(folder)
    if plan is None:
        raise InputError(f"curriculum {recipe.curriculum!r} has no {PLAN} at {folder / PLAN}: run `curate curriculum`")
    return rl_stages(
        plan, folder, recipe.rl, fields=recipe.plan_fields, scale=recipe.scale, per_stage=recipe.stages,
        only=recipe.only_stages, run=recipe.run_settings(),
    )  # fmt: skip


def rl_step_name(stage: StagePlan, iteration: int = 0) -> str:
    """``rl:<stage>`` in the first pass, ``itN:rl:<stage>`` in CoScale iteration N (the chain's step name);
    ``rl:<stage>@n<N>`` for a later rung of the stage's rollout ladder."""
    return layout.rl_step(stage.name, iteration, stage.rl.num_generations if stage.rung else None)


# --------------------------------------------------------------------------------------------------- context fit
def measured_answers(ws: io.Workspace, pool: str, model: str, ids: Sequence[str] | None = None) -> dict[str, int]:
    """Each measured prompt's answer length in tokens, from the ``model``'s samples in the pool's ledger: the median
    ``completion_tokens`` of its correct samples, else of all of them (a never-solved prompt's samples, cut at the
    rollout's cap). Empty when the ledger has none."""
    import polars as pl

    from curate import schema as S
    from curate.rollout import ledger

    if not ws.ledger_dir(pool, model).is_dir():
        return {}
    samples = ledger.read(ws, pool, model, columns=[S.PROBLEM_ID, S.CORRECT, S.COMPLETION_TOKENS])
    if ids is not None:
        samples = samples.filter(pl.col(S.PROBLEM_ID).is_in(pl.Series(list(ids), dtype=pl.String).implode()))
    tokens = pl.col(S.COMPLETION_TOKENS)
    per = samples.group_by(S.PROBLEM_ID).agg(
        pl.coalesce(tokens.filter(pl.col(S.CORRECT)).median(), tokens.median()).alias("tokens")
    )
    return {pid: round(t) for pid, t in zip(per[S.PROBLEM_ID], per["tokens"], strict=True) if t is not None}


def reference_answers(ws: io.Workspace, pool: str, model_dir: str, ids: Sequence[str]) -> dict[str, int]:
    """Each prompt's reference solution (the problems table's ``solution``) in ``model_dir``'s tokens, plus the end
    of turn: what an answer costs when no sample of it was measured. Empty without a local tokenizer or solutions."""
    import polars as pl

    from curate import schema as S

    path = ws.table(pool, "problems")
    if not (Path(model_dir) / "tokenizer_config.json").is_file() or not path.is_file() or not ids:
        return {}
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = io.read_parquet(path).filter(pl.col(S.PROBLEM_ID).is_in(pl.Series(list(ids), dtype=pl.String).implode()))
    rows = rows.filter(pl.col(S.SOLUTION).fill_null("") != "")
    lengths = [len(t) + 1 for t in tok(rows[S.SOLUTION].to_list())["input_ids"]] if rows.height else []
    return dict(zip(rows[S.PROBLEM_ID].to_list(), lengths, strict=True))


def stage_ids(stage: StagePlan) -> list[str]:
    """The problem ids of a stage's prompts (its shard's ``problem_id``; none when the file has no such column)."""
    import polars as pl

    from curate import schema as S

    if not stage.shard.is_file() or S.PROBLEM_ID not in pl.read_parquet_schema(stage.shard):
        return []
    return pl.read_parquet(stage.shard, columns=[S.PROBLEM_ID])[S.PROBLEM_ID].to_list()


def context_fit(stages: Sequence[StagePlan], answers: Mapping[str, int]) -> list[dict[str, Any]]:
    """Per stage, how many of its prompts' measured answers (``measured_answers``, else ``reference_answers``)
    exceed its context (``max_completion_length``): FastCuRL's first stage scaled to 128 tokens cut every
    8-operation answer (~137 tokens) of the built-in pool, so RL there could never earn a reward on the prompts it
    was meant to train on. Each record: stage, context, prompts, measured, over, share (of the measured; None
    without any)."""
    out = []
    for stage in stages:
        ids = stage_ids(stage)
        lengths = [answers[pid] for pid in ids if pid in answers]
        over = sum(t > stage.rl.max_completion_length for t in lengths)
        share = round(over / len(lengths), 4) if lengths else None
        record = {"stage": stage.name, "context": stage.rl.max_completion_length, "prompts": len(ids)}
        out.append({**record, "measured": len(lengths), "over": over, "share": share})
    return out


def fit_lines(fits: Sequence[Mapping[str, Any]], what: str = "measured") -> list[str]:
    """One line per stage (``context_fit``): the share of its prompts' answers over its context, as a warning when
    any are (the stage truncates the band it trains), or that none of its prompts has an answer to measure.
    ``what``: ``measured`` (samples of the starting model) or ``reference`` (the reference solutions)."""
    lines = []
    for f in fits:
        if not f["measured"]:
            lines.append(f"{f['stage']}: none of its {f['prompts']} prompts has a measured or reference answer to "
                         f"set against its {f['context']}-token context")  # fmt: skip
            continue
        whose = f"{f['prompts']} prompts'" if f["measured"] == f["prompts"] else (
            f"{f['measured']} measured prompts' (of {f['prompts']})")  # fmt: skip
        answers = "answers" if what == "measured" else "reference answers (none measured)"
        text = f"{f['stage']}: {f['share']:.0%} of its {whose} {answers} exceed its {f['context']}-token context"
        lines.append(f"warning: {text} ({f['over']}): it truncates what it trains on" if f["over"] else text)
    return lines
