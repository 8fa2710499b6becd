"""Stage ``score``: per-problem difficulty, CoT complexity, reward adaptability, DES, clusters and flags.

Reads ``pools/<pool>/problems.parquet`` (train rows only: test rows are evaluation sets), the rollout ledger
(``rollouts/<model>/part-*.parquet``) or, without one, ``stats.parquet``, ``filters.parquet`` when present, and
the embedding cache; writes ``pools/<pool>/scores.parquet`` (schema.SCORES, then the extra columns
n_samples, n_correct, alpha, beta, prior_pass_rate, learning_progress) and its manifest.

What is whose (METHODS.md §1-§4):

- DES = λ_d·D + λ_c·C + λ_r·R with λ = softmax(φ) and Gaussian component scores whose centres move with a time
  weight: the *structure* is ScalingRL's [S-sum]; every formula and constant below is RECONSTRUCTED (§1.2),
  and all of them are fields of ``DesConfig``.
- Difficulty d = 1 - p with p the mean of a Beta posterior Beta(k·m + correct, k·(1-m) + wrong): the prior mean m
  comes from the source's difficulty label (mapped to a pass rate) or, without one, from a seeded scikit-learn
  regressor trained on problems that have evidence; the pseudo-count k makes a few rollouts shift it and many
  dominate it (ours).
- CoScale-RL pools (unsolvable < 5% <= solvable <= 70% < solved) are the paper's thresholds [MOON]; ScaleRL's
  zero-variance and No-Positive-Resampling (pass rate >= 0.9) flags are the paper's rules [SRL §3.2].

An example row of ``scores`` is in ``curate.schema`` (``SCORES``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import polars as pl

from curate import cluster, config, io, verify
from curate import schema as S
from curate.embed import EmbedConfig, encoder_key
from curate.progress import bar
from curate.score import forecast
from curate.score.des import (
    DesConfig,
    constant_terms,
    coscale_pool_expr,
    des_exprs,
    des_weights,
    pool_stats,
    reduced_note,
    time_weight,
)
from curate.score.evidence import (
    ALL_EQUAL,
    N_RECENT,
    EvidenceConfig,
    ledger_evidence,
    read_ledger,
    stats_evidence,
    suspect_golds,
    usable,
)
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped


EXTRA_COLUMNS = (S.N_SAMPLES, S.N_CORRECT, S.ALPHA, S.BETA, S.PRIOR_PASS_RATE, S.LEARNING_PROGRESS, S.SUSPECT_GOLD)


# --------------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class ScoreConfig:
    """Settings of ``curate score`` (recipe key ``score:``).

    evidence: which ledger model and reward scale (``curate.score.evidence.EvidenceConfig``).
    pseudo_count: k, the prior's weight in rollouts. min_evidence: rollouts a problem needs to train the prior.
    prior_min_problems: problems with rollouts the learned prior needs, with both right and wrong answers among
    them; with less, rollouts do not train it (a dozen all-failed problems would mark a whole pool unsolvable) and
    unlabelled problems keep ``default_pass_rate``, with a warning. A prior whose held-out error does not beat
    predicting the mean is replaced by the mean, with a warning.
    level_pass_rates: MATH level 1..5 -> pass rate (RECONSTRUCTED: a small math model's typical accuracy).
    difficulty_intercept/slope: a numeric ``difficulty`` label without a level (AoPS 1-10 scale, DeepScaleR/AIME)
    maps to intercept - slope·(difficulty - 1), clipped to [0.02, 0.98] (RECONSTRUCTED).
    predictor: "ridge" or "hgb" (HistGradientBoosting); heldout_frac of the evidence is held out for its MAE.
    chars_per_token: converts reference-solution characters to tokens for the CoT length.
    min_samples: rollouts needed before all-equal rewards set ``zero_variance`` (ScaleRL).
    unsolvable_below / solved_above: CoScale-RL pool thresholds; solved_threshold: ScaleRL's No-Positive-Resampling.
    clusters: k-means k over embeddings; use_embeddings False skips the encoder (features only, one cluster).
    embed: settings passed to ``curate.embed.EmbedConfig``. time / horizon: DES time weight w = min(1, time/horizon).
    rollouts: rollouts per prompt of the RL that follows, for the forecast of zero-variance groups
    (``curate.score.forecast``) the summary prints. suspects: mark the measured problems whose gold answer is suspect
    (``suspect_gold``: the evidence model's samples agree on another answer, or the reference solution concludes
    another one; ``curate.score.headroom``), which ``curate select`` leaves out with that reason.
    """

    run: str = "default"
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    seed: int = 0
    pseudo_count: float = 8.0
    min_evidence: int = 4
    prior_min_problems: int = 30
    level_pass_rates: tuple[float, ...] = (0.9, 0.8, 0.7, 0.55, 0.35)
    difficulty_intercept: float = 0.95
    difficulty_slope: float = 0.1
    default_pass_rate: float = 0.5
    predictor: str = "ridge"
    ridge_alpha: float = 10.0
    heldout_frac: float = 0.2
    min_train: int = 20
    chars_per_token: float = 3.5
    min_samples: int = 8
    unsolvable_below: float = 0.05
    solved_above: float = 0.70
    solved_threshold: float = 0.9
    clusters: int = 64
    use_embeddings: bool = True
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    des: DesConfig = field(default_factory=DesConfig)
    time: float = 0.0
    horizon: float = 1.0
    rollouts: int = 8
    suspects: bool = True

    def __post_init__(self) -> None:
        if self.rollouts < 1:
            raise config.ConfigError("score.rollouts must be >= 1 (rollouts per prompt, for the waste forecast)")
        if self.pseudo_count <= 0:
            raise config.ConfigError("score.pseudo_count must be > 0 (it is the prior's weight in rollouts)")
        if self.predictor not in ("ridge", "hgb"):
            raise config.ConfigError(f"score.predictor must be 'ridge' or 'hgb', got {self.predictor!r}")
        if len(self.level_pass_rates) != 5:
            raise config.ConfigError("score.level_pass_rates needs 5 values (MATH levels 1..5)")


def load_config(recipe: config.Recipe) -> ScoreConfig:
    """The recipe's ``score`` section; ``seed`` defaults to the recipe's."""
    return config.from_mapping(ScoreConfig, recipe.seeded_config("score"), "score")


# --------------------------------------------------------------------------------------------------- flags (pure)
def posterior_exprs(k: float) -> list[pl.Expr]:
    """alpha = k·m + correct, beta = k·(1-m) + wrong, pass_rate = alpha / (alpha + beta); m = prior_pass_rate.

    Example: m = 0.5, k = 8, 2 of 4 correct -> Beta(6, 6), p = 0.5; 4 of 4 -> Beta(8, 4), p = 0.667.
    """
    m, n, c = pl.col(S.PRIOR_PASS_RATE), pl.col(S.N_SAMPLES).fill_null(0), pl.col(S.N_CORRECT).fill_null(0)
    alpha, beta = k * m + c, k * (1.0 - m) + (n - c)
    return [alpha.alias(S.ALPHA), beta.alias(S.BETA), (alpha / (alpha + beta)).alias(S.PASS_RATE)]


def label_pass_rate_expr(cfg: ScoreConfig) -> pl.Expr:
    """A source's difficulty label on the pass-rate scale: MATH level 1..5 via ``level_pass_rates``, else a numeric
    ``difficulty`` via intercept - slope·(difficulty - 1) clipped to [0.02, 0.98]; null when neither exists."""
    by_level = pl.col(S.LEVEL).replace_strict(
        [1, 2, 3, 4, 5], list(cfg.level_pass_rates), default=None, return_dtype=pl.Float64
    )
    by_difficulty = (cfg.difficulty_intercept - cfg.difficulty_slope * (pl.col(S.DIFFICULTY) - 1.0)).clip(0.02, 0.98)
    return pl.coalesce(by_level, by_difficulty)


# --------------------------------------------------------------------------------------------------- predictors
def text_features(problems: pl.DataFrame) -> np.ndarray:
    """Six cheap features of the problem text: log chars, log words, digit share, log LaTeX commands, log ``$``
    count, log number count. Vectorized polars string expressions; float32 [n, 6]."""
    p = pl.col(S.PROBLEM)
    chars = p.str.len_chars().cast(pl.Float64)
    feats = problems.select(
        chars.log1p().alias("chars"),
        p.str.count_matches(r"\S+").cast(pl.Float64).log1p().alias("words"),
        (p.str.count_matches(r"\d").cast(pl.Float64) / chars.clip(1.0)).alias("digits"),
        p.str.count_matches(r"\\[A-Za-z]+").cast(pl.Float64).log1p().alias("latex"),
        p.str.count_matches(r"\$").cast(pl.Float64).log1p().alias("dollars"),
        p.str.count_matches(r"\d+(?:\.\d+)?").cast(pl.Float64).log1p().alias("numbers"),
    )
    return feats.to_numpy().astype(np.float32)


def feature_matrix(problems: pl.DataFrame, embeddings: np.ndarray | None) -> np.ndarray:
    """Predictor inputs, float32 [n, 6 + d]: z-scored ``text_features`` and, if given, the unit-norm embeddings
    times sqrt(d), so every column has about unit variance (what a StandardScaler would give, without copies)."""
    text = text_features(problems)
    std = text.std(axis=0)
    text = (text - text.mean(axis=0)) / np.where(std > 0, std, 1.0)
    if embeddings is None:
        return text.astype(np.float32)
    out = np.empty((len(text), text.shape[1] + embeddings.shape[1]), dtype=np.float32)
    out[:, : text.shape[1]] = text
    np.multiply(embeddings, np.float32(np.sqrt(embeddings.shape[1])), out=out[:, text.shape[1] :])
    return out


def fit_predict(
    x: np.ndarray, y: np.ndarray, train: np.ndarray, cfg: ScoreConfig, seed: int, clip: tuple[float, float] | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """Fit a seeded regressor on rows ``train`` (bool mask) and predict every row; report held-out MAE.

    A seeded ``heldout_frac`` of the training rows is held out to measure MAE (and the MAE of predicting the
    training mean, for scale); the model is then refit on all training rows. Under ``min_train`` rows the
    prediction is the training mean (or ``default_pass_rate``) and MAE is None.
    """
    idx = np.flatnonzero(train)
    report: dict[str, Any] = {"kind": cfg.predictor, "n_train": int(idx.size), "mae": None, "baseline_mae": None}
    if idx.size < cfg.min_train:
        fill = float(y[idx].mean()) if idx.size else cfg.default_pass_rate
        return np.full(len(x), fill), report | {"kind": "constant"}

    def model():
        if cfg.predictor == "hgb":
            from sklearn.ensemble import HistGradientBoostingRegressor

            return HistGradientBoostingRegressor(random_state=seed, max_iter=200)
        from sklearn.linear_model import Ridge

        return Ridge(alpha=cfg.ridge_alpha)  # features come standardized (``feature_matrix``)

    def predict(m, rows=None):
        out = m.predict(x if rows is None else x[rows])
        return np.clip(out, *clip) if clip else out

    perm = np.random.default_rng(seed).permutation(idx.size)
    n_hold = max(1, round(idx.size * cfg.heldout_frac))
    hold, fit = idx[perm[:n_hold]], idx[perm[n_hold:]]
    with cluster.one_blas_thread():
        held = predict(model().fit(x[fit], y[fit]), hold)
        every = idx.size == len(x)  # fit on x itself rather than on a copy of it
        full = predict(model().fit(x if every else x[idx], y if every else y[idx]))
    report["mae"] = round(float(np.mean(np.abs(held - y[hold]))), 4)
    report["baseline_mae"] = round(float(np.mean(np.abs(y[fit].mean() - y[hold]))), 4)
    report["n_heldout"] = int(n_hold)
    return full, report


def subject_features(problems: pl.DataFrame, min_count: int = 5, max_subjects: int = 32) -> np.ndarray:
    """One-hot columns of the pool's frequent subjects (float32 [n, k]; k = 0 with fewer than two), so the learned
    prior can use a subject's difficulty where the pool carries subjects but no levels."""
    counts = problems[S.SUBJECT].drop_nulls().value_counts(sort=True)
    subjects = [v for v, c in counts.iter_rows() if c >= min_count][:max_subjects]
    if len(subjects) < 2:
        return np.zeros((problems.height, 0), dtype=np.float32)
    column = problems[S.SUBJECT].to_list()
    return np.asarray([[float(v == s) for s in subjects] for v in column], dtype=np.float32)


# --------------------------------------------------------------------------------------------------- the stage (pure)
def score_frame(
    problems: pl.DataFrame,
    cfg: ScoreConfig,
    *,
    evidence: pl.DataFrame | None = None,
    embeddings: np.ndarray | None = None,
    filters: pl.DataFrame | None = None,
    step: Callable[[str], None] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Score the train rows of ``problems`` (``embeddings`` aligned with its rows; seeded by ``cfg.seed``);
    returns (scores, report).

    ``evidence`` is ``ledger_evidence`` / ``stats_evidence`` output, ``filters`` is schema.FILTERS. The result is
    sorted by problem_id and has the SCORES columns followed by ``EXTRA_COLUMNS``.
    """
    step = step or (lambda _: None)
    keep = (~problems[S.SPLIT].is_in(S.HELDOUT_SPLITS)).fill_null(True).to_numpy()
    order = problems.filter(keep)[S.PROBLEM_ID].arg_sort().to_numpy()
    rows = np.flatnonzero(keep)[order]
    emb = None if embeddings is None else np.asarray(embeddings, dtype=np.float32)
    if emb is not None and not np.array_equal(rows, np.arange(len(emb))):
        emb = emb[rows]  # copy only when the caller did not already pass train rows sorted by problem_id
    df = _join_evidence(problems.filter(keep)[order], evidence).with_columns(
        label_pass_rate_expr(cfg).alias("_label"),
        pl.col(S.PROBLEM).str.len_chars().cast(pl.Int32).alias(S.PROMPT_CHARS),
    )
    x, subjects = feature_matrix(df, emb), subject_features(df)
    if subjects.shape[1]:  # the pool carries subjects: a difficulty signal the learned prior can use
        x = np.hstack([x, subjects])
    seed = cfg.seed
    step("difficulty prior")
    df, prior_report = _difficulty(df, x, cfg, seed)
    step("CoT complexity")
    df, cot_report = _cot_length(df, x, cfg, seed + 1)
    step("clusters")
    clusters = np.zeros(df.height, np.int32) if emb is None else cluster.kmeans_clusters(emb, cfg.clusters, seed)
    step("DES and flags")
    stats = pool_stats(df, cfg.des.quantile)
    df = (
        df.with_columns(pl.Series(S.CLUSTER, clusters, dtype=pl.Int32))
        .join(_filter_flags(df.select(S.PROBLEM_ID), filters), on=S.PROBLEM_ID, how="left", maintain_order="left")
        .with_columns(
            pl.col(S.REWARD_EMA).fill_null(pl.col(S.PASS_RATE)),
            (pl.col(ALL_EQUAL) & (pl.col(N_RECENT) >= cfg.min_samples)).fill_null(False).alias(S.ZERO_VARIANCE),
            coscale_pool_expr(cfg.unsolvable_below, cfg.solved_above).alias(S.COSCALE_POOL),
            # ScaleRL's No-Positive-Resampling looks at the observed pass rate, not the prior-smoothed posterior
            # (with a pseudo-count, 8/8 correct never reaches 0.9 and the flag would never fire).
            (
                (pl.col(S.N_SAMPLES) >= cfg.min_samples)
                & (pl.col(S.N_CORRECT) / pl.col(S.N_SAMPLES) >= cfg.solved_threshold)
            )
            .fill_null(False)
            .alias(S.SOLVED),
            pl.col(S.CONTAMINATED).fill_null(False),
            pl.lit(cfg.run).alias(S.RUN),
        )
        .with_columns(des_exprs(cfg.des, cfg.time, cfg.horizon, stats))
        .sort(S.PROBLEM_ID)
    )
    out = S.validate(df, S.SCORES, table="scores").hstack(df.select(EXTRA_COLUMNS))
    report = {
        "prior_predictor": prior_report,
        "cot_predictor": cot_report,
        "pool_stats": asdict(stats),
        "des_weights": [round(v, 4) for v in des_weights(cfg.des.phi)],
        "time_weight": time_weight(cfg.time, cfg.horizon),
        "constant_terms": constant_terms(out),
        "warnings": prior_report.pop("warnings", []) + des_warnings(out),
    }
    return out, report


def des_warnings(scores: pl.DataFrame) -> list[str]:
    """What DES is reduced to when some of its terms are constant, and why (``des.reduced_note``), with the pass
    rate's reason when it is the same for every problem."""
    text = reduced_note(scores)
    if text is None:
        return []
    p = scores[S.PASS_RATE]
    if scores.height > 1 and float(p.max() - p.min()) <= 1e-9:
        text += (
            f"; every problem has the pass rate {float(p[0]):.2f}: no rollouts and no difficulty labels (levels, "
            "a difficulty column). Run `curate rollout`, or `curate import-generations` for a dataset that ships "
            "graded generations, to give DES its difficulty and reward terms"
        )
    return [text]


_EVIDENCE = {
    S.N_SAMPLES: pl.Int32,
    S.N_CORRECT: pl.Int32,
    S.MEAN_TOKENS_CORRECT: pl.Float64,
    S.REWARD_EMA: pl.Float64,
    ALL_EQUAL: pl.Boolean,
    N_RECENT: pl.Int32,
    S.LEARNING_PROGRESS: pl.Float64,
    S.SUSPECT_GOLD: pl.String,
}


def _join_evidence(df: pl.DataFrame, evidence: pl.DataFrame | None) -> pl.DataFrame:
    """Left-join the evidence columns (typed; absent ones null; counts 0 and progress 0 where there is none)."""
    evidence = pl.DataFrame(schema={S.PROBLEM_ID: pl.String}) if evidence is None else evidence
    evidence = evidence.select(
        S.PROBLEM_ID,
        *(pl.col(c).cast(t) if c in evidence.columns else pl.lit(None, t).alias(c) for c, t in _EVIDENCE.items()),
    )
    return df.join(evidence, on=S.PROBLEM_ID, how="left", maintain_order="left").with_columns(
        pl.col(S.N_SAMPLES, S.N_CORRECT).fill_null(0), pl.col(S.LEARNING_PROGRESS).fill_null(0.0)
    )


def prior_evidence(n: np.ndarray, correct: np.ndarray, cfg: ScoreConfig) -> tuple[np.ndarray, str | None]:
    """Which problems' rollouts may train the difficulty prior, and why none may (``None`` when they may).

    A problem counts with ``min_evidence`` rollouts; together they must be ``prior_min_problems`` problems and
    show both outcomes (some correct and some wrong answers), or the prior would learn a constant from them.

    >>> prior_evidence(np.full(12, 8), np.zeros(12), ScoreConfig())[1]
    '12 problems with >= 4 rollouts (need 30), all wrong'
    """
    has = n >= cfg.min_evidence
    k, right, total = int(has.sum()), int(correct[has].sum()), int(n[has].sum())
    need = f"{k} problems with >= {cfg.min_evidence} rollouts (need {cfg.prior_min_problems})"
    problems = [] if k >= cfg.prior_min_problems else [need]
    outcome = [] if 0 < right < total else ["all wrong" if right == 0 else "all right"] if k else []
    why = ", ".join(problems + outcome)
    return (has, None) if not why else (np.zeros_like(has), why)


def _difficulty(df: pl.DataFrame, x: np.ndarray, cfg: ScoreConfig, seed: int) -> tuple[pl.DataFrame, dict]:
    """Prior mean m (label, else the learned predictor), Beta posterior, pass-rate source and d = 1 - p.

    The learned part needs evidence (``prior_evidence``) and must beat predicting the mean on held-out problems;
    otherwise unlabelled problems get ``default_pass_rate`` (no evidence) or the mean (no skill), and the report
    carries a warning. Every problem's own rollouts still enter its posterior.
    """
    n, label = df[S.N_SAMPLES].to_numpy(), df["_label"].to_numpy().astype(float)
    correct = df[S.N_CORRECT].to_numpy()
    has_ledger, weak = prior_evidence(n, correct, cfg)
    y = np.where(has_ledger, correct / np.maximum(n, 1), label)
    train = has_ledger | ~np.isnan(label)
    pred, report = fit_predict(x, y, train, cfg, seed, clip=(0.01, 0.99))
    report["warnings"] = []
    unlabelled = int(np.isnan(label).sum())
    if weak and (n > 0).any():
        report["warnings"].append(f"difficulty prior not trained on rollouts: {weak}")
    if not train.any():
        pred = np.full(len(x), cfg.default_pass_rate)
        report |= {"kind": "default", "n_train": 0}
        if unlabelled and (n > 0).any():
            report["warnings"][-1] += (
                f"; {unlabelled} unlabelled problems keep the default prior {cfg.default_pass_rate}"
            )
    elif report["mae"] is not None and report["mae"] >= report["baseline_mae"]:
        mean = float(y[train].mean())
        pred = np.full(len(x), mean)
        report["kind"] = f"mean (the {report['kind']} prior did not beat it)"
        if unlabelled:
            report["warnings"].append(
                f"the difficulty prior does not beat predicting the mean (held-out MAE {report['mae']} vs "
                f"{report['baseline_mae']}); {unlabelled} unlabelled problems get the mean pass rate {mean:.3f}"
            )
    k, nn = cfg.pseudo_count, pl.col(S.N_SAMPLES)
    source = (
        pl.when(nn >= k).then(pl.lit("ledger")).when(nn > 0).then(pl.lit("blend"))
        .when(pl.col("_label").is_not_null()).then(pl.lit("label")).otherwise(pl.lit("prior"))
    )  # fmt: skip
    df = (
        df.with_columns(pl.coalesce("_label", pl.Series(pred)).alias(S.PRIOR_PASS_RATE))
        .with_columns(posterior_exprs(k))
        .with_columns(source.alias(S.PASS_RATE_SOURCE), (1.0 - pl.col(S.PASS_RATE)).alias(S.DIFFICULTY_SCORE))
    )
    return df, report


def _cot_length(df: pl.DataFrame, x: np.ndarray, cfg: ScoreConfig, seed: int) -> tuple[pl.DataFrame, dict]:
    """ℓ(x): log tokens of correct completions (ledger), else of the reference solution (chars / chars_per_token),
    z-scored within each source; the rest predicted from features by a regressor trained on those z values (or,
    with no length evidence at all, the z-scored log prompt length, source "prompt")."""
    sol = pl.col(S.SOLUTION).fill_null("").str.len_chars()
    from_ledger = (pl.col(S.N_CORRECT) > 0) & pl.col(S.MEAN_TOKENS_CORRECT).is_not_null()
    df = df.with_columns(
        pl.when(from_ledger).then(pl.lit("ledger")).when(sol > 0).then(pl.lit("solution")).alias(S.COT_SOURCE),
        pl.when(from_ledger).then(pl.col(S.MEAN_TOKENS_CORRECT).clip(1.0).log())
        .when(sol > 0).then((sol / cfg.chars_per_token).clip(1.0).log()).alias("_raw_cot"),
    ).with_columns(_zscore("_raw_cot", over=S.COT_SOURCE).alias("_z_cot"))  # fmt: skip
    has = df["_z_cot"].is_not_null().to_numpy()
    if has.any():
        pred, report = fit_predict(x, df["_z_cot"].fill_null(0.0).to_numpy(), has, cfg, seed, None)
        fallback, fallback_source = pl.Series(pred), "predicted"
    else:
        report = {"kind": "prompt_length", "n_train": 0, "mae": None, "baseline_mae": None}
        fallback = df.select(_zscore(pl.col(S.PROMPT_CHARS).cast(pl.Float64).log1p()))[S.PROMPT_CHARS]
        fallback_source = "prompt"
    return df.with_columns(
        pl.coalesce("_z_cot", fallback).alias(S.COT_LENGTH), pl.col(S.COT_SOURCE).fill_null(pl.lit(fallback_source))
    ), report


def _zscore(x: pl.Expr | str, over: str | None = None) -> pl.Expr:
    """(x - mean) / std (ddof=0), within ``over`` groups; 0 where the std is 0."""
    x = pl.col(x) if isinstance(x, str) else x
    mean, std = x.mean(), x.std(ddof=0)
    if over is not None:
        mean, std = mean.over(over), std.over(over)
    return pl.when(std > 0).then((x - mean) / std).otherwise(x * 0.0)


def _filter_flags(ids: pl.DataFrame, filters: pl.DataFrame | None) -> pl.DataFrame:
    """contaminated / duplicate_of per problem from the decontaminate stage's table (all False/None without it)."""
    if filters is None:
        return ids.with_columns(pl.lit(False).alias(S.CONTAMINATED), pl.lit(None, pl.String).alias(S.DUPLICATE_OF))
    flags = filters.group_by(S.PROBLEM_ID).agg(
        pl.col(S.CONTAMINATED).fill_null(False).any(), pl.col(S.DUPLICATE_OF).drop_nulls().first()
    )
    return ids.join(flags, on=S.PROBLEM_ID, how="left", maintain_order="left")


def summarize(scores: pl.DataFrame, report: dict[str, Any], *, filters_present: bool) -> dict[str, Any]:
    """The numbers ``curate score`` prints: counts per source/pool/flag, predictor error, DES spread."""

    def counts(col: str) -> dict[str, int]:
        return {str(k): int(v) for k, v in scores[col].value_counts(sort=True).iter_rows()}

    des = scores[S.DES]
    return {
        "problems": scores.height,
        "pass_rate_source": counts(S.PASS_RATE_SOURCE),
        "cot_source": counts(S.COT_SOURCE),
        "coscale_pool": counts(S.COSCALE_POOL),
        "zero_variance": int(scores[S.ZERO_VARIANCE].sum()),
        "solved": int(scores[S.SOLVED].sum()),
        "contaminated": int(scores[S.CONTAMINATED].sum()) if filters_present else "no filters.parquet (not checked)",
        "clusters": int(scores[S.CLUSTER].n_unique()) if scores.height else 0,
        "prior_mae": report["prior_predictor"]["mae"],
        "prior_baseline_mae": report["prior_predictor"]["baseline_mae"],
        "prior_trained_on": report["prior_predictor"]["n_train"],
        "des_mean": round(float(des.mean()), 4) if scores.height else None,
        "des_p10_p90": [round(float(des.quantile(q, "linear")), 4) for q in (0.1, 0.9)] if scores.height else None,
        "constant_terms": report.get("constant_terms", []),
        "warnings": report.get("warnings", []),
    }


# --------------------------------------------------------------------------------------------------- I/O wrapper
@io.pool_locked
def score_pool(
    ws: io.Workspace,
    pool: str,
    cfg: ScoreConfig,
    *,
    force: bool = False,
    progress: bool = True,
    verify_config: verify.VerifyConfig | None = None,
) -> StageResult:
    """Read the pool's tables, score with ``cfg`` (its ``seed`` too), write ``scores.parquet`` through
    ``run_wrapped`` (skipped when inputs, config and code are unchanged). Holds the pool's lock, so the tables it
    reads and writes do not change under it. ``verify_config``: the checker's settings for the reference solutions
    of suspect golds (the recipe's ``verify:``)."""
    from curate.rollout.ledger import files as ledger_files

    problems_path = ws.require_pool(pool)
    out = ws.table(pool, "scores")
    stats_path, filters_path = ws.table(pool, "stats"), ws.table(pool, "filters")
    conf = asdict(cfg) | {"pool": pool}
    if cfg.suspects and verify_config is not None:  # the checker's settings judge the reference solutions
        conf["verify"] = asdict(verify_config)
    if cfg.use_embeddings:  # the concrete encoder (``default`` is an alias): its clusters differ from another's
        conf["encoder_key"] = encoder_key(cfg.embed)

    def work(_manifest) -> StageOutput:
        problems = io.read_parquet(problems_path, S.PROBLEMS)
        train = problems.filter(~pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS)).sort(S.PROBLEM_ID)
        ledger = read_ledger(ws, pool)
        ledger = usable(ledger, cfg.evidence) if ledger is not None else None
        if ledger is not None and ledger.height:
            evidence, evidence_from = ledger_evidence(ledger, cfg.evidence), "ledger"
            if cfg.suspects:
                check = functools.partial(verify.check_batch, cfg=verify_config or verify.VerifyConfig())
                found = suspect_golds(ledger, train, cfg.evidence, check)
                evidence = evidence.join(found, on=S.PROBLEM_ID, how="left", maintain_order="left")
        elif stats_path.is_file():
            evidence, evidence_from = stats_evidence(io.read_parquet(stats_path, S.STATS), cfg.evidence.model), "stats"
        else:
            evidence, evidence_from = None, "none"
        filters = io.read_parquet(filters_path, S.FILTERS) if filters_path.is_file() else None
        embeddings = (
            cluster.embed_pool(ws, train, cfg.embed, progress) if cfg.use_embeddings and train.height else None
        )
        with bar(4, "scoring", enabled=progress, unit="steps") as advance:
            scores, report = score_frame(
                train, cfg, evidence=evidence, embeddings=embeddings, filters=filters,
                step=lambda name: advance(1, description=f"scoring: {name}"),
            )  # fmt: skip
        summary = summarize(scores, report, filters_present=filters is not None) | {"evidence": evidence_from}
        summary["zero_variance_forecast"] = forecast.of_frame(scores, cfg.rollouts)
        return StageOutput(
            summary,
            tables={out: (scores, None)},
            rows_in=problems.height,
            rows_out=scores.height,
            drops={"split_test": problems.height - train.height},
            extra=report,
        )

    inputs = [problems_path, stats_path, filters_path, *ledger_files(ws, pool)]
    return run_wrapped(ws, "score", inputs=inputs, config=conf, outputs=[out], fn=work, force=force)


def run_stage(ws: io.Workspace, recipe: config.Recipe, *, force: bool = False, progress: bool = False) -> StageResult:
    """The recipe's ``score`` stage on ``recipe.pool`` (seed: the section's, else the recipe's)."""
    cfg = load_config(recipe)
    return score_pool(ws, recipe.pool, cfg, force=force, progress=progress, verify_config=verify.load_config(recipe))
