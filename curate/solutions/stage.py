r"""The solutions stage (DESIGN.md stage 7, issue 13): K distinct verified solutions per problem, CoScale-RL pools.

Pipeline position: ingest -> ... -> rollout -> score -> select -> **solutions** (-> SFT in ``training/``). Reads the
pool's problems (and a selection's ids with ``selection``), the rollout ledger, and the student's pass rates; writes

- ``pools/<pool>/solutions.parquet`` (schema.SOLUTIONS) + manifest: the kept solutions, ``rank`` 0.. per problem;
- ``pools/<pool>/solutions_quarantine.parquet`` (schema.SOLUTIONS_QUARANTINE): every dropped candidate and why;
- ``pools/<pool>/solution_pools.parquet`` (schema.SOLUTION_POOLS): per problem, solutions kept, the student's
  pass rate, teacher samples spent, and the CoScale-RL pool;
- ``<home>/solutions/<name>/``: ``sft.parquet`` (TRL conversational prompt/completion, the first K solutions of
  every problem), ``README.md`` (dataset card), ``lineage.json``, ``manifest.json`` (``curate.solutions.export``).

Candidates, in this order of preference (earlier ones win a near-duplicate tie):

1. ``reference``: the pool's ``solution`` column and, for the built-in generator, every solution in
   ``meta.solutions`` (``curate.ingest.generate`` writes several methods per problem);
2. ``imported``: ledger rows of ``curate import-generations`` (backend ``import``; GSM8K model solutions, simpleRL,
   OpenR1) that our checker judged correct;
3. ``ledger``: correct rollouts of any model;
4. ``teacher``: samples this stage drew from a teacher (run ids ``teacher-...``), see below.

Every candidate is re-checked by ``curate.verify.check_batch`` against the gold answers (a ledger's ``correct`` flag
or a dataset's shipped label only nominates it). Then, in order, a candidate is dropped as ``truncated`` (finish
reason ``length``), ``wrong_answer``, ``answer_leak`` (fewer than ``min_reasoning_words`` words before the final
answer), ``too_long`` (over ``max_tokens`` with a tokenizer, or over ``max_chars``; never truncated, which would cut
off the boxed answer), ``duplicate`` or ``near_duplicate`` (``curate.solutions.distinct``: word 3-gram Jaccard
>= ``near_duplicate``, 0.4 by default, measured on GSM8K's model solutions and the generator's). With ``boxed`` (the
default) a verified solution that states its answer another way (GSM8K's ``#### 72`` or ``A: 72``) gets the line
``The final answer is $\boxed{72}$.`` appended, so SFT targets match the prompt's instruction.

The teacher (CoScale-RL's extra QwQ-32B solutions): while a problem in scope has fewer than K kept solutions and its
teacher budget (``teacher.budget`` samples of the teacher model over all teacher runs) is not spent, a round asks the
teacher for ``max(K - kept, per_round)`` more samples (capped by the budget). Rounds go through the rollout stage's
shard machinery (``curate.rollout.stage.run_shard``: hf, openai or vllm backend, every sample verified, one atomic
part file per shard in the ledger under the teacher's model), so a killed run loses at most the shard in flight and
resumes without duplicates: the next run reads the ledger, counts what each problem has, and asks only for the
rest, with new sample indices. A problem whose budget is spent without K solutions lands in the ``failed`` pool.

CoScale-RL pools (METHODS.md 2.2) from the student's pass rate: ``unsolvable`` (< 5%), ``solvable``, ``solved``
(> 70%), and ``failed``. The pass rate is the student's empirical rate in the ledger (``student``), else the
scores table's ``pass_rate``, else unknown, which counts as unsolvable (every problem starts unsolvable).

Skip-if-done (``io.run_wrapped``): the manifest fingerprints the problems, the selection, the ledger's part files,
the scores table, the config and the code; an unchanged re-run writes nothing (a teacher, if set, first checks that
no problem is short of K with budget left, which costs a re-check of the candidates and no samples).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate import config as config_mod
from curate import io, prompts, verify
from curate import schema as S
from curate.errors import InputError, MissingInput
from curate.io import StageResult
from curate.rollout import stage as rollout
from curate.rollout import stats
from curate.rollout.backends import HFOptions, OpenAIOptions
from curate.rollout.vllm_engine import VLLMOptions
from curate.score.des import coscale_pool_expr
from curate.solutions import distinct


TEACHER_PREFIX = "teacher-"
BACKENDS = ("hf", "openai", "vllm")
_BOXED_LINE = "\n\nThe final answer is $\\boxed{{{answer}}}$."


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
    selection: restrict the scope to a selection's problems (else every problem of ``splits``).
    name: export folder ``<home>/solutions/<name>/`` (default: the selection, else the pool); ``export``: any folder.
    origins: which candidate sources to use (schema.ORIGINS). models: ledger models to take (empty: all).
    tokenizer: count ``tokens`` with it (and bound by ``max_tokens``); ``max_chars`` always bounds (None: off).
    min_reasoning_words: fewer words before the final answer is an answer leak.
    near_duplicate / ngram: the distinctness threshold (word n-gram Jaccard) and n.
    boxed: append a boxed final-answer line to verified solutions that state the answer another way.
    student: ledger model whose pass rate sets the CoScale pool; thresholds ``unsolvable_below`` / ``solved_above``.
    """

    k: int = 4
    selection: str | None = None
    name: str | None = None
    export: str | None = None
    splits: tuple[str, ...] = ("train",)
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


def teacher_run_id(cfg: SolutionsConfig) -> str | None:
    """``teacher-<hash>`` of everything that shapes the teacher's samples (not K or the budget)."""
    t = cfg.teacher
    if t is None:
        return None
    keys = {
        "model": t.model,
        "revision": t.revision,
        "backend": t.backend,
        "sampling": [t.temperature, t.top_p, t.max_tokens, t.seed],
        "instruction": cfg.instruction,
    }
    return TEACHER_PREFIX + hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:12]


def teacher_rollout_config(cfg: SolutionsConfig) -> rollout.RolloutConfig:
    """The teacher as a rollout job, so its samples go through ``rollout.run_shard`` into the ledger."""
    t = cfg.teacher
    assert t is not None
    return rollout.RolloutConfig(
        model=t.model,
        backend=t.backend,
        revision=t.revision,
        n=t.budget,
        temperature=t.temperature,
        top_p=t.top_p,
        max_tokens=t.max_tokens,
        seed=t.seed,
        instruction=cfg.instruction,
        shard_size=t.shard_size,
        hf=t.hf,
        vllm=t.vllm,
        openai=t.openai,
        verify=cfg.verify,
        verify_workers=cfg.verify_workers,
    )


def export_dir(ws: io.Workspace, pool: str, cfg: SolutionsConfig) -> Path:
    """Where the SFT dataset goes: ``export``, else ``<home>/solutions/<name | selection | pool>/``."""
    if cfg.export:
        return Path(cfg.export).expanduser().resolve()
    return ws.root / "solutions" / (cfg.name or cfg.selection or pool)


# --------------------------------------------------------------------------------------------------- inputs
_PROBLEM_COLS = [S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SPLIT, S.SOLUTION, S.META]
_LEDGER_COLS = [
    S.PROBLEM_ID,
    S.MODEL,
    S.SAMPLE_IDX,
    S.COMPLETION,
    S.FINISH_REASON,
    S.CORRECT,
    S.BACKEND,
    S.RUN_ID,
]
CANDIDATE = pl.Schema(
    {
        S.PROBLEM_ID: pl.String,
        S.TEXT: pl.String,
        S.ORIGIN: pl.String,
        S.MODEL: pl.String,
        S.RUN_ID: pl.String,
        S.SAMPLE_IDX: pl.Int32,
        S.FINISH_REASON: pl.String,
        "ledger_file": pl.String,
    }
)


def selection_path(ws: io.Workspace, selection: str) -> Path:
    path = ws.selection_dir(selection) / "selection.parquet"
    if not path.is_file():
        raise MissingInput(f"selection {selection!r} not found at {path}; run `curate select` first")
    return path


def scope(ws: io.Workspace, pool: str, cfg: SolutionsConfig) -> tuple[pl.DataFrame, dict[str, int]]:
    """The problems this job gathers solutions for (sorted by id), and what each filter left out."""
    problems = pl.read_parquet(ws.require_pool(pool), columns=_PROBLEM_COLS).sort(S.PROBLEM_ID)
    keep = problems.filter(pl.col(S.SPLIT).is_in(list(cfg.splits)))
    excluded = {"split": problems.height - keep.height}
    if cfg.selection:
        ids = pl.read_parquet(selection_path(ws, cfg.selection), columns=[S.PROBLEM_ID]).unique()
        missing = ids.join(problems.select(S.PROBLEM_ID), on=S.PROBLEM_ID, how="anti").height
        if missing:
            raise InputError(
                f"selection {cfg.selection!r} has {missing} problem(s) that are not in pool {pool!r}; "
                "give the pool the selection was drawn from"
            )
        before = keep.height
        keep = keep.join(ids, on=S.PROBLEM_ID, how="semi")
        excluded["not_selected"] = before - keep.height
    return keep, excluded


def reference_candidates(problems: pl.DataFrame) -> pl.DataFrame:
    """The pool's own solutions: the ``solution`` column, then ``meta.solutions`` (exact repeats listed once)."""
    rows = []
    for pid, solution, meta in problems.select(S.PROBLEM_ID, S.SOLUTION, S.META).iter_rows():
        texts = [solution] if isinstance(solution, str) else []
        try:
            extra = json.loads(meta or "{}").get("solutions") or []
        except (json.JSONDecodeError, AttributeError):
            extra = []
        texts += [t for t in extra if isinstance(t, str)]
        seen: set[str] = set()
        for text in texts:
            if text.strip() and text not in seen:
                seen.add(text)
                rows.append({S.PROBLEM_ID: pid, S.TEXT: text, S.ORIGIN: "reference"})
    return pl.DataFrame(rows, schema={S.PROBLEM_ID: pl.String, S.TEXT: pl.String, S.ORIGIN: pl.String})


def read_ledger_rows(ws: io.Workspace, pool: str) -> pl.DataFrame:
    """The ledger's rows with the part file each came from, deduplicated by key (first file in name order wins).

    Completions are kept for correct rows only (the only candidates), file by file, so memory stays near the size
    of the correct completions rather than of the whole ledger.
    """
    files = stats.ledger_files(ws, pool)
    if not files:
        return S.empty(pl.Schema({**{c: S.ROLLOUTS[c] for c in _LEDGER_COLS}, "ledger_file": pl.String}))
    base = ws.pool_dir(pool)
    correct = pl.col(S.CORRECT).fill_null(False)
    frames = [
        pl.read_parquet(f, columns=_LEDGER_COLS).with_columns(
            pl.when(correct).then(pl.col(S.COMPLETION)).alias(S.COMPLETION),
            pl.lit(str(f.relative_to(base))).alias("ledger_file"),
        )
        for f in files
    ]
    return stats.dedupe(pl.concat(frames, how="vertical_relaxed"))


def ledger_candidates(ledger: pl.DataFrame, ids: pl.DataFrame, cfg: SolutionsConfig) -> pl.DataFrame:
    """Ledger rows our checker called correct (only a nomination: they are re-checked), with their origin."""
    rows = ledger.filter(pl.col(S.CORRECT).fill_null(False) & pl.col(S.COMPLETION).is_not_null()).join(
        ids, on=S.PROBLEM_ID, how="semi"
    )
    teacher_model = cfg.teacher.model if cfg.teacher else None
    if cfg.models:
        rows = rows.filter(pl.col(S.MODEL).is_in([*cfg.models, *([teacher_model] if teacher_model else [])]))
    origin = (
        pl.when(pl.col(S.BACKEND) == "import")
        .then(pl.lit("imported"))
        .when(pl.col(S.RUN_ID).str.starts_with(TEACHER_PREFIX))
        .then(pl.lit("teacher"))
        .otherwise(pl.lit("ledger"))
    )
    return rows.select(
        S.PROBLEM_ID,
        pl.col(S.COMPLETION).alias(S.TEXT),
        origin.alias(S.ORIGIN),
        S.MODEL,
        S.RUN_ID,
        pl.col(S.SAMPLE_IDX).cast(pl.Int32),
        S.FINISH_REASON,
        "ledger_file",
    )


def candidates(problems: pl.DataFrame, ledger: pl.DataFrame, cfg: SolutionsConfig) -> pl.DataFrame:
    """Every candidate solution of the scope, in order of preference (schema ``CANDIDATE``)."""
    parts = []
    if "reference" in cfg.origins:
        parts.append(reference_candidates(problems))
    led = ledger_candidates(ledger, problems.select(S.PROBLEM_ID), cfg)
    parts.append(led.filter(pl.col(S.ORIGIN).is_in(list(cfg.origins))))
    frame = pl.concat([_widen(p) for p in parts])
    order = {o: i for i, o in enumerate(S.ORIGINS)}
    frame = frame.with_columns(pl.col(S.ORIGIN).replace_strict(order, return_dtype=pl.Int32).alias("_o"))
    frame = frame.with_row_index("_row")  # reference solutions keep their listed order
    return frame.sort([S.PROBLEM_ID, "_o", S.MODEL, S.RUN_ID, S.SAMPLE_IDX, "_row"], nulls_last=False).drop(
        "_o", "_row"
    )


def _widen(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=dtype).alias(name) for name, dtype in CANDIDATE.items() if name not in frame.columns]
    return S.validate(frame.with_columns(missing), CANDIDATE)


# --------------------------------------------------------------------------------------------------- judging
class Checker:
    """``verify.check_batch`` over candidates, memoized by (problem, text) for the rounds of one run."""

    def __init__(self, problems: pl.DataFrame, cfg: SolutionsConfig) -> None:
        self.cfg = cfg
        self.golds: dict[str, list[str]] = {}
        self.messages: dict[str, str] = {}
        for pid, problem, answer, alts in problems.select(
            S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES
        ).iter_rows():
            self.golds[pid] = [a for a in (alts or []) if a] or ([answer] if answer else [])
            self.messages[pid] = prompts.user_message(problem, cfg.instruction)
        self.memo: dict[tuple[str, str, str | None], verify.Verdict] = {}
        self.checked = 0

    def __call__(self, cands: pl.DataFrame) -> list[verify.Verdict]:
        keys = list(zip(cands[S.PROBLEM_ID], cands[S.TEXT], cands[S.FINISH_REASON], strict=True))
        todo = list(dict.fromkeys(k for k in keys if k not in self.memo))
        if todo:
            verdicts = verify.check_batch(
                [t for _, t, _ in todo],
                [self.golds[p] for p, _, _ in todo],
                self.cfg.verify,
                finish_reasons=[f for _, _, f in todo],
                prompts=[self.messages[p] for p, _, _ in todo],
                workers=self.cfg.verify_workers,
            )
            self.memo.update(zip(todo, verdicts, strict=True))
            self.checked += len(todo)
        return [self.memo[k] for k in keys]


def with_boxed(text: str, extracted: str | None) -> str:
    r"""``text`` with a ``\boxed{}`` final-answer line appended when it has no ``\boxed`` of its own."""
    if extracted is None or "\\boxed" in text:
        return text
    return text.rstrip() + _BOXED_LINE.format(answer=extracted)


def token_counts(texts: list[str], tokenizer: str | None) -> list[int | None]:
    """Tokens per text with ``tokenizer`` (no special tokens), or None for each without one."""
    if tokenizer is None or not texts:
        return [None] * len(texts)
    from curate.rollout.backends import load_tokenizer

    tok = load_tokenizer(tokenizer)
    return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def judge(
    cands: pl.DataFrame, verdicts: list[verify.Verdict], cfg: SolutionsConfig
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Kept solutions (schema.SOLUTIONS + ``ledger_file``) and dropped ones (schema.SOLUTIONS_QUARANTINE).

    Pure apart from the tokenizer: the same candidates, verdicts and config give the same two frames.
    """
    rows = cands.to_dicts()
    drops: list[dict[str, Any]] = []
    survivors: list[dict[str, Any]] = []
    for row, v in zip(rows, verdicts, strict=True):
        text = with_boxed(row[S.TEXT], v.extracted) if cfg.boxed and v.correct else row[S.TEXT]
        row = {**row, S.TEXT: text, S.EXTRACTED_ANSWER: v.extracted, S.VERDICT: v.verdict}
        row[S.SOLUTION_ID] = distinct.solution_id(row[S.PROBLEM_ID], text)
        if v.verdict == "truncated" or row[S.FINISH_REASON] == "length":
            drops.append(_drop(row, "truncated", f"finish_reason length; verdict {v.verdict}"))
        elif not v.correct:
            drops.append(_drop(row, "wrong_answer", f"verdict {v.verdict}; extracted {v.extracted!r}; {v.detail}"))
        elif (n_words := distinct.reasoning_words(text)) < cfg.min_reasoning_words:
            drops.append(_drop(row, "answer_leak", f"{n_words} words before the answer"))
        else:
            survivors.append(row)
    tokens = token_counts([r[S.TEXT] for r in survivors], cfg.tokenizer)
    bounded = []
    for row, n_tok in zip(survivors, tokens, strict=True):
        row[S.TOKENS], row[S.CHARS] = n_tok, len(row[S.TEXT])
        if cfg.tokenizer and cfg.max_tokens is not None and n_tok > cfg.max_tokens:
            drops.append(_drop(row, "too_long", f"{n_tok} tokens > max_tokens {cfg.max_tokens}"))
        elif cfg.max_chars is not None and row[S.CHARS] > cfg.max_chars:
            drops.append(_drop(row, "too_long", f"{row[S.CHARS]} chars > max_chars {cfg.max_chars}"))
        else:
            bounded.append(row)
    kept: list[dict[str, Any]] = []
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in bounded:
        by_problem.setdefault(row[S.PROBLEM_ID], []).append(row)
    for group in by_problem.values():
        matches = distinct.distinct([r[S.TEXT] for r in group], cfg.near_duplicate, cfg.ngram)
        rank = 0
        for row, m in zip(group, matches, strict=True):
            if m.keep:
                kept.append({**row, S.RANK: rank})
                rank += 1
            else:
                other = group[m.similar_to]
                detail = f"{m.reason} of {other[S.SOLUTION_ID]} ({other[S.ORIGIN]}), similarity {m.similarity:.3f}"
                drops.append(_drop(row, m.reason, detail, similar_to=other[S.SOLUTION_ID], similarity=m.similarity))
    kept_schema = pl.Schema({**S.SOLUTIONS, "ledger_file": pl.String})
    kept_df = pl.DataFrame([{c: r.get(c) for c in kept_schema} for r in kept], schema=kept_schema)
    drop_df = pl.DataFrame(drops, schema=S.SOLUTIONS_QUARANTINE) if drops else S.empty(S.SOLUTIONS_QUARANTINE)
    return kept_df.sort([S.PROBLEM_ID, S.RANK]), drop_df.sort([S.PROBLEM_ID, S.DROP_REASON, S.SOLUTION_ID])


def _drop(
    row: dict[str, Any], reason: str, detail: str, *, similar_to: str | None = None, similarity: float | None = None
) -> dict[str, Any]:
    out = {c: row.get(c) for c in S.SOLUTIONS_QUARANTINE}
    out.update({S.DROP_REASON: reason, S.DETAIL: detail, S.SIMILAR_TO: similar_to, S.SIMILARITY: similarity})
    return out


# --------------------------------------------------------------------------------------------------- pools
def teacher_spent(ledger: pl.DataFrame, cfg: SolutionsConfig) -> pl.DataFrame:
    """Teacher samples per problem in the ledger: rows of the teacher model written by any teacher run."""
    if cfg.teacher is None:
        return pl.DataFrame(schema={S.PROBLEM_ID: pl.String, S.TEACHER_SAMPLES: pl.Int32})
    rows = ledger.filter((pl.col(S.MODEL) == cfg.teacher.model) & pl.col(S.RUN_ID).str.starts_with(TEACHER_PREFIX))
    return rows.group_by(S.PROBLEM_ID).agg(pl.len().cast(pl.Int32).alias(S.TEACHER_SAMPLES))


def student_pass_rates(
    ws: io.Workspace, pool: str, ledger: pl.DataFrame, cfg: SolutionsConfig
) -> tuple[pl.DataFrame, str]:
    """(problem_id, pass_rate) and where it came from: the student's ledger rows, the scores table, or nothing."""
    if cfg.student:
        rows = ledger.filter(pl.col(S.MODEL) == cfg.student)
        if rows.height == 0:
            raise InputError(f"student {cfg.student!r} has no rows in pool {pool!r}'s ledger; run `curate rollout`")
        rates = rows.group_by(S.PROBLEM_ID).agg(pl.col(S.CORRECT).fill_null(False).mean().alias(S.PASS_RATE))
        return rates, f"ledger:{cfg.student}"
    scores = ws.table(pool, "scores")
    if scores.is_file():
        return pl.read_parquet(scores, columns=[S.PROBLEM_ID, S.PASS_RATE]).unique(S.PROBLEM_ID), "scores"
    return pl.DataFrame(schema={S.PROBLEM_ID: pl.String, S.PASS_RATE: pl.Float64}), "none"


def problem_pools(
    ids: pl.DataFrame, kept: pl.DataFrame, rates: pl.DataFrame, spent: pl.DataFrame, cfg: SolutionsConfig
) -> pl.DataFrame:
    """schema.SOLUTION_POOLS for every problem in scope (pure).

    ``failed`` (a teacher is set, its budget is spent and fewer than K solutions were found) overrides the
    pass-rate pool; an unknown pass rate is ``unsolvable`` (CoScale-RL starts every problem there).
    """
    counts = kept.group_by(S.PROBLEM_ID).agg(pl.len().cast(pl.Int32).alias(S.N_SOLUTIONS))
    df = (
        ids.select(S.PROBLEM_ID)
        .join(counts, on=S.PROBLEM_ID, how="left")
        .join(rates.select(S.PROBLEM_ID, pl.col(S.PASS_RATE).cast(pl.Float64)), on=S.PROBLEM_ID, how="left")
        .join(spent, on=S.PROBLEM_ID, how="left")
        .with_columns(pl.col(S.N_SOLUTIONS).fill_null(0), pl.col(S.TEACHER_SAMPLES).fill_null(0))
    )
    by_rate = coscale_pool_expr(cfg.unsolvable_below, cfg.solved_above)
    by_rate = pl.when(pl.col(S.PASS_RATE).is_null()).then(pl.lit("unsolvable")).otherwise(by_rate)
    if cfg.teacher is not None:
        failed = (pl.col(S.N_SOLUTIONS) < cfg.k) & (pl.col(S.TEACHER_SAMPLES) >= cfg.teacher.budget)
        by_rate = pl.when(failed).then(pl.lit("failed")).otherwise(by_rate)
    return S.validate(df.with_columns(by_rate.alias(S.COSCALE_POOL)).sort(S.PROBLEM_ID), S.SOLUTION_POOLS)


# --------------------------------------------------------------------------------------------------- teacher
def plan_teacher(
    problems: pl.DataFrame, kept: pl.DataFrame, ledger: pl.DataFrame, cfg: SolutionsConfig
) -> list[rollout.WorkItem]:
    """This round's teacher work: problems short of K with budget left, each with its next free sample indices."""
    t = cfg.teacher
    if t is None or "teacher" not in cfg.origins:
        return []
    have = dict(kept.group_by(S.PROBLEM_ID).agg(pl.len()).iter_rows())
    spent = dict(teacher_spent(ledger, cfg).iter_rows())
    used = ledger.filter(pl.col(S.MODEL) == t.model).group_by(S.PROBLEM_ID).agg(pl.col(S.SAMPLE_IDX).max())
    next_idx = {pid: int(m) + 1 for pid, m in used.iter_rows()}
    items = []
    for pid, problem, answer, alts in problems.select(
        S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES
    ).iter_rows():
        short = cfg.k - have.get(pid, 0)
        left = t.budget - spent.get(pid, 0)
        if short <= 0 or left <= 0:
            continue
        n = min(left, max(short, t.per_round))
        start = next_idx.get(pid, 0)
        golds = tuple(a for a in (alts or []) if a) or ((answer,) if answer else ())
        items.append(rollout.WorkItem(pid, problem, golds, tuple(range(start, start + n))))
    return items


def run_teacher_round(
    ws: io.Workspace, pool: str, cfg: SolutionsConfig, items: list[rollout.WorkItem], round_no: int
) -> int:
    """Sample ``items`` from the teacher, one atomic ledger part per shard; returns samples written."""
    tcfg = teacher_rollout_config(cfg)
    rid = teacher_run_id(cfg)
    size = cfg.teacher.shard_size  # type: ignore[union-attr]
    written = 0
    for i, start in enumerate(range(0, len(items), size)):
        shard = rollout.Shard(round_no * 100_000 + i, rid, tuple(items[start : start + size]))
        if rollout.run_shard(ws, pool, tcfg, shard) is not None:
            written += shard.samples
    return written


# --------------------------------------------------------------------------------------------------- summary
def histogram(pools: pl.DataFrame) -> dict[str, int]:
    """Problems per number of kept solutions, ``{"0": 3, "1": 10, ...}`` in order."""
    counts = Counter(pools[S.N_SOLUTIONS].to_list())
    return {str(n): counts[n] for n in sorted(counts)}


def summarize(
    kept: pl.DataFrame,
    drops: pl.DataFrame,
    pools: pl.DataFrame,
    cands: pl.DataFrame,
    cfg: SolutionsConfig,
    extra: dict[str, Any],
) -> dict[str, Any]:
    def counts(df: pl.DataFrame, col: str) -> dict[str, int]:
        return dict(sorted(Counter(df[col].to_list()).items())) if df.height else {}

    n = pools.height
    return {
        "problems": n,
        "k": cfg.k,
        "candidates": counts(cands, S.ORIGIN),
        "kept": kept.height,
        "kept_by_origin": counts(kept, S.ORIGIN),
        "drops": counts(drops, S.DROP_REASON),
        "problems_with_k": int((pools[S.N_SOLUTIONS] >= cfg.k).sum()) if n else 0,
        "mean_solutions": round(float(pools[S.N_SOLUTIONS].mean()), 3) if n else None,
        "solutions_per_problem": histogram(pools),
        "coscale_pools": counts(pools, S.COSCALE_POOL),
        "near_duplicate_threshold": cfg.near_duplicate,
        **extra,
    }


# --------------------------------------------------------------------------------------------------- job
@dataclass
class State:
    """One evaluation of the pool's candidates: the ledger read, the candidates, what was kept and dropped."""

    ledger: pl.DataFrame
    cands: pl.DataFrame
    kept: pl.DataFrame
    drops: pl.DataFrame
    files: tuple[str, ...]  # ledger part files it read (a later evaluation is needed when they changed)


def evaluate(ws: io.Workspace, pool: str, problems: pl.DataFrame, checker: Checker, cfg: SolutionsConfig) -> State:
    """Read the ledger, gather the candidates, re-check and judge them (the verdicts are memoized in ``checker``)."""
    files = tuple(str(f) for f in stats.ledger_files(ws, pool))
    ledger = read_ledger_rows(ws, pool)
    cands = candidates(problems, ledger, cfg)
    kept, drops = judge(cands, checker(cands), cfg)
    return State(ledger, cands, kept, drops, files)


def fill_with_teacher(
    ws: io.Workspace, pool: str, problems: pl.DataFrame, checker: Checker, cfg: SolutionsConfig, progress: bool
) -> tuple[State, int, int]:
    """Teacher rounds until no problem in scope is short of K with budget left; returns (state, rounds, samples).

    Each round is planned from the ledger as it is, so a killed run resumes where it stopped, never twice.
    """
    from curate.progress import log

    rounds = samples = 0
    while True:
        state = evaluate(ws, pool, problems, checker, cfg)
        items = plan_teacher(problems, state.kept, state.ledger, cfg)
        if not items:
            return state, rounds, samples
        rounds += 1
        n = sum(len(i.sample_idxs) for i in items)
        log(f"solutions {pool}: teacher round {rounds}: {n} samples for {len(items)} short problems", progress)
        written = run_teacher_round(ws, pool, cfg, items, rounds)
        if written == 0:  # every sample was claimed by another live run of the teacher model: do not spin
            log(f"solutions {pool}: teacher round {rounds} wrote nothing (claimed elsewhere); stopping", progress)
            return evaluate(ws, pool, problems, checker, cfg), rounds, samples
        samples += written


def _config(cfg: SolutionsConfig, pool: str) -> dict[str, Any]:
    out = dataclasses.asdict(cfg)
    out["verify_workers"] = None  # how many processes check answers does not change the output
    if cfg.teacher is not None:
        out["teacher"]["openai"].pop("api_key_env", None)
    return {**out, "pool": pool}


@io.pool_locked
def solutions(
    ws: io.Workspace, pool: str, cfg: SolutionsConfig, *, force: bool = False, progress: bool = False
) -> StageResult:
    """Gather, re-check, filter and deduplicate solutions; run the teacher; write the tables and the SFT export.

    The teacher phase runs first (it only appends to the ledger, and does nothing when no problem is short of K
    with budget left); the rest goes through ``io.run_wrapped`` with the ledger as it then is, so an unchanged
    re-run is skipped. The table writes hold the pool's lock.
    """
    from curate.solutions import export as export_mod

    problems, excluded = scope(ws, pool, cfg)
    checker = Checker(problems, cfg)
    state: State | None = None
    rounds = teacher_samples = 0
    if cfg.teacher is not None and "teacher" in cfg.origins:
        state, rounds, teacher_samples = fill_with_teacher(ws, pool, problems, checker, cfg, progress)
        if rounds:
            stats.refresh_stats(ws, pool)
    out_path, q_path, pools_path = (ws.table(pool, n) for n in ("solutions", "solutions_quarantine", "solution_pools"))
    out_dir = export_dir(ws, pool, cfg)
    inputs = [ws.require_pool(pool), *stats.ledger_files(ws, pool)]
    if cfg.selection:
        inputs.append(selection_path(ws, cfg.selection))
    if not cfg.student:
        inputs.append(ws.table(pool, "scores"))

    def work(_manifest: io.Manifest) -> io.StageOutput:
        nonlocal state
        files = tuple(str(f) for f in stats.ledger_files(ws, pool))
        if state is None or state.files != files:
            state = evaluate(ws, pool, problems, checker, cfg)
        ids = problems.select(S.PROBLEM_ID)
        rates, rate_source = student_pass_rates(ws, pool, state.ledger, cfg)
        spent = teacher_spent(state.ledger, cfg)
        pools = problem_pools(ids, state.kept, rates, spent, cfg)
        extra = {
            "pool": pool,
            "selection": cfg.selection,
            "excluded": excluded,
            "pass_rate_source": rate_source,
            "rechecked": checker.checked,
            "teacher": _teacher_summary(state.ledger, ids, cfg, rounds, teacher_samples),
            "export": str(out_dir),
        }
        summary = summarize(state.kept, state.drops, pools, state.cands, cfg, extra)
        export_mod.write_export(
            ws, pool, cfg, problems, state.kept, summary, out_dir,
            selection_file=selection_path(ws, cfg.selection) if cfg.selection else None,
            teacher_run=teacher_run_id(cfg),
        )  # fmt: skip
        return io.StageOutput(
            summary,
            tables={
                q_path: (state.drops, S.SOLUTIONS_QUARANTINE),
                pools_path: (pools, S.SOLUTION_POOLS),
                out_path: (state.kept, S.SOLUTIONS),
            },
            rows_in=state.cands.height,
            rows_out=state.kept.height,
            drops=summary["drops"],
        )

    outputs = [out_path, q_path, pools_path, out_dir / export_mod.SFT_FILE]
    with ws.lock("pool", pool):  # the tables' read-modify-write; the teacher phase above takes the ledger's lock
        return io.run_wrapped(
            ws, "solutions", inputs=inputs, config=_config(cfg, pool), outputs=outputs, fn=work, force=force
        )


def _teacher_summary(
    ledger: pl.DataFrame, ids: pl.DataFrame, cfg: SolutionsConfig, rounds: int, samples: int
) -> dict[str, Any] | None:
    if cfg.teacher is None:
        return None
    rows = ledger.filter(
        (pl.col(S.MODEL) == cfg.teacher.model) & pl.col(S.RUN_ID).str.starts_with(TEACHER_PREFIX)
    ).join(ids, on=S.PROBLEM_ID, how="semi")
    return {
        "model": cfg.teacher.model,
        "backend": cfg.teacher.backend,
        "run_id": teacher_run_id(cfg),
        "budget": cfg.teacher.budget,
        "rounds_this_run": rounds,
        "samples_this_run": samples,
        "samples_total": rows.height,
        "correct_total": int(rows[S.CORRECT].fill_null(False).sum()),
    }


def run_stage(
    ws: io.Workspace, recipe: config_mod.Recipe, *, force: bool = False, progress: bool = False
) -> StageResult:
    """Stage wrapper: the recipe's ``solutions`` settings on ``recipe.pool``."""
    return solutions(ws, recipe.pool, load_config(recipe), force=force, progress=progress)
