"""The one contract between stages: table names, column names, polars schemas, stable ids.

Every table that crosses a stage boundary or lands on disk is declared here (DESIGN.md, "The workspace").
Other modules import the column constants instead of typing column names as strings, so a rename is one
edit and a typo is an ImportError rather than a silently empty column.

Example row of ``problems``::

    {"problem_id": "3f9c0a1b2c4d5e6f", "problem": "What is 2+3?", "answer": "5", "answer_alternatives": ["5"],
     "answer_raw": "5", "solution": None, "level": None, "difficulty": None, "subject": None, "split": "train",
     "source": "gsm8k-train", "source_row": 0, "sources": ["gsm8k-train#0"], "meta": "{}"}

Example row of ``scores`` (t = 0, equal DES weights; ``curate score``)::

    {"problem_id": "3f9c0a1b2c4d5e6f", "run": "default", "pass_rate": 0.45, "pass_rate_source": "blend",
     "difficulty_score": 0.55, "cot_length": 0.3, "cot_source": "ledger", "reward_ema": 0.5, "des_d": 0.97,
     "des_c": 0.96, "des_r": 0.61, "des": 0.85, "cluster": 12, "coscale_pool": "solvable", "zero_variance": False,
     "solved": False, "contaminated": False, "duplicate_of": None, "prompt_chars": 212}
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import polars as pl


# --------------------------------------------------------------------------------------------------- columns
PROBLEM_ID = "problem_id"
PROBLEM = "problem"
ANSWER = "answer"  # normalized primary gold answer
ANSWER_ALTERNATIVES = "answer_alternatives"  # normalized acceptable answers (primary first)
ANSWER_RAW = "answer_raw"  # the gold answer exactly as the source had it (JSON for non-strings)
SOLUTION = "solution"  # reference solution, where the source has one
LEVEL = "level"  # MATH level 1-5 where known
DIFFICULTY = "difficulty"  # the source's own numeric difficulty label (MATH level, DeepScaleR difficulty)
SUBJECT = "subject"
SPLIT = "split"  # "train", "validation" or "test": the last two are evaluation sets, decontaminated against
SOURCE = "source"  # name of the first source the problem was read from
SOURCE_ROW = "source_row"  # row index inside that source
SOURCES = "sources"  # every "source#row" this problem was read from (exact duplicates merged)
META = "meta"  # JSON object with the source's remaining useful fields

DROP_REASON = "drop_reason"
DETAIL = "detail"
STAGE = "stage"

MODEL = "model"
SAMPLE_IDX = "sample_idx"
COMPLETION = "completion"
PROMPT_TOKENS = "prompt_tokens"
COMPLETION_TOKENS = "completion_tokens"
FINISH_REASON = "finish_reason"  # "stop", "length", "error"
EXTRACTED_ANSWER = "extracted_answer"
VERDICT = "verdict"  # see VERDICTS
CORRECT = "correct"
REWARD = "reward"
TEMPERATURE = "temperature"
TOP_P = "top_p"
MAX_TOKENS = "max_tokens"
SEED = "seed"
BACKEND = "backend"  # "hf", "vllm", "openai", "import", "sampler"
RUN_ID = "run_id"
SHIPPED_LABEL = "shipped_label"  # imported generations: the correctness label the dataset shipped
STEP = "step"  # training step when the row was written back by the curriculum sampler
CREATED_AT = "created_at"

N_SAMPLES = "n_samples"
N_CORRECT = "n_correct"
PASS_RATE = "pass_rate"  # empirical n_correct / n_samples
ALPHA = "alpha"  # Beta posterior parameters of the pass rate
BETA = "beta"
PASS_RATE_MEAN = "pass_rate_mean"  # posterior mean
PASS_RATE_LO = "pass_rate_lo"  # 5% posterior quantile
PASS_RATE_HI = "pass_rate_hi"  # 95% posterior quantile
MEAN_TOKENS_CORRECT = "mean_tokens_correct"
MEAN_TOKENS_INCORRECT = "mean_tokens_incorrect"
TRUNCATION_RATE = "truncation_rate"
LAST_STEP = "last_step"
UPDATED_AT = "updated_at"

ENCODER = "encoder"
EMBEDDING = "embedding"

RUN = "run"
DIFFICULTY_SCORE = "difficulty_score"  # d = 1 - p, p from the posterior or the learned prior
PASS_RATE_SOURCE = "pass_rate_source"  # "ledger", "prior", "blend"
COT_LENGTH = "cot_length"  # standardized log CoT length (ScalingRL's l(x))
COT_SOURCE = "cot_source"  # "ledger", "solution", "predicted"
REWARD_EMA = "reward_ema"
DES_D = "des_d"
DES_C = "des_c"
DES_R = "des_r"
DES = "des"
CLUSTER = "cluster"
COSCALE_POOL = "coscale_pool"  # "unsolvable", "solvable", "solved"
ZERO_VARIANCE = "zero_variance"
SOLVED = "solved"  # ScaleRL no-positive-resampling flag: pass rate >= 0.9
CONTAMINATED = "contaminated"
DUPLICATE_OF = "duplicate_of"
PROMPT_CHARS = "prompt_chars"

CONTAMINATED_BY = "contaminated_by"  # problem_id of the matching benchmark item
CONTAMINATION_KIND = "contamination_kind"  # "exact", "ngram", "embedding"
CONTAMINATION_SCORE = "contamination_score"
BENCHMARK = "benchmark"  # source name of the matching benchmark item
CLUSTER_SIZE = "cluster_size"

RANK = "rank"
CURRICULUM_STAGE = "curriculum_stage"

# score/select extras (written after the SCORES/SELECTIONS columns; readers validating with the schema drop them)
PRIOR_PASS_RATE = "prior_pass_rate"  # prior mean m of the pass-rate posterior (source label or learned predictor)
LEARNING_PROGRESS = "learning_progress"  # change in pass rate between the first and last checkpoint/model
SUSPECT_GOLD = "suspect_gold"  # why the gold answer is suspect (curate.score.headroom.SUSPECT_REASONS), else null
SELECT_SCORE = "select_score"  # the value a selection sampled on (DES, a column, or an external score)

SOLUTION_ID = "solution_id"
ORIGIN = "origin"  # where a solution came from: ORIGINS ("reference", "imported", "ledger", "teacher")
TEXT = "text"
VERIFIED = "verified"
TOKENS = "tokens"

# stats state: the additive sums behind STATS, kept so stats are refreshed from new ledger files only
N_TRUNCATED = "n_truncated"
TOKENS_CORRECT_SUM = "tokens_correct_sum"
TOKENS_CORRECT_N = "tokens_correct_n"  # correct samples with a token count (imports may have none)
TOKENS_INCORRECT_SUM = "tokens_incorrect_sum"
TOKENS_INCORRECT_N = "tokens_incorrect_n"

# --------------------------------------------------------------------------------------------------- values
SPLITS = ("train", "validation", "test")
# Evaluation splits: never trained on, and decontaminated against (``validation`` chooses settings, ``test`` reports)
HELDOUT_SPLITS = ("validation", "test")
VERDICTS = ("correct", "wrong", "no_answer", "unparseable", "timeout", "truncated", "error")
# The instruction appended to every problem (DeepScaleR/FastCuRL). Builders of prompts live in curate/prompts.py.
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
INSTRUCTION_SUFFIX = " " + INSTRUCTION

# --------------------------------------------------------------------------------------------------- tables
PROBLEMS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        PROBLEM: pl.String,
        ANSWER: pl.String,
        ANSWER_ALTERNATIVES: pl.List(pl.String),
        ANSWER_RAW: pl.String,
        SOLUTION: pl.String,
        LEVEL: pl.Int32,
        DIFFICULTY: pl.Float64,
        SUBJECT: pl.String,
        SPLIT: pl.String,
        SOURCE: pl.String,
        SOURCE_ROW: pl.Int64,
        SOURCES: pl.List(pl.String),
        META: pl.String,
    }
)

QUARANTINE = pl.Schema(
    {
        SOURCE: pl.String,
        SOURCE_ROW: pl.Int64,
        STAGE: pl.String,
        DROP_REASON: pl.String,
        DETAIL: pl.String,
        PROBLEM_ID: pl.String,
        PROBLEM: pl.String,
        ANSWER_RAW: pl.String,
    }
)

ROLLOUTS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        MODEL: pl.String,
        SAMPLE_IDX: pl.Int32,
        COMPLETION: pl.String,
        PROMPT_TOKENS: pl.Int32,
        COMPLETION_TOKENS: pl.Int32,
        FINISH_REASON: pl.String,
        EXTRACTED_ANSWER: pl.String,
        VERDICT: pl.String,
        CORRECT: pl.Boolean,
        REWARD: pl.Float64,
        TEMPERATURE: pl.Float64,
        TOP_P: pl.Float64,
        MAX_TOKENS: pl.Int32,
        SEED: pl.Int64,
        BACKEND: pl.String,
        RUN_ID: pl.String,
        SHIPPED_LABEL: pl.Boolean,
        STEP: pl.Int64,
        CREATED_AT: pl.Datetime("us", "UTC"),
    }
)

STATS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        MODEL: pl.String,
        N_SAMPLES: pl.Int32,
        N_CORRECT: pl.Int32,
        PASS_RATE: pl.Float64,
        ALPHA: pl.Float64,
        BETA: pl.Float64,
        PASS_RATE_MEAN: pl.Float64,
        PASS_RATE_LO: pl.Float64,
        PASS_RATE_HI: pl.Float64,
        MEAN_TOKENS_CORRECT: pl.Float64,
        MEAN_TOKENS_INCORRECT: pl.Float64,
        TRUNCATION_RATE: pl.Float64,
        LAST_STEP: pl.Int64,
        UPDATED_AT: pl.Datetime("us", "UTC"),
    }
)

EMBEDDINGS = pl.Schema({PROBLEM_ID: pl.String, ENCODER: pl.String, EMBEDDING: pl.List(pl.Float32)})

SCORES = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        RUN: pl.String,
        PASS_RATE: pl.Float64,
        PASS_RATE_SOURCE: pl.String,
        DIFFICULTY_SCORE: pl.Float64,
        COT_LENGTH: pl.Float64,
        COT_SOURCE: pl.String,
        REWARD_EMA: pl.Float64,
        DES_D: pl.Float64,
        DES_C: pl.Float64,
        DES_R: pl.Float64,
        DES: pl.Float64,
        CLUSTER: pl.Int32,
        COSCALE_POOL: pl.String,
        ZERO_VARIANCE: pl.Boolean,
        SOLVED: pl.Boolean,
        CONTAMINATED: pl.Boolean,
        DUPLICATE_OF: pl.String,
        PROMPT_CHARS: pl.Int32,
    }
)

FILTERS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        CONTAMINATED: pl.Boolean,
        CONTAMINATED_BY: pl.String,
        BENCHMARK: pl.String,
        CONTAMINATION_KIND: pl.String,
        CONTAMINATION_SCORE: pl.Float64,
        DUPLICATE_OF: pl.String,
        CLUSTER_SIZE: pl.Int32,
    }
)

SELECTIONS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        PROBLEM: pl.String,
        ANSWER: pl.String,
        ANSWER_ALTERNATIVES: pl.List(pl.String),
        SOURCE: pl.String,
        SPLIT: pl.String,
        RANK: pl.Int32,
        CLUSTER: pl.Int32,
        PASS_RATE: pl.Float64,
        DES: pl.Float64,
        PROMPT_CHARS: pl.Int32,
    }
)

CURRICULA = pl.Schema(
    {
        CURRICULUM_STAGE: pl.String,
        PROBLEM_ID: pl.String,
        PROBLEM: pl.String,
        ANSWER: pl.String,
        ANSWER_ALTERNATIVES: pl.List(pl.String),
        PASS_RATE: pl.Float64,
        PROMPT_CHARS: pl.Int32,
    }
)

# --------------------------------------------------------------------------------------------------- solutions
# The solutions stage (curate/solutions/): distinct verified solutions per problem, what it dropped and
# why (solutions_quarantine.parquet: solutions, not problems, so apart from the quarantine_<stage> files of
# problems), and each problem's CoScale-RL pool. ORIGIN says where a solution came from (ORIGINS).
CHARS = "chars"  # length of a solution's text in characters
N_SOLUTIONS = "n_solutions"  # distinct verified solutions kept for a problem
TEACHER_SAMPLES = "teacher_samples"  # teacher samples spent on a problem (its budget counts these)
SIMILAR_TO = "similar_to"  # the kept solution a dropped duplicate matched
SIMILARITY = "similarity"  # word n-gram Jaccard with SIMILAR_TO (1.0 for an exact duplicate)
ORIGINS = ("reference", "imported", "ledger", "teacher")
SOLUTION_DROP_REASONS = (
    "wrong_answer",  # re-checked by curate.verify: not correct against the gold answer
    "truncated",  # the generation hit its token limit (finish_reason "length")
    "answer_leak",  # fewer than min_reasoning_words before the final answer
    "too_long",  # over the SFT length bound (never truncated: that would cut off the boxed answer)
    "duplicate",  # same normalized text as a kept solution
    "near_duplicate",  # word n-gram Jaccard with a kept solution at or above the threshold
)
COSCALE_POOLS = ("unsolvable", "solvable", "solved", "failed")

SOLUTIONS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        SOLUTION_ID: pl.String,  # sha256 of problem_id + normalized text, 16 hex digits
        RANK: pl.Int32,  # 0.. within the problem: the order SFT exports take solutions in
        TEXT: pl.String,
        EXTRACTED_ANSWER: pl.String,
        VERDICT: pl.String,
        ORIGIN: pl.String,
        MODEL: pl.String,  # generator for ledger/imported/teacher rows; null for reference solutions
        RUN_ID: pl.String,
        SAMPLE_IDX: pl.Int32,
        TOKENS: pl.Int32,  # with a tokenizer, else null
        CHARS: pl.Int32,
    }
)

SOLUTIONS_QUARANTINE = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        SOLUTION_ID: pl.String,
        ORIGIN: pl.String,
        MODEL: pl.String,
        RUN_ID: pl.String,
        SAMPLE_IDX: pl.Int32,
        DROP_REASON: pl.String,
        DETAIL: pl.String,
        SIMILAR_TO: pl.String,
        SIMILARITY: pl.Float64,
        TEXT: pl.String,
    }
)

SOLUTION_POOLS = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        N_SOLUTIONS: pl.Int32,
        PASS_RATE: pl.Float64,  # the student's pass rate the pool is read from (null: no evidence)
        TEACHER_SAMPLES: pl.Int32,
        COSCALE_POOL: pl.String,  # COSCALE_POOLS
    }
)

# Internal to curate.rollout.stats (not a stage output): per (problem_id, model) sums that merge by addition.
STATS_STATE = pl.Schema(
    {
        PROBLEM_ID: pl.String,
        MODEL: pl.String,
        N_SAMPLES: pl.Int64,
        N_CORRECT: pl.Int64,
        N_TRUNCATED: pl.Int64,
        TOKENS_CORRECT_SUM: pl.Int64,
        TOKENS_CORRECT_N: pl.Int64,
        TOKENS_INCORRECT_SUM: pl.Int64,
        TOKENS_INCORRECT_N: pl.Int64,
        LAST_STEP: pl.Int64,
    }
)

TABLES: dict[str, pl.Schema] = {
    "problems": PROBLEMS,
    "quarantine": QUARANTINE,
    "rollouts": ROLLOUTS,
    "stats": STATS,
    "embeddings": EMBEDDINGS,
    "filters": FILTERS,
    "scores": SCORES,
    "selections": SELECTIONS,
    "curricula": CURRICULA,
    "solutions": SOLUTIONS,
    "solutions_quarantine": SOLUTIONS_QUARANTINE,
    "solution_pools": SOLUTION_POOLS,
}


class SchemaError(ValueError):
    """A frame does not match its table's schema; the message names the columns."""


def validate(frame: pl.DataFrame | pl.LazyFrame, schema: pl.Schema, *, table: str = "table") -> pl.DataFrame:
    """Check ``frame`` against ``schema`` and return it with exactly the schema's columns, in order.

    Extra columns are dropped. A missing column or a column of another dtype raises ``SchemaError`` naming it;
    null-typed columns (all-null literals) are cast, since they carry no type of their own.

    >>> validate(pl.DataFrame({"problem_id": ["a"], "x": [1]}), pl.Schema({"problem_id": pl.String}))["problem_id"][0]
    'a'
    """
    df = frame.collect() if isinstance(frame, pl.LazyFrame) else frame
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise SchemaError(f"{table}: missing column(s) {missing}; have {df.columns}")
    casts = []
    wrong = []
    for name, dtype in schema.items():
        have = df.schema[name]
        if have == dtype:
            continue
        null_list = isinstance(have, pl.List) and have.inner == pl.Null and isinstance(dtype, pl.List)
        both_datetime = isinstance(dtype, pl.Datetime) and isinstance(have, pl.Datetime)
        if have == pl.Null or null_list or both_datetime:
            casts.append(pl.col(name).cast(dtype))
        else:
            wrong.append(f"{name} is {have}, expected {dtype}")
    if wrong:
        raise SchemaError(f"{table}: mistyped column(s): " + "; ".join(wrong))
    if casts:
        df = df.with_columns(casts)
    return df.select(list(schema))


def empty(schema: pl.Schema) -> pl.DataFrame:
    """An empty frame with ``schema``."""
    return pl.DataFrame(schema=schema)


# --------------------------------------------------------------------------------------------------- ids
_WS = re.compile(r"\s+")
# Invisible characters that NFKC keeps: zero-width space / non-joiner / joiner, word joiner, zero-width no-break
# space (a BOM inside text), soft hyphen, Mongolian vowel separator. Copies of one problem that differ only in them
# are the same problem (kept apart, they were neither merged nor flagged as conflicting).
ZERO_WIDTH = re.compile("[\u00ad\u180e\u200b\u200c\u200d\u2060\ufeff]")


def strip_instruction(text: str) -> str:
    """Remove the DeepScaleR/FastCuRL instruction suffix from a prompt, if present."""
    stripped = text.rstrip()
    suffix = INSTRUCTION
    if stripped.endswith(suffix):
        return stripped[: -len(suffix)].rstrip()
    return text


def normalize_problem(text: str) -> str:
    """The text that identifies a problem: NFKC, zero-width characters removed, instruction suffix removed,
    whitespace collapsed, lowercased.

    Two rows are the same problem exactly when this normal form is equal (case, whitespace and invisible characters
    are noise in the shared pools; LaTeX and numbers are kept, because templated problems differ only in them).

    >>> normalize_problem("What is  $2+3$?\\n" + INSTRUCTION_SUFFIX)
    'what is $2+3$?'
    >>> normalize_problem("What is 2\\u200b+3?")
    'what is 2+3?'
    """
    text = ZERO_WIDTH.sub("", unicodedata.normalize("NFKC", text))
    text = strip_instruction(text)
    return _WS.sub(" ", text).strip().lower()


def problem_id(text: str) -> str:
    """Stable id of a problem: the first 16 hex digits of sha256 over its normal form.

    Same id on every run, machine and library version (never polars hashing, which is not stable).

    >>> problem_id("What is 2+3?") == problem_id("what is  2+3? ")
    True
    """
    return hashlib.sha256(normalize_problem(text).encode("utf-8")).hexdigest()[:16]


def meta_values(meta: Sequence[str | None], key: str) -> list[Any]:
    """The field ``key`` of each row's ``meta`` (a JSON object as text; None or a missing key: None).

    >>> meta_values(['{"ops": 3}', None, '{"level": 2}'], "ops")
    [3, None, None]
    """
    return [json.loads(m or "{}").get(key) for m in meta]


def field_groups(
    problems: pl.DataFrame, by: str, column: str = "group", *, bins: bool = False, label: str = ""
) -> pl.DataFrame:
    """(problem_id, ``column``): each problem's value of the field ``by`` as text (a missing value: ``None``), in
    the problems' order. ``by`` is a column of ``problems`` (``level``, ``difficulty``, ``subject``, ``des``) or
    ``meta.<key>``, a field of its JSON ``meta`` (``meta.ops``: the built-in arithmetic chains' length). With
    ``bins``, a field whose values are all numbers in [0, 1] (a score such as ``des``) falls into bins of 0.1.
    Raises ``ValueError``, led by ``label`` (the setting that named ``by``) and ``by``, when no problem has it.

    The one grouping of problems by a field: the headroom report's bands (``curate.score.headroom.band_values``)
    and ``eval.by``'s groups (``training.evaluate.groups``).

    >>> field_groups(pl.DataFrame({"problem_id": ["a", "b"], "meta": ['{"ops": 3}', None]}), "meta.ops").rows()
    [('a', '3'), ('b', 'None')]
    """
    if by.startswith("meta."):
        if META not in problems.columns:
            raise ValueError(f"{label}{by!r}: the problems have no meta column")
        values = meta_values(problems[META].to_list(), by.split(".", 1)[1])
    elif by in problems.columns:
        values = problems[by].to_list()
    else:
        raise ValueError(f"{label}{by!r}: not a column of the problems ({', '.join(problems.columns)}) nor meta.<key>")
    if all(v is None for v in values):
        raise ValueError(f"{label}{by!r}: no problem has a value")
    if bins and all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in values if v is not None):
        values = [None if v is None else f"{min(int(v * 10), 9) / 10:.1f}-{min(int(v * 10), 9) / 10 + 0.1:.1f}"
                  for v in values]  # fmt: skip
    return pl.DataFrame({PROBLEM_ID: problems[PROBLEM_ID], column: [str(v) for v in values]})


def slug(name: str) -> str:
    """A file-system safe name for a model or encoder id: ``Qwen/Qwen2.5-Math-1.5B`` -> ``Qwen__Qwen2.5-Math-1.5B``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name.replace("/", "__")).strip("_") or "unnamed"
