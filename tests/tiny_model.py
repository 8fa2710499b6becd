r"""A tiny causal LM built locally for tests: byte-level BPE tokenizer with a ChatML template + random Qwen2.

Nothing touches the hub (ENV.md §5 and its appendix). Building takes well under a second; ``train_steps > 0``
teaches the model, with a few hundred plain Adam steps, to answer the given arithmetic problems with
``The answer is \boxed{N}.`` so that verdicts of its completions are a mix of correct and wrong (about 2 s of CPU).

    from tests.tiny_model import build_tiny_model, make_problems
    path = build_tiny_model(tmp_path / "tiny", problems=make_problems(8), train_steps=200)
    # AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path) both work offline
"""

from __future__ import annotations

import random
from pathlib import Path


CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def make_problems(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` distinct arithmetic problems ``("Compute 12 + 7.", "19")``, seeded."""
    rng = random.Random(seed)
    out: dict[str, str] = {}
    while len(out) < n:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op = rng.choice(["+", "-", "*"])
        out[f"Compute {a} {op} {b}."] = str({"+": a + b, "-": a - b, "*": a * b}[op])
    return list(out.items())


def build_tiny_model(
    out_dir: str | Path,
    *,
    problems: list[tuple[str, str]] | None = None,
    train_steps: int = 0,
    seed: int = 0,
    hidden_size: int = 64,
) -> Path:
    r"""Build (and optionally train) a tiny Qwen2 + tokenizer with a chat template; save both to ``out_dir``.

    problems: (question, answer) pairs the model is taught to answer as ``The answer is \boxed{answer}.`` after
    the prompt ``question + " " + INSTRUCTION`` in the chat template (only when ``train_steps > 0``).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    rng = random.Random(seed)
    corpus = [INSTRUCTION, "The answer is \\boxed{}."]
    for q, a in make_problems(2000, seed) + list(problems or []):
        corpus.append(f"user\n{q} {INSTRUCTION}\nassistant\nThe answer is \\boxed{{{a}}}.")
    rng.shuffle(corpus)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>", bos_token=None, unk_token=None
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.padding_side = "left"
    hf_tok.save_pretrained(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(cfg)
    if train_steps and problems:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matrices: one thread is several times faster than two on a busy box
        try:
            _teach(model, tokenizer, problems, train_steps)
        finally:
            torch.set_num_threads(threads)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _teach(model, tokenizer, problems: list[tuple[str, str]], steps: int) -> None:
    """Plain teacher forcing on ``prompt -> "The answer is \\boxed{a}."<eos>``, loss on the completion only."""
    import torch

    rows = []
    for q, a in problems:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{q} {INSTRUCTION}"}], tokenize=False, add_generation_prompt=True
        )
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(f"The answer is \\boxed{{{a}}}.", add_special_tokens=False)["input_ids"]
        c_ids = [*c_ids, tokenizer.eos_token_id]
        rows.append((p_ids + c_ids, [-100] * len(p_ids) + c_ids))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids, _ in rows])
    labels = torch.tensor([[-100] * (width - len(lab)) + lab for _, lab in rows])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(ids) for ids, _ in rows])[:, None]).long()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def shared_tiny_model(tmp_path_factory, n_problems: int = 24, taught: int = 8, train_steps: int = 150):
    """One taught tiny model per test session (built on first use under pytest's base temp folder).

    Returns ``(path, problems)``: the first ``taught`` of the ``n_problems`` problems were taught, so completions
    on them are often correct and on the rest mostly wrong.
    """
    problems = make_problems(n_problems)
    path = tmp_path_factory.getbasetemp() / f"tiny-model-{n_problems}-{taught}-{train_steps}"
    if not (path / "config.json").is_file():
        build_tiny_model(path, problems=problems[:taught], train_steps=train_steps)
    return path, problems


def problems_frame(problems: list[tuple[str, str]], split: str = "train"):
    """A schema.PROBLEMS frame of (question, answer) pairs, for writing a test pool."""
    import polars as pl

    from curate import schema as S

    n = len(problems)
    df = pl.DataFrame(
        {
            S.PROBLEM_ID: [S.problem_id(q) for q, _ in problems],
            S.PROBLEM: [q for q, _ in problems],
            S.ANSWER: [a for _, a in problems],
            S.ANSWER_ALTERNATIVES: [[a] for _, a in problems],
            S.ANSWER_RAW: [a for _, a in problems],
            S.SPLIT: [split] * n,
            S.SOURCE: ["tiny"] * n,
            S.SOURCE_ROW: list(range(n)),
            S.SOURCES: [[f"tiny#{i}"] for i in range(n)],
            S.META: ["{}"] * n,
        }
    )
    return df.with_columns([pl.lit(None, S.PROBLEMS[c]).alias(c) for c in S.PROBLEMS if c not in df.columns])


def write_rl_prompts(path, problems: list[tuple[str, str]]):
    """The RL trainer's input for (question, answer) pairs: chat prompt, answer and problem_id, as parquet."""
    import polars as pl

    from curate import prompts
    from curate import schema as S

    pl.DataFrame(
        {
            "prompt": [prompts.chat_prompt(q) for q, _ in problems],
            S.ANSWER: [a for _, a in problems],
            S.PROBLEM_ID: [S.problem_id(q) for q, _ in problems],
        }
    ).write_parquet(path)
    return path
