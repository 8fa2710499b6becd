r"""A from-scratch tiny causal LM for the built-in task: ``training init-tiny OUT [--size tiny|small]``.

Why: the built-in chain (generator -> curation -> SFT -> RL) must run end to end on a laptop CPU with no model
download. This builds a randomly initialised Qwen2-architecture model and a byte-level BPE tokenizer trained
offline on text of the built-in generator (problems and reference solutions of every family and level, inside the
same chat template and instruction the pipeline uses), and saves both so that ``AutoModelForCausalLM`` and
``AutoTokenizer.from_pretrained(out)`` load it offline, like any hub model. Nothing is pretrained: SFT on reference
solutions is what teaches it (``training sft``), then RL.

Digits are split one per token (as Qwen2's tokenizer does), so numbers of any size are spelled the same way. The
chat template is ChatML (``<|im_start|>role\ncontent<|im_end|>\n``); ``<|im_end|>`` is the eos token.

Sizes (parameters with the ~590-token vocabulary the default corpus yields; embeddings tied):

- ``tiny``: 2 layers, hidden 64 (about 0.16M): for tests, learns little;
- ``medium``: 6 layers, hidden 192 (about 3.4M): the built-in chain on a GPU (bench/HISTORY.md), ~5x ``small``'s
  cost per token;
- ``small``: 4 layers, hidden 96 (0.61M): the built-in chain's model. Chosen by measurement: at equal
  compute it learned level-1 arithmetic better than a 128-wide model (1.06M) or a 2-layer one. ``SMALL_SFT`` below
  (2,000 reference solutions of ``gen://arith?max_level=1``, 4 epochs = 1,000 steps of 8) took held-out pass rate
  from 0 to 0.35-0.74 greedy (0.19-0.48 mean@4 at temperature 1) over seeds and devices, in about 125 CPU-seconds
  on one core (``torch_threads=1``: two threads on a shared 2-core box ran 3-7x slower). Near this budget the
  outcome varies a lot between seeds: the model is just learning to carry out the additions.

    from training.tiny import TinyConfig, init_tiny
    path = init_tiny("models/tiny", TinyConfig(size="small", seed=0))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate.errors import ConfigError


CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
EOS, PAD = "<|im_end|>", "<|pad|>"
SPECIALS = ("<|endoftext|>", "<|im_start|>", EOS, PAD)
# SFT settings (``training.sft.SFTRunConfig`` keys) measured for ``small`` on ~2K level-1 arithmetic solutions
SMALL_SFT = {"learning_rate": 2e-3, "epochs": 4.0, "per_device_batch_size": 8, "warmup_ratio": 0.05,
             "lr_scheduler": "cosine", "max_length": 256, "torch_threads": 1}  # fmt: skip


@dataclass(frozen=True)
class TinySize:
    """Architecture knobs of a Qwen2 model (the rest follow Qwen2's defaults)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int


SIZES = {
    "tiny": TinySize(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2),
    "small": TinySize(hidden_size=96, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2),
    "medium": TinySize(hidden_size=192, intermediate_size=768, num_hidden_layers=6, num_attention_heads=6,
                       num_key_value_heads=2),
}  # fmt: skip


@dataclass(frozen=True)
class TinyConfig:
    """What ``init_tiny`` builds.

    size: a key of ``SIZES``. seed: weight initialisation (the tokenizer does not depend on it).
    vocab_size: BPE vocabulary including the 4 special tokens. corpus_problems: generator problems (all families,
    levels 1-5, seed 0) whose text and reference solutions train the tokenizer. max_position_embeddings: the
    longest sequence the model accepts (generated problems with their solutions measured at most ~450 tokens).
    split_digits: one token per digit (default); off, BPE merges frequent numbers into single tokens (no better
    on level-1 arithmetic in the measurements).
    """

    size: str = "small"
    seed: int = 0
    vocab_size: int = 1024
    corpus_problems: int = 4000
    max_position_embeddings: int = 1024
    split_digits: bool = True

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ConfigError(f"tiny.size: unknown tiny model size {self.size!r}; choose from {sorted(SIZES)}")
        if self.vocab_size < 300:
            raise ConfigError("tiny.vocab_size must be >= 300 (256 byte symbols + specials + a few merges)")


def tokenizer_corpus(n: int, instruction: str) -> list[str]:
    """Chat-formatted text of ``n`` generated problems with their reference solutions (what the tokenizer sees)."""
    from curate.ingest.generate import generate
    from curate.prompts import user_message

    out = []
    for p in generate(n, seed=0, family="mixed", min_level=1, max_level=5):
        out.append(f"user\n{user_message(p['problem'], instruction)}\nassistant\n{p['solution']}")
    return out


def build_tokenizer(corpus: list[str], vocab_size: int, split_digits: bool = True) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``corpus``, digits split, ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=None)
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.padding_side = "left"  # generation batches; TRL's SFT collator pads on the right by itself
    return hf_tok


def build_model(tokenizer: Any, cfg: TinyConfig) -> Any:
    """A randomly initialised ``Qwen2ForCausalLM`` sized by ``cfg.size`` for ``tokenizer``'s vocabulary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    size = SIZES[cfg.size]
    torch.manual_seed(cfg.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **dataclasses.asdict(size),
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def init_tiny(out_dir: str | Path, cfg: TinyConfig = TinyConfig()) -> Path:
    """Build tokenizer + random model, save both (and a model card) to ``out_dir``; return ``out_dir``."""
    from curate import io
    from curate.prompts import INSTRUCTION
    from training.card import write_model_card

    out_dir = Path(out_dir)
    corpus = tokenizer_corpus(cfg.corpus_problems, INSTRUCTION)
    tokenizer = build_tokenizer(corpus, cfg.vocab_size, cfg.split_digits)
    model = build_model(tokenizer, cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    for path in out_dir.iterdir():  # safetensors writes the weights 0600; every other model file honours the umask
        if path.is_file():
            io.public_mode(path)
    n_params = sum(p.numel() for p in model.parameters())
    write_model_card(
        out_dir,
        kind="init",
        base_model=None,
        data={
            "tokenizer_corpus": f"gen://mixed?n={cfg.corpus_problems}&seed=0&min_level=1&max_level=5 "
            "(problems + reference solutions in the chat template)",
            "weights": "random initialisation, no pretraining",
        },
        recipe={"tiny": dataclasses.asdict(cfg), "architecture": dataclasses.asdict(SIZES[cfg.size])},
        metrics={"parameters": n_params, "vocab_size": len(tokenizer)},
    )
    return out_dir
