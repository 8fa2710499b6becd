r"""Built-in default data: a procedural generator of verifiable math problems.

Four families, each with an exact gold answer and a step-by-step reference solution ending in ``\boxed{}``:

- ``arith``: arithmetic chains (``Compute 12 + 7 \times 3 - 5.``), steps and magnitudes grow with the level;
- ``linear``: linear equations ``a x + b = c x + d`` with integer or fractional roots;
- ``fraction``: sums and products of fractions, answer reduced (``\frac{7}{12}``);
- ``word``: templated word problems (shops, trains, recipes) with a few sentences of context, so prompt lengths vary.

Difficulty is a knob: ``level`` 1-5 sets the number of steps and the size of the numbers; each problem records its
level (also as ``difficulty``) so scoring has a dataset label to learn a difficulty prior from. Deterministic by
seed and index: problem ``i`` of seed ``s`` is the same whatever ``n`` is, so a 220K pool extends a 2K one.

Used through the source URI ``gen://<family>?n=2000&seed=0&min_level=1&max_level=5`` (``family`` is one of the
four or ``mixed``), e.g. ``curate ingest "gen://mixed?n=220000&seed=0" --pool big``.

>>> p = generate_problem(0, seed=0, family="arith", level=1)
>>> sorted(p) == ["answer", "family", "level", "problem", "solution"]
True
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from fractions import Fraction
from urllib.parse import parse_qs, urlparse


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


def _arith(rng: random.Random, level: int) -> tuple[str, str, str]:
    steps = 1 + level + rng.randint(0, level)
    hi = 10 ** min(1 + level // 2, 4)
    value = rng.randint(1, hi)
    expr = str(value)
    lines = [f"Start with ${value}$."]
    for _ in range(steps):
        op = rng.choice("+-*") if level > 1 else rng.choice("+-")
        b = rng.randint(2, 12) if op == "*" else rng.randint(1, hi)
        if op == "*":
            new = value * b
            lines.append(f"Multiply by ${b}$: ${value} \\times {b} = {new}$.")
            expr = f"({expr}) \\times {b}"
        elif op == "+":
            new = value + b
            lines.append(f"Add ${b}$: ${value} + {b} = {new}$.")
            expr = f"{expr} + {b}"
        else:
            new = value - b
            lines.append(f"Subtract ${b}$: ${value} - {b} = {new}$.")
            expr = f"{expr} - {b}"
        value = new
    problem = f"Compute ${expr}$."
    solution = "\n".join([*lines, f"The result is $\\boxed{{{value}}}$."])
    return problem, str(value), solution


def _linear(rng: random.Random, level: int) -> tuple[str, str, str]:
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
    return problem, _fmt(x), solution


def _fraction(rng: random.Random, level: int) -> tuple[str, str, str]:
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
    return problem, _fmt(total), solution


def _word(rng: random.Random, level: int) -> tuple[str, str, str]:
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
    if level >= 3:
        extra = rng.randint(2, 4)
        lines.append(f"Then {name} buys {extra} times as many {plural} as {name} kept, at the same price.")
        kept = kept + extra * kept
        sol.append(f"After buying {extra} times as many, {name} has ${kept}$ {plural}.")
        answer = kept * price
    whole = [p for p in (10, 20, 25, 50) if kept * p % 100 == 0]  # sell whole items only
    if level >= 4 and whole:
        pct = rng.choice(whole)
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
    return problem, _fmt(Fraction(answer)), "\n".join(sol)


_BUILDERS = {"arith": _arith, "linear": _linear, "fraction": _fraction, "word": _word}


def generate_problem(
    index: int,
    *,
    seed: int = 0,
    family: str = "mixed",
    level: int | None = None,
    min_level: int = 1,
    max_level: int = 5,
) -> dict:
    """Problem ``index`` of the stream ``(seed, family)``: problem, answer, solution, level, family."""
    rng = _rng(seed, index, family)
    fam = rng.choice(FAMILIES) if family == "mixed" else family
    if fam not in _BUILDERS:
        raise ValueError(f"unknown generator family {family!r}; choose from {[*FAMILIES, 'mixed']}")
    lvl = level if level is not None else rng.randint(min_level, max_level)
    problem, answer, solution = _BUILDERS[fam](rng, lvl)
    return {"problem": problem, "answer": answer, "solution": solution, "level": lvl, "family": fam}


def generate(
    n: int, *, seed: int = 0, family: str = "mixed", min_level: int = 1, max_level: int = 5
) -> Iterator[dict]:
    """``n`` problems of the stream ``(seed, family)``, in index order."""
    if not 1 <= min_level <= max_level <= 5:
        raise ValueError(f"levels must satisfy 1 <= min_level <= max_level <= 5, got {min_level}..{max_level}")
    for i in range(n):
        yield generate_problem(i, seed=seed, family=family, min_level=min_level, max_level=max_level)


def parse_uri(uri: str) -> dict:
    """``gen://mixed?n=2000&seed=0&min_level=1&max_level=5`` -> keyword arguments of ``generate``."""
    parsed = urlparse(uri)
    if parsed.scheme != "gen":
        raise ValueError(f"not a generator URI: {uri!r}")
    family = parsed.netloc or "mixed"
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    allowed = {"n", "seed", "min_level", "max_level"}
    unknown = set(query) - allowed
    if unknown:
        raise ValueError(f"unknown generator option(s) {sorted(unknown)} in {uri!r}; allowed: {sorted(allowed)}")
    try:
        out = {k: int(v) for k, v in query.items()}
    except ValueError as exc:
        raise ValueError(f"generator options must be integers in {uri!r}") from exc
    out.setdefault("n", 1000)
    out.setdefault("seed", 0)
    return {"family": family, **out}
