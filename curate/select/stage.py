"""Stage ``select``: filter the pool, then draw a diverse, DES-weighted, seeded subset (``curate select``).

Reads ``problems.parquet``, ``scores.parquet`` and ``filters.parquet`` when present, and optionally an external
scores file joined by problem text (LIMR's ``scores.json``); writes ``selections/<name>/`` (see
``curate.select.export``).

1. Filters, in this order, each row dropped once with the first reason that applies: split_test (evaluation
   sets are never selected), other_source (not one of ``sources``, when given), contaminated, duplicate
   (``duplicate_of`` another problem), unverifiable_answer, gold_consensus and gold_vs_reference (the gold answer
   is suspect: ``suspect_gold`` of ``curate score``, ``curate.score.headroom``), too_long, zero_variance
   (all-equal rewards with enough evidence; ScaleRL), solved (pass rate >= 0.9 with evidence; ScaleRL's
   No-Positive-Resampling), missing_score (no value in the ``--by`` column), below_min, above_max.
2. Diversity: a quota per cluster proportional to its eligible size (largest-remainder rounding).
3. Within a cluster, a sample without replacement with P(x) ∝ exp(score(x) / T) (ScalingRL's temperature-controlled
   distribution, METHODS.md §1.2), drawn as Gumbel-top-k: key = score / T + Gumbel noise hashed from
   (seed, problem_id). Same seed and inputs give the same subset whatever the row order; T = 0 is greedy top-k.
   With no size cap (size 0, or thresholds without a size) every eligible row is taken and nothing is sampled.

Rows in = selected + not sampled + dropped (by reason); the summary, manifest and dataset card all carry it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from curate import config, io, prompts
from curate import schema as S
from curate.embed import EmbedConfig, encoder_key
from curate.errors import ConfigError, InputError, MissingInput
from curate.manifest import Manifest, read_manifest
from curate.score import des
from curate.score.headroom import SUSPECT_REASONS
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped


DEFAULT_SIZE = 1500
DROP_ORDER = (
    "split_test",
    "other_source",
    "contaminated",
    "duplicate",
    "unverifiable_answer",
    "gold_consensus",
    "gold_vs_reference",
    "too_long",
    "zero_variance",
    "solved",
    "missing_score",
    "below_min",
    "above_max",
)
_KEY = "_key"
UNVERIFIABLE = "unverifiable_answer"  # candidates' flag: no gold form the checker can verify (``answers``)


@dataclass(frozen=True)
class SelectConfig:
    """Settings of ``curate select`` (recipe key ``select:``).

    name: the selection folder (default: the recipe's name, or the pool on the CLI). size: rows to select; None
    means 1500, or every passing row when min_value/max_value is set; 0 = every passing row (no sampling).
    by: the column sampled on (``des``, ``pass_rate``, any numeric column, or the external ``scores_col``);
    a leading ``-`` prefers low values; ``random`` samples uniformly (the random-subset baseline ScalingRL compares
    DES against: no score needed; the filters still apply, turn off ``drop_solved``/``drop_zero_variance`` for a
    subset that uses no evidence at all). min_value / max_value: bounds on that column (before any ``-``).
    temperature: T of P ∝ exp(score / T), in the column's units; 0 = greedy top-k. DES lies in [0, 1], so the
    default T = 1 (§1.2's T_0, the exploratory start) favours high DES at most e-fold; 0.1 is much sharper.
    clusters: None = the clusters in scores.parquet; K >= 2 re-clusters the pool's embeddings with k-means; 0 or 1
    = no diversity quotas.
    scores_file / scores_key / scores_col: an external table (JSON, JSONL, Parquet, CSV) joined by problem text
    (``scores_key``, hashed with schema.problem_id) or by ``problem_id``; several rows of one problem keep the max.
    drop_*: which filters run; ``drop_unverifiable`` leaves out problems whose gold answer the checker cannot verify
    (prose, several values in a sentence; flagged ``unverifiable_answer`` at ingest): their RL reward would be wrong.
    ``drop_suspect_gold`` leaves out problems whose gold answer ``curate score`` found suspect (``suspect_gold``:
    the reason is the drop reason): a reward on a wrong gold that matches a slip of the model teaches the slip.
    prefer_measured: when sampling on a score (``des``, ``pass_rate``, ...) and some eligible problems have rollouts
    of their own (``n_samples > 0``), draw from those first; the others, whose pass rate is predicted, only fill
    what they cannot, and a warning says how many (without it, a measure of 96 prompts gave a selection of 48
    prompts that had never been measured).
    max_prompt_chars: longer problems are dropped as too_long (None = no bound). sources: select only problems
    first read from these ingest sources (their ``name``; None = every source), e.g. the SFT set from one
    generator source and the RL set from another in one pool; the others are dropped as ``other_source``.
    instruction: appended to the problem in the TRL/verl prompts. plots: write the PNG figures. rollouts: rollouts per
    prompt of the RL that follows, for the forecast of zero-variance groups in the pool and the selection
    (``curate.score.forecast``).
    embed: ``curate.embed.EmbedConfig`` settings used when re-clustering.
    """

    name: str | None = None
    sources: tuple[str, ...] | None = None
    size: int | None = None
    seed: int = 0
    by: str = "des"
    min_value: float | None = None
    max_value: float | None = None
    temperature: float = 1.0
    clusters: int | None = None
    scores_file: str | None = None
    scores_key: str = "prompt"
    scores_col: str = "score"
    drop_contaminated: bool = True
    drop_duplicates: bool = True
    drop_unverifiable: bool = True
    drop_suspect_gold: bool = True
    drop_zero_variance: bool = True
    drop_solved: bool = True
    prefer_measured: bool = True
    max_prompt_chars: int | None = 8192
    instruction: str = prompts.INSTRUCTION
    plots: bool = True
    rollouts: int = 8
    embed: EmbedConfig = field(default_factory=EmbedConfig)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise config.ConfigError("select.temperature must be >= 0 (0 = greedy top-k)")
        if self.rollouts < 1:
            raise config.ConfigError("select.rollouts must be >= 1 (rollouts per prompt, for the waste forecast)")
        if self.size is not None and self.size < 0:
            raise config.ConfigError("select.size must be >= 0 (0 = take every row that passes the filters)")

    def effective_size(self) -> int:
        """Rows to draw; 0 means take all eligible rows."""
        if self.size is not None:
            return self.size
        return 0 if (self.min_value is not None or self.max_value is not None) else DEFAULT_SIZE


def load_config(recipe: config.Recipe) -> SelectConfig:
    """The recipe's ``select`` section; ``seed`` defaults to the recipe's."""
    return config.from_mapping(SelectConfig, recipe.seeded_config("select"), "select")


# --------------------------------------------------------------------------------------------------- pure parts
RANDOM = "random"  # ``by: random``: a uniform sample (every eligible row weighs the same)


def by_column(by: str) -> tuple[str, float]:
    """``"-pass_rate"`` -> ("pass_rate", -1.0): the column and the sign of its sampling weight."""
    return (by[1:], -1.0) if by.startswith("-") else (by, 1.0)


def drop_reason_expr(cfg: SelectConfig, column: str) -> pl.Expr:
    """The first filter a row fails (null = eligible), in ``DROP_ORDER``."""
    rules = [
        ("split_test", pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS)),
        ("other_source", pl.lit(cfg.sources is not None) & ~pl.col(S.SOURCE).is_in(list(cfg.sources or ()))),
        ("contaminated", pl.lit(cfg.drop_contaminated) & pl.col(S.CONTAMINATED)),
        ("duplicate", pl.lit(cfg.drop_duplicates) & (pl.col(S.DUPLICATE_OF) != pl.col(S.PROBLEM_ID))),
        ("unverifiable_answer", pl.lit(cfg.drop_unverifiable) & pl.col(UNVERIFIABLE)),
        *((reason, pl.lit(cfg.drop_suspect_gold) & (pl.col(S.SUSPECT_GOLD) == reason)) for reason in SUSPECT_REASONS),
        (
            "too_long",
            pl.lit(cfg.max_prompt_chars is not None) & (pl.col(S.PROMPT_CHARS) > (cfg.max_prompt_chars or 0)),
        ),
        ("zero_variance", pl.lit(cfg.drop_zero_variance) & pl.col(S.ZERO_VARIANCE)),
        ("solved", pl.lit(cfg.drop_solved) & pl.col(S.SOLVED)),
        ("missing_score", pl.col(column).is_null()),
        ("below_min", pl.lit(cfg.min_value is not None) & (pl.col(column) < (cfg.min_value or 0.0))),
        ("above_max", pl.lit(cfg.max_value is not None) & (pl.col(column) > (cfg.max_value or 0.0))),
    ]
    expr = pl.lit(None, pl.String)
    for reason, test in reversed(rules):
        expr = pl.when(test.fill_null(False)).then(pl.lit(reason)).otherwise(expr)
    return expr


def unverifiable_expr() -> pl.Expr:
    """True where no gold alternative is one the checker can verify (``answers.unverifiable_alternatives``)."""
    from curate.verify.answers import unverifiable_alternatives

    return (
        pl.col(S.ANSWER_ALTERNATIVES)
        .map_elements(lambda a: unverifiable_alternatives(list(a)) is not None, return_dtype=pl.Boolean)
        .fill_null(False)
        .alias(UNVERIFIABLE)
    )


def cluster_quotas(counts: dict[int, int], size: int) -> dict[int, int]:
    """Split ``size`` over clusters in proportion to ``counts`` with largest-remainder (Hamilton) rounding.

    Integer arithmetic, so the result is exact; remainder ties go to the larger cluster, then the lower id.

    >>> cluster_quotas({0: 5, 1: 3, 2: 2}, 4)
    {0: 2, 1: 1, 2: 1}
    """
    total = sum(counts.values())
    if size >= total:
        return dict(counts)
    quotas = {c: n * size // total for c, n in counts.items()}
    order = sorted(counts, key=lambda c: (-(counts[c] * size % total), -counts[c], c))
    for c in order[: size - sum(quotas.values())]:
        quotas[c] += 1
    return quotas


def gumbel_noise(ids: Sequence[str], seed: int) -> np.ndarray:
    """Standard Gumbel noise per id from blake2b(seed, id): deterministic and independent of row order."""
    bits = [int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "big") >> 11 for i in ids]
    u = (np.asarray(bits, dtype=np.float64) + 0.5) / float(1 << 53)
    return -np.log(-np.log(u))


def select_frame(candidates: pl.DataFrame, cfg: SelectConfig) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Filter, apportion and sample (seeded by ``cfg.seed``). Returns (selection, drops [problem_id, drop_reason],
    report).

    ``candidates`` needs problem_id, split, contaminated, duplicate_of, prompt_chars, zero_variance, solved,
    cluster and the ``by`` column (see ``build_candidates``; ``suspect_gold`` is read when present). The selection
    keeps every candidate column plus ``select_score`` and ``rank`` (1 = highest sampling key).
    """
    column, sign = by_column(cfg.by)
    if column == RANDOM:  # equal weights: the Gumbel keys alone order the rows, a uniform sample per cluster
        candidates = candidates.with_columns(pl.lit(0.0).alias(RANDOM))
    if column not in candidates.columns:
        numeric = sorted(c for c, t in candidates.schema.items() if t.is_numeric() and not c.startswith("_"))
        raise ConfigError(f"--by {column!r} is not a column of the candidates; numeric columns: {numeric}")
    if UNVERIFIABLE not in candidates.columns:
        candidates = candidates.with_columns(unverifiable_expr())
    if S.SUSPECT_GOLD not in candidates.columns:  # a candidates frame of scores without suspects
        candidates = candidates.with_columns(pl.lit(None, pl.String).alias(S.SUSPECT_GOLD))
    frame = (
        candidates.sort(S.PROBLEM_ID)
        .with_columns(pl.col(column).cast(pl.Float64).fill_nan(None).alias(S.SELECT_SCORE))
        .with_columns(drop_reason_expr(cfg, S.SELECT_SCORE).alias(S.DROP_REASON))
    )
    drops = frame.filter(pl.col(S.DROP_REASON).is_not_null()).select(S.PROBLEM_ID, S.DROP_REASON)
    eligible = frame.filter(pl.col(S.DROP_REASON).is_null()).drop(S.DROP_REASON)
    size = cfg.effective_size()
    sampled = 0 < size < eligible.height
    measured = _measured(eligible, cfg, column)
    if sampled and measured is not None and 0 < int(measured.sum()) < eligible.height:
        first = eligible.filter(measured)  # prompts with rollouts of their own first; the rest only fill up
        tiers = [_draw(first, min(size, first.height), cfg, column, sign)]
        if size > first.height:
            tiers.append(_draw(eligible.filter(~measured), size - first.height, cfg, column, sign))
        chosen = pl.concat([t.with_columns(pl.lit(-k).alias("_tier")) for k, t in enumerate(tiers)])
    else:
        chosen = _draw(eligible, size if sampled else eligible.height, cfg, column, sign).with_columns(_tier=0)
    chosen = (
        chosen.sort(["_tier", _KEY, S.PROBLEM_ID], descending=[True, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).alias(S.RANK))
        .drop(_KEY, "_tier")
    )
    counts = dict(eligible.group_by(S.CLUSTER).len().iter_rows())
    reasons = dict(drops.group_by(S.DROP_REASON).len().iter_rows())
    report = {
        "rows_in": candidates.height,
        "dropped": {r: int(reasons[r]) for r in DROP_ORDER if r in reasons},
        "eligible": eligible.height,
        "selected": chosen.height,
        "not_sampled": eligible.height - chosen.height,
        "sampled": sampled,
        "size_requested": size,
        "clusters_eligible": len(counts),
        "clusters_selected": chosen[S.CLUSTER].n_unique() if chosen.height else 0,
    }
    if measured is not None:  # how many prompts the sampled score was measured on, not predicted for
        report["measured"] = {
            "candidates": int(_measured(candidates, cfg, column).sum()),
            "eligible": int(measured.sum()),
            "selected": int(chosen.select((pl.col(S.N_SAMPLES).fill_null(0) > 0).sum()).item()),
        }
    assert report["selected"] + report["not_sampled"] + drops.height == candidates.height
    return chosen, drops, report


def _measured(frame: pl.DataFrame, cfg: SelectConfig, column: str) -> pl.Series | None:
    """Which rows have rollouts of their own (``n_samples > 0``), when the selection samples on a score that comes
    from them (``SCORE_DRIVEN``) and ``prefer_measured`` is on; else None (no preference)."""
    if not cfg.prefer_measured or column not in SCORE_DRIVEN or S.N_SAMPLES not in frame.columns:
        return None
    return frame[S.N_SAMPLES].fill_null(0) > 0


def _draw(eligible: pl.DataFrame, size: int, cfg: SelectConfig, column: str, sign: float) -> pl.DataFrame:
    """``size`` rows of ``eligible`` (all of them when ``size`` is its height): per-cluster quotas, and within a
    cluster the highest sampling keys (the score over T plus Gumbel noise, ``_KEY``), which stay in the frame."""
    sampled = 0 < size < eligible.height
    weight = sign * pl.col(S.SELECT_SCORE)
    if sampled and (cfg.temperature > 0 or column == RANDOM):
        noise = pl.Series(_KEY, gumbel_noise(eligible[S.PROBLEM_ID].to_list(), cfg.seed))
        scaled = weight / cfg.temperature if cfg.temperature > 0 else pl.lit(0.0)  # random at T = 0: noise alone
        eligible = eligible.with_columns((scaled + noise).alias(_KEY))
    else:
        eligible = eligible.with_columns(weight.alias(_KEY))
    counts = dict(eligible.group_by(S.CLUSTER).len().iter_rows())
    quotas = cluster_quotas(counts, size) if sampled else counts
    return (
        eligible.with_columns(pl.col(_KEY).rank("ordinal", descending=True).over(S.CLUSTER).alias("_r"))
        .join(pl.DataFrame({S.CLUSTER: list(quotas), "_q": list(quotas.values())}).cast({S.CLUSTER: pl.Int32}),
              on=S.CLUSTER, how="left", maintain_order="left")
        .filter(pl.col("_r") <= pl.col("_q"))
        .drop("_r", "_q")
    )  # fmt: skip


def waste_forecast(candidates: pl.DataFrame, selection: pl.DataFrame, cfg: SelectConfig) -> dict[str, Any]:
    """The forecast share of zero-variance groups (``curate.score.forecast``) over the pool the selection draws from
    (its sources' train problems) and over the selection, at ``cfg.rollouts`` rollouts per prompt."""
    from curate.score import forecast

    pool = candidates.filter(pl.col(S.SPLIT) == "train")
    if cfg.sources is not None:
        pool = pool.filter(pl.col(S.SOURCE).is_in(list(cfg.sources)))
    return {"pool": forecast.of_frame(pool, cfg.rollouts), "selection": forecast.of_frame(selection, cfg.rollouts)}


# --------------------------------------------------------------------------------------------------- inputs
def load_external_scores(path: str | Path, key: str, column: str) -> tuple[pl.DataFrame, dict[str, int]]:
    """An external score table as [problem_id, column] (max per problem), plus counts for the summary."""
    path = Path(path)
    if not path.is_file():
        raise MissingInput(f"scores file {path} not found")
    suffix = path.suffix.lower()
    if suffix == ".json":
        raw = pl.DataFrame(json.loads(path.read_text(encoding="utf-8")))
    elif suffix == ".jsonl":
        raw = pl.read_ndjson(path)
    elif suffix == ".csv":
        raw = pl.read_csv(path)
    else:
        raw = pl.read_parquet(path)
    missing = [c for c in (key, column) if c not in raw.columns]
    if missing:
        raise InputError(f"scores file {path} has no column(s) {missing}; columns: {raw.columns}")
    ids = raw[key].cast(pl.String) if key == S.PROBLEM_ID else [S.problem_id(t) for t in raw[key].cast(pl.String)]
    table = (
        raw.select(pl.Series(S.PROBLEM_ID, ids, dtype=pl.String), pl.col(column).cast(pl.Float64))
        .group_by(S.PROBLEM_ID)
        .agg(pl.col(column).max())
    )
    return table, {"rows": raw.height, "problems": table.height}


def build_candidates(
    problems: pl.DataFrame,
    scores: pl.DataFrame | None,
    filters: pl.DataFrame | None,
    external: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per problem with what the filters and the sampler read; missing inputs give neutral defaults."""
    keep = [S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.SOURCE, S.SPLIT, S.LEVEL, S.DIFFICULTY]
    frame = problems.select(*keep, S.SUBJECT).with_columns(
        pl.col(S.PROBLEM).str.len_chars().cast(pl.Int32).alias(S.PROMPT_CHARS)
    )
    flags = {S.CONTAMINATED, S.DUPLICATE_OF, S.PROMPT_CHARS}
    if scores is not None:
        frame = frame.join(scores.drop([c for c in scores.columns if c in flags or c in keep[1:]] + [S.RUN]),
                           on=S.PROBLEM_ID, how="left", maintain_order="left")  # fmt: skip
    if filters is not None:
        flag_frame = filters.group_by(S.PROBLEM_ID).agg(
            pl.col(S.CONTAMINATED).fill_null(False).any(), pl.col(S.DUPLICATE_OF).drop_nulls().first()
        )
    elif scores is not None:
        flag_frame = scores.select(S.PROBLEM_ID, S.CONTAMINATED, S.DUPLICATE_OF)
    else:
        flag_frame = pl.DataFrame(
            schema={S.PROBLEM_ID: pl.String, S.CONTAMINATED: pl.Boolean, S.DUPLICATE_OF: pl.String}
        )
    frame = frame.join(flag_frame, on=S.PROBLEM_ID, how="left", maintain_order="left")
    if external is not None:
        clash = [c for c in external.columns if c != S.PROBLEM_ID and c in frame.columns]
        if clash:
            raise InputError(f"--scores-col {clash} clashes with a pool column; rename it in the scores file")
        frame = frame.join(external, on=S.PROBLEM_ID, how="left", maintain_order="left")
    defaults = {
        S.CONTAMINATED: pl.lit(False), S.DUPLICATE_OF: pl.lit(None, pl.String), S.ZERO_VARIANCE: pl.lit(False),
        S.SOLVED: pl.lit(False), S.CLUSTER: pl.lit(0, pl.Int32), S.PASS_RATE: pl.lit(None, pl.Float64),
        S.DES: pl.lit(None, pl.Float64), S.SUSPECT_GOLD: pl.lit(None, pl.String),
    }  # fmt: skip
    return frame.with_columns(
        pl.col(c).fill_null(v) if c in frame.columns else v.alias(c) for c, v in defaults.items()
    )


# --------------------------------------------------------------------------------------------------- I/O wrapper
def select_pool(
    ws: io.Workspace,
    pool: str,
    cfg: SelectConfig,
    *,
    name: str,
    force: bool = False,
    progress: bool = True,
) -> StageResult:
    """Read the pool, select with ``cfg`` (its ``seed`` too), and write ``selections/<name>/`` through
    ``run_wrapped`` (skipped when inputs, config and code match its manifest)."""
    from curate.select import export

    problems_path = ws.require_pool(pool)
    scores_path, filters_path = ws.table(pool, "scores"), ws.table(pool, "filters")
    paths = [problems_path, scores_path, filters_path] + ([Path(cfg.scores_file)] if cfg.scores_file else [])
    out = ws.selection_dir(name)
    conf = asdict(cfg) | {"pool": pool, "name": name}
    if (cfg.clusters or 0) > 1:  # re-clusters over embeddings: record the concrete encoder
        conf["encoder_key"] = encoder_key(cfg.embed)

    def work(manifest: Manifest) -> StageOutput:
        problems = io.read_parquet(problems_path, S.PROBLEMS)
        scores = io.read_parquet(scores_path) if scores_path.is_file() else None
        filters = io.read_parquet(filters_path, S.FILTERS) if filters_path.is_file() else None
        external, external_info = None, None
        if cfg.scores_file:
            external, external_info = load_external_scores(cfg.scores_file, cfg.scores_key, cfg.scores_col)
        if scores is None and by_column(cfg.by)[0] in (S.DES, S.PASS_RATE):
            raise MissingInput(
                f"no scores for pool {pool!r} ({scores_path}); run `curate score --pool {pool}` first, or select "
                "--by a column of the pool or of --scores-file"
            )
        candidates = build_candidates(problems, scores, filters, external)
        if cfg.clusters is not None:
            candidates = _recluster(ws, candidates, cfg, progress)
        selection, drops, report = select_frame(candidates, cfg)
        summary = {
            "selection": name,
            "path": str(out),
            "pool": pool,
            **report,
            "by": cfg.by,
            "temperature": cfg.temperature,
            "seed": cfg.seed,
            "sources": dict(selection.group_by(S.SOURCE).len().sort(S.SOURCE).iter_rows()),
            "zero_variance_forecast": waste_forecast(candidates, selection, cfg),
            "warnings": _warnings(scores, filters, cfg, report) + score_warnings(read_manifest(scores_path), cfg),
        }
        if external_info is not None:
            summary["scores_file"] = external_info | {"matched": int(candidates[cfg.scores_col].is_not_null().sum())}
        result = StageOutput(
            summary,
            rows_in=candidates.height,
            rows_out=selection.height,
            drops=dict(report["dropped"]) | {"not_sampled": report["not_sampled"]},
            extra={"score_manifest": read_manifest(scores_path)},
        )
        # the dataset card inside the folder is written from the manifest: fill it before the folder is built
        manifest.summary, manifest.rows_in, manifest.rows_out = summary, result.rows_in, result.rows_out
        manifest.drops = dict(result.drops)
        manifest.extra.update(result.extra)
        pool_rows = candidates.filter(~pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS))
        export.write_selection(
            out, selection, pool_rows, drops, manifest, instruction=cfg.instruction, plots=cfg.plots
        )
        return result

    with ws.lock("selection", name):  # one writer of the folder at a time, from the skip check to its manifest
        return run_wrapped(ws, "select", inputs=paths, config=conf, outputs=[out], fn=work, force=force)


def _recluster(ws: io.Workspace, candidates: pl.DataFrame, cfg: SelectConfig, progress: bool) -> pl.DataFrame:
    """Replace ``cluster``: k-means with ``cfg.clusters`` over the train rows' embeddings (0/1: one cluster)."""
    if (cfg.clusters or 0) <= 1:
        return candidates.with_columns(pl.lit(0, pl.Int32).alias(S.CLUSTER))
    from curate import cluster

    train = candidates.filter(~pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS)).sort(S.PROBLEM_ID)
    labels = cluster.kmeans_clusters(cluster.embed_pool(ws, train, cfg.embed, progress), cfg.clusters, cfg.seed)
    fresh = pl.DataFrame({S.PROBLEM_ID: train[S.PROBLEM_ID], S.CLUSTER: pl.Series(labels, dtype=pl.Int32)})
    return (
        candidates.drop(S.CLUSTER)
        .join(fresh, on=S.PROBLEM_ID, how="left", maintain_order="left")
        .with_columns(pl.col(S.CLUSTER).fill_null(0))
    )


def _warnings(
    scores: pl.DataFrame | None, filters: pl.DataFrame | None, cfg: SelectConfig, report: dict[str, Any]
) -> list[str]:
    out = []
    size = cfg.effective_size()
    if size and report["eligible"] < size:
        dropped = ", ".join(f"{k}={v}" for k, v in report["dropped"].items()) or "none"
        out.append(
            f"size {size} asked for, but only {report['eligible']} rows pass the filters, so the selection has "
            f"{report['selected']} (drops: {dropped})"
        )
    measured = report.get("measured") or {}
    unmeasured = report["selected"] - measured.get("selected", report["selected"])
    if measured.get("candidates") and unmeasured:
        out.append(
            f"{unmeasured} of the {report['selected']} selected prompts have no rollouts of their own, only predicted "
            f"pass rates: {measured['eligible']} of the {measured['candidates']} measured prompts pass the filters, "
            "and the selection holds all of them (measure more prompts, e.g. a larger rollout.limit, or select fewer)"
        )
    if filters is None:
        out.append("no filters.parquet: not decontaminated or deduplicated (run the decontaminate stage)")
    if scores is None:
        out.append("no scores.parquet: no clusters, zero-variance or solved filters (run `curate score`)")
    return out


def score_warnings(score_manifest: dict[str, Any] | None, cfg: SelectConfig) -> list[str]:
    """The score stage's warnings (weak difficulty prior, constant DES terms) when the selection samples on a
    score column, so the dataset card says when DES was reduced to prompt length."""
    if not score_manifest or by_column(cfg.by)[0] not in SCORE_DRIVEN:
        return []
    return list((score_manifest.get("extra") or {}).get("warnings") or [])


SCORE_DRIVEN = (S.DES, S.PASS_RATE, S.DIFFICULTY_SCORE, *des.COLUMNS, S.PRIOR_PASS_RATE)


def selection_name(cfg: SelectConfig, recipe: config.Recipe) -> str:
    """The folder a recipe's select stage writes: ``select.name``, else the recipe's name."""
    return cfg.name or recipe.name


def run_stage(ws: io.Workspace, recipe: config.Recipe, *, force: bool = False, progress: bool = False) -> StageResult:
    """The recipe's ``select`` stage on ``recipe.pool`` (seed: the section's, else the recipe's)."""
    cfg = load_config(recipe)
    return select_pool(ws, recipe.pool, cfg, name=selection_name(cfg, recipe), force=force, progress=progress)
