r"""Recall of ``curate decontaminate`` on copies of test problems written another way, and its false hits on template
siblings (before the text tests knew them, a copy typed with a Unicode minus was missed 258 times in 300; a reworded
copy with a typo'd gold, 300 times in 300). Seconds on one core; no encoder (the text tests only, as the built-in
recipe runs them).

Benchmarks: the built-in pool's test split (``datasets/tiny/recipe.yaml``: ``gen://arith`` seed 1, 300 chains of 3-8
operations of + and -) and, for the multiplication signs, 300 chains with ``\times`` drawn the same way (seed 11,
operators ``+-*``). Each variant is one train copy of every benchmark problem, checked alone against the benchmark:

  minus-u2212     every ``-`` typed as the minus sign U+2212 (the gold unchanged)
  en-dash         every ``-`` typed as an en dash U+2013
  fullwidth       every digit full-width (U+FF10-FF19)
  nbsp-thin       the spaces inside the formula as no-break (U+00A0) and thin (U+2009) spaces
  times-x / middot / cdot / star   ``\times`` typed as U+00D7, U+00B7, ``\cdot``, ``*`` (the multiplication set)
  reworded        reworded (``curate.ingest.waste.reworded``: ``What is $E$?`` ...), the same gold
  reworded-typo   reworded, with a typo'd gold (``waste.wrong_answer`` kind ``typo``: digits reversed or one added)
  sibling-number  NOT a leak: the same wording with the last number one higher (and its own true answer)
  sibling-sign    NOT a leak: the same numbers with the first ``+`` made a ``-`` (or the reverse), its true answer

Usage (and the figures before a change: the same script on an older tree's ``curate``)::

    .venv/bin/python bench/bench_leaks.py [--n 300]
    git archive <commit> curate | tar -x -C /tmp/old && PYTHONPATH=/tmp/old .venv/bin/python bench/bench_leaks.py
"""

from __future__ import annotations

import argparse
import json
import random
import re

import polars as pl

from curate import schema as S
from curate.decontaminate.dedup import DedupConfig
from curate.decontaminate.stage import DecontamConfig, decontaminate
from curate.ingest import waste
from curate.ingest.generate import generate


_FORMULA = re.compile(r"\$(.+)\$")


def frame(rows: list[tuple[str, str]], split: str, source: str) -> pl.DataFrame:
    """The columns ``decontaminate`` reads, for (problem, answer) pairs."""
    return pl.DataFrame(
        {
            S.PROBLEM_ID: [f"{source}-{i}" for i in range(len(rows))],
            S.PROBLEM: [p for p, _ in rows],
            S.ANSWER: [a for _, a in rows],
            S.ANSWER_ALTERNATIVES: [[a] for _, a in rows],
            S.SPLIT: [split] * len(rows),
            S.SOURCE: [source] * len(rows),
        }
    )


def in_formula(problem: str, fn) -> str:
    """``problem`` with ``fn`` applied to its ``$...$`` formula only."""
    return _FORMULA.sub(lambda m: "$" + fn(m.group(1)) + "$", problem)


def value(expr: str) -> str:
    """The true value of a chain of + and - (the test split's), term by term."""
    return str(sum(int(t) for t in re.findall(r"[+-]?\d+", expr.replace(" ", ""))))


def sibling_number(problem: str) -> tuple[str, str]:
    expr = _FORMULA.search(problem).group(1)
    m = list(re.finditer(r"\d+", expr))[-1]
    new = expr[: m.start()] + str(int(m.group()) + 1) + expr[m.end() :]
    return problem.replace(expr, new), value(new)


def sibling_sign(problem: str) -> tuple[str, str]:
    expr = _FORMULA.search(problem).group(1)
    k = min((i for i in (expr.find(" + "), expr.find(" - ")) if i >= 0), default=-1)
    new = expr[:k] + (" - " if expr[k : k + 3] == " + " else " + ") + expr[k + 3 :]
    return problem.replace(expr, new), value(new)


def variants(n: int) -> dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]], bool]]:
    """name -> (benchmark rows, train rows, are they leaks)."""
    common = {"family": "arith", "min_level": 1, "max_level": 1, "min_ops": 3, "max_ops": 8}
    test = [(p["problem"], p["answer"]) for p in generate(n, seed=1, **common)]
    times = [(p["problem"], p["answer"]) for p in generate(n, seed=11, ops="+-*", **common)]
    rng = random.Random(0)
    fullwidth = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
    spaces = iter(["\u00a0", "\u2009"] * 10_000)

    def each(rows, fn):
        return [(fn(p), a) for p, a in rows]

    def spaced(problem: str) -> str:
        return in_formula(problem, lambda f: re.sub(" ", lambda _: next(spaces), f))

    out = {
        "minus-u2212": (test, each(test, lambda p: in_formula(p, lambda f: f.replace("-", "\u2212"))), True),
        "en-dash": (test, each(test, lambda p: in_formula(p, lambda f: f.replace("-", "\u2013"))), True),
        "fullwidth": (test, each(test, lambda p: p.translate(fullwidth)), True),
        "nbsp-thin": (test, each(test, spaced), True),
        "times-x": (times, each(times, lambda p: p.replace("\\times", "\u00d7")), True),
        "middot": (times, each(times, lambda p: p.replace("\\times", "\u00b7")), True),
        "cdot": (times, each(times, lambda p: p.replace("\\times", "\\cdot")), True),
        "star": (times, each(times, lambda p: p.replace("\\times", "*")), True),
        "reworded": (test, [(waste.reworded(p, rng), a) for p, a in test], True),
        "reworded-typo": (
            test,
            [(waste.reworded(p, rng), waste.wrong_answer({"answer": a}, "typo", rng)) for p, a in test],
            True,
        ),
        "sibling-number": (test, [sibling_number(p) for p, _ in test], False),
        "sibling-sign": (test, [sibling_sign(p) for p, _ in test], False),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="benchmark problems (and copies per variant)")
    args = ap.parse_args()
    cfg = DecontamConfig(use_embeddings=False, dedup=DedupConfig(enabled=False))
    report = {}
    for name, (bench, train, leaks) in variants(args.n).items():
        flags, _ = decontaminate(frame(train, "train", "copy"), frame(bench, "test", "test"), cfg)
        found = int(flags[S.CONTAMINATED].sum())
        report[name] = {"flagged": found, "of": len(train), "leaks": leaks}
        what = "recall" if leaks else "false hits"
        print(f"{name:16} {what:10} {found:4d} / {len(train)}", flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
