"""Near-duplicate clusters (curate.decontaminate.dedup): blocked similarity search, union-find, representatives,
text signatures.

In-memory and synthetic (no encoder): vectors are built so that the expected clusters are known.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from curate import schema as S
from curate.config import ConfigError
from curate.decontaminate.dedup import (
    DedupConfig,
    connected_components,
    near_duplicates,
    numbers,
    numbers_compatible,
    similarity_edges,
    tokenize,
)


def unit(rng: np.random.Generator, n: int, d: int = 32) -> np.ndarray:
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def jitter(v: np.ndarray, rng: np.random.Generator, eps: float = 0.02) -> np.ndarray:
    w = v + eps * rng.standard_normal(v.shape).astype(np.float32)
    return w / np.linalg.norm(w, axis=-1, keepdims=True)


def frame(ids, answers, sources=None, solutions=None) -> pl.DataFrame:
    n = len(ids)
    return pl.DataFrame(
        {
            S.PROBLEM_ID: ids,
            S.ANSWER: answers,
            S.SOURCES: sources or [[f"src#{i}"] for i in range(n)],
            S.SOLUTION: pl.Series(solutions or [None] * n, dtype=pl.String),
        }
    )


def brute_force(v: np.ndarray, threshold: float, groups=None) -> set[tuple[int, int]]:
    sims = v @ v.T
    out = set()
    for i in range(len(v)):
        for j in range(i + 1, len(v)):
            if sims[i, j] >= threshold and (groups is None or groups[i] == groups[j]):
                out.add((i, j))
    return out


def test_blocked_edges_equal_brute_force_at_any_block_size():
    rng = np.random.default_rng(0)
    base = unit(rng, 20)
    v = np.concatenate([base, jitter(base[:8], rng), jitter(base[:3], rng)])  # 8 pairs + 3 triangles
    expected = brute_force(v, 0.9)
    assert len(expected) == 8 + 3 * 2  # (k, k+20), (k, k+28) and (k+20, k+28) for k < 3, one each for 3 <= k < 8
    for block in (1, 3, 7, 1000):  # block 1 and 3 exercise the tiled, memory-safe path
        i, j, s = similarity_edges(v, 0.9, block_size=block)
        assert set(zip(i.tolist(), j.tolist(), strict=True)) == expected
        assert np.all(i < j) and np.all(s >= 0.9)


def test_edges_only_within_groups_and_capped_per_row():
    rng = np.random.default_rng(1)
    v = np.repeat(unit(rng, 1), 6, axis=0)  # six identical vectors: 15 pairs
    groups = np.array([0, 0, 0, 1, 1, 1])
    i, j, _ = similarity_edges(v, 0.99, groups=groups, block_size=2)
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == brute_force(v, 0.99, groups)
    assert len(i) == 6
    i, j, _ = similarity_edges(v, 0.99, max_neighbors=1)
    assert np.bincount(i).max() == 1
    assert len(set(connected_components(6, i, j).tolist())) == 1  # still one cluster: a chain links them all


def test_connected_components_label_is_smallest_member():
    labels = connected_components(6, np.array([4, 1, 2]), np.array([5, 2, 3]))
    assert labels.tolist() == [0, 1, 1, 1, 4, 4]


def test_near_duplicates_keep_one_per_cluster_and_never_merge_different_answers():
    rng = np.random.default_rng(2)
    base = unit(rng, 4)
    v = np.concatenate([base, jitter(base[:2], rng), base[2:3]])  # rows 4, 5 near 0, 1; row 6 == row 2
    ids = [f"p{k}" for k in range(7)]
    answers = ["1", "2", "3", "4", "1", "2", "7"]  # row 6 has another answer than its twin, row 2
    out = near_duplicates(frame(ids, answers), v, DedupConfig(threshold=0.9, block_size=2))
    assert out[S.PROBLEM_ID].to_list() == ids
    assert out[S.DUPLICATE_OF].to_list() == [None, None, None, None, "p0", "p1", None]
    assert out[S.CLUSTER_SIZE].to_list() == [2, 2, 1, 1, 2, 2, 1]
    dropped = out.filter(pl.col(S.DUPLICATE_OF).is_not_null())
    assert dropped["similarity"].min() >= 0.9
    for rep, group in out.group_by(pl.coalesce(S.DUPLICATE_OF, S.PROBLEM_ID)):
        kept = group.filter(pl.col(S.DUPLICATE_OF).is_null())
        assert kept.height == 1 and kept[S.PROBLEM_ID][0] == rep[0]


def test_representative_rule_sources_then_solution_then_id():
    rng = np.random.default_rng(3)
    v = np.repeat(unit(rng, 1), 4, axis=0)
    ids = ["d", "c", "b", "a"]
    sources = [["x#1", "y#1"], ["x#2"], ["x#3"], ["x#4"]]
    out = near_duplicates(frame(ids, ["5"] * 4, sources), v, DedupConfig(threshold=0.99))
    assert set(out[S.DUPLICATE_OF].drop_nulls()) == {"d"}  # most sources wins over the smallest id
    out = near_duplicates(frame(ids, ["5"] * 4, solutions=[None, None, "sol", None]), v, DedupConfig(threshold=0.99))
    assert set(out[S.DUPLICATE_OF].drop_nulls()) == {"b"}  # then a reference solution
    out = near_duplicates(frame(ids, ["5"] * 4), v, DedupConfig(threshold=0.99))
    assert set(out[S.DUPLICATE_OF].drop_nulls()) == {"a"}  # then the smallest id


def test_numbers_guard_keeps_template_siblings_apart():
    rng = np.random.default_rng(4)
    v = np.repeat(unit(rng, 1), 3, axis=0)
    texts = ["What is 2 + 3?", "What is 1 + 4?", "What is $2+3$ ?"]
    nums = [numbers(tokenize(t)) for t in texts]
    out = near_duplicates(frame(["a", "b", "c"], ["5"] * 3), v, DedupConfig(threshold=0.99), nums)
    assert out[S.DUPLICATE_OF].to_list() == [None, None, "a"]
    off = near_duplicates(frame(["a", "b", "c"], ["5"] * 3), v, DedupConfig(threshold=0.99, same_numbers=False), nums)
    assert off[S.DUPLICATE_OF].to_list() == [None, "a", "a"]


def test_numbers_slack_only_for_long_problems():
    rng = np.random.default_rng(5)
    v = np.repeat(unit(rng, 1), 2, axis=0)
    nums = [numbers(tokenize("1 2 3")), numbers(tokenize("1 2 3 4"))]  # the second adds a number
    cfg = DedupConfig(threshold=0.99, number_slack_tokens=40)
    short = near_duplicates(frame(["a", "b"], ["5", "5"]), v, cfg, nums, lengths=[10, 12])
    assert short[S.DUPLICATE_OF].to_list() == [None, None]
    long = near_duplicates(frame(["a", "b"], ["5", "5"]), v, cfg, nums, lengths=[60, 64])
    assert long[S.DUPLICATE_OF].to_list() == [None, "a"]


def test_problems_without_answer_never_merge_and_disabled_is_identity():
    v = np.ones((2, 4), dtype=np.float32) / 2
    out = near_duplicates(frame(["a", "b"], ["", ""]), v, DedupConfig(threshold=0.5))
    assert out[S.DUPLICATE_OF].to_list() == [None, None]
    out = near_duplicates(frame(["a", "b"], ["1", "1"]), v, DedupConfig(enabled=False))
    assert out[S.DUPLICATE_OF].to_list() == [None, None] and out[S.CLUSTER_SIZE].to_list() == [1, 1]


def test_tokenize_is_latex_and_whitespace_blind_but_keeps_numbers():
    a = r"Find all pairs $(m, n)$ for which  $$ m^{2}+2 \cdot 3^{n}=m\left(2^{n+1}-1\right) \tag{1} $$"
    b = r"Find all pairs $(m,n)$ for which \[m^2 + 2 \cdot 3^n = m(2^{n+1} - 1).\]  [i]"
    assert tokenize(a) == tokenize(b)
    assert tokenize(r"$\dfrac{1}{2} \leqslant x_{1}$") == tokenize(r"\frac12 \le x_1".replace("12", "{1}{2}"))
    assert tokenize("divided by 9") != tokenize("divided by 8")
    assert tokenize(r"$z^4+z^2+1$") != tokenize(r"$z^4-z^2+1$")  # operators are tokens
    assert numbers(tokenize("1,000 apples and 2.5 pears, 3 times")) == {"1000": 1, "2.5": 1, "3": 1}


def test_numbers_compatible_is_sub_multiset_either_way():
    c = numbers(tokenize("1 2 2 3"))
    assert numbers_compatible(c, numbers(tokenize("1 2 3 2 7")))
    assert numbers_compatible(numbers(tokenize("2 1")), c)
    assert not numbers_compatible(numbers(tokenize("1 2 3 8")), numbers(tokenize("1 2 3 9")))


def test_config_rejects_nonsense():
    with pytest.raises(ConfigError):
        DedupConfig(threshold=1.5)
    with pytest.raises(ConfigError):
        DedupConfig(block_size=0)
