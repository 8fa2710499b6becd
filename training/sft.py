"""Supervised fine-tuning on verified solutions (CoScale-RL's SFT stage; also the body of re-distillation).

Input: a Parquet file of conversational prompt/completion rows, exactly as ``curate.prompts.sft_row`` builds them
(``prompt=[{"role": "user", ...}]``, ``completion=[{"role": "assistant", ...}]``); K solutions of a problem are
simply K rows. Other columns (``problem_id``, ``answer``, ...) are carried into the quarantine only.

What it guarantees, and why:

- completion-only loss: TRL's SFTTrainer masks the prompt for prompt/completion rows (the model is never trained to
  write the problem statement);
- rows longer than ``max_length`` tokens are dropped into ``<out>/quarantine.parquet`` with ``drop_reason =
  "too_long"``, never truncated: TRL keeps the start of a long row, which cuts off the boxed answer and teaches the
  model to stop mid-solution;
- packing is refused without flash-attention: TRL packs padding-free, and with sdpa attention packed rows attend to
  each other (TRAINING.md measured logits off by up to 11.3) without any warning;
- resumable: checkpoints go to ``<out>/checkpoints``; re-running the same command resumes from the last complete
  checkpoint, and a finished run (``<out>/final`` + ``metrics.json`` of the same data and config) is skipped;
- the result ``<out>/final`` is a model folder: model + tokenizer + model card + ``lineage.json``
  (``training.card``); ``<out>/metrics.json`` holds first/last train loss, rows, drops and wall time.

    from training.sft import SFTRunConfig, train_sft
    metrics = train_sft(SFTRunConfig(learning_rate=1e-4, epochs=2), model="models/tiny", data=Path("sft.parquet"),
                        out_dir=Path("runs/sft"))
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.config import from_mapping, placement
from curate.errors import ConfigError, InputError
from curate.manifest import file_hash, fingerprint, read_manifest
from training import layout, plateau, run_folder
from training.plateau import EarlyStop


QUARANTINE, METRICS, RUN = layout.SFT_QUARANTINE, layout.SFT_METRICS, layout.SFT_RUN  # its step folder's records
TOO_LONG, MALFORMED = "too_long", "malformed"


@dataclass(frozen=True)
class SFTRunConfig:
    """One SFT run (recipe key ``sft``; the CLI's ``--config`` YAML and ``--set key=value`` fill it, strictly).

    model: hub id or local folder of the starting model (``train_sft(model=...)`` overrides it).
    learning_rate / epochs / per_device_batch_size / gradient_accumulation_steps / lr_scheduler / warmup_ratio /
    weight_decay / seed: the optimisation, as in TRL's SFTConfig. max_steps: stop after this many optimizer steps
    (None: ``epochs`` decide; set, it wins, as in TRL: two SFT sets of different sizes trained for equal compute).
    max_length: longest row in tokens (prompt +
    completion in the chat template); longer rows are quarantined, not truncated. save_steps / save_total_limit:
    checkpoints (resume points). packing: needs flash-attention (refused otherwise). dtype: weights when loading
    (``float32`` trains in mixed precision with ``bf16``). bf16 / gradient_checkpointing: None means on when CUDA is
    available (TRL turns both on even on CPU, where they only slow a small model down). torch_threads: CPU threads
    (None: torch's default; 1 is often faster for tiny models on a busy machine). report_to: the trackers the
    trainer logs to (``trackers``: none, all, or comma-separated names). logging_steps: train-loss logging
    interval (the first step is always logged).
    """

    model: str = ""
    learning_rate: float = 1e-5
    epochs: float = 2.0
    max_steps: int | None = None
    per_device_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_length: int = 4096
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    seed: int = 0
    save_steps: int = 500
    save_total_limit: int | None = 2
    packing: bool = False
    dtype: str = "float32"
    bf16: bool | None = None
    gradient_checkpointing: bool | None = None
    torch_threads: int | None = placement(None)
    logging_steps: int = 10
    report_to: str = placement("none")

    def __post_init__(self) -> None:
        if self.learning_rate <= 0 or self.epochs <= 0 or (self.max_steps is not None and self.max_steps < 1):
            raise ConfigError("sft.learning_rate and sft.epochs must be > 0, sft.max_steps >= 1")
        if min(self.per_device_batch_size, self.gradient_accumulation_steps, self.max_length, self.save_steps) < 1:
            raise ConfigError(
                "sft.per_device_batch_size, gradient_accumulation_steps, max_length, save_steps must be >= 1"
            )
        if self.dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise ConfigError(f"sft.dtype must be float32, bfloat16, float16 or auto, got {self.dtype!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError("sft.warmup_ratio must be in [0, 1)")
        trackers(self.report_to, "sft.report_to")


# Trackers a trainer can log to (transformers' ``report_to``) and the modules that must be importable for each:
# ``pip install -e '.[trackers]'`` installs the two this project offers (tensorboard, trackio).
TRACKERS = {"tensorboard": ("tensorboard", "tensorboardX"), "trackio": ("trackio",), "wandb": ("wandb",),
            "mlflow": ("mlflow",)}  # fmt: skip


def trackers(value: str, where: str = "report_to") -> str | list[str]:
    """``report_to`` as transformers takes it: ``none``, ``all`` (every tracker installed), or a list of the
    comma-separated trackers in ``value``, each checked when a config is built: an unknown or uninstalled tracker is
    a ``ConfigError`` naming ``where`` (before any model loads, not when the trainer starts, minutes in). SFT and RL
    stages both pass their setting through here."""
    import difflib
    import importlib.util

    if value in ("none", "all"):
        return value
    names = [name.strip() for name in value.split(",") if name.strip()]
    for name in names:
        if name not in TRACKERS:
            close = difflib.get_close_matches(name, TRACKERS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown tracker {name!r}{hint}; known: none, all, {', '.join(TRACKERS)}")
        if not any(importlib.util.find_spec(module) for module in TRACKERS[name]):
            raise ConfigError(
                f"{where}: {name} is not installed: pip install -e '.[trackers]' (tensorboard, trackio), "
                f"or report_to: none"
            )
    return names or "none"


def lr_schedule(name: str, warmup: float) -> str:
    """The transformers scheduler that does what ``name`` plus ``warmup`` ask: ``constant`` ignores warm-up
    (transformers' own ``constant`` has none), so with warm-up it becomes ``constant_with_warmup``. SFT and RL
    stages both pass their schedule through here."""
    return "constant_with_warmup" if name == "constant" and warmup else name


def load_config(data: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None = None) -> SFTRunConfig:
    """``SFTRunConfig`` from a mapping (a YAML file's content) plus ``key=value`` overrides; unknown keys fail."""
    merged = {**dict(data or {}), **dict(overrides or {})}
    return from_mapping(SFTRunConfig, merged, "sft")


def flash_attention_available() -> bool:
    """Whether a flash-attention kernel (2 or 3) is importable and CUDA is present (the only safe packing)."""
    import torch
    from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available

    return torch.cuda.is_available() and (is_flash_attn_2_available() or is_flash_attn_3_available())


# --------------------------------------------------------------------------------------------------- data
def _messages_ok(value: Any, role: str) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in value)
        and value[-1].get("role") == role
    )


def split_rows(df: pl.DataFrame, tokenizer: Any, max_length: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, quarantined) rows: a row is kept when well formed and at most ``max_length`` tokens long.

    The length is that of prompt + completion rendered by the tokenizer's chat template, the sequence TRL trains
    on. Quarantined rows keep their columns plus ``drop_reason`` (``too_long`` or ``malformed``), ``detail`` and
    ``tokens``.
    """
    for col in ("prompt", "completion"):
        if col not in df.columns:
            raise InputError(f"SFT data needs conversational `prompt` and `completion` columns; have {df.columns}")
    rows = df.select("prompt", "completion").to_dicts()
    ok = [_messages_ok(r["prompt"], "user") and _messages_ok(r["completion"], "assistant") for r in rows]
    texts = [
        tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=False) if good else ""
        for r, good in zip(rows, ok, strict=True)
    ]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
    reason = [
        None if good and n <= max_length else TOO_LONG if good else MALFORMED
        for good, n in zip(ok, lengths, strict=True)
    ]
    detail = [
        f"{n} tokens > max_length {max_length}" if r == TOO_LONG else "prompt/completion are not chat messages"
        if r == MALFORMED else None
        for r, n in zip(reason, lengths, strict=True)
    ]  # fmt: skip
    tagged = df.with_columns(
        pl.Series(S.DROP_REASON, reason, pl.String),
        pl.Series(S.DETAIL, detail, pl.String),
        pl.Series("tokens", lengths, pl.Int64),
    )
    dropped = tagged.filter(pl.col(S.DROP_REASON).is_not_null())
    kept = tagged.filter(pl.col(S.DROP_REASON).is_null()).drop(S.DROP_REASON, S.DETAIL, "tokens")
    return kept, dropped


# --------------------------------------------------------------------------------------------------- run state
def _loss_history(log_history: list[dict[str, Any]]) -> list[float]:
    return [float(e["loss"]) for e in log_history if "loss" in e]


def _fingerprint(cfg: SFTRunConfig, data: Path) -> str:
    """Identity of a run: the data's content hash and every setting (``torch_threads``/``report_to`` excluded)."""
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("torch_threads", "report_to")}
    return fingerprint({"data": file_hash(data)}, config)


def _data_lineage(data: Path) -> dict[str, Any]:
    """Lineage facts of the data file: its path, hash, and the manifest that wrote it (if any)."""
    out: dict[str, Any] = {"source": str(data), "source_sha256": file_hash(data)}
    manifest = read_manifest(data)
    if manifest:
        out["source_manifest"] = {k: manifest.get(k) for k in ("stage", "rows_out", "fingerprint", "config")}
    return out


# --------------------------------------------------------------------------------------------------- train
def build_trainer(cfg: SFTRunConfig, tokenizer: Any, rows: pl.DataFrame, output_dir: Path) -> Any:
    """TRL's ``SFTTrainer`` for ``cfg.model`` on ``rows`` (prompt/completion), checkpoints in ``output_dir``.

    Completion-only loss is forced on (TRL's default for this format, made explicit so a TRL default change cannot
    silently train on prompts). Rows must already fit ``max_length`` (``split_rows``), so TRL truncates nothing.
    """
    import torch
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from datasets import Dataset

    cuda = torch.cuda.is_available()
    bf16 = cfg.bf16 if cfg.bf16 is not None else cuda and torch.cuda.is_bf16_supported()
    model_init_kwargs: dict[str, Any] = {"dtype": cfg.dtype}
    if cfg.packing:
        model_init_kwargs["attn_implementation"] = "flash_attention_2"
    args = SFTConfig(
        output_dir=str(output_dir),
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps if cfg.max_steps is not None else -1,
        per_device_train_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        lr_scheduler_type=lr_schedule(cfg.lr_scheduler, cfg.warmup_ratio),
        warmup_steps=cfg.warmup_ratio,  # a float below 1 is a fraction of the total steps (transformers 5)
        weight_decay=cfg.weight_decay,
        seed=cfg.seed,
        max_length=cfg.max_length,
        packing=cfg.packing,
        completion_only_loss=True,
        bf16=bf16,
        gradient_checkpointing=cfg.gradient_checkpointing if cfg.gradient_checkpointing is not None else cuda,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        report_to=trackers(cfg.report_to, "sft.report_to"),
        model_init_kwargs=model_init_kwargs,
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=cfg.model,
        args=args,
        train_dataset=Dataset.from_list(rows.select("prompt", "completion").to_dicts()),
        processing_class=tokenizer,
        callbacks=[run_folder.save_callback()],  # files.json in every checkpoint: a whole one is verifiable
    )
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts to stdout; ``progress_callback`` one line
    trainer.create_model_card = no_stub_card  # the card is the project's own, in final/ (training.card)
    trainer.add_callback(progress_callback())
    run_folder.quiet_tied_weights(trainer.model)  # a resume loads tied embeddings once: not a missing key
    return trainer


def no_stub_card(*args: Any, **kwargs: Any) -> None:
    """What the trainer calls to write TRL's stub model card (``a fine-tuned version of
    [None](https://huggingface.co/None)``) into ``checkpoints/README.md`` at every save: nothing."""


def progress_line(step: int, max_steps: int, logs: Mapping[str, Any]) -> str | None:
    """The line a logging step prints (None for a log without a loss): ``sft step 20/240: loss=1.23 lr=9.8e-05
    acc=0.61 epoch=0.33``; the end-of-training log (``train_loss``, ``train_runtime``) becomes ``sft done: ...``.

    >>> progress_line(20, 240, {"loss": 1.2345, "learning_rate": 9.8e-05, "grad_norm": 0.5, "epoch": 0.333})
    'sft step 20/240: loss=1.23 lr=9.8e-05 grad=0.5 epoch=0.33'
    >>> progress_line(240, 240, {"train_loss": 0.9, "train_runtime": 61.2, "epoch": 2.0})
    'sft done: 240 steps, mean loss=0.9 in 61 s'
    """
    if "train_loss" in logs:
        return f"sft done: {step} steps, mean loss={logs['train_loss']:.3g} in {logs.get('train_runtime', 0):.0f} s"
    if "loss" not in logs:
        return None
    keys = (("loss", "loss", ".3g"), ("learning_rate", "lr", ".2g"), ("grad_norm", "grad", ".2g"),
            ("mean_token_accuracy", "acc", ".2f"), ("epoch", "epoch", ".2f"))  # fmt: skip
    parts = [f"{name}={logs[key]:{fmt}}" for key, name, fmt in keys if isinstance(logs.get(key), int | float)]
    return f"sft step {step}/{max_steps}: " + " ".join(parts)


def progress_callback() -> Any:
    """A ``TrainerCallback`` printing ``progress_line`` to stderr on each logging step (main process only):
    stdout stays the caller's result, as in the RL trainer's ``log``."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            line = progress_line(state.global_step, state.max_steps, logs or {})
            if line is not None and state.is_world_process_zero:
                print(line, file=sys.stderr, flush=True)

    return Progress()


def _check_inputs(cfg: SFTRunConfig, model: str | Path | None, data: Path) -> SFTRunConfig:
    """``cfg`` with its model (``model``, else ``cfg.model``) checked as a model folder or hub name, after the data
    and packing are checked: each missing or impossible input is one ``InputError`` / ``ConfigError`` line."""
    model_name = str(model if model is not None else cfg.model)
    if not model_name:
        raise ConfigError("sft: no model given (set `model` in the config or pass --model)")
    model_name = run_folder.check_model(model_name)
    if not data.exists():
        raise InputError(f"SFT data {data} not found")
    if cfg.packing and not flash_attention_available():
        raise ConfigError(
            "sft.packing needs flash-attention on CUDA: TRL packs padding-free, and with sdpa attention packed rows "
            "attend to each other without any warning. Install flash-attn or set packing: false."
        )
    return dataclasses.replace(cfg, model=model_name)


def train_sft(
    cfg: SFTRunConfig,
    *,
    model: str | Path | None = None,
    data: Path,
    out_dir: Path,
    kind: str = "sft",
    lineage: Mapping[str, Any] | None = None,
    validation: EarlyStop | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` (default ``cfg.model``) on ``data``; write ``out_dir/final`` and return the metrics.

    kind / lineage: the model card's kind and extra data lineage (pool, selection, curriculum, solutions table)
    supplied by the caller; re-distillation passes its own. validation: take a validation point at every checkpoint
    and stop at the plateau (``training.plateau``; ``cfg.max_steps`` is then a cap): the metrics say why it stopped
    (``stopped``) and what the evaluations cost (``validation_cpu_s``). Raises ``InputError`` when every row is
    dropped or ``out_dir`` holds a run of other data or settings, ``ConfigError`` for packing without
    flash-attention.
    """
    import torch
    from accelerate import PartialState

    started = time.perf_counter()
    cfg, data, out_dir = _check_inputs(cfg, model, Path(data)), Path(data), Path(out_dir)
    model_name = cfg.model

    # None for a run without early stop: a folder of a run from before it was an option still binds
    identity = {"fingerprint": _fingerprint(cfg, data), "early_stop": validation.identity() if validation else None}
    final, ckpt_dir = out_dir / run_folder.FINAL, out_dir / run_folder.CHECKPOINTS
    if run_folder.bind(out_dir, RUN, identity, write=False):
        done = run_folder.finished(out_dir, METRICS)
        if done is not None:
            return {**done, "skipped": True}

    main = PartialState().is_main_process  # several GPUs (accelerate launch): one process writes the files
    tokenizer = run_folder.load_tokenizer(model_name)
    df = io.read_parquet(data)
    if df.height == 0:
        raise InputError(f"SFT data {data} has no rows")
    kept, dropped = split_rows(df, tokenizer, cfg.max_length)
    if main:
        io.write_parquet(dropped, out_dir / QUARANTINE)
    if kept.height == 0:
        raise InputError(f"all {df.height} SFT rows were dropped (see {out_dir / QUARANTINE})")
    if main:
        run_folder.bind(out_dir, RUN, identity, extra={"config": dataclasses.asdict(cfg), "data": str(data)})

    threads = torch.get_num_threads()
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    try:
        last = run_folder.last_checkpoint(ckpt_dir)
        resume = str(last) if last is not None else None
        curve = plateau.catch_up(out_dir, validation, last) if validation is not None and main else None
        if run_folder.at_end(last) or (curve is not None and curve.stopped()):
            # trained to the end (or to the plateau) before: the final model is that checkpoint's
            trainer = build_trainer(dataclasses.replace(cfg, model=resume), tokenizer, kept, ckpt_dir)
            trainer.state, mean_loss = run_folder.trainer_state(last), None
        else:
            trainer = build_trainer(cfg, tokenizer, kept, ckpt_dir)
            if validation is not None:
                trainer.add_callback(plateau.callback(curve or plateau.Curve(out_dir, validation)))
            mean_loss = float(trainer.train(resume_from_checkpoint=resume).training_loss)
        trainer.save_model(str(final))
        if main:
            tokenizer.save_pretrained(str(final))
    finally:
        torch.set_num_threads(threads)

    losses = _loss_history(trainer.state.log_history)
    first = run_folder.checkpoint_step(last) + 1 if last is not None else 1  # a resumed run trained from here on
    drops = dropped.group_by(S.DROP_REASON).len().sort(S.DROP_REASON).rows() if dropped.height else []
    metrics = {
        "train_loss_first": losses[0] if losses else None,
        "train_loss_last": losses[-1] if losses else None,
        "train_loss_mean": mean_loss,  # over the steps this call trained (None: none were left), which are:
        "train_loss_mean_steps": None if mean_loss is None else [first, trainer.state.global_step],
        "rows": df.height,
        "rows_trained": kept.height,
        "dropped": {reason: n for reason, n in drops},
        "steps": trainer.state.global_step,
        "epochs": cfg.epochs,
        "resumed_from": resume,
        "device": str(trainer.args.device),  # where it trained, for the card: cuda:0 / cpu
        "precision": "bf16" if trainer.args.bf16 else "float32",
        "wall_s": round(time.perf_counter() - started, 2),
        **(_stopped(curve, trainer.state) if curve is not None and curve.points else {}),
    }
    if main:
        from curate.solutions.export import answer_check
        from training.card import write_model_card

        write_model_card(
            final,
            kind=kind,
            base_model=model_name,
            data={
                **dict(lineage or {}),
                **_data_lineage(data),
                "rows": kept.height,
                "dropped": metrics["dropped"],
                "answers": answer_check(kept),
            },
            recipe={kind: dataclasses.asdict(cfg)},
            metrics=metrics,
        )
        run_folder.seal(final)
        io.write_json(out_dir / METRICS, metrics)
    trainer.accelerator.wait_for_everyone()
    return metrics


def _stopped(curve: plateau.Curve, state: Any) -> dict[str, Any]:
    """The metrics of a run with early stop: why it stopped (``plateau.why_stopped``) and the CPU seconds its
    validation points cost over every invocation (the SFT step's CPU includes them; ``bench_curation`` takes them
    out of its per-step cost)."""
    early = curve.early
    why = plateau.why_stopped(curve.verdict(), curve.points, state.max_steps, early.patience, early.min_delta)
    return {"stopped": why, "validation_cpu_s": round(sum(p.get("cpu_s", 0.0) for p in curve.points), 2)}


def read_metrics(out_dir: Path) -> dict[str, Any] | None:
    """An SFT run folder's ``metrics.json`` (``train_sft`` writes it last: steps, rows trained and dropped, the
    losses, wall time), None before the run finished."""
    path = Path(out_dir) / METRICS
    return json.loads(path.read_text()) if path.is_file() else None
