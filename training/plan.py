"""A curriculum plan (``curate curriculum``'s ``plan.json``) plus a training recipe -> fully specified RL stages.

Pure and torch-free, so a recipe is checked in milliseconds before any model is loaded. Each plan stage carries the
paper's settings (FastCuRL: context 8K -> 16K -> 24K -> 16K, rollouts per prompt, prompt batch, steps, KL and
entropy coefficients, learning rate, temperature). A recipe decides which of those it follows (``plan_fields``),
may shrink them to the model at hand (``scale``: a tiny CPU model cannot use a 24K context), and sets anything
else per stage (``stages.<name>``). Precedence, lowest first:

    RLConfig defaults < recipe ``rl`` < plan fields (scaled) < recipe ``stages.<stage name>``

Every stage's mapping is validated as an ``RLConfig`` here, so a typo in any stage fails before the first one
trains.

>>> plan = {"stages": [{"stage": "stage1", "shard": "stage1.parquet", "rows": 10, "n": 8, "prompt_batch": 128,
...     "steps": 160, "max_response_length": 8192, "use_kl_loss": True, "kl_loss_coef": 0.001}]}
>>> s = rl_stages(plan, Path("c"), {"loss_type": "cispo"}, scale=PlanScale(context=1 / 128, max_prompts_per_step=4))
>>> s[0].rl["max_completion_length"], s[0].rl["prompts_per_step"], s[0].rl["beta"]
(64, 4, 0.001)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate.errors import ConfigError


# plan.json key -> RLConfig key (``kl`` is special: beta = kl_loss_coef when use_kl_loss, else 0).
PLAN_TO_RL = {
    "n": "num_generations",
    "prompt_batch": "prompts_per_step",
    "steps": "max_steps",
    "max_response_length": "max_completion_length",
    "max_prompt_length": "max_prompt_length",
    "entropy_coef": "entropy_coef",
    "lr": "learning_rate",
    "temperature": "temperature",
}
PLAN_FIELDS = (*PLAN_TO_RL, "kl")


@dataclass(frozen=True)
class PlanScale:
    """Shrink a paper's plan to the model at hand (recipe key ``scale``).

    context / prompt_length / steps: factors on the plan's max_response_length, max_prompt_length and steps
    (rounded, at least ``min_context`` tokens and 1 step). max_prompts_per_step / max_num_generations: caps.
    """

    context: float = 1.0
    prompt_length: float = 1.0
    steps: float = 1.0
    min_context: int = 16
    max_prompts_per_step: int | None = None
    max_num_generations: int | None = None

    def __post_init__(self) -> None:
        if min(self.context, self.prompt_length, self.steps) <= 0:
            raise ConfigError("scale.context, scale.prompt_length and scale.steps must be > 0")


@dataclass(frozen=True)
class StagePlan:
    """One RL stage ready to train: its name, shard, row count and the validated ``RLConfig`` mapping."""

    index: int
    name: str
    shard: Path
    rows: int
    rl: dict[str, Any]

    @property
    def folder(self) -> str:
        return f"{self.index + 1:02d}-{self.name}"


def _plan_values(entry: Mapping[str, Any], fields: Sequence[str], scale: PlanScale) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in fields:
        if key == "kl":
            if "use_kl_loss" in entry or "kl_loss_coef" in entry:
                out["beta"] = float(entry.get("kl_loss_coef", 0.0)) if entry.get("use_kl_loss", True) else 0.0
            continue
        if key not in PLAN_TO_RL:
            raise ConfigError(f"plan_fields: unknown field {key!r}; known: {list(PLAN_FIELDS)}")
        if entry.get(key) is None:
            continue
        value = entry[key]
        if key == "max_response_length":
            value = max(scale.min_context, round(value * scale.context))
        elif key == "max_prompt_length":
            value = max(scale.min_context, round(value * scale.prompt_length))
        elif key == "steps":
            value = max(1, math.ceil(value * scale.steps))
        elif key == "prompt_batch" and scale.max_prompts_per_step:
            value = min(value, scale.max_prompts_per_step)
        elif key == "n" and scale.max_num_generations:
            value = min(value, scale.max_num_generations)
        out[PLAN_TO_RL[key]] = value
    return out


def rl_stages(
    plan: Mapping[str, Any],
    plan_dir: Path,
    base: Mapping[str, Any] | None = None,
    *,
    fields: Sequence[str] = PLAN_FIELDS,
    scale: PlanScale = PlanScale(),
    per_stage: Mapping[str, Mapping[str, Any]] | None = None,
    only: Sequence[str] | None = None,
) -> list[StagePlan]:
    """The plan's stages in order as ``StagePlan`` records (see the module docstring for the precedence).

    only: train just these stage names (in plan order). Raises ``ConfigError`` for an unknown stage name in
    ``per_stage``/``only``, a stage without a shard, or any invalid RL setting.
    """
    from training.rl import load_rl_config

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
        mapping = {**dict(base or {}), **_plan_values(entry, fields, scale), **dict(per_stage.get(name) or {})}
        cfg = load_rl_config(mapping)  # strict: unknown keys and bad values fail here, before any training
        out.append(StagePlan(i, name, Path(plan_dir) / entry["shard"], int(entry.get("rows") or 0), cfg.to_dict()))
    return out


def single_stage(train: Path, base: Mapping[str, Any] | None = None, name: str = "rl") -> list[StagePlan]:
    """One RL stage over one prompt file (a selection's ``trl.parquet`` or a shard), no plan."""
    from training.rl import load_rl_config

    return [StagePlan(0, name, Path(train), 0, load_rl_config(dict(base or {})).to_dict())]
