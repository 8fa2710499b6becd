"""Per-problem evidence for scoring, read from the rollout ledger (or, without one, from ``stats.parquet``).

What ``curate score`` needs beyond counts: the EMA of a problem's recent rewards (ScalingRL's reward
adaptability, METHODS.md §1.2), whether its recent rewards are all equal (ScaleRL's zero-variance filter, §4.3),
and learning progress between checkpoints. Only the few columns needed are read: completions never are.

Example output row::

    {"problem_id": "3f9c0a1b2c4d5e6f", "n_samples": 8, "n_correct": 3, "mean_tokens_correct": 812.0,
     "reward_ema": 0.41, "_all_equal": False, "_n_recent": 8, "learning_progress": 0.25}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from curate import config, io
from curate import schema as S
from curate.errors import InputError


LEDGER_READ = (S.PROBLEM_ID, S.MODEL, S.SAMPLE_IDX, S.COMPLETION_TOKENS, S.CORRECT, S.REWARD, S.STEP)
LEDGER_READ += (S.CREATED_AT, S.BACKEND, S.RUN_ID, S.EXTRACTED_ANSWER)
ALL_EQUAL, N_RECENT = "_all_equal", "_n_recent"  # internal evidence columns (not written anywhere)
_Q = "_q"


@dataclass(frozen=True)
class EvidenceConfig:
    """How rollouts become evidence (recipe key ``score.evidence``).

    model: the ledger model whose rollouts give the pass rate; None = the newest model (by first rollout) that was
    not imported. training_rollouts: whether rollouts written by training runs (backends ``trl`` and ``sampler``:
    the RL stages of ``training run``; and rollouts with a ``chain-`` run id, which a training run makes of its own
    SFT model) count as evidence; off by default, so one run's RL rollouts never change the
    next run's curation (a model named in ``model`` always counts). reward_correct / reward_wrong: the ledger's
    reward values, mapped onto [0, 1].
    ema_alpha: weight of the newest reward in the EMA. recent_window: how many of the latest rollouts count as
    recent for the all-equal test. suspect_band: the kinds of problem the model's reliability is measured on for the
    consensus test of suspect golds (a problems column or ``meta.<key>``, as ``curate headroom --by``; ``training
    run``'s ``measure`` sets its ``eval.by``); None: the whole pool (``curate.score.headroom.suspects``).
    """

    model: str | None = None
    training_rollouts: bool = False
    reward_correct: float = 1.0
    reward_wrong: float = 0.0
    ema_alpha: float = 0.3
    recent_window: int = 32
    suspect_band: str | None = None

    def __post_init__(self) -> None:
        if self.reward_correct == self.reward_wrong:
            raise config.ConfigError("score.evidence.reward_correct and reward_wrong must differ")


def fraction_correct(cfg: EvidenceConfig) -> pl.Expr:
    """A rollout's reward on [0, 1]; the verdict stands in where the reward is missing."""
    reward = pl.col(S.REWARD).fill_null(
        pl.when(pl.col(S.CORRECT)).then(cfg.reward_correct).otherwise(cfg.reward_wrong)
    )
    return ((reward - cfg.reward_wrong) / (cfg.reward_correct - cfg.reward_wrong)).clip(0.0, 1.0)


TRAINING_BACKENDS = ("trl", "sampler")  # who writes a training run's rollouts (training.rl, the online sampler)
CHAIN_RUN_TAG = "chain"  # run ids of the rollouts a training run makes of its own models (curate rollout run_tag)


def usable(ledger: pl.DataFrame, cfg: EvidenceConfig) -> pl.DataFrame:
    """The ledger rows that may count as evidence: training runs' rollouts only when ``cfg.training_rollouts`` (or
    when they are the model named in ``cfg.model``)."""
    if cfg.training_rollouts:
        return ledger
    trained = pl.col(S.BACKEND).fill_null("").is_in(TRAINING_BACKENDS) | pl.col(S.RUN_ID).fill_null(
        ""
    ).str.starts_with(f"{CHAIN_RUN_TAG}-")
    return ledger.filter(~trained | (pl.col(S.MODEL) == cfg.model) if cfg.model else ~trained)


def target_model(ledger: pl.DataFrame, wanted: str | None) -> str:
    """``wanted`` if given, else the newest model (by first rollout) that was not imported."""
    models = ledger.group_by(S.MODEL).agg(
        pl.col(S.CREATED_AT).min().alias("first"), (pl.col(S.BACKEND).fill_null("") == "import").all().alias("imp")
    )
    if wanted is not None:
        if wanted not in models[S.MODEL].to_list():
            raise InputError(f"model {wanted!r} has no rollouts; ledger models: {sorted(models[S.MODEL].to_list())}")
        return wanted
    own = models.filter(~pl.col("imp"))
    return (own if own.height else models).sort(["first", S.MODEL], nulls_last=False)[S.MODEL][-1]


def ledger_evidence(ledger: pl.DataFrame, cfg: EvidenceConfig) -> pl.DataFrame:
    """Per problem, from the target model's rollouts: n, correct, mean tokens of correct completions, the EMA of
    rewards in time order, whether the latest ``recent_window`` rewards are all equal, and learning progress.

    Learning progress = mean reward at the last checkpoint minus at the first, where checkpoints are the ledger's
    models (ordered by first rollout) when it holds several, else the ``step`` values of one model; 0 with one.
    """
    model = target_model(ledger, cfg.model)
    rows = ledger.with_columns(fraction_correct(cfg).alias(_Q))
    order = [S.PROBLEM_ID, S.STEP, S.CREATED_AT, S.SAMPLE_IDX]
    q, w = pl.col(_Q), cfg.recent_window
    ev = (
        rows.filter(pl.col(S.MODEL) == model)
        .sort(order, nulls_last=False)
        .group_by(S.PROBLEM_ID, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int32).alias(S.N_SAMPLES),
            pl.col(S.CORRECT).fill_null(False).sum().cast(pl.Int32).alias(S.N_CORRECT),
            pl.col(S.COMPLETION_TOKENS).filter(pl.col(S.CORRECT).fill_null(False)).mean().alias(S.MEAN_TOKENS_CORRECT),
            q.ewm_mean(alpha=cfg.ema_alpha, adjust=False).last().alias(S.REWARD_EMA),
            (q.tail(w).max() == q.tail(w).min()).alias(ALL_EQUAL),
            q.tail(w).len().cast(pl.Int32).alias(N_RECENT),
        )
    )
    n_models = rows[S.MODEL].n_unique()
    if n_models >= 2:
        order_of = rows.group_by(S.MODEL).agg(pl.col(S.CREATED_AT).min().alias("_first")).sort(["_first", S.MODEL])
        rank = dict(zip(order_of[S.MODEL].to_list(), range(order_of.height), strict=True))
        ckpt = pl.col(S.MODEL).replace_strict(rank, return_dtype=pl.Int64)
    else:
        ckpt = pl.col(S.STEP)
    per_ckpt = (
        rows.with_columns(ckpt.alias("_ckpt"))
        .filter(pl.col("_ckpt").is_not_null())
        .group_by(S.PROBLEM_ID, "_ckpt")
        .agg(q.mean().alias("_qm"))
        .sort([S.PROBLEM_ID, "_ckpt"])
        .group_by(S.PROBLEM_ID, maintain_order=True)
        .agg((pl.col("_qm").last() - pl.col("_qm").first()).alias(S.LEARNING_PROGRESS))
    )
    return ev.join(per_ckpt, on=S.PROBLEM_ID, how="left", maintain_order="left").with_columns(
        pl.col(S.LEARNING_PROGRESS).fill_null(0.0)
    )


def suspect_golds(ledger: pl.DataFrame, problems: pl.DataFrame, cfg: EvidenceConfig, check: Any) -> pl.DataFrame:
    """(problem_id, suspect_gold) of the target model's measured problems whose gold answer is suspect
    (``curate.score.headroom.suspects``: the model's samples agree on another answer where it is reliable on the
    problem's band, ``cfg.suspect_band``, or the pool's reference solution concludes another one, judged by
    ``check``, ``curate.verify.check_batch``). Raises ``ConfigError`` for a band no problem has."""
    from curate.score import headroom

    rows = ledger.filter(pl.col(S.MODEL) == target_model(ledger, cfg.model))
    measured = problems.join(rows.select(S.PROBLEM_ID).unique(), on=S.PROBLEM_ID, how="semi")
    try:
        bands = headroom.band_values(measured, cfg.suspect_band) if measured.height else None
    except ValueError as exc:
        raise config.ConfigError(f"score.evidence.suspect_band: {exc}") from exc
    found = headroom.suspects(headroom.prompt_counts(rows), headroom.reference_verdicts(measured, check), bands)
    return found.select(S.PROBLEM_ID, pl.col("reason").alias(S.SUSPECT_GOLD))


def stats_evidence(stats: pl.DataFrame, model: str | None) -> pl.DataFrame:
    """The same evidence from ``stats.parquet`` when no ledger is kept: all-equal means all right or all wrong;
    without ``model``, the most recently updated one. No EMA (the pass rate stands in) and no progress."""
    if model is None:
        model = stats.sort(S.UPDATED_AT, nulls_last=False)[S.MODEL][-1]
    n, c = pl.col(S.N_SAMPLES), pl.col(S.N_CORRECT)
    return stats.filter(pl.col(S.MODEL) == model).select(
        S.PROBLEM_ID,
        S.N_SAMPLES,
        S.N_CORRECT,
        S.MEAN_TOKENS_CORRECT,
        (c / n).alias(S.REWARD_EMA),
        ((c == 0) | (c == n)).alias(ALL_EQUAL),
        n.alias(N_RECENT),
        pl.lit(0.0).alias(S.LEARNING_PROGRESS),
    )


def read_ledger(ws: io.Workspace, pool: str) -> pl.DataFrame | None:
    """The columns of the pool's ledger that scoring needs, deduplicated on its key (completions are never read),
    or None when the pool has no rollouts."""
    from curate.rollout import ledger as rollout_ledger

    ledger = rollout_ledger.read(ws, pool, columns=LEDGER_READ)
    return ledger if ledger.height else None
