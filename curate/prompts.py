r"""The one place for prompt text and the row layouts built from it.

Curation exports (TRL, verl), curriculum shards, the generation backends, SFT rows and the RL trainer all build their
prompts here, so the model is trained, sampled and evaluated on exactly the same user turn:
``"<problem> Let's think step by step and output the final answer within \boxed{}."`` (DeepScaleR/FastCuRL's
instruction). A recipe may change the instruction (``select.instruction``); every builder takes it as an argument.

>>> user_message("What is 2+3?")
"What is 2+3? Let's think step by step and output the final answer within \\boxed{}."
>>> sft_row("What is 2+3?", "2+3=5, so \\boxed{5}.")["completion"]
[{'role': 'assistant', 'content': '2+3=5, so \\boxed{5}.'}]
"""

from __future__ import annotations

from typing import Any

import polars as pl

from curate import schema as S


INSTRUCTION = S.INSTRUCTION
PROMPT = "prompt"
COMPLETION = "completion"
ROW_INDEX = "_index"  # the row index column ``verl_columns`` reads (``DataFrame.with_row_index(ROW_INDEX)``)


def user_message(problem: str, instruction: str = INSTRUCTION) -> str:
    """The user turn: problem text, a space, the instruction (an empty instruction leaves the problem alone)."""
    problem = problem.strip()
    return f"{problem} {instruction.strip()}" if instruction.strip() else problem


def chat_prompt(problem: str, instruction: str = INSTRUCTION) -> list[dict[str, str]]:
    """TRL's conversational prompt: one user message."""
    return [{"role": "user", "content": user_message(problem, instruction)}]


def sft_row(problem: str, solution: str, instruction: str = INSTRUCTION) -> dict[str, Any]:
    """One TRL conversational prompt/completion row: completion-only loss trains on ``solution`` alone."""
    return {PROMPT: chat_prompt(problem, instruction), COMPLETION: [{"role": "assistant", "content": solution}]}


def build_prompt(tokenizer: Any, message: str) -> str:
    """The model's chat template applied to one user turn, ready for generation; the bare message without one."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return message
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
    )


def user_message_expr(instruction: str = INSTRUCTION, column: str = S.PROBLEM) -> pl.Expr:
    """``user_message`` as a polars expression over a problem column (same text, row for row)."""
    text = pl.col(column).str.strip_chars()
    return text + (" " + instruction.strip()) if instruction.strip() else text


def chat_prompt_expr(instruction: str = INSTRUCTION, column: str = S.PROBLEM) -> pl.Expr:
    """``[{"role": "user", "content": user_message}]`` as a List(Struct) column named ``prompt``."""
    message = pl.struct(pl.lit("user").alias("role"), user_message_expr(instruction, column).alias("content"))
    return pl.concat_list(message).alias(PROMPT)


def trl_frame(df: pl.DataFrame, instruction: str = INSTRUCTION) -> pl.DataFrame:
    """TRL's conversational prompt-only layout; ``answer`` reaches the reward function as a keyword argument."""
    return df.select(chat_prompt_expr(instruction), pl.col(S.ANSWER), pl.col(S.PROBLEM_ID))


def verl_frame(df: pl.DataFrame, instruction: str = INSTRUCTION, split: str = "train") -> pl.DataFrame:
    """verl's RL parquet layout (as in FastCuRL's and DeepScaleR's training files), rows in ``df``'s order."""
    return df.with_row_index(ROW_INDEX).select(verl_columns(df, instruction, pl.lit(split)))


def verl_columns(df: pl.DataFrame, instruction: str, split: pl.Expr, *extra: pl.Expr) -> list[pl.Expr]:
    """verl's RL columns over ``df`` (which must carry the row index ``ROW_INDEX``): ``data_source``, ``prompt``,
    ``ability``, ``reward_model`` = {ground_truth, style "rule"} and ``extra_info`` = {index, problem_id, split,
    answer_alternatives when ``df`` has them, ``extra``...}. The one layout of the selection's ``verl.parquet`` and
    the curriculum's shards. ``extra_info`` carries ``answer_alternatives`` because verl passes it to a custom reward
    function, so ``training/verl_reward.py`` accepts every gold form, as the TRL reward does."""
    alternatives = [pl.col(S.ANSWER_ALTERNATIVES)] if S.ANSWER_ALTERNATIVES in df.columns else []
    return [
        pl.col(S.SOURCE).alias("data_source"),
        chat_prompt_expr(instruction),
        pl.lit("math").alias("ability"),
        pl.struct(pl.col(S.ANSWER).alias("ground_truth"), pl.lit("rule").alias("style")).alias("reward_model"),
        pl.struct(
            pl.col(ROW_INDEX).cast(pl.Int64).alias("index"),
            pl.col(S.PROBLEM_ID),
            split.alias("split"),
            *alternatives,
            *extra,
        ).alias("extra_info"),
    ]
