r"""The ``decontaminate`` stage: train problems that leak evaluation items, and near-duplicate clusters.

Benchmarks are every evaluation problem of the pool (``split`` validation or test) plus every problem of the pools
named in ``benchmark_pools``. A train problem is contaminated when one of three tests matches it to a benchmark item
(the strongest wins: exact, then ngram, then embedding):

- ``exact``: equal token sequences after LaTeX/whitespace normalization (``curate.decontaminate.dedup.tokenize``).
  Ingest already drops case/whitespace-exact copies; this catches formatting variants (``\dfrac``/``\frac``,
  ``a_{1}``/``a_1``, ``\leqslant``/``\le``, ``\left(``, AoPS ``[i]`` tags, ``\tag{1}``, ``xy``/``x y``).
- ``ngram``: the fraction of the benchmark item's ``ngram_n``-token n-grams (numbers and operators kept) found in
  the train problem is >= ``ngram_threshold``, AND the pair is compatible (below).
- ``embedding``: cosine >= ``embed_threshold`` to a benchmark item, AND the pair is compatible.

Compatible (our rule, against template siblings, ANALYSIS.md §4): the two have the same numbers (for a benchmark item
of ``number_slack_tokens`` or more, or one contained whole in the train problem, one side's numbers may be a
sub-multiset of the other's), so ``divided by 9`` vs ``divided by 8`` fails; AND the gold answers agree: a shared
``answer_key``, or the same numbers and operators (``curate.decontaminate.dedup.answers_compatible``: ``n=1,2,3,4`` vs
``1,2,3,4``, tuples in another order), or math-verify says they are equal (``\frac 9{16\sqrt 2}`` vs
``\frac{9}{32}\sqrt 2``; ``verify_answers``). An n-gram score of 1.0 (``contained_threshold``: the whole benchmark text
is inside the train problem) needs only the numbers. ``ELLIPSE`` vs ``SUCCESS`` (answers 1260 vs 420) and "same
diagram, another question" items fail. A leak is a leak whatever its gold (a reworded copy with a typo'd gold, as
DeepScaleR's conflicting copies have, is one): a candidate that asks the same question, word for word once the words
that only ask are dropped (``tokenize(asking=False)``: ``Compute $E$.`` and ``What is the value of $E$?``), or that
asks to evaluate the same expression (``dedup.expression``: ``Work out $E$.``), is contaminated even when the answers
differ; its quarantine detail names both golds. Pairs that pass the text or embedding test but fail compatibility are
counted as ``siblings_ignored``, with examples, for review.

Constants, tuned on DeepScaleR (FastCuRL L1+L3) against MATH-500 and the DeepScaleR test sets by reading every
candidate (bench/HISTORY.md has the counts): n = 8 tokens; n-gram threshold 0.4 (true leaks scored down to 0.48,
and one at 0.35 that the embedding test catches; at n = 5 and 0.3, short items whose small-integer answers
coincide got through); embedding threshold 0.85 with all-MiniLM-L6-v2 (0.85-0.89 holds reworded olympiad
problems, all true leaks; at 0.80 a different functional equation with the same answer got in). All pairs above
0.9 were already found by the text tests. The cosine thresholds (embedding test, near duplicates) are per encoder
(``curate.embed.THRESHOLDS``): unset in the config, they are the encoder's calibrated values, and the resolved
values and the encoder's cache key are recorded in the stage's manifest.

Then, among the train problems that are not contaminated, near-duplicate clusters are found (``dedup``).
Outputs: ``filters.parquet`` (schema.FILTERS, one row per train problem) and the stage's own quarantine table
``quarantine_decontaminate.parquet`` (reasons ``contaminated`` and ``near_duplicate``), replaced on every run. The
problems table is not modified; later stages join filters.parquet.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from curate import io
from curate import schema as S
from curate.config import ConfigError, Recipe, from_mapping
from curate.decontaminate.dedup import (
    SIMILARITY,
    DedupConfig,
    answers_compatible,
    expression,
    near_duplicates,
    ngrams,
    numbers,
    numbers_compatible,
    tokenize,
)
from curate.embed import EmbedConfig, embed_problems, encoder_key, thresholds
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped


STAGE = "decontaminate"
KINDS = ("exact", "ngram", "embedding")


@dataclass(frozen=True)
class DecontamConfig:
    r"""Settings of the ``decontaminate`` stage (recipe key ``decontaminate``).

    benchmark_pools: other pools whose every problem is an evaluation item (besides this pool's validation and test
    splits). ngram_n / ngram_threshold: n-gram length in tokens and the minimum fraction of the benchmark item's
    n-grams found in the train problem. short_ngram_n: the n-gram length for benchmark items of at most ``ngram_n``
    tokens (a short item's numbers must then equal the train problem's exactly, as ever). contained_threshold: at
    or above this n-gram score the benchmark text is entirely inside the train problem, and only the numbers must
    be compatible, not the answers (a train item that adds a second question still leaks the first).
    number_slack_tokens: benchmark items shorter than this (in tokens) need exactly the train problem's numbers;
    longer or contained ones allow a sub-multiset either way.
    use_embeddings / embed_threshold: the embedding test and its minimum cosine (None: the encoder's calibrated
    value, ``curate.embed.THRESHOLDS``; so is ``dedup.threshold``). compatible: require the numbers-and-answer
    agreement of the module docstring (off: text alone). verify_answers: ask math-verify (``curate.verify``) about
    answers the string rules cannot match (``\frac 9{16\sqrt 2}`` vs ``\frac{9}{32} \sqrt{2}``). max_candidates:
    benchmark items checked per train problem and test. max_examples: examples per kind in the summary. embed: the
    encoder (shared cache). dedup: near-duplicate clustering (``curate.decontaminate.dedup.DedupConfig``).
    """

    benchmark_pools: tuple[str, ...] = ()
    ngram_n: int = 8
    short_ngram_n: int = 3
    ngram_threshold: float = 0.4
    contained_threshold: float = 1.0
    number_slack_tokens: int = 40
    use_embeddings: bool = True
    embed_threshold: float | None = None
    compatible: bool = True
    verify_answers: bool = True
    max_candidates: int = 3
    max_examples: int = 5
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)

    def __post_init__(self) -> None:
        if not 1 <= self.short_ngram_n <= self.ngram_n:
            raise ConfigError("decontaminate: need 1 <= short_ngram_n <= ngram_n")
        if not 0.0 < self.ngram_threshold <= 1.0:
            raise ConfigError("decontaminate.ngram_threshold must be in (0, 1]")


def load_config(recipe: Recipe) -> DecontamConfig:
    return from_mapping(DecontamConfig, recipe.stage_config(STAGE), STAGE)


def with_thresholds(cfg: DecontamConfig) -> DecontamConfig:
    """``cfg`` with the encoder's calibrated cosines where ``embed_threshold`` / ``dedup.threshold`` are None (an
    encoder without calibration then fails with a ConfigError naming the two keys)."""
    need_embed = cfg.use_embeddings and cfg.embed_threshold is None
    need_dedup = cfg.dedup.enabled and cfg.dedup.threshold is None
    if not (need_embed or need_dedup):
        return cfg
    t = thresholds(cfg.embed.encoder)
    return replace(
        cfg,
        embed_threshold=t.contamination if cfg.embed_threshold is None else cfg.embed_threshold,
        dedup=replace(cfg.dedup, threshold=t.near_duplicate if cfg.dedup.threshold is None else cfg.dedup.threshold),
    )


# --------------------------------------------------------------------------------------------------- matching
@dataclass
class _Side:
    """Tokens, n-grams, numbers and answers of one side (train or benchmarks), aligned with its frame."""

    tokens: list[list[str]]
    grams: list[set[int]]
    nums: list[Counter]
    answers: list[list[str]]
    questions: list[tuple[str, ...]]  # its expression (``dedup.expression``), else ``tokenize(asking=False)``

    @classmethod
    def of(cls, frame: pl.DataFrame, n: int, short: int, bench: bool) -> _Side:
        """``bench``: a benchmark item of at most ``n`` tokens gets ``short``-token n-grams (one n-gram of the whole
        item could only match a train problem that contains it word for word, and a reworded copy of a short item,
        ``What is $4 + 10$?`` for ``Compute $4 + 10$.``, would never be found); the train side has both sizes."""
        texts = frame[S.PROBLEM].to_list()
        tokens = [tokenize(p) for p in texts]
        alts = frame[S.ANSWER_ALTERNATIVES].to_list()
        answers = [list(a) if a else [x or ""] for a, x in zip(alts, frame[S.ANSWER].to_list(), strict=True)]
        if bench:
            grams = [ngrams(t, short if len(t) <= n else n) for t in tokens]
        else:
            grams = [ngrams(t, n) | (ngrams(t, short) if len(t) > short else set()) for t in tokens]
        questions = [expression(p) or tuple(tokenize(p, asking=False)) for p in texts]
        return cls(tokens, grams, [numbers(t) for t in tokens], answers, questions)


def _numbers_agree(t: Counter, b: Counter, b_tokens: int, contained: bool, cfg: DecontamConfig) -> bool:
    """Equal numbers; or, when the benchmark text is contained or long (``number_slack_tokens``), one side may carry
    extra numbers (added context, a dropped index list). In a short problem every number is the problem."""
    if t == b:
        return True
    return (contained or b_tokens >= cfg.number_slack_tokens) and numbers_compatible(t, b)


Candidates = dict[int, list[tuple[int, float]]]  # train row -> [(bench row, score)], best first


def text_candidates(
    train: _Side, bench: _Side, cfg: DecontamConfig, progress: bool = False
) -> tuple[dict[int, int], Candidates]:
    """Exact matches ``{train row: bench row}`` and n-gram candidates: the benchmark rows whose n-gram containment
    in the train problem is >= ``ngram_threshold`` (at most ``max_candidates`` per train row)."""
    from curate.progress import bar

    exact: dict[tuple[str, ...], int] = {}
    index: dict[int, list[int]] = defaultdict(list)
    for j, (tokens, grams) in enumerate(zip(bench.tokens, bench.grams, strict=True)):
        if tokens:
            exact.setdefault(tuple(tokens), j)
        for g in grams:
            index[g].append(j)
    hits: dict[int, int] = {}
    found: Candidates = {}
    n = len(train.tokens)
    with bar(n, "n-gram matching", enabled=progress, unit="problems") as advance:
        for i in range(n):
            if i % 256 == 0:
                advance(min(256, n - i))
            j = exact.get(tuple(train.tokens[i])) if train.tokens[i] else None
            if j is not None:
                hits[i] = j
                continue
            counts: Counter = Counter()
            for g in train.grams[i]:
                counts.update(index.get(g, ()))
            cands = [
                (j, c / len(bench.grams[j]))
                for j, c in counts.items()
                if c >= cfg.ngram_threshold * len(bench.grams[j])
            ]
            if cands:
                found[i] = sorted(cands, key=lambda x: (-x[1], x[0]))[: cfg.max_candidates]
    return hits, found


def text_duplicate_edges(frame: pl.DataFrame, cfg: DecontamConfig) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(i, j)``, ``i < j``, of ``frame``'s problems that are the same problem reworded: each one's n-grams
    (``_Side.of``'s short-item rule) found in the other at ``ngram_threshold`` or more, the same numbers exactly
    and answers with the same ``answer_key``. The near-duplicate test that needs no embeddings (``dedup.text``)."""
    from curate.verify import answers as A

    as_train = _Side.of(frame, cfg.ngram_n, cfg.short_ngram_n, bench=False)
    as_item = _Side.of(frame, cfg.ngram_n, cfg.short_ngram_n, bench=True)
    keys = [A.answer_key(a or "") for a in frame[S.ANSWER].to_list()]
    index: dict[int, list[int]] = defaultdict(list)
    for j, grams in enumerate(as_item.grams):
        for g in grams:
            index[g].append(j)
    pairs: set[tuple[int, int]] = set()
    for i, grams in enumerate(as_train.grams):
        counts: Counter = Counter()
        for g in grams:
            counts.update(index.get(g, ()))
        for j, c in counts.items():
            if j == i or not keys[i] or keys[i] != keys[j] or as_train.nums[i] != as_train.nums[j]:
                continue
            if c >= cfg.ngram_threshold * len(as_item.grams[j]):
                pairs.add((min(i, j), max(i, j)))
    ordered = sorted(pairs)
    return np.array([p[0] for p in ordered], dtype=np.int64), np.array([p[1] for p in ordered], dtype=np.int64)


def embedding_candidates(
    train_vecs: np.ndarray, bench_vecs: np.ndarray, threshold: float, top: int, block_size: int = 4096
) -> Candidates:
    """Per train row, the benchmark rows with cosine >= ``threshold`` (the ``top`` nearest), blocked over train rows
    so memory is ``block_size x len(bench)`` floats."""
    found: Candidates = {}
    for lo in range(0, len(train_vecs), block_size):
        sims = train_vecs[lo : lo + block_size] @ bench_vecs.T
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            found.setdefault(lo + r, []).append((c, float(sims[r, c])))
    return {i: sorted(c, key=lambda x: (-x[1], x[0]))[:top] for i, c in found.items()}


def resolve(
    candidates: Candidates, train: _Side, bench: _Side, cfg: DecontamConfig, kind: str, equivalent=None
) -> tuple[dict[int, tuple[int, str, float]], list[tuple[int, int, float]]]:
    """Keep, per train row, the best candidate that is compatible (module docstring); the rest are siblings.

    Numbers must be compatible. Answers must agree by ``answers_compatible``, or (n-gram scores at or above
    ``contained_threshold``) need not, or else ``equivalent(pairs) -> list[bool]`` (math-verify, batched, bounded
    in time) decides for the candidates still open. A pair whose answers differ is still a hit when both ask the
    same question (``_Side.questions`` equal): a copy with a wrong gold. Returns ``({train row: (bench row, kind,
    score)}, siblings)``.
    """
    state: dict[tuple[int, int], bool | None] = {}
    for i, cands in candidates.items():
        for j, score in cands:
            # a short item's 3-grams can all be found in a problem that only starts like it (``Compute $4 + 10 - 3 +
            # 5$.`` for ``Compute $4 + 10 - 3$.``): containment, which waives the answers, needs full-length n-grams
            short = len(bench.tokens[j]) <= cfg.ngram_n
            contained = kind == "ngram" and score >= cfg.contained_threshold and not short
            if not cfg.compatible:
                state[i, j] = True
            elif not _numbers_agree(train.nums[i], bench.nums[j], len(bench.tokens[j]), contained, cfg):
                state[i, j] = False
            elif contained or answers_compatible(train.answers[i], bench.answers[j]):
                state[i, j] = True
            else:
                state[i, j] = None
    open_pairs = [pair for pair, ok in state.items() if ok is None]
    if open_pairs and equivalent is not None:
        verdicts = equivalent([(train.answers[i][0], bench.answers[j][0]) for i, j in open_pairs])
        state.update(zip(open_pairs, (bool(v) for v in verdicts), strict=True))
    for i, j in [pair for pair, ok in state.items() if not ok]:
        state[i, j] = bool(train.questions[i]) and train.questions[i] == bench.questions[j]
    hits, siblings = {}, []
    for i, cands in candidates.items():
        ok = [(j, score) for j, score in cands if state[i, j]]
        if ok:
            hits[i] = (ok[0][0], kind, ok[0][1])
        else:
            siblings.append((i, cands[0][0], cands[0][1]))
    return hits, siblings


def _default_equivalent(cfg: DecontamConfig):
    if not (cfg.compatible and cfg.verify_answers):
        return None
    from curate import verify

    return verify.equivalent_batch


def decontaminate(
    train: pl.DataFrame,
    bench: pl.DataFrame,
    cfg: DecontamConfig,
    train_vecs: np.ndarray | None = None,
    bench_vecs: np.ndarray | None = None,
    progress: bool = False,
    equivalent=None,
) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """Match train problems to benchmark items (pure: frames in, frame out).

    Returns one row per train problem (problem_id, contaminated, contaminated_by, benchmark, contamination_kind,
    contamination_score), in ``train``'s order, and the ignored siblings (dicts for the summary). The embedding test
    runs when both vector arrays are given and ``cfg.use_embeddings``. ``equivalent`` overrides the math-verify
    answer check (``curate.verify.equivalent_batch`` when ``cfg.verify_answers``).
    """
    cfg = with_thresholds(cfg)
    if equivalent is None:
        equivalent = _default_equivalent(cfg)
    t_side = _Side.of(train, cfg.ngram_n, cfg.short_ngram_n, bench=False)
    b_side = _Side.of(bench, cfg.ngram_n, cfg.short_ngram_n, bench=True)
    exact, ngram_cands = text_candidates(t_side, b_side, cfg, progress)
    best: dict[int, tuple[int, str, float]] = {i: (j, "exact", 1.0) for i, j in exact.items()}
    if cfg.use_embeddings and train_vecs is not None and bench_vecs is not None and len(bench_vecs):
        emb = embedding_candidates(train_vecs, bench_vecs, cfg.embed_threshold, cfg.max_candidates)
        emb_cands = {i: c for i, c in emb.items() if i not in best}
    else:
        emb_cands = {}
    ngram_hits, siblings = resolve(ngram_cands, t_side, b_side, cfg, "ngram", equivalent)
    best.update({i: m for i, m in ngram_hits.items() if i not in best})
    emb_hits, emb_siblings = resolve(
        {i: c for i, c in emb_cands.items() if i not in best}, t_side, b_side, cfg, "embedding", equivalent
    )
    best.update(emb_hits)
    siblings += emb_siblings
    n = train.height
    bench_ids, bench_src = bench[S.PROBLEM_ID].to_list(), bench[S.SOURCE].to_list()
    match = [best.get(i) for i in range(n)]
    frame = pl.DataFrame(
        {
            S.PROBLEM_ID: train[S.PROBLEM_ID],
            S.CONTAMINATED: pl.Series([m is not None for m in match], dtype=pl.Boolean),
            S.CONTAMINATED_BY: pl.Series([bench_ids[m[0]] if m else None for m in match], dtype=pl.String),
            S.BENCHMARK: pl.Series([bench_src[m[0]] if m else None for m in match], dtype=pl.String),
            S.CONTAMINATION_KIND: pl.Series([m[1] if m else None for m in match], dtype=pl.String),
            S.CONTAMINATION_SCORE: pl.Series([round(m[2], 4) if m else None for m in match], dtype=pl.Float64),
        }
    )
    nearest: dict[int, tuple[int, float]] = {}  # one sibling per train problem: its n-gram one, else its embedding one
    for i, j, score in siblings:
        if i not in best and i not in nearest:
            nearest[i] = (j, score)
    ignored = [
        {
            "train": train[S.PROBLEM_ID][i],
            "benchmark": bench_src[j],
            "benchmark_id": bench_ids[j],
            "score": round(float(score), 3),
        }
        for i, (j, score) in sorted(nearest.items(), key=lambda x: (-x[1][1], x[0]))
    ]
    return frame, ignored


# --------------------------------------------------------------------------------------------------- tables
def benchmark_problems(ws: io.Workspace, problems: pl.DataFrame, pools: tuple[str, ...]) -> pl.DataFrame:
    """This pool's test rows plus every row of the ``pools`` named, one row per problem_id, sorted by id."""
    frames = [problems.filter(pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS))]
    frames += [io.read_parquet(ws.require_pool(p), S.PROBLEMS) for p in pools]
    return pl.concat(frames, how="vertical").unique(S.PROBLEM_ID, keep="first").sort(S.PROBLEM_ID)


def filters_table(contamination: pl.DataFrame, duplicates: pl.DataFrame) -> pl.DataFrame:
    """schema.FILTERS: contamination for every train problem, near-duplicate columns for the clean ones."""
    dup = duplicates.select(S.PROBLEM_ID, S.DUPLICATE_OF, S.CLUSTER_SIZE)
    df = contamination.join(dup, on=S.PROBLEM_ID, how="left", maintain_order="left")
    return S.validate(df, S.FILTERS, table="filters")


def quarantine_rows(train: pl.DataFrame, filters: pl.DataFrame, duplicates: pl.DataFrame, bench: pl.DataFrame):
    """schema.QUARANTINE rows of stage ``decontaminate`` for every dropped train problem, with a detail naming the
    benchmark item (and both gold answers when they differ: a copy with a wrong gold) or the representative."""
    from curate.verify.answers import answer_key

    ref = {
        pid: f"{src}#{row}"
        for pid, src, row in zip(bench[S.PROBLEM_ID], bench[S.SOURCE], bench[S.SOURCE_ROW], strict=True)
    }
    gold = dict(zip(bench[S.PROBLEM_ID], bench[S.ANSWER], strict=True))
    df = (
        train.select(S.PROBLEM_ID, S.SOURCE, S.SOURCE_ROW, S.PROBLEM, S.ANSWER_RAW, S.ANSWER)
        .join(filters, on=S.PROBLEM_ID, how="left", maintain_order="left")
        .join(duplicates.select(S.PROBLEM_ID, SIMILARITY), on=S.PROBLEM_ID, how="left", maintain_order="left")
        .filter(pl.col(S.CONTAMINATED) | pl.col(S.DUPLICATE_OF).is_not_null())
    )
    rows = []
    for r in df.iter_rows(named=True):
        if r[S.CONTAMINATED]:
            reason = "contaminated"
            detail = (
                f"{r[S.CONTAMINATION_KIND]} match of benchmark problem {ref.get(r[S.CONTAMINATED_BY], '?')} "
                f"({r[S.CONTAMINATED_BY]}, score {r[S.CONTAMINATION_SCORE]:.3f})"
            )
            theirs = gold.get(r[S.CONTAMINATED_BY])
            if answer_key(r[S.ANSWER] or "") != answer_key(theirs or ""):
                detail += f"; its gold {r[S.ANSWER]!r} differs from the benchmark's {theirs!r}"
        else:
            reason = "near_duplicate"
            how = "same wording" if r[SIMILARITY] is None else f"cosine {r[SIMILARITY]:.3f}"
            detail = f"near duplicate of {r[S.DUPLICATE_OF]} ({how}, same answer, cluster of {r[S.CLUSTER_SIZE]})"
        rows.append(
            {
                S.SOURCE: r[S.SOURCE],
                S.SOURCE_ROW: r[S.SOURCE_ROW],
                S.STAGE: STAGE,
                S.DROP_REASON: reason,
                S.DETAIL: detail,
                S.PROBLEM_ID: r[S.PROBLEM_ID],
                S.PROBLEM: (r[S.PROBLEM] or "")[:2000] or None,
                S.ANSWER_RAW: r[S.ANSWER_RAW],
            }
        )
    return pl.DataFrame(rows, schema=S.QUARANTINE) if rows else S.empty(S.QUARANTINE)


_INGEST_TEST = re.compile(r"test problem (.+)#\d+$")


def exact_at_ingest(quarantine: pl.DataFrame) -> dict[str, int]:
    """Train copies that ingest already quarantined as exact matches of a test problem, per benchmark source."""
    rows = quarantine.filter((pl.col(S.STAGE) == "ingest") & (pl.col(S.DROP_REASON) == "contaminated"))
    names = []
    for detail in rows[S.DETAIL].to_list():
        m = _INGEST_TEST.search(detail or "")
        names.append(m.group(1) if m else "unknown")
    return dict(Counter(names).most_common())


# --------------------------------------------------------------------------------------------------- summary
def summarize(
    train: pl.DataFrame,
    bench: pl.DataFrame,
    filters: pl.DataFrame,
    duplicates: pl.DataFrame,
    ignored: list[dict[str, Any]],
    ingest_exact: dict[str, int],
    cfg: DecontamConfig,
) -> dict[str, Any]:
    """Counts per benchmark and kind (and the copies whose gold differs from the benchmark's), near-duplicate
    clusters and drops, and examples to read."""
    from curate.verify.answers import answer_key

    hit = filters.filter(pl.col(S.CONTAMINATED))
    keys = {pid: answer_key(a or "") for pid, a in zip(train[S.PROBLEM_ID], train[S.ANSWER], strict=True)}
    keys.update({pid: answer_key(a or "") for pid, a in zip(bench[S.PROBLEM_ID], bench[S.ANSWER], strict=True)})
    pairs = zip(hit[S.PROBLEM_ID], hit[S.CONTAMINATED_BY], strict=True)
    dup = filters.filter(pl.col(S.DUPLICATE_OF).is_not_null())
    text = dict(zip(train[S.PROBLEM_ID], train[S.PROBLEM], strict=True))
    text.update(zip(bench[S.PROBLEM_ID], bench[S.PROBLEM], strict=True))

    def short(pid: str | None) -> str:
        return " ".join((text.get(pid) or "").split())[:100]

    examples = []
    for kind in KINDS:
        for r in hit.filter(pl.col(S.CONTAMINATION_KIND) == kind).head(cfg.max_examples).iter_rows(named=True):
            examples.append(
                {
                    "kind": kind,
                    "score": r[S.CONTAMINATION_SCORE],
                    "benchmark": r[S.BENCHMARK],
                    "train": short(r[S.PROBLEM_ID]),
                    "benchmark_item": short(r[S.CONTAMINATED_BY]),
                }
            )
    dup_examples = [
        {
            "similarity": None if r[SIMILARITY] is None else round(r[SIMILARITY], 3),
            "found_by": "cosine" if (r[SIMILARITY] or 0) >= (cfg.dedup.threshold or 2) else "text (same words)",
            "dropped": short(r[S.PROBLEM_ID]),
            "kept": short(r[S.DUPLICATE_OF]),
        }
        for r in duplicates.filter(pl.col(S.DUPLICATE_OF).is_not_null()).head(cfg.max_examples).iter_rows(named=True)
    ]
    sibling_examples = [
        {
            "score": s["score"],
            "benchmark": s["benchmark"],
            "train": short(s["train"]),
            "item": short(s["benchmark_id"]),
        }
        for s in ignored[: cfg.max_examples]
    ]
    kept = train.height - hit.height - dup.height
    clusters = (
        filters.filter(pl.col(S.CLUSTER_SIZE) > 1).select(pl.coalesce(S.DUPLICATE_OF, S.PROBLEM_ID).n_unique()).item()
    )
    return {
        "train": train.height,
        "benchmarks": dict(Counter(bench[S.SOURCE].to_list()).most_common()),
        "contaminated": hit.height,
        "by_benchmark": dict(Counter(hit[S.BENCHMARK].to_list()).most_common()),
        "by_kind": {k: int((hit[S.CONTAMINATION_KIND] == k).sum()) for k in KINDS},
        "gold_differs": sum(keys.get(t) != keys.get(b) for t, b in pairs),
        "exact_at_ingest": ingest_exact,
        "siblings_ignored": len(ignored),
        "near_duplicate_clusters": int(clusters),
        "near_duplicates_dropped": dup.height,
        "kept": kept,
        "examples": examples,
        "near_duplicate_examples": dup_examples,
        "sibling_examples": sibling_examples,
    }


# --------------------------------------------------------------------------------------------------- stage
def run(
    train: pl.DataFrame,
    bench: pl.DataFrame,
    cfg: DecontamConfig,
    train_vecs: np.ndarray | None = None,
    bench_vecs: np.ndarray | None = None,
    progress: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame, list[dict[str, Any]]]:
    """Decontaminate, then cluster the clean train problems: (filters, duplicates, ignored siblings). Pure."""
    cfg = with_thresholds(cfg)
    contamination, ignored = decontaminate(train, bench, cfg, train_vecs, bench_vecs, progress)
    clean = ~contamination[S.CONTAMINATED].to_numpy()
    rows = np.flatnonzero(clean)
    empty_dups = pl.DataFrame(
        schema={S.PROBLEM_ID: pl.String, S.DUPLICATE_OF: pl.String, S.CLUSTER_SIZE: pl.Int32, SIMILARITY: pl.Float64}
    )
    if cfg.dedup.enabled and (train_vecs is not None or cfg.dedup.text) and rows.size:
        subset = train[rows]
        tokens = [tokenize(p) for p in subset[S.PROBLEM].to_list()]
        nums, lengths = [numbers(t) for t in tokens], [len(t) for t in tokens]
        edges = text_duplicate_edges(subset, cfg) if cfg.dedup.text else None
        vecs = train_vecs[rows] if train_vecs is not None else None
        duplicates = near_duplicates(subset, vecs, cfg.dedup, nums, progress, lengths, edges)
    else:
        duplicates = empty_dups.vstack(
            pl.DataFrame(
                {
                    S.PROBLEM_ID: train[S.PROBLEM_ID].filter(pl.Series(clean)),
                    S.DUPLICATE_OF: pl.Series([None] * rows.size, dtype=pl.String),
                    S.CLUSTER_SIZE: pl.Series([1] * rows.size, dtype=pl.Int32),
                    SIMILARITY: pl.Series([None] * rows.size, dtype=pl.Float64),
                }
            )
        )
    return filters_table(contamination, duplicates), duplicates, ignored


@io.pool_locked
def decontaminate_pool(
    ws: io.Workspace, pool: str, cfg: DecontamConfig, *, force: bool = False, progress: bool = False
) -> StageResult:
    """The I/O entry point: read the pool (and benchmark pools), run, write filters + quarantine through
    ``run_wrapped`` (skipped when inputs, config and code are unchanged). Holds the pool's lock; the stage's
    quarantine rows go to its own file (``quarantine_decontaminate.parquet``), replaced whole on every run."""
    problems_path = ws.require_pool(pool)
    filters_path, q_path = ws.table(pool, "filters"), ws.quarantine_path(pool, STAGE)
    bench_paths = [ws.require_pool(p) for p in cfg.benchmark_pools]
    needs_vectors = cfg.use_embeddings or (cfg.dedup.enabled and cfg.dedup.embeddings)
    cfg = with_thresholds(cfg)
    key = encoder_key(cfg.embed) if needs_vectors else None
    conf = asdict(cfg) | ({"encoder_key": key} if needs_vectors else {})

    def work(_manifest) -> StageOutput:
        problems = io.read_parquet(problems_path, S.PROBLEMS)
        bench = benchmark_problems(ws, problems, cfg.benchmark_pools)
        train = problems.filter(~pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS)).sort(S.PROBLEM_ID)
        train_vecs = bench_vecs = None
        if needs_vectors and train.height:
            both = pl.concat([train.select(S.PROBLEM_ID, S.PROBLEM), bench.select(S.PROBLEM_ID, S.PROBLEM)])
            vecs = embed_problems(ws, both, cfg.embed, progress)
            train_vecs, bench_vecs = vecs[: train.height], vecs[train.height :]
        filters, duplicates, ignored = run(train, bench, cfg, train_vecs, bench_vecs, progress)
        at_ingest = exact_at_ingest(io.read_quarantine(ws, pool))
        new_rows = quarantine_rows(train, filters, duplicates, bench)
        summary = summarize(train, bench, filters, duplicates, ignored, at_ingest, cfg)
        summary["encoder"] = key
        summary["thresholds"] = {
            "embedding": cfg.embed_threshold if cfg.use_embeddings else None,
            "near_duplicate": cfg.dedup.threshold if cfg.dedup.enabled else None,
        }
        return StageOutput(
            summary,
            tables={
                q_path: (new_rows, S.QUARANTINE),
                filters_path: (filters, S.FILTERS),
            },
            rows_in=train.height,
            rows_out=summary["kept"],
            drops=dict(Counter(new_rows[S.DROP_REASON].to_list())),
            check=lambda: {"reconciles": reconciles_on_disk(problems_path, filters_path, q_path)},
        )

    return run_wrapped(
        ws,
        STAGE,
        inputs=[problems_path, *bench_paths],
        config=conf,
        outputs=[filters_path, q_path],
        fn=work,
        force=force,
    )


def reconciles_on_disk(problems_path, filters_path, q_path) -> bool:
    """Read back from the files: every train problem of the pool has exactly one row in filters.parquet, and the
    rows filters.parquet flags (contaminated or a near-duplicate) are exactly this stage's quarantine rows."""
    problems = pl.scan_parquet(problems_path)
    train = problems.filter(~pl.col(S.SPLIT).is_in(S.HELDOUT_SPLITS)).select(S.PROBLEM_ID).collect()
    filters = pl.read_parquet(filters_path, columns=[S.PROBLEM_ID, S.CONTAMINATED, S.DUPLICATE_OF])
    flagged = filters.filter(pl.col(S.CONTAMINATED) | pl.col(S.DUPLICATE_OF).is_not_null())[S.PROBLEM_ID]
    quarantined = pl.scan_parquet(q_path).filter(pl.col(S.STAGE) == STAGE).select(S.PROBLEM_ID).collect()
    return (
        filters.height == train.height
        and set(filters[S.PROBLEM_ID].to_list()) == set(train[S.PROBLEM_ID].to_list())
        and sorted(flagged.to_list()) == sorted(quarantined[S.PROBLEM_ID].to_list())
    )


def run_stage(ws: io.Workspace, recipe: Recipe, *, force: bool = False, progress: bool = False) -> StageResult:
    """The recipe's ``decontaminate`` stage on ``recipe.pool``."""
    return decontaminate_pool(ws, recipe.pool, load_config(recipe), force=force, progress=progress)
