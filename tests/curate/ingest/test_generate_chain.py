"""``gen://arith`` chain length and operator options (issue 21): absent, nothing changes; present, they hold."""

from __future__ import annotations

import re

import pytest

from curate.errors import InputError
from curate.ingest.generate import generate, generate_problem, parse_uri
from curate.verify import answers as A


def _ops(problem: str) -> list[str]:
    return re.findall(r" ([+-]) |(\\times)", problem.split("$")[1])


def test_without_the_options_problems_are_unchanged():
    for i in range(60):
        for level in (1, 3, 5):
            plain = generate_problem(i, seed=4, family="arith", level=level)
            assert generate_problem(i, seed=4, family="arith", level=level, min_ops=None, ops=None) == plain
    assert list(generate(40, seed=2)) == list(generate(40, seed=2, min_ops=None, max_ops=None, ops=None))


def test_chain_length_and_operators_are_honoured_and_answers_right():
    seen = set()
    for p in generate(300, seed=1, family="arith", min_level=1, max_level=1, min_ops=4, max_ops=6, ops="+-"):
        ops = _ops(p["problem"])
        assert 4 <= len(ops) <= 6 and all(o[0] in "+-" and not o[1] for o in ops)
        seen.add(len(ops))
        assert A.find_boxed(p["solution"])[-1] == p["answer"]
        assert eval(p["problem"].split("$")[1]) == int(p["answer"])  # +- only: plain Python arithmetic
    assert seen == {4, 5, 6}
    one = [generate_problem(i, seed=0, family="arith", level=2, min_ops=2, max_ops=2, ops="x") for i in range(20)]
    assert all(p["problem"].count("\\times") == 2 for p in one)
    # other families ignore the options
    assert generate_problem(5, seed=0, family="linear", min_ops=3) == generate_problem(5, seed=0, family="linear")


def test_uri_options():
    assert parse_uri("gen://arith?n=5&min_ops=4&max_ops=6&ops=%2B-") == {
        "family": "arith", "n": 5, "seed": 0, "min_ops": 4, "max_ops": 6, "ops": "+-"
    }  # fmt: skip
    assert parse_uri("gen://arith?ops=+-")["ops"] == "+-"  # a bare '+' arrives as a space
    assert parse_uri("gen://arith?ops=x")["ops"] == "*"
    for bad in (
        "gen://arith?ops=/",
        "gen://arith?min_ops=5&max_ops=2",
        "gen://arith?min_ops=0",
        "gen://arith?min_ops=a",
    ):
        with pytest.raises(InputError):
            parse_uri(bad)
    with pytest.raises(InputError):
        next(generate(3, family="arith", ops="+/"))
