r"""A tiny, safe evaluator of numeric LaTeX answers: the answer checker's second fast path (``curate.verify``).

Many answers that would reach math-verify are numbers in LaTeX (``\frac{3}{4}``, ``2\sqrt{5}``, ``(8,-3)``). They
are evaluated to floats by a small recursive-descent parser: nothing is ``eval``-ed, input is capped at 200 characters
and 40 levels of nesting, and float arithmetic cannot hang (a huge power overflows at once).
Anything else (variables, units, percent, degrees, text, intervals, sets in braces, matrices) is *not handled*, and
the pair goes to math-verify.

``compare(golds, candidate)`` returns ``"correct"`` when the values agree to 1e-12 (relative), ``"wrong"`` when they
differ by more than 1e-5 (relative to max(1, |value|)), and ``None`` in between or when it cannot tell. The thresholds
keep it on math-verify's side of every decision: math-verify compares exact expressions exactly and floats rounded to
6 decimals, so values 1e-5 apart are different for it too. Its conventions are followed where they matter: an integer
directly before ``\frac{int}{int}`` is a mixed number (``2\frac{1}{2}`` = 5/2), other juxtaposition multiplies;
``(a, b)`` is an ordered tuple and a bare ``a, b`` an unordered list.

>>> compare(("\\frac{1}{2}",), "0.5"), compare(("2\\sqrt{5}",), "\\sqrt{20}"), compare(("(8,-3)",), "(9,-3)")
('correct', 'correct', 'wrong')
"""

from __future__ import annotations

import math
import re

from curate.verify.answers import answer_key


MAX_CHARS = 200
MAX_DEPTH = 40
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\.\d+|\\[A-Za-z]+|[-+*/^(){}\[\],]|.", re.S)
_STARTS = ("\\frac", "\\sqrt", "\\pi", "(", "{")  # tokens that begin a factor
_SPACING = {"\\cdot": "*", "\\times": "*", "\\div": "/", "\\dfrac": "\\frac", "\\tfrac": "\\frac"}


class _Unhandled(Exception):
    """Not a numeric answer this evaluator reads (the caller falls back to math-verify)."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = [_SPACING.get(t, t) for t in _TOKEN.findall(text)]
        self.i = 0
        self.depth = 0

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
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        self.depth -= 1
        return value

    def term(self) -> float:
        value = self.factor()
        while True:
            tok = self.peek()
            if tok in ("*", "/"):
                self.take()
                rhs = self.factor()
                value = value * rhs if tok == "*" else _div(value, rhs)
            elif tok is not None and (tok[0].isdigit() or tok[0] == "." or tok in _STARTS):
                value = value * self.factor()  # juxtaposition: 2\sqrt{5}, 3\pi, 2(4)
            else:
                return value

    def factor(self) -> float:
        if self.peek() in ("-", "+"):
            return -self.factor() if self.take() == "-" else self.factor()
        base = self.atom()
        if self.peek() == "^":
            self.take()
            exponent = self.group() if self.peek() == "{" else self.single(split=False)
            base = _pow(base, exponent)
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
        if tok == "\\frac":
            return _div(self.group(), self.group())
        if tok == "\\sqrt":
            root = 2.0
            if self.peek() == "[":
                self.take()
                root = self.expr()
                self.take("]")
            return _pow(self.group(), 1.0 / root)
        if tok in ("(", "{"):
            value = self.expr()
            self.take(")" if tok == "(" else "}")
            return value
        raise _Unhandled(f"token {tok!r}")

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


def evaluate(answer: str) -> tuple[str, list[float]]:
    """``(kind, values)`` of a numeric answer: kind ``scalar``, ``tuple`` (``(a, b)``) or ``list`` (``a, b``).

    Raises ``ValueError`` when the answer is not one this evaluator reads.
    """
    key = answer_key(answer)
    if not key or len(key) > MAX_CHARS:
        raise ValueError("empty or too long")
    kind = "scalar"
    parts = _split_top(key)
    if len(parts) == 1 and key.startswith("(") and key.endswith(")") and len(_split_top(key[1:-1])) > 1:
        kind, parts = "tuple", _split_top(key[1:-1])
    elif len(parts) > 1:
        kind = "list"
    values = []
    for part in parts:
        parser = _Parser(part)
        try:
            value = parser.expr()
            if parser.peek() is not None:
                raise _Unhandled(f"trailing {parser.peek()!r}")
        except (_Unhandled, RecursionError) as exc:
            raise ValueError(str(exc)) from None
        values.append(value)
    return kind, (sorted(values) if kind == "list" else values)


def _close(a: float, b: float) -> str | None:
    if math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15):
        return "correct"
    if abs(a - b) > 1e-5 * max(1.0, abs(a), abs(b)):
        return "wrong"
    return None


def compare(golds: tuple[str, ...], candidate: str) -> str | None:
    """``correct``, ``wrong`` or ``None`` (cannot tell: ask math-verify) for a candidate against gold alternatives."""
    try:
        kind, cand = evaluate(candidate)
    except ValueError:
        return None
    verdicts = []
    for gold in golds:
        try:
            gkind, gvals = evaluate(gold)
        except ValueError:
            return None
        if gkind != kind or len(gvals) != len(cand):
            return None  # a tuple against a list, or lengths differ: math-verify's call
        per = [_close(g, c) for g, c in zip(gvals, cand, strict=True)]
        verdicts.append("wrong" if "wrong" in per else ("correct" if all(p == "correct" for p in per) else None))
    if "correct" in verdicts:
        return "correct"
    return "wrong" if verdicts and all(v == "wrong" for v in verdicts) else None
