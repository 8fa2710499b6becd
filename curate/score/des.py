"""ScalingRL's Data Effectiveness Score as vectorized polars expressions, plus the CoScale-RL pool rule.

Pure builders shared by ``curate.score`` (DES at t = 0, written to ``scores.parquet``) and the curriculum
sampler (DES at t > 0 over the same columns). The score stage's I/O lives in ``curate.score.stage``.

What is whose (METHODS.md §1.2, §2): DES = λ_d·D + λ_c·C + λ_r·R with λ = softmax(φ), Gaussian component scores
whose centres move with a time weight w_t, and zero reward adaptability for prompts whose rewards are all equal:
that *structure* is ScalingRL's [S-sum]. The formulas (w_t = min(1, t/T), μ(t) = (1-w)·mean + w·q_0.8, σ = pool
std, μ_r 0.5 -> 0.0 on the ±1 scale, σ_r = 0.5, the φ update) are RECONSTRUCTED; every constant is a field of
``DesConfig``. The pool thresholds (5% / 70%) are CoScale-RL's [MOON].

Columns read: difficulty_score, cot_length, reward_ema, zero_variance (and learning_progress unless disabled).

The terms live in one table, ``TERMS`` (name, score column, input column, component builder): every other module
(the score stage's warnings, the selection's columns and plots, the curriculum's DES at t > 0) reads it, so a new
factor is a component function and a ``Term`` here plus its column in ``curate.schema``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from curate import config
from curate import schema as S


@dataclass(frozen=True)
class DesConfig:
    """Constants of the RECONSTRUCTED DES (METHODS.md §1.2); only the three-factor softmax structure is ScalingRL's.

    phi: softmax logits of the terms' weights, in ``TERMS`` order (λ_d, λ_c, λ_r); all 0 gives equal weights.
    quantile: the centres of D and C move from the pool mean (w=0) to this pool quantile (w=1). sigma_d / sigma_c:
    Gaussian widths; None = the pool's std.
    reward_center_start/end, reward_sigma: R's Gaussian on the [0, 1] fraction-correct scale; the defaults are
    §1.2's ±1-scale values (centre 0.5 -> 0.0, σ 0.5) mapped through q = (r + 1) / 2. progress_weight: how much
    learning progress between checkpoints shifts R (up when learning, down when forgetting; ours).
    sigma_floor keeps a degenerate pool finite.
    """

    phi: tuple[float, ...] = field(default_factory=lambda: (0.0,) * len(TERMS))
    quantile: float = 0.8
    sigma_d: float | None = None
    sigma_c: float | None = None
    reward_center_start: float = 0.75
    reward_center_end: float = 0.5
    reward_sigma: float = 0.25
    progress_weight: float = 0.5
    sigma_floor: float = 1e-3

    def __post_init__(self) -> None:
        if len(self.phi) != len(TERMS):
            names = ", ".join(t.name for t in TERMS)
            raise config.ConfigError(f"score.des.phi needs {len(TERMS)} logits ({names}), got {self.phi}")


# --------------------------------------------------------------------------------------------------- DES (pure)
@dataclass(frozen=True)
class PoolStats:
    """Pool-level moments the DES centres and widths are built from (stored in the scores manifest)."""

    d_mean: float
    d_quantile: float
    d_std: float
    c_mean: float
    c_quantile: float
    c_std: float


def pool_stats(frame: pl.DataFrame, quantile: float = 0.8) -> PoolStats:
    """Mean, ``quantile`` and population std (ddof=0) of difficulty_score and cot_length over ``frame``."""

    def moments(col: str) -> tuple[float, float, float]:
        s = frame[col].drop_nulls() if col in frame.columns else pl.Series([], dtype=pl.Float64)
        if s.len() == 0:
            return 0.0, 0.0, 0.0
        return float(s.mean()), float(s.quantile(quantile, "linear")), float(s.std(ddof=0))

    return PoolStats(*moments(S.DIFFICULTY_SCORE), *moments(S.COT_LENGTH))


def time_weight(t: float, horizon: float) -> float:
    """w_t = min(1, t / T) (METHODS.md §1.2, linear ramp); 0 at the start of training.

    >>> time_weight(0, 10), time_weight(5, 10), time_weight(20, 10)
    (0.0, 0.5, 1.0)
    """
    if horizon <= 0:
        return 1.0 if t > 0 else 0.0
    return min(1.0, max(0.0, t / horizon))


def gaussian_score(x: pl.Expr | str, center: float | pl.Expr, sigma: float) -> pl.Expr:
    """exp(-(x - centre)² / (2σ²)): 1 at the centre, 0.61 one σ away.

    >>> pl.DataFrame({"x": [1.0, 2.0]}).select(gaussian_score("x", 1.0, 1.0))["x"].round(4).to_list()
    [1.0, 0.6065]
    """
    x = pl.col(x) if isinstance(x, str) else x
    return (-((x - center) ** 2) / (2.0 * sigma * sigma)).exp()


def moving_center(mean: float, quantile: float, w: float) -> float:
    """μ(t) = (1 - w)·mean + w·q: the centre drifts from the average toward harder / longer problems."""
    return (1.0 - w) * mean + w * quantile


def des_weights(phi: Sequence[float]) -> tuple[float, ...]:
    """λ = softmax(φ).

    >>> des_weights((0.0, 0.0, 0.0))
    (0.3333333333333333, 0.3333333333333333, 0.3333333333333333)
    """
    top = max(phi)
    exps = [math.exp(p - top) for p in phi]
    return tuple(e / sum(exps) for e in exps)


def difficulty_component(cfg: DesConfig, w: float, stats: PoolStats) -> pl.Expr:
    """D_t(x) = G(d(x); μ_d(t), σ_d) over ``difficulty_score``."""
    sigma = max(cfg.sigma_d if cfg.sigma_d is not None else stats.d_std, cfg.sigma_floor)
    return gaussian_score(S.DIFFICULTY_SCORE, moving_center(stats.d_mean, stats.d_quantile, w), sigma)


def cot_component(cfg: DesConfig, w: float, stats: PoolStats) -> pl.Expr:
    """C_t(x) = G(ℓ(x); μ_ℓ(t), σ_ℓ) over ``cot_length`` (standardized log length)."""
    sigma = max(cfg.sigma_c if cfg.sigma_c is not None else stats.c_std, cfg.sigma_floor)
    return gaussian_score(S.COT_LENGTH, moving_center(stats.c_mean, stats.c_quantile, w), sigma)


def reward_component(
    cfg: DesConfig, w: float, stats: PoolStats | None = None, progress_col: str | None = S.LEARNING_PROGRESS
) -> pl.Expr:
    """R_t(x): 0 for zero-variance problems (no gradient signal), else clip(G(r̄; μ_r(t), σ_r) + β·progress, 0, 1).

    Reads ``reward_ema`` (EMA of recent rewards on the [0, 1] fraction-correct scale), ``zero_variance`` and,
    unless ``progress_col`` is None, the learning progress between checkpoints (the β term is ours).
    """
    center = (1.0 - w) * cfg.reward_center_start + w * cfg.reward_center_end
    score = gaussian_score(S.REWARD_EMA, center, max(cfg.reward_sigma, cfg.sigma_floor))
    if progress_col is not None:
        score = (score + cfg.progress_weight * pl.col(progress_col).fill_null(0.0)).clip(0.0, 1.0)
    return pl.when(pl.col(S.ZERO_VARIANCE).fill_null(False)).then(0.0).otherwise(score)


@dataclass(frozen=True)
class Term:
    """One DES factor. name: how warnings, cards and plots call it. column: its score column (``curate.schema``).
    input: the column its component reads. component: ``(cfg, w, stats, progress_col) -> expression in [0, 1]``."""

    name: str
    column: str
    input: str
    component: Callable[[DesConfig, float, PoolStats, str | None], pl.Expr]


# The terms of DES, in the order of ``DesConfig.phi``: the one table every reader of DES terms goes through.
TERMS = (
    Term("difficulty", S.DES_D, S.DIFFICULTY_SCORE, lambda cfg, w, stats, _: difficulty_component(cfg, w, stats)),
    Term("CoT length", S.DES_C, S.COT_LENGTH, lambda cfg, w, stats, _: cot_component(cfg, w, stats)),
    Term("reward", S.DES_R, S.REWARD_EMA, reward_component),
)
COLUMNS = tuple(t.column for t in TERMS)  # the per-term score columns


def without_input(cfg: DesConfig, column: str) -> DesConfig:
    """``cfg`` with weight 0 on the terms that read ``column`` (the others renormalized): DES when that input is
    unknown for every prompt (the curriculum without any CoT length)."""
    phi = tuple(-math.inf if t.input == column else p for t, p in zip(TERMS, cfg.phi, strict=True))
    return dataclasses.replace(cfg, phi=phi)


def constant_terms(frame: pl.DataFrame, tol: float = 1e-9) -> list[str]:
    """The names of the DES terms that take one value over ``frame``'s rows (they carry no ranking signal there);
    none for fewer than two rows or a frame without the term columns."""
    if frame.height < 2 or any(t.column not in frame.columns for t in TERMS):
        return []
    spread = frame.select(pl.col(t.column).max() - pl.col(t.column).min() for t in TERMS).row(0)
    return [t.name for t, d in zip(TERMS, spread, strict=True) if d is None or float(d) <= tol]


def reduced_note(frame: pl.DataFrame) -> str | None:
    """What DES is reduced to over ``frame`` when some of its terms are constant (e.g. without rollouts or
    difficulty labels, difficulty and reward are the same for every problem and DES ranks by length); None when
    every term varies. Says when the CoT length it ranks by is the prompt length (``cot_source`` ``prompt``)."""
    constant = constant_terms(frame)
    if not constant:
        return None
    varying = [t for t in TERMS if t.name not in constant]
    if not varying:
        return "every DES term is constant over the pool: DES does not rank the problems at all"
    text = f"DES terms {', '.join(constant)} are constant over the pool, so DES ranks by "
    text += " and ".join(t.name for t in varying) + " alone"
    by_prompt = S.COT_SOURCE in frame.columns and (frame[S.COT_SOURCE] == "prompt").all()
    if by_prompt and any(t.input == S.COT_LENGTH for t in varying):
        text += " (with no solutions and no rollouts the CoT length is the prompt length)"
    return text


def des_exprs(
    cfg: DesConfig, t: float, horizon: float, stats: PoolStats, progress_col: str | None = S.LEARNING_PROGRESS
) -> list[pl.Expr]:
    """The DES columns (one per term: des_d, des_c, des_r; then des) at time t of horizon T, as expressions.

    Needs difficulty_score, cot_length, reward_ema, zero_variance (and ``progress_col``). Worked row with equal
    weights, pool stats d: mean 0.5 std 0.2, ℓ: mean 0 std 1, t = 0: d = 0.7 -> D = exp(-0.04/0.08) = 0.6065;
    ℓ = 0 -> C = 1; r̄ = 0.75 -> R = 1; DES = (0.6065 + 1 + 1) / 3 = 0.8689.
    """
    w = time_weight(t, horizon)
    parts = [term.component(cfg, w, stats, progress_col) for term in TERMS]
    des = sum((lam * part for lam, part in zip(des_weights(cfg.phi), parts, strict=True)), pl.lit(0.0))
    return [*(part.alias(term.column) for term, part in zip(TERMS, parts, strict=True)), des.alias(S.DES)]


def update_des_weights(phi: Sequence[float], components: np.ndarray, progress: np.ndarray, lr: float) -> tuple:
    """One gradient step on φ that raises Cov(DES, progress) (METHODS.md §1.2's optional online update; RECONSTRUCTED).

    components: [n, terms] (D, C, R) per prompt; progress: [n] observed learning progress (Δ EMA reward).
    d/dφ_j Σ_i λ_i cov_i = λ_j (cov_j - Σ_i λ_i cov_i).
    """
    lam = np.asarray(des_weights(phi))
    centred = np.asarray(progress, dtype=float) - np.mean(progress)
    cov = (np.asarray(components, dtype=float) - np.mean(components, axis=0)).T @ centred / max(len(centred), 1)
    grad = lam * (cov - float(lam @ cov))
    return tuple(float(p) for p in np.asarray(phi, dtype=float) + lr * grad)


# --------------------------------------------------------------------------------------------------- flags (pure)
def coscale_pool_expr(lo: float = 0.05, hi: float = 0.70, col: str = S.PASS_RATE) -> pl.Expr:
    """CoScale-RL's pool: unsolvable (p < lo), solvable (lo <= p <= hi), solved (p > hi). "Failed" needs a budget."""
    p = pl.col(col)
    pool = pl.when(p < lo).then(pl.lit("unsolvable")).when(p > hi).then(pl.lit("solved")).otherwise(pl.lit("solvable"))
    return pool.alias(S.COSCALE_POOL)
