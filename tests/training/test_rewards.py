"""``training.rewards.accuracy_reward`` called the way TRL's GRPOTrainer calls reward functions (no trainer needed).

TRL calls ``reward_func(prompts=..., completions=..., completion_ids=..., **dataset_columns, trainer_state=...,
log_extra=..., log_metric=...)`` (``GRPOTrainer._calculate_rewards``); async reward functions run on another thread.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from curate import verify
from training.rewards import accuracy_reward


PROMPTS = [[{"role": "user", "content": "What is 1/2 + 0? Example: \\boxed{7}"}]] * 4 + [
    [{"role": "user", "content": "Name a prime."}]
]
COMPLETIONS = [
    [{"role": "assistant", "content": "It is \\boxed{\\frac{1}{2}}."}],
    [{"role": "assistant", "content": "It is \\boxed{0.5} or maybe \\boxed{3}."}],  # hedge
    [{"role": "assistant", "content": "What is 1/2 + 0? Example: \\boxed{7}"}],  # prompt echo only
    [{"role": "assistant", "content": "It is \\boxed{1}."}],
    [{"role": "assistant", "content": "\\boxed{2}"}],
]
ANSWERS = ["\\frac{1}{2}", "0.5", "7", "\\frac12", ""]


def _call(**extra):
    logged = {}
    rewards = accuracy_reward(
        prompts=PROMPTS,
        completions=COMPLETIONS,
        completion_ids=[[1, 2, 3]] * 5,
        answer=ANSWERS,
        trainer_state=None,
        log_extra=lambda name, values: logged.__setitem__(name, values),
        log_metric=lambda name, value: None,
        **extra,
    )
    return rewards, logged


def test_trl_calling_convention():
    rewards, logged = _call()
    assert rewards == [1.0, 0.0, 0.0, 0.0, None]  # None: no gold, TRL skips the row
    assert logged["verdict"] == ["correct", "wrong", "no_answer", "wrong", "unparseable"]
    assert logged["extracted_answer"][0] == "\\frac{1}{2}"


def test_plain_string_completions_alternatives_and_reward_values():
    cfg = verify.VerifyConfig(reward_correct=1.0, reward_wrong=-0.5)
    rewards = accuracy_reward(
        ["so \\boxed{6630}", "so \\boxed{6600}"],
        answer=["6630.65", "6630.65"],
        answer_alternatives=[["6630.65", "6630"], ["6630.65", "6630"]],
        cfg=cfg,
    )
    assert rewards == [1.0, -0.5]


def test_reward_from_a_non_main_thread_and_an_event_loop():
    with ThreadPoolExecutor(1) as ex:
        rewards, _ = ex.submit(_call).result()
    assert rewards[0] == 1.0

    async def async_reward():  # TRL's async reward path: a coroutine on the trainer's event-loop thread
        return await asyncio.to_thread(_call)

    with ThreadPoolExecutor(1) as ex:
        rewards, _ = ex.submit(asyncio.run, async_reward()).result()
    assert rewards == [1.0, 0.0, 0.0, 0.0, None]


def test_rewards_match_curation_verdicts():
    texts = [c[0]["content"] for c in COMPLETIONS]
    prompts = [p[-1]["content"] for p in PROMPTS]
    verdicts = verify.check_batch(texts, ANSWERS, prompts=prompts)
    rewards, _ = _call()
    assert [None if r is None else r == 1.0 for r in rewards][:4] == [v.correct for v in verdicts][:4]
