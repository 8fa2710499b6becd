"""The teacher (CoScale-RL's extra QwQ-32B solutions): fills problems short of K distinct verified solutions.

While a problem in scope has fewer than K kept solutions and its teacher budget (``teacher.budget`` samples of the
teacher model over all teacher runs) is not spent, a round asks the teacher for ``max(K - kept, per_round)`` more
samples (capped by the budget). Rounds go through the rollout stage's shard machinery
(``curate.rollout.stage.run_shard``: hf, openai or vllm backend, every sample verified, one atomic part file per
shard in the ledger under the teacher's model), so a killed run loses at most the shard in flight and resumes
without duplicates: the next run reads the ledger, counts what each problem has, and asks only for the rest, with
new sample indices (the ledger's one numbering rule, ``curate.rollout.ledger``: the lowest free ones). A problem
whose budget is spent without K solutions lands in the ``failed`` pool.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.rollout import stage as rollout
from curate.rollout.ledger import free_indices, taken
from curate.solutions.candidates import Checker, State, evaluate
from curate.solutions.config import TEACHER_PREFIX, SolutionsConfig


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


def teacher_spent(ledger: pl.DataFrame, cfg: SolutionsConfig) -> pl.DataFrame:
    """Teacher samples per problem in the ledger: rows of the teacher model written by any teacher run."""
    if cfg.teacher is None:
        return pl.DataFrame(schema={S.PROBLEM_ID: pl.String, S.TEACHER_SAMPLES: pl.Int32})
    rows = ledger.filter((pl.col(S.MODEL) == cfg.teacher.model) & pl.col(S.RUN_ID).str.starts_with(TEACHER_PREFIX))
    return rows.group_by(S.PROBLEM_ID).agg(pl.len().cast(pl.Int32).alias(S.TEACHER_SAMPLES))


def plan_teacher(
    ws: io.Workspace,
    pool: str,
    problems: pl.DataFrame,
    kept: pl.DataFrame,
    ledger: pl.DataFrame,
    cfg: SolutionsConfig,
) -> list[rollout.WorkItem]:
    """This round's teacher work: problems short of K with budget left, each with the sample indices the ledger's
    rule gives it (``free_indices(used, count=n)``: the lowest indices in no part of the teacher model's ledger and
    in no live writer's claim, looked up under the model ledger's lock). ``run_shard`` then claims them, leaving
    out any another writer took meanwhile; the next round plans those again."""
    t = cfg.teacher
    if t is None or "teacher" not in cfg.origins:
        return []
    have = dict(kept.group_by(S.PROBLEM_ID).agg(pl.len()).iter_rows())
    spent = dict(teacher_spent(ledger, cfg).iter_rows())
    wants = []
    for pid, problem, answer, alts in problems.select(
        S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES
    ).iter_rows():
        short = cfg.k - have.get(pid, 0)
        left = t.budget - spent.get(pid, 0)
        if short <= 0 or left <= 0:
            continue
        golds = tuple(a for a in (alts or []) if a) or ((answer,) if answer else ())
        wants.append((pid, problem, golds, min(left, max(short, t.per_round))))
    if not wants:
        return []
    with ws.lock("ledger", f"{pool}/{t.model}"):
        used = taken(ws, pool, t.model, [w[0] for w in wants])
    return [
        rollout.WorkItem(pid, problem, golds, free_indices(used.get(pid, ()), count=n))
        for pid, problem, golds, n in wants
    ]


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
        items = plan_teacher(ws, pool, problems, state.kept, state.ledger, cfg)
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


def teacher_summary(
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
