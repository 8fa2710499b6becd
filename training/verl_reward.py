"""A verl custom reward function over the one answer checker (``curate.verify``), for a selection's ``verl.parquet``.

verl's default reward picks a scorer by ``data_source`` and raises ``NotImplementedError`` on names it does not
know, which is every source name of a curated pool. Point verl at this file instead (the selection's card prints
the exact flags with this file's path)::

    custom_reward_function.path=/path/to/curate-rl/training/verl_reward.py custom_reward_function.name=compute_score

The judgement is the same as curation's pass rates and TRL's reward (``training.rewards``): every gold form in
``extra_info.answer_alternatives`` (written by ``curate select``) is accepted, falling back to
``reward_model.ground_truth``. verl loads this file by path (not as a package module), so it imports only
``curate``. The checker runs math-verify in spawned worker processes where needed: the script that starts training
must be guarded by ``if __name__ == "__main__":`` (verl's own entry points are).
"""

from __future__ import annotations

from typing import Any

from curate import verify


def golds(ground_truth: Any, extra_info: dict[str, Any] | None) -> Any:
    """The gold answers of one row: ``extra_info["answer_alternatives"]`` when present and non-empty, else the
    ``ground_truth`` string (verl may hand a list column over as a numpy array)."""
    alternatives = (extra_info or {}).get("answer_alternatives")
    if alternatives is not None and hasattr(alternatives, "tolist"):
        alternatives = alternatives.tolist()
    return list(alternatives) if alternatives else ground_truth


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """verl's custom reward signature: ``reward_correct`` (1.0) when the response's final answer matches a gold
    answer, else ``reward_wrong`` (0.0); also 0.0 where the gold cannot be read (verl needs a number for every row).

    ``data_source`` is not used: every curated row is scored by the same checker. Extra keyword arguments that
    newer verl versions pass (``custom_reward_function.reward_kwargs``) are accepted and ignored.
    """
    gold = golds(ground_truth, extra_info)
    if gold is None or (isinstance(gold, str) and not gold.strip()):
        return float(verify.DEFAULT.reward_wrong)
    verdict = verify.check(solution_str or "", gold)
    return float(verify.reward_of(verdict))
