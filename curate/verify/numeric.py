r"""A tiny, safe evaluator of numeric LaTeX answers: the answer checker's second fast path (``curate.verify``).

Many answers that would reach math-verify are numbers in LaTeX (``\frac{3}{4}``, ``2\sqrt{5}``, ``(8,-3)``). They
are evaluated to floats by a small recursive-descent parser: nothing is ``eval``-ed, input is capped at 200 characters
and 40 levels of nesting, and float arithmetic cannot hang (a huge power overflows at once).
It also reads ``\ln``, ``e``, factorials and binomials of integers, percentages (``12.5\%``), degrees, ratios
(``3:4``), based numbers (``1011_2``, whose base math-verify drops), matrices, sets in braces and intervals with a
square bracket, each kind compared only with the same kind. Anything else (units, text, relations, functions) is *not
handled*, and the pair goes to math-verify. ``compare_symbolic`` also reads single-letter variables, for ``wrong``
only.

``compare(golds, candidate)`` returns ``"correct"`` when the values agree to 1e-12 (relative), ``"wrong"`` when they
differ by more than 1e-5 (relative to max(1, |value|)) and far more than the float error of the evaluation (large
intermediate values cancelling), and ``None`` in between or when it cannot tell; values beyond 1e15 are never
``correct`` (floats cannot see a difference of 1 there, math-verify's exact integers can). The thresholds
keep it on math-verify's side of every decision: math-verify compares exact expressions exactly and floats rounded to
6 decimals, so values 1e-5 apart are different for it too. Its conventions are followed where they matter: an integer
directly before ``\frac{int}{int}`` is a mixed number (``2\frac{1}{2}`` = 5/2), other juxtaposition multiplies;
``(a, b)`` is an ordered tuple and a bare ``a, b`` an unordered list.

>>> compare(("\\frac{1}{2}",), "0.5"), compare(("2\\sqrt{5}",), "\\sqrt{20}"), compare(("(8,-3)",), "(9,-3)")
('correct', 'correct', 'wrong')
"""

from __future__ import annotations

import itertools
import math
import re
import string

from curate.verify.answers import answer_key


MAX_CHARS = 200
MAX_DEPTH = 40
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\.\d+|\\[A-Za-z]+|[-+*/^(){}\[\],]|.", re.S)
_STARTS = ("\\frac", "\\sqrt", "\\pi", "(", "{", "e", "\\ln", "\\binom")  # tokens that begin a factor
_SPACING = {
    "\\cdot": "*",
    "\\times": "*",
    "\\div": "/",
    "\\dfrac": "\\frac",
    "\\tfrac": "\\frac",
    "\\dbinom": "\\binom",
    "\\tbinom": "\\binom",
}
_NUMBER = re.compile(r"\d+(?:\.\d+)?$")


class _Unhandled(Exception):
    """Not a numeric answer this evaluator reads (the caller falls back to math-verify)."""


class _Parser:
    def __init__(self, text: str, env: dict[str, float] | None = None) -> None:
        self.toks = [_SPACING.get(t, t) for t in _TOKEN.findall(text)]
        self.i = 0
        self.depth = 0
        self.env = env  # a value per (lower-case) variable letter, or None: numbers only
        self.peak = 0.0  # largest magnitude met on the way: float cancellation is bounded relative to it

    def seen(self, value: float) -> float:
        """``value``, after noting its magnitude in ``peak``."""
        self.peak = max(self.peak, abs(value))
        return value

    def is_var(self, tok: str | None) -> bool:
        """Whether ``tok`` is a variable letter here (only with an ``env``; see ``VARIABLES``)."""
        return self.env is not None and tok is not None and tok in VARIABLES

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise _Unhandled(f"expected {want!r}, got {tok!r}")
        self.i += 1
        return tok

    def expr(self) -> float:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Unhandled("too deep")
        value = self.seen(self.term())
        while self.peek() in ("+", "-"):
            op, rhs = self.take(), self.seen(self.term())
            value = self.seen(value + rhs if op == "+" else value - rhs)
        self.depth -= 1
        return value

    def term(self) -> float:
        value = self.factor()
        while True:
            tok = self.peek()
            if tok in ("*", "/"):
                self.take()
                rhs = self.factor()
                value = self.seen(value * rhs if tok == "*" else _div(value, rhs))
            elif tok is not None and (tok[0].isdigit() or tok[0] == "." or tok in _STARTS or self.is_var(tok)):
                if (tok[0].isdigit() or tok[0] == ".") and (
                    self.is_var(self.toks[self.i - 1]) or self.toks[self.i - 1] == "e"
                ):
                    raise _Unhandled("a digit after a variable")  # x2: math-verify reads 2x, a reader x_2
                value = self.seen(value * self.factor())  # juxtaposition: 2\sqrt{5}, 3\pi, 2(4), 2xy
            else:
                return value

    def factor(self) -> float:
        if self.peek() in ("-", "+"):
            return -self.factor() if self.take() == "-" else self.factor()
        base = self.atom()
        while self.peek() == "!":  # 5!: math-verify's factorial, exact for integers
            self.take()
            if base != int(base) or not 0 <= base <= 170:
                raise _Unhandled("factorial of a non-integer or too large")
            base = float(math.factorial(int(base)))
        if self.peek() == "^":
            self.take()
            exponent = self.group() if self.peek() == "{" else self.single(split=False)
            base = self.seen(_pow(base, exponent))
        return base

    def atom(self) -> float:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            if self.peek() == "\\frac" and "." not in tok:  # mixed number: 2\frac{1}{2} = 5/2
                mark = self.i
                self.take()
                num, den = self.group(), self.group()
                if self._is_int_group(mark):
                    return float(tok) + _div(num, den)
                self.i = mark
            return float(tok)
        if tok == "\\pi":
            return math.pi
        if tok == "e":  # Euler's number to math-verify (while E is a symbol)
            return math.e
        if tok == "\\ln":
            return self.log()
        if tok == "\\binom":
            n, k = self.group(), self.group()
            if n != int(n) or k != int(k) or n < 0 or k < 0:
                raise _Unhandled("binomial of non-integers")
            try:
                return float(math.comb(int(n), int(k)))
            except OverflowError:
                raise _Unhandled("binomial too large") from None
        if self.is_var(tok):
            if self.peek() == "(":
                raise _Unhandled("a letter before a parenthesis")  # f(x): a function call or a product
            return self.env[tok.lower()]  # type: ignore[index]
        if tok == "\\frac":
            return _div(self.group(), self.group())
        if tok == "\\sqrt":
            root = 2.0
            if self.peek() == "[":
                self.take()
                root = self.expr()
                self.take("]")
            return _pow(self.group(), _div(1.0, root))
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        raise _Unhandled(f"token {tok!r}")

    def log(self) -> float:
        """``\\ln`` of a braced or parenthesized argument, or of one number when nothing follows it (``\\ln 2``;
        ``\\ln 2x`` is refused: ln(2x) or ln(2)x)."""
        if self.peek() in ("{", "("):
            arg = self.atom()
        elif self.peek() is not None and _NUMBER.match(self.peek() or ""):
            arg = float(self.take())
            nxt = self.peek()
            if nxt is not None and (nxt[0].isdigit() or nxt in _STARTS or self.is_var(nxt) or nxt == "!"):
                raise _Unhandled("an unbraced logarithm followed by a factor")
        else:
            raise _Unhandled("logarithm argument")
        if arg <= 0:
            raise _Unhandled("logarithm of a non-positive number")
        return math.log(arg)

    def _is_int_group(self, mark: int) -> bool:
        """Whether the ``\\frac`` read from ``mark`` had two plain integers (the mixed-number form)."""
        return all(t.isdigit() or t in "{}" for t in self.toks[mark + 1 : self.i])

    def group(self) -> float:
        """A ``{...}`` argument, or the single digit/token LaTeX allows without braces (``\\frac12``)."""
        if self.peek() == "{":
            self.take()
            value = self.expr()
            self.take("}")
            return value
        return self.single()

    def single(self, split: bool = True) -> float:
        """One unbraced token; ``\\frac12`` takes one digit of ``12`` (``2^34`` is refused: too easy to misread)."""
        tok = self.peek()
        if tok is not None and tok.isdigit() and len(tok) > 1 and split:
            self.toks[self.i] = tok[1:]
            return float(tok[0])
        tok = self.take()
        if tok.isdigit() and len(tok) == 1:
            return float(tok)
        if tok == "\\pi":
            return math.pi
        if self.is_var(tok):
            return self.env[tok.lower()]  # type: ignore[index]
        raise _Unhandled(f"ungrouped {tok!r}")


def _div(a: float, b: float) -> float:
    if b == 0:
        raise _Unhandled("division by zero")
    return a / b


def _pow(a: float, b: float) -> float:
    try:
        value = a**b
    except (OverflowError, ZeroDivisionError) as exc:
        raise _Unhandled(str(exc)) from None
    if isinstance(value, complex) or math.isinf(value) or math.isnan(value):
        raise _Unhandled("not a finite real")
    return value


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside any brackets."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    return [*parts, text[start:]]


_PERCENT = re.compile(r"^([-+]?\d+(?:\.\d+)?)\\%$")  # 12.5\%: math-verify's value is 12.5/100
_DEGREES = re.compile(r"^([-+]?\d+(?:\.\d+)?)\^(?:\\circ|\{\\circ\})$")  # 30^\circ: math-verify drops the degree sign
_RATIO = re.compile(r"^([-+]?\d+(?:\.\d+)?):(\d+(?:\.\d+)?)$")  # 16:3: math-verify's value is 16/3
_BASED = re.compile(r"^(\d{1,15})_(\d|\{\d+\})$")  # 1011_2: math-verify reads the digits and drops the base
_MATRIX = re.compile(r"^\\begin\{([pb]matrix)\}(.*)\\end\{\1\}$")
_SET = re.compile(r"^\\\{(.*)\\\}$")  # \{1, 2\}
# Variables: single letters, upper case the same as lower case (math-verify reads N as n). Not e (Euler's number to
# math-verify, while E is the symbol e), nor i / I (the imaginary unit).
VARIABLES = frozenset(c for c in string.ascii_letters if c not in "eEiI")
# Sample points for expressions in variables: every letter positive and non-integer, distinct from the others.
POINTS = tuple(
    {c: 1.1 + 1.8 * ((k * 0.7548776662 + n * 0.5698402910 + 0.31) % 1.0) for n, c in enumerate(string.ascii_lowercase)}
    for k in range(3)
)


def _evaluate(answer: str, env: dict[str, float] | None = None) -> tuple[str, list[float], float, bool]:
    """``(kind, values, peak, used_variables)``; see ``evaluate``. With ``env``, letters are variables."""
    key = answer_key(answer)
    if not key or len(key) > MAX_CHARS:
        raise ValueError("empty or too long")
    for pattern, kind, scale in ((_PERCENT, "percent", 0.01), (_DEGREES, "degrees", 1.0)):
        m = pattern.match(key)
        if m:
            value = float(m.group(1)) * scale
            return kind, [value], abs(value), False
    m = _RATIO.match(key)
    if m:
        a, b = float(m.group(1)), float(m.group(2))
        if b == 0:
            raise ValueError("ratio to zero")
        return "ratio", [a / b], max(abs(a), b), False
    m = _BASED.match(key)
    if m:
        return f"base {m.group(2).strip('{}')}", [float(m.group(1))], float(m.group(1)), False
    kind, parts = "scalar", _split_top(key)
    if (m := _MATRIX.match(key)) is not None:  # rows from the answer itself: the key drops "\\ " with the space
        inner = _MATRIX.match(re.sub(r"\s+", "", answer.strip()))
        if inner is None:
            raise ValueError("matrix")
        rows = [[answer_key(c) for c in row.split("&")] for row in inner.group(2).split("\\\\")]
        if not rows or any(len(row) != len(rows[0]) for row in rows):
            raise ValueError("ragged matrix")
        kind, parts = f"matrix {len(rows)}x{len(rows[0])}", [cell for row in rows for cell in row]
    elif (m := _SET.match(key)) is not None:
        kind, parts = "set", _split_top(m.group(1))
    elif key[0] in "([" and key[-1] in ")]" and key[0] + key[-1] != "()" and len(_split_top(key[1:-1])) == 2:
        kind, parts = f"interval {key[0]}{key[-1]}", _split_top(key[1:-1])  # [a, b), (a, b], [a, b]
    elif len(parts) == 1 and key.startswith("(") and key.endswith(")") and len(_split_top(key[1:-1])) > 1:
        kind, parts = "tuple", _split_top(key[1:-1])
    elif len(parts) > 1:
        kind = "list"
    values, peak, used = [], 0.0, False
    for part in parts:
        parser = _Parser(part, env)
        try:
            value = parser.expr()
            if parser.peek() is not None:
                raise _Unhandled(f"trailing {parser.peek()!r}")
        except (_Unhandled, RecursionError, ArithmeticError) as exc:
            raise ValueError(str(exc)) from None
        if not math.isfinite(value):
            raise ValueError("not a finite value")
        values.append(value)
        peak = max(peak, parser.peak, abs(value))
        used = used or any(parser.is_var(t) for t in parser.toks)
    if kind.startswith("interval") and not values[1] - values[0] > 1e-5 * max(1.0, peak):
        raise ValueError("an empty or degenerate interval")  # math-verify reads [3, 1] as a tuple
    return kind, (sorted(values) if kind in ("list", "set") else values), peak, used


def _has_duplicates(kind: str, values: list[float]) -> bool:
    """Whether a list or set repeats a value: math-verify's sets drop repeats (``5, 5, 7`` = ``5, 7, 7``)."""
    return kind in ("list", "set") and any(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in itertools.pairwise(values)
    )


def evaluate(answer: str) -> tuple[str, list[float]]:
    """``(kind, values)`` of a numeric answer: kind ``scalar``, ``tuple`` (``(a, b)``), ``list`` (``a, b``),
    ``percent`` (``12.5\\%``, value 0.125) or ``degrees`` (``30^\\circ``, value 30).

    Raises ``ValueError`` when the answer is not one this evaluator reads.
    """
    kind, values, _, _ = _evaluate(answer)
    return kind, values


def _close(a: float, b: float, peak: float = 0.0) -> str | None:
    """``correct`` / ``wrong`` / ``None`` for two values computed with intermediate magnitudes up to ``peak``.

    Float cancellation (``10^{17} + 1 - 10^{17}``) loses precision relative to ``peak``, not to the result: a large
    ``peak`` blocks ``correct``, and ``wrong`` needs a difference far above the float error (about 1e-14 x peak).
    """
    scale = max(1.0, abs(a), abs(b))
    if math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15):  # beyond 1e15 floats miss what exact integers see
        return "correct" if peak <= 1e4 * scale and scale < 1e15 else None
    if abs(a - b) > 1e-5 * scale and abs(a - b) > 1e-9 * peak:
        return "wrong"
    return None


def compare(golds: tuple[str, ...], candidate: str) -> str | None:
    """``correct``, ``wrong`` or ``None`` (cannot tell: ask math-verify) for a candidate against gold alternatives."""
    try:
        kind, cand, cpeak, _ = _evaluate(candidate)
    except ValueError:
        return None
    verdicts = []
    for gold in golds:
        try:
            gkind, gvals, gpeak, _ = _evaluate(gold)
        except ValueError:
            return None
        if gkind != kind or len(gvals) != len(cand) or _has_duplicates(kind, cand) or _has_duplicates(kind, gvals):
            return None  # a tuple against a list, lengths differ, or a set with repeats: math-verify's call
        per = [_close(g, c, max(gpeak, cpeak)) for g, c in zip(gvals, cand, strict=True)]
        verdicts.append("wrong" if "wrong" in per else ("correct" if all(p == "correct" for p in per) else None))
    if "correct" in verdicts:
        return "correct"
    return "wrong" if verdicts and all(v == "wrong" for v in verdicts) else None


def compare_symbolic(golds: tuple[str, ...], candidate: str) -> str | None:
    r"""``wrong`` when the candidate and every gold are expressions in variables (``3x-2``, ``\frac{10m}{m-10}``,
    ``(k+1, k, k)``) whose values clearly differ at one of ``POINTS``; else ``None`` (ask math-verify).

    Two expressions that differ at a point are different functions, and math-verify (strict: variables matter)
    never calls different functions equal; equal values prove nothing (math-verify's simplification may fail), so
    this never says ``correct``. Pairs of two, ``(a, b)``, are left alone: math-verify may read them as intervals,
    and an empty interval equals every other one.
    """
    used = False
    for gold in golds:
        differs = False
        for env in POINTS:
            try:
                ckind, cvals, cpeak, cused = _evaluate(candidate, env)
                gkind, gvals, gpeak, gused = _evaluate(gold, env)
            except ValueError:
                return None
            if ckind != gkind or len(cvals) != len(gvals) or ckind not in ("scalar", "tuple", "list", "set"):
                return None
            if _has_duplicates(ckind, cvals) or _has_duplicates(gkind, gvals):
                return None
            if ckind == "tuple" and len(cvals) < 3:
                return None
            used = used or cused or gused
            peak = max(cpeak, gpeak)
            differs = differs or any(_close(g, c, peak) == "wrong" for g, c in zip(gvals, cvals, strict=True))
        if not differs:
            return None
    return "wrong" if used and golds else None
