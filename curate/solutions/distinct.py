r"""When two solutions of a problem count once, and when a solution is an answer without reasoning (pure functions).

"Distinct" means more than "not byte-identical": K solutions should be K ways to the answer.

- ``normalize``: the text two solutions must share to be *duplicates*: NFKC, lowercase, GSM8K calculator
  annotations (``<<48/2=24>>``) and LaTeX spacing/sizing (``$``, ``\left``, ``\right``, ``\,``) removed,
  multiplication signs unified, whitespace collapsed. ``solution_id`` hashes it with the problem id.
- ``words``: the normal form as words, numbers and operators; ``shingles``: its word n-grams (n = 3 by default).
- ``jaccard`` of two solutions' shingle sets is their *similarity*; at or above the threshold a later solution is a
  *near-duplicate* of an earlier kept one.

The threshold, 0.4, was chosen by measuring:

- the generator's reference solutions (four methods per problem): every same-problem pair is below 0.334 over
  23,000 problems, so all four count;
- near-copies made from GSM8K's shipped model solutions (two sentences swapped, a filler sentence inserted,
  calculator annotations removed, a few words replaced): minimum 0.465, 5th percentile 0.62 or more, so they count
  once;
- same-problem pairs of GSM8K's correct model solutions (1,787 pairs): median 0.22, 19% at 0.4 or more; read
  around the threshold, pairs at 0.4-0.5 are the same steps reworded.

It measures wording, not method: against the label "same calculator annotations" on GSM8K pairs its ROC AUC is
0.72, and many pairs below 0.4 still do the same calculations in other words.

Pairwise comparison is exact (no MinHash): a problem has tens of candidate solutions, not millions, and a greedy pass
compares each candidate only with the solutions already kept.

>>> a = "Natalia sold 48/2 = <<48/2=24>>24 clips in May. Altogether she sold 48+24 = <<48+24=72>>72 clips. #### 72"
>>> b = "Natalia sold 48/2 = 24 clips in May.  Altogether she sold 48+24 = 72 clips.\n#### 72"
>>> normalize(a) == normalize(b)
True
>>> round(similarity(a, "In May she sold half as many: 24. In total 48 + 24 = 72. #### 72"), 2)
0.1
>>> reasoning_words("\\boxed{5}"), reasoning_words("2 + 3 is 5, so the answer is \\boxed{5}.")
(0, 8)
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from curate.verify.answers import ANSWER_IS, ANSWER_LINE


DEFAULT_NGRAM = 3
DEFAULT_THRESHOLD = 0.4

_CALC = re.compile(r"<<[^<>]*>>")  # GSM8K calculator annotations
_LATEX_NOISE = re.compile(r"\\(?:left|right|[,;:! ]|displaystyle|quad|qquad)|\$")
_TIMES = re.compile(r"\\times|\\cdot|×|·")
_WS = re.compile(r"\s+")
_WORD = re.compile(r"[a-z]+|\d+(?:\.\d+)?|[=+\-*/^<>%]")
_COUNTED = re.compile(r"[A-Za-z]+|\d+")


def normalize(text: str) -> str:
    r"""The normal form that identifies a solution up to formatting noise.

    >>> normalize("  $2 \\times 3$ =  <<2*3=6>>6 ")
    '2 * 3 = 6'
    """
    text = unicodedata.normalize("NFKC", text or "")
    text = _CALC.sub("", text)
    text = _TIMES.sub(" * ", text)
    text = _LATEX_NOISE.sub(" ", text)
    return _WS.sub(" ", text).strip().lower()


def solution_id(problem_id: str, text: str) -> str:
    """Stable id of a problem's solution: 16 hex digits of sha256 over the problem id and the normalized text."""
    return hashlib.sha256(f"{problem_id}\n{normalize(text)}".encode()).hexdigest()[:16]


def words(text: str) -> list[str]:
    """The normalized text as words, numbers and operator signs (punctuation and LaTeX braces dropped)."""
    return _WORD.findall(normalize(text))


def shingles(tokens: Sequence[str], n: int = DEFAULT_NGRAM) -> frozenset[tuple[str, ...]]:
    """The set of word n-grams (the whole sequence as one gram when it is shorter than ``n``)."""
    if len(tokens) < n:
        return frozenset([tuple(tokens)]) if tokens else frozenset()
    return frozenset(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def similarity(a: str, b: str, n: int = DEFAULT_NGRAM) -> float:
    """Word n-gram Jaccard similarity of two solution texts."""
    return jaccard(shingles(words(a), n), shingles(words(b), n))


def answer_position(text: str) -> int:
    r"""Where the final answer starts: the last ``\boxed``, else ``####``, else an ``Answer:`` line, else
    ``answer is`` (the checker's rules, ``curate.verify.answers.ANSWER_LINE`` / ``ANSWER_IS``); the end of the text
    when none is present."""
    pos = text.rfind("\\boxed")
    if pos >= 0:
        return pos
    pos = text.rfind("####")
    if pos >= 0:
        return pos
    lines = list(ANSWER_LINE.finditer(text))
    if lines:
        return lines[-1].start()
    said = list(ANSWER_IS.finditer(text))
    return said[-1].start() if said else len(text)


def reasoning_words(text: str) -> int:
    """Words and numbers written before the final answer: an answer-only completion has (almost) none."""
    return len(_COUNTED.findall(text[: answer_position(text)]))


# --------------------------------------------------------------------------------------------------- greedy
@dataclass(frozen=True)
class Match:
    """The outcome for one candidate: kept, or dropped as a (near-)duplicate of ``similar_to``."""

    keep: bool
    reason: str | None = None  # "duplicate" or "near_duplicate"
    similar_to: int | None = None  # index of the kept candidate it matched
    similarity: float | None = None


def distinct(texts: Sequence[str], threshold: float = DEFAULT_THRESHOLD, n: int = DEFAULT_NGRAM) -> list[Match]:
    """Greedy distinct subset of one problem's candidates, in the order given (earlier candidates win).

    A candidate is a ``duplicate`` when its normal form equals a kept one's, a ``near_duplicate`` when its n-gram
    Jaccard similarity with a kept one is ``>= threshold`` (the most similar kept one is reported), else kept.

    >>> [m.reason for m in distinct(["a b c d e", "A  b c d e", "a b c d f", "x y z w v"], threshold=0.5)]
    [None, 'duplicate', 'near_duplicate', None]
    """
    kept: list[tuple[int, str, frozenset]] = []
    out = []
    for i, text in enumerate(texts):
        norm = normalize(text)
        same = next((k for k, kn, _ in kept if kn == norm), None)
        if same is not None:
            out.append(Match(False, "duplicate", same, 1.0))
            continue
        grams = shingles(_WORD.findall(norm), n)
        best, best_sim = None, -1.0
        for k, _, kg in kept:
            sim = jaccard(grams, kg)
            if sim > best_sim:
                best, best_sim = k, sim
        if best is not None and best_sim >= threshold:
            out.append(Match(False, "near_duplicate", best, round(best_sim, 4)))
            continue
        kept.append((i, norm, grams))
        out.append(Match(True))
    return out
