r"""Candidate solutions: gathered from the pool and the rollout ledger, re-checked, then kept or dropped with a reason.

Candidates, in this order of preference (earlier ones win a near-duplicate tie):

1. ``reference``: the pool's ``solution`` column and, for the built-in generator, every solution in
   ``meta.solutions`` (``curate.ingest.generate`` writes several methods per problem);
2. ``imported``: ledger rows of ``curate import-generations`` (backend ``import``; GSM8K model solutions, simpleRL,
   OpenR1) that our checker judged correct;
3. ``ledger``: correct rollouts of any model;
4. ``teacher``: samples the stage drew from a teacher (run ids ``teacher-...``, curate.solutions.teacher).

Every candidate is re-checked by ``curate.verify.check_batch`` against the gold answers (a ledger's ``correct`` flag
or a dataset's shipped label only nominates it). Then, in order, a candidate is dropped as ``truncated`` (finish
reason ``length``), ``wrong_answer``, ``answer_leak`` (fewer than ``min_reasoning_words`` words before the final
answer), ``too_long`` (over ``max_tokens`` with a tokenizer, or over ``max_chars``; never truncated, which would cut
off the boxed answer), ``duplicate`` or ``near_duplicate`` (``curate.solutions.distinct``: word 3-gram Jaccard
>= ``near_duplicate``, 0.4 by default, measured on GSM8K's model solutions and the generator's). With ``boxed`` (the
default) a verified solution that states its answer another way (GSM8K's ``#### 72`` or ``A: 72``) gets the line
``The final answer is $\boxed{72}$.`` appended, so SFT targets match the prompt's instruction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from curate import io, prompts, verify
from curate import schema as S
from curate.errors import InputError, MissingInput
from curate.rollout import ledger
from curate.solutions import distinct
from curate.solutions.config import TEACHER_PREFIX, SolutionsConfig


_BOXED_LINE = "\n\nThe final answer is $\\boxed{{{answer}}}$."


# --------------------------------------------------------------------------------------------------- inputs
_PROBLEM_COLS = [S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SPLIT, S.SOURCE, S.SOLUTION, S.META]
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
    if cfg.sources is not None:
        before = keep.height
        keep = keep.filter(pl.col(S.SOURCE).is_in(list(cfg.sources)))
        excluded["other_source"] = before - keep.height
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
    """The ledger's rows (``ledger.scan``: deduplicated by key, the first file in name order wins) with the part
    file each came from (``ledger_file``: ``rollouts/<model>/part-....parquet``, relative to the pool's folder).

    Completions are kept for correct rows only (the only candidates).
    """
    correct = pl.col(S.CORRECT).fill_null(False)
    lf = ledger.scan(ws, pool, columns=_LEDGER_COLS, file_column="ledger_file")
    lf = lf.with_columns(pl.when(correct).then(pl.col(S.COMPLETION)).alias(S.COMPLETION))
    return ledger.collect(lf, ledger.files(ws, pool))


def ledger_candidates(ledger_rows: pl.DataFrame, ids: pl.DataFrame, cfg: SolutionsConfig) -> pl.DataFrame:
    """Ledger rows our checker called correct (only a nomination: they are re-checked), with their origin."""
    rows = ledger_rows.filter(pl.col(S.CORRECT).fill_null(False) & pl.col(S.COMPLETION).is_not_null()).join(
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


def candidates(problems: pl.DataFrame, ledger_rows: pl.DataFrame, cfg: SolutionsConfig) -> pl.DataFrame:
    """Every candidate solution of the scope, in order of preference (schema ``CANDIDATE``)."""
    parts = []
    if "reference" in cfg.origins:
        parts.append(reference_candidates(problems))
    led = ledger_candidates(ledger_rows, problems.select(S.PROBLEM_ID), cfg)
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
        elif cfg.recheck and not v.correct:
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


# --------------------------------------------------------------------------------------------------- evaluation
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
    files = tuple(str(f) for f in ledger.files(ws, pool))
    rows = read_ledger_rows(ws, pool)
    cands = candidates(problems, rows, cfg)
    kept, drops = judge(cands, checker(cands), cfg)
    return State(rows, cands, kept, drops, files)
