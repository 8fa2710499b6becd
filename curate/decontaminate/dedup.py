"""Near-duplicate clusters inside a training pool: cosine over cached embeddings AND the same answer.

Two train problems are near duplicates when their embeddings' cosine is at least ``threshold``, their gold answers
have the same ``curate.verify.answers.answer_key``, and (by default) they have the same numbers, or, when both are long
(``number_slack_tokens``), the numbers of one are a sub-multiset of the other's; so a template sibling that
changed a number is never merged, even if the answer happens to agree. Clusters are the connected components of
that graph (union-find); every edge joins problems with equal answer keys, so a cluster never mixes answers.

One representative stays per cluster, by this rule (ours): the problem with the most sources (``sources``: the
rows that were merged into it at ingest, i.e. the most evidence that it is a real, well-formed problem), then one
with a reference solution, then the smallest ``problem_id`` (deterministic). The rest are dropped as
``near_duplicate`` with ``duplicate_of`` = the representative.

Memory is never O(n^2): problems are compared only within their answer group, in tiles of ``block_size`` x
``block_size`` (float32: 16 MiB at 2048), and at most ``max_neighbors`` edges per problem are kept. 220K problems
fit easily (bench/bench_embed.py measures it).

The threshold 0.95 is conservative: on DeepScaleR, same-answer pairs at 0.93-0.99 read as the same problem
reworded, while at 0.87-0.91 a few are different problems that share an answer (``f(x)=\\cos(2x+\\varphi)`` vs
``y=\\sin(2x+\\pi/3)``, both ``\\pi/6``). This module also holds the text signatures both filters use:
``tokenize`` (LaTeX/whitespace normal form), ``ngrams``, ``numbers`` and ``answers_compatible``.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from curate import schema as S
from curate.config import ConfigError
from curate.verify import answers as A


SIMILARITY = "similarity"  # cosine between a dropped problem and its representative (extra column, not stored)


@dataclass(frozen=True)
class DedupConfig:
    """Near-duplicate clustering inside the train pool.

    enabled: run it at all. threshold: minimum cosine (embeddings are L2-normalized); None = the encoder's
    calibrated value (``curate.embed.THRESHOLDS``), resolved by the stage. embeddings: join embedding neighbours
    (needs the encoder). text: also join problems whose wording is near-identical by the decontamination's n-gram
    test (``ngram_threshold``), with the same numbers and answer: a reworded copy (``What is $4 + 10$?`` for
    ``Compute $4 + 10$.``) scores a cosine of only 0.91-0.98 with MiniLM, under the 0.95 at which template siblings
    with other numbers already sit; it needs no encoder. same_numbers: also require equal numbers, or, for two
    problems of at least ``number_slack_tokens`` tokens, one side's numbers to be a sub-multiset of the other's.
    block_size: rows per tile of the blocked
    similarity product. max_neighbors: edges kept per problem (the strongest), bounding memory on huge clusters.
    """

    enabled: bool = True
    embeddings: bool = True
    text: bool = True
    threshold: float | None = None
    same_numbers: bool = True
    number_slack_tokens: int = 40
    block_size: int = 2048
    max_neighbors: int = 64

    def __post_init__(self) -> None:
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            raise ConfigError(f"dedup.threshold must be a cosine in [-1, 1], got {self.threshold}")
        if self.block_size < 1 or self.max_neighbors < 1:
            raise ConfigError("dedup.block_size and dedup.max_neighbors must be >= 1")


# --------------------------------------------------------------------------------------------------- text signatures
_BBCODE = re.compile(r"\[/?(?:i|b|u|s|list|\*|quote|hide|url|center|color|size|img)(?:=[^\]]*)?\]")
_DROP_GROUP = re.compile(r"\\(?:tag\*?|label|hspace\*?|vspace\*?|begin|end)\s*\{[^{}]*\}")
_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,|\\,|\\ |[\u00a0\u2007\u2009\u202f])(?=\d{3}(?!\d))")
_MINUS = re.compile("[\u2010-\u2015\u2212\u2796\ufe58\ufe63]")  # hyphens, dashes, the minus sign (U+2212), heavy minus
_TIMES = re.compile("[\u00b7\u00d7\u2217\u2219\u22c5\u2715\u2716\u2a09]")  # · × ∗ ∙ ⋅ ✕ ✖ ⨉
_COMMAND = re.compile(r"\\([a-z]+)")
_TOKEN = re.compile(r"\\[a-z]+|[a-z]+|\d+(?:\.\d+)?|[+\-*/=<>^!|]")
_SYNONYMS = {
    "dfrac": "frac", "tfrac": "frac", "cfrac": "frac",
    "le": "leq", "leqslant": "leq", "ge": "geq", "geqslant": "geq", "ne": "neq",
    "ldots": "dots", "cdots": "dots", "dotsm": "dots", "dotsb": "dots", "dotsc": "dots", "dotso": "dots",
    "to": "rightarrow", "mapsto": "rightarrow", "longrightarrow": "rightarrow",
    "lvert": "|", "rvert": "|", "vert": "|", "mid": "|",
    "equal": "=", "gets": "leftarrow", "plus": "+", "minus": "-",  # AoPS writes \plus{}, \equal{}, \minus{}
    "times": "*", "cdot": "*", "ast": "*",  # one multiplication sign, as x, the middle dot and * are
}  # fmt: skip
_FORMAT_ONLY = frozenset(
    {
        "left", "right", "displaystyle", "textstyle", "limits", "nolimits", "text", "textit", "textbf", "textrm",
        "mathrm", "mathbf", "mathit", "mathsf", "operatorname", "emph", "big", "bigl", "bigr", "bigg", "biggl",
        "biggr", "quad", "qquad", "nonumber", "noindent",
    }
)  # fmt: skip


def _command(match: re.Match) -> str:
    name = match.group(1)
    if name in _FORMAT_ONLY:
        return " "
    name = _SYNONYMS.get(name, name)
    return f" \\{name} " if name[0].isalpha() else f" {name} "


ASKING = frozenset(  # words that only ask for the answer (``tokenize(asking=False)`` drops them)
    {"compute", "evaluate", "calculate", "find", "determine", "simplify", "what", "is", "the", "value", "of"}
)


def tokenize(text: str, *, asking: bool = True) -> list[str]:
    r"""Word tokens of a problem after LaTeX and whitespace normalization; numbers and operators are kept.

    Formatting-only commands, braces, ``$``, punctuation, AoPS tags and ``\tag{}`` go; synonyms map to one name
    (``\dfrac`` -> ``\frac``, ``\leqslant`` -> ``\leq``); digit-group commas and spaces go; runs of at most 3
    letters are split into letters, so ``xy`` and ``x y`` (or ``abc`` and ``a b c``) tokenize alike. Math symbols
    typed another way are one token (else a test problem copied with a Unicode minus gets past): every dash
    and the minus sign U+2212 are ``-``; ``\times``, ``\cdot``, ``*``, x and the middle dots are ``*``; NFKC makes
    full-width digits ASCII and odd spaces plain; zero-width characters go. ``asking=False`` also drops the words
    that only ask (``ASKING``: compute, what is the value of, ...): two problems that tokenize alike then ask the
    same thing in other words (``Compute $E$.`` and ``What is $E$?``).

    >>> tokenize(r"Find $a_{1}+\dfrac{xy}{2}$ for 1,000 values.")
    ['find', 'a', '1', '+', '\\frac', 'x', 'y', '2', 'f', 'o', 'r', '1000', 'values']
    >>> tokenize("Compute $\uff16 \u2212 2 \u00d7 1\u2009000$.") == tokenize(r"Compute $6 - 2 \times 1,000$.")
    True
    """
    t = _THOUSANDS.sub("", S.ZERO_WIDTH.sub("", S.strip_instruction(text or "")))  # before NFKC makes spaces plain
    t = _TIMES.sub(" * ", _MINUS.sub("-", unicodedata.normalize("NFKC", t))).lower()
    t = _BBCODE.sub(" ", t)
    t = _DROP_GROUP.sub(" ", t)
    t = _THOUSANDS.sub("", t.replace("\\not=", "\\neq").replace("\\not =", "\\neq"))  # after NFKC: full-width commas
    t = _COMMAND.sub(_command, t)
    out: list[str] = []
    for tok in _TOKEN.findall(t):
        if not asking and tok in ASKING:
            continue
        if len(tok) <= 3 and tok.isalpha():
            out.extend(tok)
        else:
            out.append(tok)
    return out


def ngrams(tokens: list[str], n: int) -> set[int]:
    """Hashes of the token n-grams (the whole sequence when it is shorter than ``n``; empty for no tokens)."""
    if not tokens:
        return set()
    if len(tokens) <= n:
        return {hash(tuple(tokens))}
    return {hash(tuple(tokens[k : k + n])) for k in range(len(tokens) - n + 1)}


_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
EXPRESSION_WORDS = 3  # the words besides ``ASKING`` a problem that only asks to evaluate its expression may have


def expression(text: str) -> tuple[str, ...] | None:
    r"""The normalized expression (``tokenize`` of its math) of a problem that only asks to evaluate it, or None.

    Such a problem has at most ``EXPRESSION_WORDS`` words outside its math besides the words that only ask
    (``Work out $E$.``, ``Try this one. Compute $E$.``), and its math holds an operator and at least two numbers.
    Two of them with one expression are one question whatever their wording and golds (``Work out $8 +
    4 - 6 + 1 - 3$.`` with gold 5 is a corrupted copy of the test item ``Compute $8 + 4 - 6 + 1 - 3$.``, gold 4).

    >>> expression("Work out $8 + 4 - 6 + 1 - 3$.") == expression("Compute $8 + 4 - 6 + 1 - 3$.")
    True
    >>> expression("What is the remainder when $1 + 2 + 3$ is divided by 9?") is None
    True
    """
    text = S.strip_instruction(text or "")
    maths = [next(g for g in m.groups() if g is not None) for m in _MATH.finditer(text)]
    words = [w for w in re.findall(r"[a-z]+", _MATH.sub(" ", text).lower()) if w not in ASKING]
    tokens = tokenize(" ".join(f"${m}$" for m in maths))
    if len(words) > EXPRESSION_WORDS or sum(t[0].isdigit() for t in tokens) < 2:
        return None
    return tuple(tokens) if any(t in _OPERATORS for t in tokens) else None


def numbers(tokens: list[str]) -> Counter:
    """The multiset of numbers in a token list."""
    return Counter(t for t in tokens if t[0].isdigit())


def numbers_compatible(a: Counter, b: Counter) -> bool:
    """One problem's numbers are a sub-multiset of the other's (equal numbers, or one adds some)."""
    return not (a - b) or not (b - a)


_OPERATORS = frozenset("+-*/^<>!|")
_SEPARATOR = re.compile(r",|;|\band\b|\bor\b")


def answer_shape(answer: str) -> tuple[tuple[str, ...], Counter]:
    """The numbers and the operators/commands of an answer, after dropping a ``name =`` or ``name \\in`` prefix.

    Numbers keep their order (``5/2`` is not ``2/5``) unless the answer lists several items (commas, "and", "or"),
    where the order is free. ``/`` counts as ``\\frac``; words and letters are ignored.
    """
    tokens = tokenize(answer)
    cut = [k for k, t in enumerate(tokens) if t in ("=", "\\in")]
    if len(cut) == 1:
        tokens = tokens[cut[0] + 1 :]
    nums = [t for t in tokens if t[0].isdigit()]
    if _SEPARATOR.search(answer.lower()):
        nums.sort()
    ops = Counter("\\frac" if t == "/" else t for t in tokens if t[0] == "\\" or t in _OPERATORS)
    return tuple(nums), ops


def answers_compatible(a: list[str], b: list[str]) -> bool:
    """Two lists of acceptable answers agree (format-tolerant, but never merely "both contain a 2").

    True when they share an ``answer_key``, or some answer of each has the same non-empty numbers and the same
    operators (``answer_shape``): ``n=1,2,3,4`` vs ``1,2,3,4``, tuples listed in another order, ``a = 4/9`` vs
    ``\\frac{4}{9}``; but not ``\\frac{\\pi}{2}`` vs ``2+\\pi``. Anything else is left to math-verify.
    """
    if {A.answer_key(x) for x in a} & {A.answer_key(x) for x in b}:
        return True
    shapes = [answer_shape(v) for v in a]
    for v in b:
        nums, ops = answer_shape(v)
        if nums and any(nums == n and ops == o for n, o in shapes):
            return True
    return False


# --------------------------------------------------------------------------------------------------- edges
def _top_k_per_row(rows: np.ndarray, cols: np.ndarray, sims: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Keep the ``k`` most similar entries of each row (ties broken by column, so the result is deterministic)."""
    if rows.size == 0:
        return rows, cols, sims
    order = np.lexsort((cols, -sims, rows))
    rows, cols, sims = rows[order], cols[order], sims[order]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    rank = np.arange(rows.size) - np.repeat(starts, np.diff(np.r_[starts, rows.size]))
    keep = rank < k
    return rows[keep], cols[keep], sims[keep]


def similarity_edges(
    vectors: np.ndarray,
    threshold: float,
    *,
    groups: Sequence[int] | np.ndarray | None = None,
    block_size: int = 2048,
    max_neighbors: int = 64,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j, cosine)`` with ``i < j``, cosine >= ``threshold`` and (if given) ``groups[i] == groups[j]``.

    ``vectors`` must be L2-normalized rows. Work is done in tiles of ``block_size`` rows, so memory is
    O(block_size^2 + edges); each row keeps at most ``max_neighbors`` of its strongest forward edges.
    """
    from curate.progress import bar

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(vectors)
    codes = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1], True])
    members = [order[a:b] for a, b in itertools.pairwise(bounds) if b - a > 1]
    total = sum(len(m) for m in members)
    out_i, out_j, out_s = [], [], []
    with bar(total, f"near-duplicate search over {n} problems", enabled=progress, unit="rows") as advance:
        for idx in members:
            idx = np.sort(idx)
            for a in range(0, len(idx), block_size):
                q_idx = idx[a : a + block_size]
                q = vectors[q_idx]
                r_all, c_all, s_all = [], [], []
                for b in range(a, len(idx), block_size):
                    c_idx = idx[b : b + block_size]
                    sims = q @ vectors[c_idx].T
                    if b == a:
                        sims[np.tril_indices_from(sims)] = -np.inf  # each pair once, never a row with itself
                    r, c = np.nonzero(sims >= threshold)
                    if r.size:
                        r_all.append(r)
                        c_all.append(c + b)
                        s_all.append(sims[r, c])
                if r_all:
                    r, c, s = _top_k_per_row(
                        np.concatenate(r_all), np.concatenate(c_all), np.concatenate(s_all), max_neighbors
                    )
                    out_i.append(q_idx[r])
                    out_j.append(idx[c])
                    out_s.append(s)
                advance(len(q_idx))
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    i, j, s = np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s).astype(np.float32)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return lo.astype(np.int64), hi.astype(np.int64), s


def connected_components(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Component label (the smallest member index) of each of ``n`` nodes, by union-find over edges ``(i, j)``."""
    parent = list(range(n))

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for a, b in zip(i.tolist(), j.tolist(), strict=True):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([find(x) for x in range(n)], dtype=np.int64)


# --------------------------------------------------------------------------------------------------- clusters
def representative_rank(frame: pl.DataFrame) -> np.ndarray:
    """Rank of each row as a cluster representative (0 = best): most sources, has a solution, smallest id."""
    keys = frame.select(
        pl.col(S.SOURCES).list.len().fill_null(0).alias("n_sources"),
        pl.col(S.SOLUTION).is_not_null().alias("has_solution"),
        pl.col(S.PROBLEM_ID),
        pl.int_range(pl.len()).alias("row"),
    ).sort(["n_sources", "has_solution", S.PROBLEM_ID], descending=[True, True, False])
    rank = np.empty(frame.height, dtype=np.int64)
    rank[keys["row"].to_numpy()] = np.arange(frame.height)
    return rank


def _edges(
    vectors: np.ndarray | None,
    keys: list[str],
    cfg: DedupConfig,
    progress: bool,
    text_edges: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The candidate pairs: embedding neighbours within an answer group (with ``vectors``) and ``text_edges``."""
    i = j = np.zeros(0, dtype=np.int64)
    if vectors is not None:
        codes = pl.Series(keys).cast(pl.Categorical).to_physical().to_numpy()
        i, j, _ = similarity_edges(
            vectors, cfg.threshold, groups=codes, block_size=cfg.block_size, max_neighbors=cfg.max_neighbors,
            progress=progress,
        )  # fmt: skip
    if text_edges is not None:
        i, j = np.concatenate([i, text_edges[0]]), np.concatenate([j, text_edges[1]])
    return i, j


def near_duplicates(
    frame: pl.DataFrame,
    vectors: np.ndarray | None,
    cfg: DedupConfig,
    numbers: Sequence[Counter] | None = None,
    progress: bool = False,
    lengths: Sequence[int] | None = None,
    text_edges: tuple[np.ndarray, np.ndarray] | None = None,
) -> pl.DataFrame:
    """Cluster ``frame``'s problems (rows aligned with ``vectors``) and pick one representative per cluster.

    ``frame`` needs problem_id, answer, sources and solution. ``numbers`` (the numbers in each problem, aligned)
    enables the numbers guard when ``cfg.same_numbers``; ``lengths`` (tokens per problem) allow its sub-multiset
    slack for long problems (without them, numbers must be equal). ``text_edges``: pairs already found by text
    (``curate.decontaminate.stage.text_duplicate_edges``: near-identical wording, the same numbers and answer),
    joined with the embedding edges; ``vectors`` None: text edges only. Returns problem_id, duplicate_of (null for
    representatives and unique problems), cluster_size and similarity (cosine to the representative, dropped rows
    with vectors only), in ``frame``'s row order.
    """
    n = frame.height
    if n == 0 or not cfg.enabled:
        return pl.DataFrame(
            {
                S.PROBLEM_ID: frame[S.PROBLEM_ID],
                S.DUPLICATE_OF: pl.Series([None] * n, dtype=pl.String),
                S.CLUSTER_SIZE: pl.Series([1] * n, dtype=pl.Int32),
                SIMILARITY: pl.Series([None] * n, dtype=pl.Float64),
            }
        )
    if cfg.threshold is None and vectors is not None:
        raise ConfigError("dedup.threshold is unset: give a cosine, or run the stage, which takes the encoder's")
    keys = [A.answer_key(a or "") for a in frame[S.ANSWER].to_list()]
    i, j = _edges(vectors, keys, cfg, progress, text_edges)
    keep = np.array([keys[a] != "" for a in i.tolist()], dtype=bool)  # problems without an answer never merge
    if cfg.same_numbers and numbers is not None and i.size:

        def agree(a: int, b: int) -> bool:
            if numbers[a] == numbers[b]:
                return True
            long = lengths is not None and min(lengths[a], lengths[b]) >= cfg.number_slack_tokens
            return long and numbers_compatible(numbers[a], numbers[b])

        keep &= np.array([agree(a, b) for a, b in zip(i.tolist(), j.tolist(), strict=True)], dtype=bool)
    labels = connected_components(n, i[keep], j[keep])
    rank = representative_rank(frame)
    best: dict[int, int] = {}
    for row, label in enumerate(labels.tolist()):
        if label not in best or rank[row] < rank[best[label]]:
            best[label] = row
    sizes = Counter(labels.tolist())
    ids = frame[S.PROBLEM_ID].to_list()
    rep = np.array([best[label] for label in labels.tolist()], dtype=np.int64)
    dropped = rep != np.arange(n)
    sim = np.full(n, np.nan)
    if dropped.any() and vectors is not None:
        sim[dropped] = np.einsum("ij,ij->i", vectors[dropped], vectors[rep[dropped]])
    return pl.DataFrame(
        {
            S.PROBLEM_ID: ids,
            S.DUPLICATE_OF: [ids[r] if d else None for r, d in zip(rep.tolist(), dropped.tolist(), strict=True)],
            S.CLUSTER_SIZE: pl.Series([sizes[label] for label in labels.tolist()], dtype=pl.Int32),
            SIMILARITY: pl.Series(sim, dtype=pl.Float64).fill_nan(None),
        }
    )
