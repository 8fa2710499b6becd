"""The solutions stage's settings (recipe key ``solutions``): what K, which candidates, which bounds, which teacher.

``SolutionsConfig`` is what every part of the stage takes (curate.solutions.candidates, .teacher, .stage, .export);
``load_config`` reads it from a recipe, with answer checking from the recipe's top-level ``verify`` key. Teacher
samples are ledger rows whose run id starts with ``TEACHER_PREFIX`` (``teacher-<hash>``, curate.solutions.teacher).

Example (recipe)::

    solutions:
      k: 4
      selection: demo-v1
      teacher: {model: Qwen/QwQ-32B, backend: openai, budget: 16}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from curate import config as config_mod
from curate import prompts, verify
from curate import schema as S
from curate.rollout.backends import HFOptions, OpenAIOptions
from curate.rollout.vllm_engine import VLLMOptions
from curate.solutions import distinct


TEACHER_PREFIX = "teacher-"
BACKENDS = ("hf", "openai", "vllm")


# --------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class TeacherConfig:
    """The teacher that fills problems short of K solutions (recipe key ``solutions.teacher``).

    model: HF id, local path, or the served name (openai). budget: teacher samples per problem at most, counted over
    every teacher run of this model in the ledger. per_round: at least this many samples per short problem per
    round. Sampling settings and backend options are those of ``curate rollout``.
    """

    model: str = ""
    backend: str = "openai"
    revision: str | None = None
    budget: int = 16
    per_round: int = 4
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 4096
    seed: int = 0
    shard_size: int = 64
    hf: HFOptions = field(default_factory=HFOptions)
    vllm: VLLMOptions = field(default_factory=VLLMOptions)
    openai: OpenAIOptions = field(default_factory=OpenAIOptions)

    def __post_init__(self) -> None:
        if not self.model:
            raise config_mod.ConfigError("solutions.teacher.model is required")
        if self.backend not in BACKENDS:
            raise config_mod.ConfigError(f"solutions.teacher.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.budget < 1 or self.per_round < 1 or self.shard_size < 1 or self.max_tokens < 1:
            raise config_mod.ConfigError("solutions.teacher budget, per_round, shard_size, max_tokens must be >= 1")


@dataclass(frozen=True)
class SolutionsConfig:
    """One solutions job (recipe key ``solutions``; answer checking from the recipe's top-level ``verify``).

    k: solutions wanted per problem (the teacher's target, and how many the SFT export takes per problem).
    selection: restrict the scope to a selection's problems (else every problem of ``splits``). sources: only
    problems first read from these ingest sources (None: all), e.g. one source's traces without any selection.
    name: export folder ``<home>/solutions/<name>/`` (default: the selection, else the pool); ``export``: any folder.
    origins: which candidate sources to use (schema.ORIGINS). models: ledger models to take (empty: all).
    tokenizer: count ``tokens`` with it (and bound by ``max_tokens``); ``max_chars`` always bounds (None: off).
    min_reasoning_words: fewer words before the final answer is an answer leak.
    near_duplicate / ngram: the distinctness threshold (word n-gram Jaccard) and n.
    boxed: append a boxed final-answer line to verified solutions that state the answer another way.
    student: ledger model whose pass rate sets the CoScale pool; thresholds ``unsolvable_below`` / ``solved_above``.
    recheck: drop candidates whose answer the checker finds wrong (default). ``false`` keeps an unverified teacher's
    traces as given (their verdict still recorded, ``wrong`` included): what an SFT set looks like without this
    project's check: the no-curation baseline (``datasets/tiny/raw.yaml``). Its cards say so, with the share.
    """

    k: int = 4
    selection: str | None = None
    name: str | None = None
    export: str | None = None
    splits: tuple[str, ...] = ("train",)
    sources: tuple[str, ...] | None = None
    origins: tuple[str, ...] = S.ORIGINS
    models: tuple[str, ...] = ()
    instruction: str = prompts.INSTRUCTION
    tokenizer: str | None = None
    max_tokens: int | None = 4096
    max_chars: int | None = 16_000
    min_reasoning_words: int = 5
    near_duplicate: float = distinct.DEFAULT_THRESHOLD
    ngram: int = distinct.DEFAULT_NGRAM
    boxed: bool = True
    recheck: bool = True
    student: str | None = None
    unsolvable_below: float = 0.05
    solved_above: float = 0.70
    teacher: TeacherConfig | None = None
    verify: verify.VerifyConfig = field(default_factory=verify.VerifyConfig)
    verify_workers: int | None = None

    def __post_init__(self) -> None:
        if self.k < 1:
            raise config_mod.ConfigError("solutions.k must be >= 1")
        unknown = sorted(set(self.origins) - set(S.ORIGINS))
        if unknown:
            raise config_mod.ConfigError(f"solutions.origins: unknown {unknown}; choose from {list(S.ORIGINS)}")
        if not 0.0 < self.near_duplicate <= 1.0 or self.ngram < 1:
            raise config_mod.ConfigError("solutions.near_duplicate must be in (0, 1] and solutions.ngram >= 1")
        if not 0.0 <= self.unsolvable_below <= self.solved_above <= 1.0:
            raise config_mod.ConfigError("solutions: need 0 <= unsolvable_below <= solved_above <= 1")
        if self.teacher is not None and self.student is not None and self.teacher.model == self.student:
            raise config_mod.ConfigError(
                "solutions.teacher.model equals the student: teacher samples land in the ledger under that model and "
                "would bias the student's pass rate; serve the same weights under another name"
            )


def load_config(recipe: config_mod.Recipe) -> SolutionsConfig:
    """The recipe's ``solutions`` mapping, with ``verify`` from the recipe's shared ``verify`` key."""
    data = recipe.stage_config("solutions")
    if "verify" in data:
        raise config_mod.ConfigError("set answer-checking options under the recipe's top-level `verify:` key")
    cfg = config_mod.from_mapping(SolutionsConfig, data, "solutions")
    return dataclasses.replace(cfg, verify=verify.load_config(recipe))
