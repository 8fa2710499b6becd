r"""Built-in default data: a procedural generator of verifiable math problems.

Four families, each with an exact gold answer and several distinct reference solutions ending in ``\boxed{}``
(``solutions``: different methods or orders of steps; ``solution`` is the first, unchanged since the first release):

- ``arith``: arithmetic chains (``Compute 12 + 7 \times 3 - 5.``), steps and magnitudes grow with the level;
- ``linear``: linear equations ``a x + b = c x + d`` with integer or fractional roots;
- ``fraction``: sums and products of fractions, answer reduced (``\frac{7}{12}``);
- ``word``: templated word problems (shops, trains, recipes) with a few sentences of context, so prompt lengths vary.

The alternative solutions (CoScale-RL's K solutions per problem, offline) are built from the same drawn
numbers without drawing more, so problems, answers and ids are the same as before they existed:

- ``arith``: step by step (``Multiply by 8: ...``); a running total in words; rewriting the expression one operation
  at a time (``= 19 \times 3 - 5 = 57 - 5 = 52``); one paragraph of sentences (``19 times 3 is 57; then ...``);
- ``linear``: ``x`` terms to the left; ``x`` terms to the right; everything on one side with a substitution check;
  subtracting from both sides to keep the equation balanced;
- ``fraction``: reduce at each step; cross-multiply each pair (``\frac{ps + rq}{qs}``) then reduce; one common
  denominator for all terms (sums only) or one unreduced fraction carried to the end (with products); the least
  common denominator of each pair, cancelling common factors before multiplying;
- ``word``: counts first; one equation for the value first; dollar values instead of counts; the share of the first
  purchase that is kept.

Every pair of a problem's solutions has word 3-gram Jaccard similarity below 0.34 (measured over 23,000 problems),
under the 0.4 at which ``curate solutions`` counts two solutions once.

Difficulty is a knob: ``level`` 1-5 sets the number of steps and the size of the numbers; each problem records its
level (also as ``difficulty``) so scoring has a dataset label to learn a difficulty prior from. Deterministic by
seed and index: problem ``i`` of seed ``s`` is the same whatever ``n`` is, so a 220K pool extends a 2K one.

Used through the source URI ``gen://<family>?n=2000&seed=0&min_level=1&max_level=5`` (``family`` is one of the
four or ``mixed``), e.g. ``curate ingest "gen://mixed?n=220000&seed=0" --pool big``. For ``arith``, ``min_ops`` /
``max_ops`` set the chain length and ``ops`` the operators apart from the level (``gen://arith?max_level=1&min_ops=4
&max_ops=6&ops=%2B-``; ``x`` may stand for ``*``; a bare ``+`` in a URI reads as a space and is taken back as ``+``):
train on short chains, evaluate on long ones. Without them nothing changes.

>>> p = generate_problem(0, seed=0, family="arith", level=1)
>>> sorted(p) == ["answer", "family", "level", "ops", "problem", "solution", "solutions"]
True
>>> p["solution"] == p["solutions"][0] and len(set(p["solutions"])) == len(p["solutions"]) == 4
True
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Iterator
from fractions import Fraction
from urllib.parse import parse_qs, urlparse

from curate.errors import InputError
from curate.ingest import arith_text


FAMILIES = ("arith", "linear", "fraction", "word")
_NAMES = ("Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Luca")
_ITEMS = (("apples", "apple"), ("notebooks", "notebook"), ("tickets", "ticket"), ("bolts", "bolt"), ("cups", "cup"))


def _rng(seed: int, index: int, salt: str = "") -> random.Random:
    digest = hashlib.sha256(f"{seed}:{index}:{salt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _fmt(q: Fraction) -> str:
    """Exact LaTeX for a rational: ``7``, ``-\\frac{3}{4}``."""
    if q.denominator == 1:
        return str(q.numerator)
    sign = "-" if q < 0 else ""
    return f"{sign}\\frac{{{abs(q.numerator)}}}{{{q.denominator}}}"


def _signed(v: Fraction | int) -> str:
    """``+ 5`` / ``- 5``: a term after another one."""
    return f"+ {_fmt(Fraction(v))}" if v >= 0 else f"- {_fmt(Fraction(-v))}"


def _frac_raw(num: int, den: int) -> str:
    """An unreduced fraction, sign on the numerator: ``\\frac{-14}{20}``."""
    return f"\\frac{{{num}}}{{{den}}}"


def _arith(
    rng: random.Random, level: int, chain: tuple[int, int] | None = None, operators: str | None = None
) -> tuple[str, str, list[str]]:
    """``chain`` (min, max operations) and ``operators`` (a subset of ``+-*``) override what ``level`` sets; left
    at None, the draws are exactly those of before they existed (same problems, same ids)."""
    steps = 1 + level + rng.randint(0, level) if chain is None else rng.randint(*chain)
    hi = 10 ** min(1 + level // 2, 4)
    start = rng.randint(1, hi)
    ops: list[tuple[str, int]] = []
    values = [start]
    allowed = operators if operators is not None else "+-*" if level > 1 else "+-"
    for _ in range(steps):
        op = rng.choice(allowed)
        b = rng.randint(2, 12) if op == "*" else rng.randint(1, hi)
        value = values[-1]
        ops.append((op, b))
        values.append(value * b if op == "*" else value + b if op == "+" else value - b)
    problem = f"Compute ${arith_text.expression(start, ops)}$."
    solutions = [arith_text.steps(start, ops, values), *arith_text.alternatives(start, ops, values)]
    return problem, str(values[-1]), solutions


def _linear(rng: random.Random, level: int) -> tuple[str, str, list[str]]:
    hi = 5 * level + 5
    a = rng.randint(2, hi)
    c = rng.randint(1, hi)
    while c == a:
        c = rng.randint(1, hi)
    x = Fraction(rng.randint(-hi, hi), rng.choice([1, 1, 1, 2, 3, 4][: 2 + level]))
    b = rng.randint(-hi * 3, hi * 3)
    d = a * x + b - c * x  # so that a x + b = c x + d holds at x
    if d.denominator != 1:  # keep coefficients integral: scale the equation
        k = d.denominator
        a, b, c, d = a * k, b * k, c * k, d * k
    d = int(d)
    problem = f"Solve for $x$: ${a}x {'+' if b >= 0 else '-'} {abs(b)} = {c}x {'+' if d >= 0 else '-'} {abs(d)}$."
    solution = "\n".join(
        [
            f"Move the $x$ terms to the left and the constants to the right: ${a}x - {c}x = {d} - ({b})$.",
            f"So ${a - c}x = {d - b}$.",
            f"Divide by ${a - c}$: $x = {_fmt(Fraction(d - b, a - c))}$.",
            f"$\\boxed{{{_fmt(x)}}}$",
        ]
    )
    right = "\n".join(
        [
            f"Move the $x$ terms to the right and the constants to the left: ${b} - ({d}) = {c}x - {a}x$.",
            f"That is, ${b - d} = {c - a}x$.",
            f"Dividing both sides by ${c - a}$ gives $x = {_fmt(Fraction(b - d, c - a))}$.",
            f"Therefore $x = \\boxed{{{_fmt(x)}}}$.",
        ]
    )
    side = "\n".join(
        [
            f"Bring every term to one side: ${a - c}x {_signed(b - d)} = 0$.",
            f"Then ${a - c}x = {d - b}$, so $x = {_fmt(x)}$.",
            f"Check by substituting: the left side is ${_fmt(a * x + b)}$ and the right side is "
            f"${_fmt(c * x + d)}$, equal as they should be.",
            f"The solution is $\\boxed{{{_fmt(x)}}}$.",
        ]
    )
    balance = "\n".join(
        [
            f"Keep the equation balanced. Subtracting ${c}x$ from both sides leaves ${a - c}x {_signed(b)} = {d}$.",
            f"Subtracting ${b}$ from both sides too leaves ${a - c}x = {d - b}$.",
            f"The unknown is the quotient ${_frac_raw(d - b, a - c)}$, which simplifies to $\\boxed{{{_fmt(x)}}}$.",
        ]
    )
    return problem, _fmt(x), [solution, right, side, balance]


def _simplify(num: int, den: int, total: Fraction) -> str:
    """The last line of a fraction solution: divide by the gcd (or say there is nothing to divide) and box."""
    g = math.gcd(num, den)
    if g == 1 and den > 0:
        return f"${_frac_raw(num, den)}$ is already in lowest terms, so the answer is $\\boxed{{{_fmt(total)}}}$."
    return f"Divide top and bottom of ${_frac_raw(num, den)}$ by ${g}$: $\\boxed{{{_fmt(total)}}}$."


def _fraction_alternatives(fracs: list[Fraction], ops: list[str], total: Fraction) -> list[str]:
    """Cross-multiplying each pair; then a common denominator (sums) or one unreduced fraction (with products)."""
    sym = {"+": "+", "-": "-", "*": "\\cdot"}
    cross = ["Combine two fractions at a time (cross-multiplying for sums and differences), then reduce."]
    before = fracs[0]
    for op, f in zip(ops, fracs[1:], strict=True):
        p, q, r, s_ = before.numerator, before.denominator, f.numerator, f.denominator
        if op == "*":
            num, den = p * r, q * s_
        else:
            num, den = (p * s_ + r * q, q * s_) if op == "+" else (p * s_ - r * q, q * s_)
        how = f"\\frac{{{p} \\cdot {s_} {op} {r} \\cdot {q}}}{{{q} \\cdot {s_}}}"
        before = Fraction(num, den)
        reduced = "" if _frac_raw(num, den) == _fmt(before) else f", which reduces to ${_fmt(before)}$"
        if op == "*":  # a product: numerators times numerators over denominators times denominators
            cross.append(
                f"For ${_frac_raw(p, q)}$ times ${_frac_raw(r, s_)}$, the numerators give ${p} \\cdot {r} = {num}$ "
                f"and the denominators ${q} \\cdot {s_} = {den}$: ${_frac_raw(num, den)}${reduced}."
            )
        else:
            cross.append(f"${_frac_raw(p, q)} {sym[op]} {_frac_raw(r, s_)} = {how} = {_frac_raw(num, den)}${reduced}.")
    cross.append(f"The answer is $\\boxed{{{_fmt(total)}}}$.")
    if "*" not in ops:
        lcd = 1
        for f in fracs:
            lcd = lcd * f.denominator // math.gcd(lcd, f.denominator)
        nums = [f.numerator * (lcd // f.denominator) for f in fracs]
        combined = " ".join([str(nums[0]), *(f"{op} {n}" for op, n in zip(ops, nums[1:], strict=True))])
        num = sum(n if op == "+" else -n for op, n in zip(["+", *ops], nums, strict=True))
        third = [
            f"Use the common denominator ${lcd}$ for every term.",
            f"Over ${lcd}$ the terms are " + ", ".join(f"${_frac_raw(n, lcd)}$" for n in nums) + ".",
            f"Add and subtract the numerators: ${combined} = {num}$, giving ${_frac_raw(num, lcd)}$.",
            _simplify(num, lcd, total),
        ]
    else:
        num, den = fracs[0].numerator, fracs[0].denominator
        third = [
            "Carry one unreduced fraction through every operation and simplify only at the end.",
            f"Start from ${_frac_raw(num, den)}$.",
        ]
        for op, f in zip(ops, fracs[1:], strict=True):
            r, s_ = f.numerator, f.denominator
            if op == "*":
                new = (num * r, den * s_)
            else:
                new = (num * s_ + r * den if op == "+" else num * s_ - r * den, den * s_)
            third.append(f"After ${sym[op]} {_fmt(f)}$ the fraction is ${_frac_raw(*new)}$.")
            num, den = new
        third.append(_simplify(num, den, total))
    pairwise = ["Use the least common denominator of each pair, and cancel common factors before multiplying."]
    before = fracs[0]
    for op, f in zip(ops, fracs[1:], strict=True):
        p, q, r, s_ = before.numerator, before.denominator, f.numerator, f.denominator
        result = before * f if op == "*" else before + f if op == "+" else before - f
        if op == "*":
            g1, g2 = math.gcd(p, s_), math.gcd(r, q)
            raw = _frac_raw(p // g1 * (r // g2), q // g2 * (s_ // g1))
            cancel = f"Cancelling ${g1}$ and ${g2}$ first" if g1 * g2 > 1 else "Nothing cancels"
            tail = "" if raw == _fmt(result) else f", that is ${_fmt(result)}$"
            pairwise.append(f"{cancel}: ${_fmt(before)}$ times ${_fmt(f)}$ is ${raw}${tail}.")
        else:
            lcd = q * s_ // math.gcd(q, s_)
            a_, b_ = p * (lcd // q), r * (lcd // s_)
            word = "add" if op == "+" else "subtract"
            raw = _frac_raw(a_ + b_ if op == "+" else a_ - b_, lcd)
            tail = "" if raw == _fmt(result) else f", that is ${_fmt(result)}$"
            pairwise.append(
                f"Over the least common denominator ${lcd}$: ${_frac_raw(a_, lcd)}$ and ${_frac_raw(b_, lcd)}$; "
                f"{word} the numerators to get ${raw}${tail}."
            )
        before = result
    pairwise.append(f"So the value is $\\boxed{{{_fmt(total)}}}$.")
    return ["\n".join(cross), "\n".join(third), "\n".join(pairwise)]


def _fraction(rng: random.Random, level: int) -> tuple[str, str, list[str]]:
    terms = 2 + level // 2
    hi = 3 + 2 * level
    fracs = [Fraction(rng.randint(1, hi), rng.randint(2, hi + 2)) for _ in range(terms)]
    ops = [rng.choice("+-") if level < 3 else rng.choice("+-*") for _ in range(terms - 1)]
    total = fracs[0]
    expr = _fmt(fracs[0]) if fracs[0].denominator != 1 else str(fracs[0])
    lines = []
    for op, f in zip(ops, fracs[1:], strict=True):
        before = total
        total = total + f if op == "+" else total - f if op == "-" else total * f
        sym = {"+": "+", "-": "-", "*": "\\cdot"}[op]
        expr = f"\\left({expr}\\right) {sym} {_fmt(f)}" if op == "*" else f"{expr} {sym} {_fmt(f)}"
        lines.append(f"${_fmt(before)} {sym} {_fmt(f)} = {_fmt(total)}$.")
    problem = f"Compute ${expr}$ and express the answer as a fraction in lowest terms."
    solution = "\n".join(["Work left to right, reducing each step.", *lines, f"$\\boxed{{{_fmt(total)}}}$"])
    return problem, _fmt(total), [solution, *_fraction_alternatives(fracs, ops, total)]


def _word_alternatives(
    name: str, other: str, plural: str, count: int, given: int, price: int, extra: int | None, pct: int | None
) -> list[str]:
    """One equation for the value first; dollar values instead of counts; the share of the purchase kept."""
    terms = [f"({count} - {given})"]
    factors = [Fraction(count - given)]
    if extra is not None:
        terms.append(f"(1 + {extra})")
        factors.append(Fraction(1 + extra))
    if pct is not None:
        terms.append(f"\\left(1 - \\frac{{{pct}}}{{100}}\\right)")
        factors.append(Fraction(100 - pct, 100))
    value = Fraction(price)
    for f in factors:
        value *= f
    times = " \\times "
    equation = [
        f"Write one equation for the value $V$, in dollars, of the {plural} {name} keeps, then evaluate it.",
        f"$V = {times.join(terms)} \\times {price}$",
        f"$V = {times.join(_fmt(f) for f in factors)} \\times {price} = {_fmt(value)}$",
        f"So $V = \\boxed{{{_fmt(value)}}}$.",
    ]
    paid, gift = count * price, given * price
    v = Fraction(paid - gift)
    dollars = [
        "Track dollar values instead of counts.",
        f"{name} pays ${count} \\times {price} = {paid}$ dollars.",
        f"The {given} {plural} given to {other} are worth ${given} \\times {price} = {gift}$ dollars, leaving "
        f"${paid} - {gift} = {_fmt(v)}$ dollars of {plural}.",
    ]
    if extra is not None:
        dollars.append(
            f"Buying {extra} times as many at the same price adds ${extra} \\times {_fmt(v)} = "
            f"{_fmt(extra * v)}$ dollars, for ${_fmt(v * (1 + extra))}$ dollars."
        )
        v = v * (1 + extra)
    if pct is not None:
        dollars.append(
            f"Selling {pct}\\% at cost keeps ${100 - pct}\\%$ of the value: "
            f"${_fmt(v)} \\times {_fmt(Fraction(100 - pct, 100))} = {_fmt(v * Fraction(100 - pct, 100))}$."
        )
        v = v * Fraction(100 - pct, 100)
    dollars.append(f"The {plural} {name} keeps are worth $\\boxed{{{_fmt(v)}}}$ dollars.")
    share = Fraction(count - given, count)
    part = [
        f"Think of the share of the first purchase that stays with {name}.",
        f"Of the {count} {plural}, {count - given} stay, a share of ${_fmt(share)}$ of the "
        f"${count * price}$ dollars spent, worth ${_fmt(share * count * price)}$ dollars.",
    ]
    worth = share * count * price
    if extra is not None:
        part.append(f"The extra purchase multiplies that by ${1 + extra}$: ${_fmt(worth * (1 + extra))}$ dollars.")
        worth *= 1 + extra
    if pct is not None:
        keep = Fraction(100 - pct, 100)
        part.append(f"Selling {pct}\\% leaves a share ${_fmt(keep)}$ of it: ${_fmt(worth * keep)}$ dollars.")
        worth *= keep
    part.append(f"Answer: $\\boxed{{{_fmt(worth)}}}$.")
    return ["\n".join(equation), "\n".join(dollars), "\n".join(part)]


def _word(rng: random.Random, level: int) -> tuple[str, str, list[str]]:
    name, other = rng.sample(_NAMES, 2)
    plural, single = rng.choice(_ITEMS)
    price = rng.randint(2, 5 + 5 * level)
    count = rng.randint(3, 10 + 10 * level)
    given = rng.randint(1, count - 1)
    lines = [
        f"{name} buys {count} {plural} at {price} dollars per {single}.",
        f"{name} gives {given} of them to {other}.",
    ]
    sol = [f"The {plural} cost ${count} \\times {price} = {count * price}$ dollars."]
    kept = count - given
    sol.append(f"{name} keeps ${count} - {given} = {kept}$ {plural}.")
    answer = kept * price
    question = f"What is the value, in dollars, of the {plural} {name} keeps?"
    extra_k = pct_k = None
    if level >= 3:
        extra = extra_k = rng.randint(2, 4)
        lines.append(f"Then {name} buys {extra} times as many {plural} as {name} kept, at the same price.")
        kept = kept + extra * kept
        sol.append(f"After buying {extra} times as many, {name} has ${kept}$ {plural}.")
        answer = kept * price
    whole = [p for p in (10, 20, 25, 50) if kept * p % 100 == 0]  # sell whole items only
    if level >= 4 and whole:
        pct = pct_k = rng.choice(whole)
        lines.append(f"Finally {name} sells {pct}\\% of them to {other} at cost.")
        sold = Fraction(kept * pct, 100)
        kept_f = kept - sold
        sol.append(f"Selling {pct}\\% leaves ${kept} - {_fmt(sold)} = {_fmt(kept_f)}$ {plural}.")
        answer = kept_f * price
    if level >= 2:
        lines.insert(0, f"At a market that opens at {rng.randint(6, 10)} a.m., prices are fixed for the whole day.")
    sol.append(
        f"Their value is ${_fmt(Fraction(answer))}$ dollars, so the answer is $\\boxed{{{_fmt(Fraction(answer))}}}$."
    )
    problem = " ".join([*lines, question])
    alternatives = _word_alternatives(name, other, plural, count, given, price, extra_k, pct_k)
    return problem, _fmt(Fraction(answer)), ["\n".join(sol), *alternatives]


_BUILDERS = {"arith": _arith, "linear": _linear, "fraction": _fraction, "word": _word}


def generate_problem(
    index: int,
    *,
    seed: int = 0,
    family: str = "mixed",
    level: int | None = None,
    min_level: int = 1,
    max_level: int = 5,
    min_ops: int | None = None,
    max_ops: int | None = None,
    ops: str | None = None,
) -> dict:
    """Problem ``index`` of the stream ``(seed, family)``: problem, answer, solution(s), level, family (and ``ops``,
    an arithmetic chain's number of operations).

    ``solutions`` holds every reference solution (distinct methods); ``solution`` is the first of them.
    ``min_ops`` / ``max_ops`` / ``ops`` (``arith`` only, see ``generate``) change the chain length and operators.
    """
    rng = _rng(seed, index, family)
    fam = rng.choice(FAMILIES) if family == "mixed" else family
    if fam not in _BUILDERS:
        raise InputError(f"unknown generator family {family!r}; choose from {[*FAMILIES, 'mixed']}")
    lvl = level if level is not None else rng.randint(min_level, max_level)
    chain = _chain(min_ops, max_ops)
    if fam == "arith" and (chain is not None or ops is not None):
        problem, answer, solutions = _arith(rng, lvl, chain, _operators(ops))
    else:
        problem, answer, solutions = _BUILDERS[fam](rng, lvl)
    out: dict = {
        "problem": problem,
        "answer": answer,
        "solution": solutions[0],
        "solutions": solutions,
        "level": lvl,
        "family": fam,
    }
    if fam == "arith":  # the chain length: what makes an arithmetic chain hard for a small model
        out["ops"] = len(re.findall(r" [+-] |\\times", problem))
    return out


def _chain(min_ops: int | None, max_ops: int | None) -> tuple[int, int] | None:
    """(min, max) operations of an ``arith`` chain, or None (the level decides); one bound alone sets both."""
    if min_ops is None and max_ops is None:
        return None
    lo = min_ops if min_ops is not None else max_ops
    hi = max_ops if max_ops is not None else min_ops
    if not 1 <= lo <= hi <= 64:
        raise InputError(f"chain length must satisfy 1 <= min_ops <= max_ops <= 64, got {lo}..{hi}")
    return lo, hi


def _operators(ops: str | None) -> str | None:
    """The operator set as a string of distinct characters from ``+-*`` (``x`` is accepted for ``*``)."""
    if ops is None:
        return None
    chosen = "".join(dict.fromkeys(ops.replace("x", "*").replace(" ", "")))
    if not chosen or set(chosen) - set("+-*"):
        raise InputError(f"ops must be a non-empty subset of '+-*' (or 'x' for '*'), got {ops!r}")
    return chosen


def generate(
    n: int,
    *,
    seed: int = 0,
    family: str = "mixed",
    min_level: int = 1,
    max_level: int = 5,
    min_ops: int | None = None,
    max_ops: int | None = None,
    ops: str | None = None,
    **waste_options: float,
) -> Iterator[dict]:
    """``n`` problems of the stream ``(seed, family)``, in index order.

    ``min_ops`` / ``max_ops``: the number of operations of an ``arith`` chain, drawn uniformly between them (by
    default the level sets it: 1 + level + 0..level). ``ops``: its operators, a subset of ``+-*`` (by default
    ``+-`` at level 1, ``+-*`` above). Numbers stay sized by the level. Other families ignore both. Without them
    every problem (and id) is what it was before they existed; with them the stream is another one.
    ``waste_options``: what real pools hold (``curate.ingest.waste.Waste``: wrong golds, duplicates, leaks of an
    evaluation stream, a teacher's wrong traces), added to the ``n`` problems; each added row says what it is in
    ``waste``. Without them the stream is exactly the clean one.
    """
    from curate.ingest import waste

    if not 1 <= min_level <= max_level <= 5:
        raise InputError(f"levels must satisfy 1 <= min_level <= max_level <= 5, got {min_level}..{max_level}")
    _chain(min_ops, max_ops), _operators(ops)  # fail before the first problem
    unknown = set(waste_options) - waste.OPTIONS
    if unknown:
        raise InputError(f"unknown generator option(s) {sorted(unknown)}")
    knobs = waste.Waste(**waste_options)  # type: ignore[arg-type]
    stream = dict(family=family, min_level=min_level, max_level=max_level, min_ops=min_ops, max_ops=max_ops, ops=ops)

    def clean(count: int, stream_seed: int, **other: int | None) -> Iterator[dict]:
        return (generate_problem(i, seed=stream_seed, **{**stream, **other}) for i in range(count))

    if not knobs.active:
        yield from clean(n, seed)
        return
    chain = {k: v for k, v in (("min_ops", knobs.leak_min_ops), ("max_ops", knobs.leak_max_ops)) if v is not None}
    yield from waste.apply(knobs, clean(n, seed), seed, lambda count: clean(count, knobs.leak_seed, **chain))


INTEGER_OPTIONS = {"n", "seed", "min_level", "max_level", "min_ops", "max_ops", "leak_seed", "leak_n", "leak_min_ops",
                   "leak_max_ops", "teacher_methods", "teacher_k"}  # fmt: skip


def parse_uri(uri: str) -> dict:
    """``gen://mixed?n=2000&seed=0&min_level=1&max_level=5`` -> keyword arguments of ``generate``."""
    from curate.ingest import waste

    parsed = urlparse(uri)
    if parsed.scheme != "gen":
        raise InputError(f"not a generator URI: {uri!r}")
    family = parsed.netloc or "mixed"
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    allowed = INTEGER_OPTIONS | {"ops"} | waste.OPTIONS
    unknown = set(query) - allowed
    if unknown:
        raise InputError(f"unknown generator option(s) {sorted(unknown)} in {uri!r}; allowed: {sorted(allowed)}")
    try:
        out: dict = {k: v if k == "ops" else int(v) if k in INTEGER_OPTIONS else float(v) for k, v in query.items()}
    except ValueError as exc:
        raise InputError(f"generator options must be numbers (ops: operators) in {uri!r}") from exc
    if "ops" in out:  # a literal '+' in a query string reads as a space: ops=+- arrives as ' -'
        out["ops"] = _operators(out["ops"].replace(" ", "+") if " " in out["ops"] else out["ops"])
    _chain(out.get("min_ops"), out.get("max_ops"))
    out.setdefault("n", 1000)
    out.setdefault("seed", 0)
    return {"family": family, **out}
