"""The training recipe (``training/recipes/<model>/<method>.yaml``): every section typed and checked at load.

One question answered here: "is this recipe valid, and what does each setting resolve to?". Every section is a
frozen dataclass built with curate's one strict loader (``curate.config.from_mapping``), so in any section (top
level, ``tiny``, ``sft``, ``rl``, ``rl.sampler``, ``stages.<name>``, ``scale``, ``eval``, ``redistill``, ``fit``,
``decide``) an unknown key fails at load time with the key, a "did you mean" and the allowed keys, and a number
written ``1e-6`` is a float everywhere (the one numeric rule of ``curate.config``). Nothing here imports torch:
a recipe is checked in milliseconds, before curation or any model work.

Each section's type lives beside the step that uses it (``RLConfig`` in ``training.rl``, ``SFTRunConfig`` in
``training.sft``, ``EvalConfig`` in ``training.evaluate``, ...), as curate keeps each stage's config beside its
stage; this module composes them. The recipe's one ``seed`` reaches every training section that takes a seed
(``tiny``, ``sft``, ``rl``, ``eval``, ``redistill``) unless the section sets its own; the curate stages the chain
runs (curation, ``measure``, ``decide``) keep the curation recipe's ``seed``, as ``curate run`` does.

Each recipe file is read and validated once, here: ``load_recipe`` reads the training recipe, loads its
``curate_recipe`` through ``curate.pipeline.load_recipe`` (every section checked) and keeps it as ``RunRecipe.curate``;
the chain, the Prefect flow and the curate steps it runs take these typed objects and never read a file again.
What the run's own settings do to each RL stage (``eval.every`` sets the checkpoint interval) and what the plan's
stage names allow (``stages.<name>``, ``only_stages``) is checked here too, before any work.

    recipe = load_recipe("training/recipes/tiny/fastcurl.yaml", {"rl.learning_rate": "1e-4"})
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curate import io
from curate.config import Recipe, apply_overrides, from_mapping, placement, read_yaml, unknown_key_error
from curate.errors import ConfigError
from curate.rollout.backends import check_engine
from training.evaluate import EvalConfig
from training.merge import MergeConfig
from training.packaged import packaged_name
from training.redistill import RedistillConfig
from training.rl import RLConfig, load_rl_config
from training.scaling import FitConfig
from training.sft import SFTRunConfig
from training.tiny import TinyConfig


# plan.json key -> RLConfig key (``kl`` is special: beta = kl_loss_coef when use_kl_loss, else 0; ``ladder`` too:
# a ``bands`` plan's ``stop_rule`` and ``ladder`` -> ``rl.ladder``, CoScale's rollout ladder). The recipe's
# ``plan_fields`` names which of the plan's settings a run follows (``training.plan``).
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
PLAN_FIELDS = (*PLAN_TO_RL, "kl", "ladder")
GROUPS = ("parallel", "sequential")  # how a pass trains its stages (``RunRecipe.groups``)
SEEDED = ("tiny", "sft", "rl", "eval", "redistill")  # sections whose ``seed`` defaults to the recipe's


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
class SFTValidation:
    """``sft.validation``: the SFT model is the checkpoint that scores best on the validation split, not the last one
    (``training.choose``). Every ``every`` optimizer steps a checkpoint is kept (all of them) and
    evaluated on ``split`` (``limit`` problems x ``k`` samples at the ``eval`` section's temperature and token
    budget); the highest pass@1 wins, the later one on a tie. ``reference``: the validation pass@1 the recipe's
    settings reached when they were chosen, and ``band`` how far below it a seed may land (their spread over seeds):
    a chosen model under ``reference - band`` gets one warning line, since its results will not match the recipe's.

    patience / min_delta: the early stop (``training.plateau``). With ``patience`` set, each checkpoint
    is evaluated as it is saved, and SFT stops once ``patience`` evaluations in a row brought no gain over the best
    point by more than ``min_delta`` times the gain's paired SE; ``sft.max_steps`` is then a cap. None: SFT trains
    its ``max_steps`` and every checkpoint is evaluated afterwards (a fixed budget: bench_curation's continued SFT at
    equal CPU). Why the defaults:

    - ``min_delta: 1.0`` (one paired SE): stopping too early costs the rest of the rise (a seed went 0.07 -> 0.31 ->
      0.65 after its flat start), training a window too long costs ``patience`` evaluations; a one-sided 1-SE test
      lets a flat curve "gain" by chance about one evaluation in six, which only lengthens training by a window.
    - ``patience`` has no default: it is a number of evaluations, so it depends on ``every``; the built-in recipes
      set 3 at ``every: 500`` (``training/recipes/tiny/fastcurl.yaml`` says why).
    """

    every: int = 500
    split: str = "validation"
    k: int = 2
    limit: int | None = 150
    reference: float | None = None
    band: float = 0.1
    patience: int | None = None
    min_delta: float = 1.0

    def __post_init__(self) -> None:
        if self.every < 1 or self.k < 1 or (self.limit is not None and self.limit < 1):
            raise ConfigError("sft.validation: every, k and limit must be >= 1")
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"sft.validation.patience must be >= 1 evaluations (or null: no early stop), "
                              f"got {self.patience}")  # fmt: skip
        if self.min_delta < 0:
            raise ConfigError(f"sft.validation.min_delta must be >= 0 (a multiple of the paired SE), "
                              f"got {self.min_delta}")  # fmt: skip
        if self.split == "test":
            raise ConfigError("sft.validation.split: choosing the SFT model on the test split would report on the "
                              "problems the choice was made on; use validation")  # fmt: skip
        if self.split == "train":  # it would choose on the problems SFT trained on
            raise ConfigError("sft.validation.split: choosing the SFT model on the train split rewards memorizing "
                              "its traces; use validation (problems SFT never trained on)")  # fmt: skip
        if self.reference is not None and not 0 <= self.reference <= 1:
            raise ConfigError(f"sft.validation.reference must be a pass@1 in [0, 1] (or null), got {self.reference}")
        if not 0 <= self.band <= 1:
            raise ConfigError(f"sft.validation.band must be in [0, 1] (how far below the reference), got {self.band}")


@dataclass(frozen=True)
class SFTSection(SFTRunConfig):
    """``sft``: an ``SFTRunConfig`` plus ``data``, the SFT rows (a ``curate solutions`` export's ``sft.parquet``;
    a relative path is read from the workspace root when it exists there, else from the working directory), and
    ``validation`` (``SFTValidation``; None: the last model is the SFT model)."""

    data: str = ""
    validation: SFTValidation | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.data:
            raise ConfigError("sft.data: the SFT rows (a `curate solutions` export's sft.parquet) are required")

    def run_config(self) -> SFTRunConfig:
        """The section without ``data``: what ``training.sft.train_sft`` takes; with ``validation`` it keeps a
        checkpoint every ``validation.every`` steps, all of them."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(SFTRunConfig)}
        if self.validation is not None:
            values.update(save_steps=self.validation.every, save_total_limit=None)
        return SFTRunConfig(**values)


@dataclass(frozen=True)
class EvalSection(EvalConfig):
    """Held-out evaluation (``eval``): ``EvalConfig``'s settings (the one set of eval defaults, shared with
    ``training eval``) plus where and when.

    split: the pool's split to evaluate on (never the training problems). every: evaluate RL checkpoints every this
    many steps (0: only each stage's final model). every_limit: at most this many problems for those checkpoint
    evaluations (None: ``limit``; a subset of the final evaluations' problems, so they still pair up): the curve
    for the fit at a fraction of the cost. init_limit: at most this many problems for the starting model
    (None: ``limit``); a model built from scratch scores 0 and samples to ``max_new_tokens`` every time, so
    confirming that on a few problems saves minutes. by: also report pass@1 and the RL-vs-SFT gain per group of
    problems (``level``, ``difficulty``, ``subject`` or ``meta.<key>``, e.g. ``meta.ops``: the arithmetic chains'
    length). temperatures: more sampling temperatures at which each trained model is also evaluated (e.g. the RL
    rollouts' temperature beside ``temperature``, the one a user samples at), each with its own paired gain.
    every_temperatures: evaluate each ``every`` checkpoint at ``temperatures`` too (default: only at ``temperature``;
    the curve stays at ``temperature``, the others' tables are kept beside it).
    sources: only the held-out problems first read from these ingest sources (None: the whole split), for both
    splits at once (e.g. ``[tiny/validation, tiny/test]``; ``split`` picks one): a band added to a split as a new
    source (the built-in pool's frontier) leaves a recipe that names the old ones scoring the same problems. The
    SFT model's validation (``sft.validation``) reads the same sources.
    """

    split: str = "test"
    every: int = 0
    every_limit: int | None = None
    init_limit: int | None = None
    by: str | None = None
    temperatures: list[float] = field(default_factory=list)
    every_temperatures: bool = False
    sources: list[str] | None = None

    def config(self, limit: int | None = None) -> EvalConfig:
        """The ``EvalConfig`` of one evaluation (``limit`` overrides the section's)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(EvalConfig)}
        return EvalConfig(**{**values, "limit": self.limit if limit is None else limit})


@dataclass(frozen=True)
class DecideSection:
    """What the chain decides after each RL stage (recipe key ``decide``; without it every stage runs, once).

    stop_margin: stop the pass when the fitted asymptote A is pinned down and within this of the measured pass rate.
    coscale_iterations: CoScale iterations after the first pass (re-measure, solutions, SFT, RL on solvable).
    rollout: ``curate rollout`` settings for re-measuring (``model`` is set to the current model; ``backend``
    defaults to ``hf``). solutions: ``curate solutions`` settings over the curate recipe's section (``student``
    and ``name`` are set per iteration; ``selection`` defaults to the curriculum's). Both are checked against
    curate's own stage configs when the recipe loads (``RunRecipe.__post_init__``). The stop rule fits the eval
    curve, so ``decide`` needs ``eval.split: validation``: with the test split it fails at load (never choose on
    the split the figures are reported on).
    """

    stop_margin: float = 0.02
    coscale_iterations: int = 0
    rollout: dict[str, Any] = field(default_factory=dict)
    solutions: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.stop_margin < 0 or self.coscale_iterations < 0:
            raise ConfigError("decide.stop_margin and decide.coscale_iterations must be >= 0")
        if "model" in self.rollout or "student" in self.solutions:
            raise ConfigError("decide.rollout.model / decide.solutions.student are set by the chain (current model)")


@dataclass(frozen=True)
class MeasureSection:
    """Before RL, the SFT model's own pass rates over the RL candidates (recipe key ``measure``): ``curate rollout``
    of the SFT model (``rollout``: curate's rollout settings, ``backend`` hf by default, ``model`` set by the
    chain), then ``curate score`` with that model as the evidence (``score``: over the curate recipe's section),
    ``curate select`` (``select``: over the curate recipe's) and ``curate curriculum`` (``curriculum``: over the
    curate recipe's, from the selection just made), both named ``<curriculum>.<run>`` (the recipe's ``curriculum``
    and the run's tag: two runs in one workspace never share them); the run pins the result as its curriculum.
    Without ``sft`` it measures the starting model (one SFT'd elsewhere, or another run's ``sft/final``).
    So DES ranks by the SFT model's real difficulty, the curriculum's bands are that model's, and RL trains on
    problems at its edge of competence. Each mapping is checked against curate's stage config when the recipe
    loads. Before any of it runs RL, the chain prints the headroom report of the rollouts (``curate.score.headroom``,
    per ``eval.by`` band) and keeps it in ``<run>/headroom/``; then ``fresh`` more samples of each selected prompt
    (None: ``rl.num_generations``; 0: none) forecast the share of zero-variance groups RL will meet from rollouts
    that did not choose the prompts.
    """

    rollout: dict[str, Any] = field(default_factory=dict)
    score: dict[str, Any] = field(default_factory=dict)
    select: dict[str, Any] = field(default_factory=dict)
    curriculum: dict[str, Any] = field(default_factory=dict)
    fresh: int | None = None

    def __post_init__(self) -> None:
        if "model" in self.rollout or "model" in dict(self.score.get("evidence") or {}):
            raise ConfigError("measure.rollout.model / measure.score.evidence.model are set by the chain (SFT model)")
        if self.fresh is not None and self.fresh < 0:
            raise ConfigError("measure.fresh must be >= 0 (fresh samples per selected prompt; 0: no forecast)")


RFT_SFT = {"learning_rate": 1e-4, "epochs": 1.0, "lr_scheduler": "cosine", "warmup_ratio": 0.05}  # ``rft.sft``'s
# how the model trains, which ``rft.sft`` takes from the recipe's ``sft`` section (its schedule is its own)
RFT_FROM_SFT = ("per_device_batch_size", "gradient_accumulation_steps", "max_length", "weight_decay", "dtype", "bf16",
                "gradient_checkpointing", "torch_threads", "packing", "report_to")  # fmt: skip


def _rft_sft() -> SFTRunConfig:
    return SFTRunConfig(**RFT_SFT)


@dataclass(frozen=True)
class RFTSection:
    """Iterated rejection-sampling fine-tuning (recipe key ``rft``; ``training.rft``): the baseline with RL's own
    information. In place of the RL stages, on the same prompts (every RL stage's shard), for up to ``rounds``
    rounds: ``n`` samples per prompt from the current model (``curate rollout``; ``rollout``: curate's rollout
    settings over ``measure.rollout``'s, backend hf by default, ``model`` and ``n`` set by the chain), keep what the
    checker verified (a completion cut at the token cap is not a whole solution; identical completions of a prompt
    count once; at most ``per_prompt`` per prompt, so the easy prompts do not fill the set), fine-tune the current
    model on them (``sft``: over the recipe's ``sft`` batch, length, weight decay and threads, ``RFT_FROM_SFT``, a
    stable schedule of its own: lr 1e-4, cosine, 1 epoch, where continued SFT from the plateau gained; not
    tuned yet) and evaluate it on ``split`` (``limit`` problems x ``k``, at the ``eval`` section's temperature and
    token budget); the next round samples from that model. ``cpu_budget``: start no round once the rounds so far
    took this many CPU-seconds (``training.runner.add_timing``; RL's CPU for an equal-CPU baseline; a round started
    under it finishes). The chain keeps the last round's model and the best one on ``split``."""

    rounds: int = 3
    n: int = 8
    per_prompt: int = 4
    cpu_budget: float | None = None
    rollout: dict[str, Any] = field(default_factory=dict)
    sft: SFTRunConfig = field(default_factory=_rft_sft)
    split: str = "validation"
    k: int = 2
    limit: int | None = 150

    def __post_init__(self) -> None:
        if min(self.rounds, self.n, self.per_prompt, self.k) < 1 or (self.limit is not None and self.limit < 1):
            raise ConfigError("rft: rounds, n, per_prompt, k and limit must be >= 1")
        if self.cpu_budget is not None and self.cpu_budget <= 0:
            raise ConfigError("rft.cpu_budget must be > 0 CPU-seconds (or null: the rounds decide)")
        if "model" in self.rollout or "n" in self.rollout:
            raise ConfigError("rft.rollout.model / rft.rollout.n are set by the chain (the current model, rft.n)")
        if self.split == "test":
            raise ConfigError("rft.split: choosing the best round on the test split would report on the problems "
                              "the choice was made on; use validation")  # fmt: skip


@dataclass(frozen=True)
class RunRecipe:
    """A training recipe. Unknown keys fail at load time, in every section.

    name: run name (folder ``runs/<name>``). pool: the workspace pool (held-out problems, ledger of training
    rollouts). model: ``tiny`` (built from scratch, ``tiny`` section = ``training.tiny.TinyConfig``),
    ``package:<name>`` (a model shipped in a PyPI package, ``training.packaged``), a local folder or a hub name.
    curate_recipe: a curation recipe run first (skip-if-done). curriculum: a curriculum folder name
    (``curate curriculum --name``); or train: one prompt file for a single RL stage (neither: an SFT-only run, e.g.
    a baseline that spends RL's compute on more SFT). sft: SFT on
    verified solutions (``SFTSection``). rl: the ``RLConfig`` every stage starts from; plan_fields / scale /
    stages: how the plan's settings and per-stage overrides (``stages.<name>``: any ``rl`` key) apply
    (``training.plan``). redistill: re-distil the starting model on the last stage's correct rollouts. fit:
    ``training.scaling.FitConfig``. decide: stop / CoScale decisions (``DecideSection``). measure: the SFT model's
    own pass rates over the RL candidates before RL, and the curriculum built from them (``MeasureSection``; needs
    ``sft``, ``curriculum`` and ``curate_recipe``). rft: iterated rejection-sampling fine-tuning on the RL stages'
    prompts in place of RL (``RFTSection``; needs ``curriculum`` or ``train``). seed: one seed for every training
    section (the curate stages keep the curation recipe's). launch: the command that starts each training step
    instead of ``python``, e.g. ``[accelerate, launch, --config_file, training/recipes/accelerate/zero2.yaml]`` for
    several GPUs. engine: ``auto`` or ``hf``: how every section that samples the model samples it
    (``_spread_engine``; a section's own ``engine`` wins). groups: how a pass trains its stages: ``sequential``
    (each from the previous stage's model) or ``parallel`` (CoScale-RL: each an independent run from the pass's
    starting model, merged after each with ``merge``; ``training.groups``); None: as the plan says (parallel when it
    marks every stage so, a ``bands`` plan).
    merge: how parallel groups are merged (``training.merge.MergeConfig``; None: linear, equal shares).
    curate: the loaded ``curate_recipe`` (set by ``recipe_from_mapping``, not a key of the file).
    """

    name: str
    pool: str
    model: str = "tiny"
    home: str | None = placement(None)
    seed: int = 0
    engine: str = "auto"
    curate_recipe: str | None = None
    curriculum: str | None = None
    train: str | None = None
    tiny: TinyConfig = field(default_factory=TinyConfig)
    sft: SFTSection | None = None
    rl: RLConfig = field(default_factory=RLConfig)
    plan_fields: list[str] = field(default_factory=lambda: list(PLAN_FIELDS))
    scale: PlanScale = field(default_factory=PlanScale)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    only_stages: list[str] | None = None
    eval: EvalSection = field(default_factory=EvalSection)
    redistill: RedistillConfig | None = None
    fit: FitConfig = field(default_factory=FitConfig)
    decide: DecideSection | None = None
    measure: MeasureSection | None = None
    rft: RFTSection | None = None
    groups: str | None = None
    merge: MergeConfig | None = None
    launch: list[str] | None = placement(None)
    curate: Recipe | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        packaged_name(self.model)  # ``package:<name>``: a known packaged model (``training.packaged``), now
        check_engine(self.engine, "recipe: engine")
        if self.curriculum and self.train:
            raise ConfigError("recipe: give one of `curriculum` (a plan) or `train` (one prompt file), not both")
        if self.groups is not None and self.groups not in GROUPS:
            raise ConfigError(f"recipe: groups {self.groups!r} is not one of {GROUPS} (or null: as the plan says)")
        if not (self.curriculum or self.train or self.sft):
            raise ConfigError("recipe: nothing to train: give `sft` and/or `curriculum` (a plan) or `train` (prompts)")
        unknown = [f for f in self.plan_fields if f not in PLAN_FIELDS]
        if unknown:
            raise unknown_key_error(unknown, set(PLAN_FIELDS), "plan_fields")
        if self.rft is not None and not (self.curriculum or self.train):
            raise ConfigError("recipe: `rft` samples the RL stages' prompts: give `curriculum` or `train`")
        if self.measure is not None and not (self.curriculum and self.curate_recipe):  # no sft: the starting model
            raise ConfigError("recipe: `measure` needs `curriculum` (the one it builds) and `curate_recipe`")
        if bool(self.curate_recipe) != (self.curate is not None):
            raise ConfigError("recipe: `curate_recipe` is loaded by training.recipe.load_recipe (give the file)")
        if self.decide is not None and self.eval.split == "test":  # never choose on the test split
            raise ConfigError(
                "recipe: `decide` chooses on the eval curve, and eval.split is test: set eval.split: validation "
                "(report on test with `training eval --split test`)"
            )
        stage_rl(self.rl, self.run_settings(), where="rl")  # the run's own settings on every stage, now
        for name, section in self.stages.items():
            stage_rl(self.rl, section, self.run_settings(), where=f"stages.{name}")  # every stage's keys and values
        _check_curate_sections(self)
        _check_validation_split(self)

    def run_settings(self) -> dict[str, Any]:
        """What the run sets on every RL stage from its own sections, last (``stage_rl``): with ``eval.every``,
        a checkpoint every that many steps (the chain evaluates them), all of them kept."""
        return {"save_steps": self.eval.every, "save_total_limit": None} if self.eval.every else {}

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as JSON-simple data (``recipe.json`` of a run; ``curate`` is the file it names)."""

        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "curate"}
        data = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in data.items()}
        return io.jsonable(data)


RUN_KEYS = {"save_steps": "eval.every"}  # RLConfig keys ``RunRecipe.run_settings`` sets, by the recipe key


def _check_curate_sections(recipe: RunRecipe) -> None:
    """The curate sections the chain will run (``measure``, ``decide``), each as curate reads it (a placeholder
    model), and the ``stages.<name>`` / ``only_stages`` names against the stage names the run's curriculum plan
    will have (``curate.curriculum.stage.stage_names``): a typo fails at load, not after curation, SFT and
    ``measure``."""
    from curate import pipeline

    plan = None  # the curriculum config that builds the run's curriculum, when this recipe says
    if recipe.measure is not None:
        for stage, section in measure_sections(recipe, "<model>").items():
            try:
                checked = pipeline.section(curate_recipe(recipe, stage, section), stage)
            except ConfigError as exc:  # the curate recipe's own sections were checked when it loaded: measure's
                text = str(exc)
                raise ConfigError(f"measure.{text}" if text.startswith(f"{stage}.") else text) from None
            plan = checked if stage == "curriculum" else plan
    elif recipe.curate is not None and "curriculum" in recipe.curate.stages:
        built = pipeline.section(recipe.curate, "curriculum")
        plan = built if built.name == recipe.curriculum else None  # else a curriculum built elsewhere
    if recipe.rft is not None:
        pipeline.section(curate_recipe(recipe, "rollout", rft_rollout(recipe, "<model>", "<selection>")), "rollout")
    if recipe.decide is not None:
        pipeline.section(curate_recipe(recipe, "rollout", rollout_section(recipe, "<model>")), "rollout")
        pipeline.section(
            curate_recipe(recipe, "solutions", solutions_section(recipe, "<model>", 1, None)), "solutions"
        )
    if plan is not None:  # without it the names are checked when the chain reads the plan
        _check_stage_names(recipe, plan)


def _check_validation_split(recipe: RunRecipe) -> None:
    """``sft.validation.split`` against the splits the curate recipe's ingest sources give the pool, when every
    source names its split: a split the pool will not have fails at load, not after the whole SFT (a pool
    built elsewhere is checked before the first step, ``training.runner``)."""
    sec = recipe.sft.validation if recipe.sft is not None else None
    cur = recipe.curate
    if sec is None or cur is None or cur.pool != recipe.pool or "ingest" not in cur.stages:
        return
    from curate import pipeline

    splits = {source.split for source in pipeline.section(cur, "ingest").sources}
    if None not in splits and sec.split not in splits:
        raise ConfigError(f"sft.validation.split: pool {recipe.pool!r} will have no {sec.split!r} problems (its "
                          f"curate recipe's sources give {', '.join(sorted(splits))})")  # fmt: skip


def _check_stage_names(recipe: RunRecipe, plan: Any) -> None:
    """``stages.<name>`` and ``only_stages`` against the stages a plan of curriculum config ``plan`` can have."""
    from curate.curriculum.stage import stage_names

    names = stage_names(plan)
    unknown = sorted(set(recipe.stages) - set(names))
    if unknown:
        raise unknown_key_error(unknown, names, f"stages (the stages of curriculum {recipe.curriculum!r})")
    for name in recipe.only_stages or ():
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            where = f"curriculum {recipe.curriculum!r}"
            raise ConfigError(f"only_stages: {name!r}{hint} is not a stage of {where}: {names}")


def stage_rl(base: RLConfig, *layers: Mapping[str, Any] | None, where: str = "rl") -> RLConfig:
    """``base`` with ``layers`` of ``rl`` keys on top, in order (a nested ``sampler`` mapping is merged key by key),
    validated as one ``RLConfig``: the one way a stage's settings change (the plan's fields, ``stages.<name>``, the
    run's ``run_settings``, the chain's ledger model). Raises ``ConfigError`` naming ``where`` for an unknown key or a
    bad value, and the recipe key (``eval.every``) for a value the run set (``RUN_KEYS``)."""
    import re

    data = dataclasses.asdict(base)
    sampler = {k: v for k, v in data.pop("sampler").items() if k not in ("policy", "seed")}  # they follow rl's
    for layer in layers:
        layer = dict(layer or {})
        if isinstance(layer.get("sampler"), Mapping):
            sampler = {**sampler, **layer.pop("sampler")}
        if isinstance(layer.get("ladder"), Mapping) and isinstance(data.get("ladder"), Mapping):
            layer["ladder"] = {**data["ladder"], **layer["ladder"]}  # key by key, as the sampler
        data.update(layer)
    try:
        return load_rl_config({**data, "sampler": sampler})
    except ConfigError as exc:
        text = str(exc).replace(" in rl", f" in {where}")
        if any(dict(layer or {}).get(key) is not None for layer in layers for key in RUN_KEYS):
            for key, name in RUN_KEYS.items():
                text = text.replace(f"rl.{key}", name)
        raise ConfigError(re.sub(r"\brl\.", f"{where}.", text)) from None


def load_recipe(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunRecipe:
    """Read and validate a training recipe; ``overrides`` are dotted ``key=value`` settings (``rl.max_steps``)
    checked like the file's own keys. Raises ``ConfigError`` (one line) before any work."""
    data = apply_overrides(read_yaml(path, "training recipe"), dict(overrides or {}))
    if isinstance(data.get("stages"), list):  # a curation recipe lists its stages by name, a training one maps them
        raise ConfigError(f"{path} is a curation recipe (stages: {data['stages']}): use `curate run --recipe {path}`")
    return recipe_from_mapping(data)


def recipe_from_mapping(data: Mapping[str, Any]) -> RunRecipe:
    """``RunRecipe`` from a mapping (a YAML file's content): the recipe's ``seed`` put into every seeded section
    that does not set one, the ``curate_recipe`` file loaded and validated (``curate.pipeline.load_recipe``, once)
    and every section checked (``RunRecipe.__post_init__``)."""
    data = dict(data)
    if "curate" in data:
        raise unknown_key_error(["curate"], {f.name for f in dataclasses.fields(RunRecipe)} - {"curate"}, "recipe")
    _misplaced_keys(data)
    _spread_engine(data)
    seed = data.get("seed", 0)
    for key in SEEDED:  # sections with a default (tiny, rl, eval) take the seed even when the recipe omits them
        section = data.get(key, {} if key in ("tiny", "rl", "eval") else None)
        if isinstance(section, Mapping) and "seed" not in section:
            data[key] = {**section, "seed": seed}
    rft = data.get("rft")
    if isinstance(rft, Mapping) and isinstance(rft.get("sft", {}), Mapping):  # its defaults, and the recipe's seed
        sft = data.get("sft") if isinstance(data.get("sft"), Mapping) else {}
        inherited = {k: sft[k] for k in RFT_FROM_SFT if k in sft}
        data["rft"] = {**rft, "sft": {**inherited, **RFT_SFT, "seed": seed, **dict(rft.get("sft") or {})}}
    path = data.get("curate_recipe")
    if isinstance(path, str) and path:  # the curation recipe, every section of it, before any work
        from curate import pipeline

        data["curate"] = pipeline.load_recipe(path)
    return from_mapping(RunRecipe, data, "recipe")


def _spread_engine(data: dict[str, Any]) -> None:
    """The recipe's ``engine`` (``auto``: the project's rollout engine wherever it supports the model; ``hf``:
    transformers' ``generate`` everywhere) into every section that samples the model and does not set its own:
    ``rl``, ``eval`` (held-out evaluation and the SFT validation choice), ``measure.rollout.hf`` and
    ``decide.rollout.hf``."""
    engine = data.get("engine", "auto")
    for key in ("rl", "eval"):
        section = data.get(key, {})
        if isinstance(section, Mapping) and "engine" not in section:
            data[key] = {**section, "engine": engine}
    for key in ("measure", "decide"):
        section = data.get(key)
        if isinstance(section, Mapping) and isinstance(section.get("rollout", {}), Mapping):
            rollout = dict(section.get("rollout") or {})
            hf = rollout.get("hf", {})
            if isinstance(hf, Mapping) and "engine" not in hf:
                data[key] = {**section, "rollout": {**rollout, "hf": {**hf, "engine": engine}}}


def _misplaced_keys(data: Mapping[str, Any]) -> None:
    """A top-level key that is a setting of one of the recipe's sections fails naming where it goes (a top-level
    ``report_to``: ``rl.report_to, sft.report_to``), not with only the list of top-level keys."""
    import typing

    hints = typing.get_type_hints(RunRecipe)
    for key in sorted(set(data) - set(hints)):
        homes = [
            f"{section}.{key}"
            for section, tp in hints.items()
            if any(dataclasses.is_dataclass(c) and key in {f.name for f in dataclasses.fields(c)}
                   for c in (tp, *typing.get_args(tp)))
        ]  # fmt: skip
        if homes:
            one = f" (stages.<name>.{key}: one RL stage's)" if f"rl.{key}" in homes else ""
            raise ConfigError(f"unknown key {key!r} in recipe: it is a section's setting: {', '.join(homes)}{one}")


# --------------------------------------------------------------------------------------------------- CoScale
def curate_recipe(recipe: RunRecipe, stage: str, section: Mapping[str, Any]) -> Any:
    """A curate recipe that runs one stage on the run's pool: the curate recipe's (verify, seed, other sections)
    with ``stage``'s section replaced (CoScale's re-measuring and solutions steps, ``training.coscale``)."""
    from curate import config as curate_config

    if recipe.curate is not None:
        configs = {**recipe.curate.stage_configs, stage: dict(section)}
        return dataclasses.replace(recipe.curate, pool=recipe.pool, stages=(stage,), stage_configs=configs)
    data = {"name": f"{recipe.name}-coscale", "pool": recipe.pool, "seed": recipe.seed, "stages": [stage],
            stage: dict(section)}  # fmt: skip
    return curate_config.recipe_from_mapping(data)


def measure_sections(recipe: RunRecipe, model: str, name: str | None = None) -> dict[str, dict[str, Any]]:
    """The curate sections of the ``measure`` step for ``model`` (the SFT model), in the order they run: rollout,
    score (that model as the evidence), select and curriculum (both named ``name``, default the recipe's
    ``curriculum``; the chain passes a name of the run's own, so concurrent runs never share them)."""
    assert recipe.measure is not None and recipe.curriculum and recipe.curate is not None
    base = recipe.curate
    m = recipe.measure
    score = {**base.stage_config("score"), **m.score}
    score["evidence"] = {"suspect_band": recipe.eval.by, **dict(score.get("evidence") or {}), "model": model}
    name = name or recipe.curriculum
    rollouts = {"rollouts": recipe.rl.num_generations}  # the waste forecast at the RL's group size
    score = {**rollouts, **score}
    select = {**base.stage_config("select"), **rollouts, **m.select, "name": name}
    curriculum = {**base.stage_config("curriculum"), **m.curriculum, "name": name}
    curriculum["selection"] = select["name"]
    rollout = {"backend": "hf", **m.rollout, "model": model, "run_tag": "chain"}
    return {"rollout": rollout, "score": score, "select": select, "curriculum": curriculum}


def rollout_section(recipe: RunRecipe, model: str) -> dict[str, Any]:
    """``curate rollout``'s section for re-measuring ``model``: ``decide.rollout`` (backend ``hf`` by default)."""
    section = {"backend": "hf", **(recipe.decide.rollout if recipe.decide else {})}
    return {**section, "model": model}


def rft_rollout(recipe: RunRecipe, model: str, selection: str) -> dict[str, Any]:
    """``curate rollout``'s section for an RFT round: ``rft.rollout`` over ``measure.rollout`` (the settings RL's
    prompts were measured with; backend ``hf`` by default), ``rft.n`` samples of each prompt of ``selection`` from
    ``model``, marked as the chain's own rollouts."""
    assert recipe.rft is not None
    measured = recipe.measure.rollout if recipe.measure is not None else {}
    section = {"backend": "hf", **measured, **recipe.rft.rollout}
    return {**section, "model": model, "n": recipe.rft.n, "selection": selection, "run_tag": "chain"}


def solutions_section(recipe: RunRecipe, model: str, iteration: int, selection: str | None) -> dict[str, Any]:
    """``curate solutions``' section of CoScale iteration ``iteration``: the curate recipe's, ``decide.solutions``
    over it, ``model`` as the student."""
    base = recipe.curate.stage_config("solutions") if recipe.curate is not None else {}
    section = {**base, **(recipe.decide.solutions if recipe.decide else {})}
    if selection and not section.get("selection"):
        section["selection"] = selection
    section.pop("export", None)
    return {**section, "student": model, "name": f"{recipe.name}-it{iteration}"}


def resolve_path(ws: io.Workspace, value: str | Path) -> Path:
    """Recipe paths: absolute, else relative to the workspace root when it exists there, else to the cwd."""
    p = Path(value)
    if p.is_absolute():
        return p
    return ws.root / p if (ws.root / p).exists() else p
