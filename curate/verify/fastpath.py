r"""The checker's fast paths: (gold, answer) pairs settled without math-verify, and the forms both sides are read in.

``decide`` settles what strings, plain numbers and numeric LaTeX can: equal ``answers.answer_key`` is ``correct``;
"no solution" and its synonyms (``\emptyset``, ``None``) match only each other; plain numbers are compared exactly
(``Decimal``), and two different integers are ``wrong``; numeric LaTeX (fractions, roots, pi, tuples of them) is
evaluated by ``curate.verify.numeric`` and decided only when clearly equal or clearly different. ``without_units``
compares a value with a unit (``12 km/h``) by its value unless both sides name different units. ``decide_forms``
handles answers without a unit: ``x = 12`` is compared by its value the way math-verify does (same letter, or against
a gold without "="), and expressions in variables that clearly differ at a sample point are ``wrong``
(``numeric.compare_symbolic``; never ``correct``). ``gold_forms`` reads a gold answer: forms joined by an upper-case
``OR`` are alternatives, and "a, b, and c" is the list "a, b, c". Whatever these leave undecided (``None``) goes to
math-verify (curate.verify.checker, the only module that imports it).

>>> decide(("\\frac{1}{2}",), "0.5"), decide(("12",), "13"), decide(("x^2",), "x^3")
('correct', 'wrong', None)
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from curate.verify import numeric as verify_numeric
from curate.verify.answers import (
    PLAIN_NUMBER,
    answer_key,
    is_no_solution,
    join_enumeration,
    normalize_alternatives,
    normalize_answer,
    same_unit,
    split_alternatives,
    split_unit,
)


key = functools.lru_cache(maxsize=1 << 16)(answer_key)  # gold keys repeat across a problem's completions
_no_solution = functools.lru_cache(maxsize=1 << 16)(is_no_solution)
_unit = functools.lru_cache(maxsize=1 << 16)(split_unit)


def normalize(answer: Any) -> str:
    r"""``answers.normalize_answer`` without currency signs (``\$18`` is 18) and with "a, b, and c" as "a, b, c",
    for golds and extracted answers alike."""
    return join_enumeration(normalize_answer(answer).replace("\\$", "").strip())


def _number(s: str) -> Decimal | None:
    if not PLAIN_NUMBER.match(s):
        return None
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


def decide(golds: tuple[str, ...], cand: str) -> str | None:
    """``correct``/``wrong`` when strings, plain numbers or numeric LaTeX settle it, else ``None`` (math-verify)."""
    ck = key(cand)
    if any(key(g) == ck for g in golds):
        return "correct"
    no_solution = [_no_solution(g) for g in golds]
    if any(no_solution) or _no_solution(cand):  # "no real solution" = "\emptyset" = "None"; never a value
        if _no_solution(cand):
            return "correct" if any(no_solution) else "wrong"
        if all(no_solution):
            return "wrong"
    cn = _number(cand)
    if cn is not None:
        gns = [_number(g) for g in golds]
        if any(gn is not None and gn == cn for gn in gns):
            return "correct"
        if cn == cn.to_integral_value() and all(gn is not None and gn == gn.to_integral_value() for gn in gns):
            return "wrong"  # different integers: math-verify cannot make them equal
    return verify_numeric.compare(golds, cand)


_ASSIGNMENT = re.compile(r"^([A-Za-z])\s*=\s*([^=<>]+)$")  # "x = 12": one letter, one "=", no other relation
_RELATION = re.compile(r"[=<>]|\\(?:le|ge|leq|geq|neq|ne|approx|equiv|sim|in|subset)(?![A-Za-z])")


def _assignment(answer: str) -> tuple[str, str] | None:
    """``(letter, value)`` of ``x = <number>`` (value numeric LaTeX, one scalar), else ``None``."""
    m = _ASSIGNMENT.match(answer)
    if not m or m.group(1) not in verify_numeric.VARIABLES:  # e = 5 is "E = 5" to math-verify, never an assignment
        return None
    try:
        kind, _ = verify_numeric.evaluate(m.group(2))
    except ValueError:
        return None
    return (m.group(1).lower(), m.group(2).strip()) if kind == "scalar" else None


def decide_forms(golds: tuple[str, ...], cand: str) -> str | None:
    """The fast paths past ``decide`` for answers with no unit: assignments and expressions in variables.

    Assignments follow math-verify's rules: ``x = 12`` against ``x = 22`` compares the values (the same letter on
    both sides, upper case = lower case); an assignment against a gold without "=" compares its value (``x = 12``
    is 12), and so does a gold assignment against a candidate without a relation. Otherwise ``compare_symbolic``
    says ``wrong`` for expressions in variables that clearly differ.
    """
    ca = _assignment(cand)
    gas = [_assignment(g) for g in golds]
    if ca is not None:
        if all(ga is not None and ga[0] == ca[0] for ga in gas):
            return decide(tuple(ga[1] for ga in gas), ca[1])  # type: ignore[index]
        if not any("=" in g for g in golds):
            return decide(golds, ca[1])
        return None
    if all(ga is not None for ga in gas):
        return None if _RELATION.search(cand) else decide(tuple(ga[1] for ga in gas), cand)  # type: ignore[index]
    if any("=" in g for g in golds) or "=" in cand:
        return None
    return verify_numeric.compare_symbolic(golds, cand)


def gold_forms(gold: Any) -> tuple[str, ...]:
    """Normalized gold alternatives; ``a \\text{ OR } b`` (equivalent forms, DeepScaleR) counts as two."""
    if hasattr(gold, "tolist") or hasattr(gold, "to_list"):  # a numpy array / polars series from a list column
        gold = gold.tolist() if hasattr(gold, "tolist") else gold.to_list()
    items = normalize_alternatives(list(gold)) if isinstance(gold, list | tuple) else [gold]
    forms = (normalize(f) for g in items for f in split_alternatives(normalize(g)))
    return tuple(dict.fromkeys(n for n in forms if n))


def without_units(golds: tuple[str, ...], cand: str) -> tuple[tuple[str, ...], str] | None:
    """Golds and candidate with a trailing unit removed (``12 km/h`` -> ``12``), when a unit is involved and the
    two sides do not name different units; else None. Only values are compared then (``12`` = ``12 km/h``)."""
    cu = _unit(cand)
    gus = [_unit(g) for g in golds]
    if cu is None and not any(gus):
        return None
    values = tuple(
        gu[0] if gu else g for g, gu in zip(golds, gus, strict=True) if not (gu and cu and not same_unit(gu[1], cu[1]))
    )
    return (values, cu[0] if cu else cand) if values else None
