r"""The waste RL will meet, forecast before training: the share of zero-variance groups.

A group of ``n`` rollouts of one prompt whose rewards are all equal (all right or all wrong) has zero advantage: it
costs its rollouts and teaches nothing (DAPO's dynamic sampling, GRESO and ScaleRL's zero-variance filtering exist
because real pools are full of such prompts). For a prompt whose pass rate is ``p``, the chance that a group of
``n`` is all-equal is ``p^n + (1-p)^n``.

``p`` is known only through the prompt's measured rollouts (``c`` right of ``m``). A flat prior would pull a prompt
seen 0 times right in 8 towards the middle and under-forecast the waste; real pass rates pile up at 0 and 1. So
the prior is the pool's own: a Beta(a0, b0) fitted by maximum likelihood to every measured prompt's counts (the
beta-binomial: empirical Bayes), and each prompt's pass rate is ``Beta(a0 + c, b0 + m - c)``. The chance of an
all-equal group is then exactly

    E[p^n + (1-p)^n] = prod_{j<n} (a + j) / (a + b + j) + prod_{j<n} (b + j) / (a + b + j).

Prompts never measured get the prior alone. Over a set of prompts, each drawn once, the share of zero-variance
groups is a sum of independent Bernoulli variables with those means ``q_i``: its expectation is their mean and its
standard error ``sqrt(sum q_i (1 - q_i)) / N``. ``curate score`` and ``curate select`` print it for the pool and the
selection (at ``rollouts``, the rollouts per prompt of the RL that follows); ``training run`` prints it after
``measure`` and, after RL, beside the share the trainer observed (``1 - kept_group_frac``).

>>> round(zero_variance_chance(1.0, 1.0, 2), 4)  # a flat prior: P(both right) + P(both wrong) = 1/3 + 1/3
0.6667
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def zero_variance_chance(alpha: float, beta: float, n: int) -> float:
    """``E[p^n + (1-p)^n]`` for ``p ~ Beta(alpha, beta)``: the chance a group of ``n`` rollouts is all-equal."""
    if n < 1:
        raise ValueError(f"rollouts per prompt must be >= 1, got {n}")
    right = wrong = 1.0
    for j in range(n):
        right *= (alpha + j) / (alpha + beta + j)
        wrong *= (beta + j) / (alpha + beta + j)
    return right + wrong


def pool_prior(samples: Sequence[int], correct: Sequence[int]) -> tuple[float, float]:
    """The Beta(a0, b0) that makes the measured counts likeliest (beta-binomial maximum likelihood), bounded to
    [1e-3, 1e3] each. Needs at least two prompts with rollouts; fewer give the flat prior (1, 1)."""
    import numpy as np
    from scipy.optimize import minimize
    from scipy.special import betaln

    m = np.asarray(samples, dtype=float)
    c = np.asarray(correct, dtype=float)
    keep = m > 0
    m, c = m[keep], c[keep]
    if m.size < 2:
        return 1.0, 1.0

    def nll(theta: np.ndarray) -> float:
        a, b = np.exp(theta)
        return float(-(betaln(a + c, b + m - c) - betaln(a, b)).sum())

    mean = float(np.clip(c.sum() / m.sum(), 0.01, 0.99))
    best = minimize(nll, np.log([mean, 1.0 - mean]), method="L-BFGS-B", bounds=[(math.log(1e-3), math.log(1e3))] * 2)
    a, b = np.exp(best.x)
    return float(a), float(b)


def forecast(samples: Sequence[int], correct: Sequence[int], n: int) -> dict[str, Any]:
    """The expected share of zero-variance groups over prompts measured ``correct[i]`` right of ``samples[i]``
    (0 of 0: never measured), one group of ``n`` each, with its standard error and the pool prior it used."""
    out: dict[str, Any] = {"rollouts": n, "prompts": len(samples), "measured": sum(1 for s in samples if s > 0)}
    if not out["measured"]:
        return {**out, "share": None, "stderr": None}
    a0, b0 = pool_prior(samples, correct)
    chances = [zero_variance_chance(a0 + c, b0 + s - c, n) for s, c in zip(samples, correct, strict=True)]
    share = sum(chances) / len(chances)
    stderr = math.sqrt(sum(q * (1.0 - q) for q in chances)) / len(chances)
    return {**out, "share": round(share, 4), "stderr": round(stderr, 4), "prior": [round(a0, 3), round(b0, 3)]}


def of_frame(frame: Any, n: int) -> dict[str, Any]:
    """``forecast`` over a frame with ``n_samples`` / ``n_correct`` (the scores table; missing counts are 0)."""
    import polars as pl

    from curate import schema as S

    if S.N_SAMPLES not in frame.columns or S.N_CORRECT not in frame.columns:
        return forecast([0] * frame.height, [0] * frame.height, n)
    counts = frame.select(pl.col(S.N_SAMPLES).fill_null(0), pl.col(S.N_CORRECT).fill_null(0))
    return forecast(counts[S.N_SAMPLES].to_list(), counts[S.N_CORRECT].to_list(), n)


def describe(fc: dict[str, Any]) -> str:
    """One line: ``0.412 ± 0.015 of 880 prompts at 8 rollouts (880 measured)``."""
    if fc.get("share") is None:
        return f"no forecast: none of {fc.get('prompts', 0)} prompts has rollouts (run `curate rollout`)"
    return (f"{fc['share']:.3f} ± {fc['stderr']:.3f} of {fc['prompts']} prompts at {fc['rollouts']} rollouts "
            f"({fc['measured']} measured)")  # fmt: skip
