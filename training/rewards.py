"""Reward functions with TRL's signature, over the one answer checker (``curate.verify``).

The training reward is the same judgement curation's pass rates come from, so the two cannot disagree: a thin
adapter, not a second checker. It runs the batch through ``verify.check_batch`` (worker processes), so it works from
TRL's async reward thread or any other non-main thread, with math-verify's timeouts still enforced.

Usage: ``GRPOTrainer(..., reward_funcs=[accuracy_reward], train_dataset=shard)`` on a shard with an ``answer`` column.
"""

from __future__ import annotations

from typing import Any

from curate import verify


def accuracy_reward(
    completions: list[Any], answer: list[Any], cfg: verify.VerifyConfig = verify.DEFAULT, **kwargs: Any
) -> list[float | None]:
    """``reward_correct`` / ``reward_wrong`` per completion; ``None`` (TRL skips it) where the gold is unreadable.

    Completions are strings or chat messages. ``answer`` is the gold column (a string or a list of alternatives per
    row); a curated shard's ``answer_alternatives`` column, when TRL passes it, is used instead. ``prompts`` (passed
    by TRL) lets the checker ignore echoes of the prompt. Verdicts and extracted answers go to TRL's completions table.
    """
    alternatives = kwargs.get("answer_alternatives")
    golds = [alt or gold for alt, gold in zip(alternatives, answer, strict=True)] if alternatives else answer
    verdicts = verify.check_batch(completions, golds, cfg, prompts=kwargs.get("prompts"))
    if kwargs.get("log_extra") is not None:
        kwargs["log_extra"]("verdict", [v.verdict for v in verdicts])
        kwargs["log_extra"]("extracted_answer", [v.extracted or "" for v in verdicts])
    return [None if v.detail == verify.GOLD_UNPARSEABLE else verify.reward_of(v, cfg) for v in verdicts]
