"""RL on one stage: GRPO, DAPO or CISPO with TRL's ``GRPOTrainer``, prompts chosen online by the curriculum.

Pipeline position: a curriculum shard (``curate curriculum``) or a selection's ``trl.parquet`` -> **training rl**
-> a run folder whose ``final/`` model starts the next stage (FastCuRL's context-scaling stages are successive
``train_rl`` calls with their own ``RLConfig``: ``max_completion_length`` is the stage's context length).

This module is the stage's config and main (open-r1's shape): ``RLConfig`` (validated here: TRL accepts typos
until the first loss step), ``grpo_args`` (the ``GRPOConfig`` it maps to), ``build_trainer`` and ``train_rl``. The
trainer itself, ``training.grpo_trainer.CurateGRPOTrainer``, adds the curriculum sampler, reward feedback, ScaleRL's
batch hygiene and the sampler state in checkpoints; every rollout (problem_id, step, completion, reward, verdict)
goes to the pool's rollout ledger under the run's model name through ``training.rl_records.LedgerWriter`` (one
atomic part per generation, named by run and step, so a resumed step rewrites its part instead of duplicating it),
and every step's metrics to ``metrics.parquet`` through ``training.rl_records.MetricsLog``.

Loss types are restricted to grpo | dapo | cispo and validated here (TRL accepts typos until the first loss step).
CISPO always gets an explicit absolute cap ``epsilon_high`` (5.0 unless set): TRL would otherwise fall back to
``epsilon`` = 0.2 and clamp every on-policy ratio (~1) to 0.2, shrinking the update 5x without a warning.

Run folder::

    config.json        resolved RLConfig + model, train file (sha256), pool, ledger model (``read_config``)
    metrics.parquet    one row per optimizer step (reward, kept-group fraction, entropy, lengths, truncation,
                       clip ratio, tokens, wall time, ...)
    checkpoints/checkpoint-N/   TRL checkpoint + sampler_state.json
    final/             model + tokenizer + model card (README.md, lineage.json)
    summary.json       written last: a run with one is done; re-running the same command returns it

Re-running the same command resumes from the last complete checkpoint (nothing trained twice); a different
config for the same folder is refused (``training.run_folder``).

    cfg = load_rl_config(None, ["loss_type=cispo", "max_steps=50"])
    train_rl(cfg, model="runs/sft/final", train=Path("curricula/fc/stage1.parquet"), out_dir=Path("runs/rl1"))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from curate import io
from curate import schema as S
from curate.config import CHOICES, HELP, apply_overrides, from_mapping, parse_overrides, read_yaml, setting
from curate.curriculum.sampler import POLICIES, SamplerConfig
from curate.errors import ConfigError, InputError
from curate.manifest import file_hash
from curate.rollout.backends import ENGINES, check_engine
from training import layout, run_folder
from training.ladder import LadderConfig
from training.rl_records import LedgerWriter, MetricsLog
from training.sft import TRACKERS, trackers


LOSS_TYPES = ("grpo", "dapo", "cispo")
CISPO_DEFAULT_CAP = 5.0  # ScaleRL's eps_max (4-8 equivalent, METHODS §4.3); TRL's recommended value
SCALE_REWARDS = ("group", "batch", "none")
DTYPES = ("auto", "float32", "bfloat16", "float16")
CONFIG, SUMMARY = layout.RL_CONFIG, layout.SUMMARY  # the run folder's identity and result files
OPTIMIZER = layout.OPTIMIZER  # Adam's state after the last step (``carry_optimizer``)


# --------------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class RLConfig:
    """One RL stage (recipe key ``rl``). Strict: build it with ``load_rl_config`` / ``from_mapping``. Each field's help
    and choices are its metadata (``curate.config.setting``); ``training rl --help`` lists them. ``sampler``: the
    curriculum (``curate.curriculum.sampler.SamplerConfig``), whose policy and seed are ``policy`` and ``seed`` here.
    ``ladder``: ``training.ladder.LadderConfig``; ``training run`` continues a stage that plateaued with N x its
    factor."""

    loss_type: str = setting("cispo", "the policy loss", LOSS_TYPES)
    epsilon: float = setting(0.2, "grpo/dapo: the ratio's lower clip, 1 - epsilon")
    epsilon_high: float | None = setting(None, "grpo/dapo: the upper clip (null: epsilon); cispo: the absolute "
                                               f"cap on the IS ratio, > 1 (null: {CISPO_DEFAULT_CAP})")  # fmt: skip
    num_generations: int = setting(8, "completions per prompt (the group size G), at least 2")
    prompts_per_step: int = setting(4, "prompts per generation batch (one optimizer step when num_iterations is 1)")
    micro_batch_size: int | None = setting(None, "completions per device per forward/backward (null: the whole batch)")
    num_iterations: int = setting(1, "optimizer passes over each generation batch (PPO epochs)")
    max_steps: int = setting(100, "optimizer steps of the stage")
    learning_rate: float = setting(1e-6, "Adam's learning rate")
    lr_scheduler_type: str = setting("constant", "the learning-rate schedule (a transformers scheduler name)")
    warmup_steps: int = setting(0, "steps of linear learning-rate warm-up")
    weight_decay: float = setting(0.0, "AdamW's weight decay")
    adam_epsilon: float = setting(1e-8, "Adam's epsilon")
    max_grad_norm: float = setting(1.0, "gradient clipping norm")
    beta: float = setting(0.0, "KL coefficient (> 0 keeps a reference copy of the model)")
    entropy_coef: float = setting(0.0, "entropy bonus coefficient (FastCuRL: 1e-3)")
    scale_rewards: str = setting("group", "what divides the group-centred rewards: the group's std, the batch's, "
                                          "or nothing", SCALE_REWARDS)  # fmt: skip
    max_prompt_length: int | None = setting(1024, "longer prompts (in tokens) are dropped, not cut (null: no limit)")
    max_completion_length: int = setting(1024, "the longest completion in tokens: the stage's context budget")
    temperature: float = setting(1.0, "sampling temperature of the rollouts, > 0")
    top_p: float = setting(1.0, "nucleus sampling's p for the rollouts")
    seed: int = setting(0, "the stage's seed (the curriculum's too)")
    save_steps: int = setting(20, "optimizer steps between checkpoints (a multiple of num_iterations)")
    save_total_limit: int | None = setting(2, "checkpoints kept (null: all)")
    policy: str = setting("uniform", "the curriculum's policy", POLICIES)
    sampler: SamplerConfig = field(default_factory=SamplerConfig, metadata={HELP: "the curriculum sampler's settings"})
    short_batch: str = setting("pad", "a short curriculum batch: pad cycles its prompts, stop ends the stage",
                               ("pad", "stop"))  # fmt: skip
    zero_variance_filter: bool = setting(False, "ScaleRL: all-equal groups leave the loss and its normaliser")
    batch_adv_norm: bool = setting(False, "ScaleRL: group-centred advantages over their std across the batch")
    prompt_level_loss: bool = setting(False, "ScaleRL: every prompt weighs the same in the loss, whatever its length")
    fp32_lm_head: bool = setting(False, "ScaleRL: the LM head in float32 (TRL's cast_lm_head_to_fp32)")
    mask_truncated_completions: bool = setting(False, "completions cut at max_completion_length leave the loss")
    carry_optimizer: bool = setting(False, "start Adam from the previous stage's moments, with this stage's schedule")
    dtype: str = setting("float32", "the dtype the model loads in", DTYPES)
    engine: str = setting("auto", "auto: the project's rollout engine where it supports the model; hf: TRL's "
                                  "generate (use_vllm: vLLM either way)", ENGINES)  # fmt: skip
    bf16: bool | None = setting(None, "bfloat16 mixed precision (null: where CUDA is)")
    gradient_checkpointing: bool = setting(True, "recompute activations in the backward pass (less memory)")
    use_vllm: bool = setting(False, "generate with vLLM (a GPU)")
    vllm_mode: str = setting("colocate", "vLLM in the training process or as a server", ("colocate", "server"))
    vllm_max_model_length: int | None = setting(None, "vLLM's context length (null: the model's)")
    vllm_enable_sleep_mode: bool = setting(False, "vLLM offloads its weights and cache during the optimizer step")
    vllm_gpu_memory_utilization: float = setting(0.3, "vLLM's share of the GPU's memory (colocate)")
    report_to: str = setting("none", f"trackers: none, all, or comma-separated {', '.join(TRACKERS)}", placement=True)
    ledger_model: str | None = setting(None, "model name of the rollouts in the ledger (null: the run folder's)")
    ladder: LadderConfig | None = setting(None, "CoScale-RL's rollout ladder: a plateau of the training reward "
                                                "ends it; training run goes on at N x factor (null: off)")  # fmt: skip

    def __post_init__(self) -> None:
        if self.loss_type == "cispo":
            if self.epsilon_high is None:
                object.__setattr__(self, "epsilon_high", CISPO_DEFAULT_CAP)
            if self.epsilon_high <= 1.0:
                raise ConfigError(
                    f"rl.epsilon_high={self.epsilon_high}: for cispo it is an absolute cap on the importance ratio "
                    "(ScaleRL uses 4-8); a cap <= 1 clamps every on-policy token"
                )
        _check_counts(self)
        for f in dataclasses.fields(self):
            allowed = f.metadata.get(CHOICES)
            if allowed and getattr(self, f.name) not in allowed:
                raise ConfigError(f"rl.{f.name} {getattr(self, f.name)!r} is not one of {allowed}")
        if self.temperature <= 0:
            raise ConfigError("rl.temperature must be > 0")
        trackers(self.report_to, "rl.report_to")
        if self.sampler.policy != self.policy or self.sampler.seed != self.seed:
            object.__setattr__(self, "sampler", dataclasses.replace(self.sampler, policy=self.policy, seed=self.seed))

    @classmethod
    def check_mapping(cls, data: Mapping[str, Any]) -> None:
        """The keys as written (``curate.config.from_mapping`` calls it on every path: a recipe's ``rl``,
        ``stages.<name>``, ``training rl``): ``policy`` and ``seed`` are set on ``rl``, not on ``rl.sampler``,
        which takes the stage's (a recipe's ``rl.sampler.seed`` would be overwritten without a word)."""
        sub = data.get("sampler") or {}
        for key in ("policy", "seed"):
            if isinstance(sub, Mapping) and key in sub and sub[key] != data.get(key, getattr(cls, key)):
                raise ConfigError(f"set rl.{key}, not rl.sampler.{key} (the curriculum takes the stage's {key})")

    @property
    def generation_batch_size(self) -> int:
        """Completions per generation batch: prompts_per_step x num_generations."""
        return self.prompts_per_step * self.num_generations

    def to_dict(self) -> dict[str, Any]:
        """JSON-simple settings; ``ladder`` only when set (the identity of a stage folder made before it existed
        stays the same)."""
        data = io.jsonable(dataclasses.asdict(self))
        if data.get("ladder") is None:
            data.pop("ladder", None)
        return data


def _check_counts(cfg: RLConfig) -> None:
    """The batch and step counts of an RL stage: positive, two completions per group at least, checkpoints on
    generation-batch boundaries."""
    if cfg.num_generations < 2:
        raise ConfigError("rl.num_generations must be >= 2 (group advantages need two completions)")
    for name in ("prompts_per_step", "num_iterations", "max_steps", "save_steps", "max_completion_length"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"rl.{name} must be >= 1")
    if cfg.micro_batch_size is not None and cfg.micro_batch_size < 1:
        raise ConfigError("rl.micro_batch_size must be >= 1 or null")
    check_engine(cfg.engine, "rl.engine")
    if cfg.micro_batch_size is not None and cfg.generation_batch_size % cfg.micro_batch_size:  # caught at load
        raise ConfigError(
            f"rl.micro_batch_size ({cfg.micro_batch_size}) must divide the completions per step, rl.prompts_per_step "
            f"x rl.num_generations = {cfg.generation_batch_size}"
        )
    if cfg.save_steps % cfg.num_iterations:
        raise ConfigError(
            f"rl.save_steps ({cfg.save_steps}) must be a multiple of rl.num_iterations ({cfg.num_iterations}): "
            "checkpoints fall between generation batches"
        )


def load_rl_config(
    source: str | Path | Mapping[str, Any] | None = None, overrides: Sequence[str] | Mapping[str, Any] | None = None
) -> RLConfig:
    """RLConfig from an optional YAML file or mapping (its ``rl:`` mapping if it has one, else the whole mapping)
    plus overrides (``["key=value", ...]`` or a dict; dotted for the sampler: ``sampler.zero_variance_skip=true``).
    Unknown keys and bad values raise ``ConfigError`` before anything is loaded."""
    loaded: Mapping[str, Any] = {}
    if isinstance(source, Mapping):
        loaded = source
    elif source is not None:
        loaded = read_yaml(source, "config")  # a file that is not a mapping fails there
    data = dict(loaded["rl"] if isinstance(loaded.get("rl"), Mapping) else loaded)
    extra = dict(overrides) if isinstance(overrides, Mapping) else parse_overrides(list(overrides or ()))
    data = apply_overrides(data, extra)
    return from_mapping(RLConfig, data, "rl")


# --------------------------------------------------------------------------------------------------- data
def load_train(path: Path, tokenizer: Any, max_prompt_length: int | None) -> tuple[pl.DataFrame, int]:
    """The stage's prompts: a curriculum shard or a selection's ``trl.parquet`` (``prompt``, ``answer``,
    ``problem_id``; optional ``answer_alternatives`` and the curriculum's priors ``pass_rate``, ``cot_length``,
    ``zero_variance``). Prompts longer than ``max_prompt_length`` tokens (chat template applied) are dropped, not
    truncated (a cut prompt loses the question or the instruction). Returns (frame, dropped)."""
    if not path.is_file():
        raise InputError(f"train file {path} not found")
    df = pl.read_parquet(path)
    missing = [c for c in ("prompt", S.ANSWER, S.PROBLEM_ID) if c not in df.columns]
    if missing:
        raise InputError(f"{path} lacks column(s) {missing}; a curriculum shard or a selection's trl.parquet has them")
    if df[S.PROBLEM_ID].n_unique() != df.height:
        raise InputError(f"{path}: problem_id values are not unique")
    keep = [c for c in ("prompt", S.ANSWER, S.ANSWER_ALTERNATIVES, S.PROBLEM_ID) if c in df.columns]
    priors = [c for c in (S.PASS_RATE, S.COT_LENGTH, S.ZERO_VARIANCE) if c in df.columns]
    df = df.select(keep + priors)
    if max_prompt_length is None or df.height == 0:
        return df, 0
    lengths = [_prompt_tokens(tokenizer, p) for p in df["prompt"].to_list()]
    short = pl.Series(lengths) <= max_prompt_length
    return df.filter(short), int((~short).sum())


def _prompt_tokens(tokenizer: Any, prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, Mapping) else ids
    return len(ids)


# --------------------------------------------------------------------------------------------------- trainer
def grpo_args(cfg: RLConfig, out_dir: Path, world_size: int) -> Any:
    """TRL's GRPOConfig for a stage: one optimizer step per generation batch (steps_per_generation = gradient
    accumulation), logging every step, checkpoints every ``save_steps`` with ``ignore_data_skip`` (the curriculum
    sampler restores its own position)."""
    import torch
    from trl import GRPOConfig

    from training.sft import lr_schedule

    total = cfg.generation_batch_size
    micro = cfg.micro_batch_size or total // world_size
    if total % (micro * world_size):
        raise ConfigError(
            f"prompts_per_step x num_generations = {total} completions must split into micro batches of {micro} "
            f"on {world_size} process(es)"
        )
    cuda = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=str(out_dir / run_folder.CHECKPOINTS),
        loss_type=cfg.loss_type,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        num_generations=cfg.num_generations,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=total // (micro * world_size),
        num_iterations=cfg.num_iterations,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=lr_schedule(cfg.lr_scheduler_type, cfg.warmup_steps),
        warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
        adam_epsilon=cfg.adam_epsilon,
        max_grad_norm=cfg.max_grad_norm,
        beta=cfg.beta,
        entropy_coef=cfg.entropy_coef,
        scale_rewards=cfg.scale_rewards,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        seed=cfg.seed,
        mask_truncated_completions=cfg.mask_truncated_completions,
        cast_lm_head_to_fp32=cfg.fp32_lm_head,
        model_init_kwargs={"dtype": cfg.dtype},
        bf16=cuda if cfg.bf16 is None else cfg.bf16,
        gradient_checkpointing=cfg.gradient_checkpointing,
        use_vllm=cfg.use_vllm,
        vllm_mode=cfg.vllm_mode,
        vllm_max_model_length=cfg.vllm_max_model_length,
        vllm_enable_sleep_mode=cfg.vllm_enable_sleep_mode,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        report_to=trackers(cfg.report_to, "rl.report_to"),
        logging_steps=1,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        ignore_data_skip=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,  # on CPU, torch warns at every stage that it cannot pin memory
        shuffle_dataset=False,
        log_completions=False,
        disable_tqdm=True,
    )


def build_trainer(
    cfg: RLConfig,
    *,
    model: str | Path,
    frame: pl.DataFrame,
    tokenizer: Any,
    out_dir: Path,
    ledger: LedgerWriter | None = None,
    metrics_log: MetricsLog | None = None,
    world_size: int = 1,
):
    """A ``CurateGRPOTrainer`` over ``frame`` (from ``load_train``) with its curriculum sampler bridge."""
    from curate.curriculum.sampler import CurriculumSampler
    from datasets import Dataset
    from training.ladder import LadderWatch
    from training.rewards import accuracy_reward
    from training.sampler_bridge import CurriculumRepeatSampler

    args = grpo_args(cfg, out_dir, world_size)
    columns = [c for c in ("prompt", S.ANSWER, S.ANSWER_ALTERNATIVES, S.PROBLEM_ID) if c in frame.columns]
    dataset = Dataset.from_list(frame.select(columns).to_dicts())
    bridge = CurriculumRepeatSampler(
        CurriculumSampler.from_frame(frame, cfg.sampler),
        {pid: i for i, pid in enumerate(frame[S.PROBLEM_ID].to_list())},
        num_generations=cfg.num_generations,
        prompts_per_chunk=cfg.prompts_per_step,
        repeat_count=cfg.num_iterations * args.steps_per_generation,
        short_batch=cfg.short_batch,
    )
    from transformers.trainer_callback import PrinterCallback

    from training.grpo_trainer import CurateGRPOTrainer

    trainer = CurateGRPOTrainer(
        model=str(model),
        reward_funcs=[accuracy_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        bridge=bridge,
        zero_variance_filter=cfg.zero_variance_filter,
        batch_adv_norm=cfg.batch_adv_norm,
        prompt_level_loss=cfg.prompt_level_loss,
        ledger=ledger,
        metrics_log=metrics_log,
        ladder=LadderWatch(cfg.ladder, cfg.num_generations, cfg.learning_rate) if cfg.ladder is not None else None,
        engine=cfg.engine,
    )
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts to stdout; ``log`` prints a line to stderr
    trainer.add_callback(run_folder.save_callback())  # files.json in every checkpoint: a whole one is verifiable
    run_folder.quiet_tied_weights(trainer.model)  # a resume loads tied embeddings once: not a missing key
    return trainer


# --------------------------------------------------------------------------------------------------- run
def run_identity(
    cfg: RLConfig,
    model: str | Path,
    train: Path,
    pool: str | None,
    ledger_model: str | None,
    optimizer_from: Path | None = None,
    continue_from: Path | None = None,
) -> dict[str, Any]:
    """What makes a run: re-running with the same identity resumes, a different one is refused."""
    return {
        "optimizer_from": str(optimizer_from) if optimizer_from else None,
        "rl": cfg.to_dict(),
        "model": str(model),
        "train": str(train),
        "train_sha256": file_hash(train),
        "pool": pool,
        "ledger_model": ledger_model,
        **({"continue_from": str(continue_from)} if continue_from else {}),
    }


class StageConfig(NamedTuple):
    """A stage folder's ``config.json`` read back (``read_config``): its settings as an ``RLConfig`` and the whole
    identity it was bound to (``run_identity``: model, train file and its sha256, pool, ledger model; plus the
    run id and world size)."""

    rl: RLConfig
    identity: dict[str, Any]


def read_config(stage_dir: Path) -> StageConfig | None:
    """The ``config.json`` ``train_rl`` bound ``stage_dir`` to, its ``rl`` settings validated back into an
    ``RLConfig`` (the sampler's policy and seed come from the stage's own, as when it was built); None before the
    stage started."""
    saved = run_folder.read_identity(stage_dir, CONFIG)
    if saved is None:
        return None
    settings = dict(saved.get("rl") or {})
    settings["sampler"] = {k: v for k, v in (settings.get("sampler") or {}).items() if k not in ("policy", "seed")}
    return StageConfig(load_rl_config(settings), saved)


def train_rl(
    cfg: RLConfig,
    *,
    model: str | Path,
    train: Path,
    out_dir: Path,
    home: str | Path | None = None,
    pool: str | None = None,
    optimizer_from: str | Path | None = None,
    continue_from: str | Path | None = None,
) -> dict[str, Any]:
    """Train one RL stage into ``out_dir`` (see the module docstring); returns the run summary.

    model: starting model (hub id or a saved folder; vLLM colocate needs a folder). train: the stage's prompts.
    home / pool: the workspace and pool whose rollout ledger receives every training rollout (no ledger without a
    pool). optimizer_from: the previous stage's ``optimizer.pt`` to start Adam from (``carry_optimizer``).
    continue_from: the checkpoint where the previous rung of this stage's rollout ladder ended
    (``training.ladder``): this run starts from its curriculum position, ladder state and RNG (``model`` and
    ``optimizer_from`` name its weights and Adam state). Multi-process (torchrun / accelerate launch): every rank
    calls this; rank 0 writes the files.
    """
    from accelerate import PartialState

    state = PartialState()
    out_dir = Path(out_dir)
    model, train, optimizer_from = _check_inputs(model, train, optimizer_from)
    continue_from = Path(continue_from) if continue_from else None
    if continue_from is not None and not (continue_from / run_folder.SAMPLER_STATE).is_file():
        raise InputError(f"{continue_from} is not a checkpoint of an RL run (no {run_folder.SAMPLER_STATE})")
    ledger_model = cfg.ledger_model or out_dir.resolve().name
    identity = run_identity(cfg, model, train, pool, ledger_model if pool else None, optimizer_from, continue_from)
    run_id = "rl-" + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    if run_folder.bind(out_dir, CONFIG, identity, write=False):
        done = run_folder.finished(out_dir, SUMMARY)
        if done is not None:
            return {**done, "skipped": True}
    state.wait_for_everyone()
    if state.is_main_process:
        run_folder.bind(out_dir, CONFIG, identity, extra={"run_id": run_id, "world_size": state.num_processes})

    t0 = time.perf_counter()
    tokenizer = run_folder.load_tokenizer(str(model), padding_side="left", truncation_side="left")
    frame, dropped = load_train(train, tokenizer, cfg.max_prompt_length)
    if frame.height == 0:
        raise ConfigError(f"no prompts left in {train} (dropped {dropped} over max_prompt_length)")
    checkpoint = run_folder.last_checkpoint(out_dir / run_folder.CHECKPOINTS, required=(run_folder.SAMPLER_STATE,))
    resume_step = run_folder.checkpoint_step(checkpoint) if checkpoint else 0
    at_end = run_folder.at_end(checkpoint)  # trained to the end before: the final model is that checkpoint's
    metrics_log = MetricsLog(out_dir / layout.METRICS, resume_step) if state.is_main_process else None

    ledger = _ledger_writer(cfg, home, pool, ledger_model, run_id) if state.is_main_process else None
    trainer = build_trainer(
        cfg,
        model=checkpoint if at_end else model,
        frame=frame,
        tokenizer=tokenizer,
        out_dir=out_dir,
        ledger=ledger,
        metrics_log=metrics_log,
        world_size=state.num_processes,
    )
    if checkpoint is not None or continue_from is not None:  # its own checkpoint, else where the last rung ended
        trainer.load_sampler_state(checkpoint or continue_from, continuing=checkpoint is None)
        trainer.resume_rng_from = str(checkpoint or continue_from)  # restored at the first step: the same samples
    trainer.optimizer_from = optimizer_from
    train_loss = _train_and_save(trainer, checkpoint, at_end, out_dir, state.is_main_process)

    summary = _summary(
        cfg, trainer, out_dir, run_id, checkpoint, frame.height, dropped, train_loss, t0, pool, ledger_model
    )
    if state.is_main_process:
        written = metrics_log.write()
        rows = metrics_log.rows
        rewards = [r["reward"] for r in rows if r.get("reward") is not None]
        summary["reward_first"] = rewards[0] if rewards else None
        summary["reward_last"] = rewards[-1] if rewards else None
        summary["metrics"] = str(written) if written else None
        final = out_dir / run_folder.FINAL
        _write_card(final, cfg, model, train, identity, frame.height, dropped, pool, summary)
        run_folder.seal(final)
        io.write_json(out_dir / SUMMARY, summary)
    state.wait_for_everyone()
    return summary


def _summary(
    cfg: RLConfig,
    trainer: Any,
    out_dir: Path,
    run_id: str,
    checkpoint: Path | None,
    prompts: int,
    dropped: int,
    train_loss: float | None,
    t0: float,
    pool: str | None,
    ledger_model: str,
) -> dict[str, Any]:
    """The run's ``summary.json`` as every rank knows it once training ended: what was trained (steps, prompts,
    the curriculum's counts and state hash, the ladder's event), from where, on what device, and the ledger its
    rollouts went to. Apart from ``train_rl`` so that the record's fields read in one place; rank 0 adds the
    metrics' rewards and path before writing it."""
    from training.sampler_bridge import state_hash

    curriculum_state = trainer.bridge.curriculum.state_dict()
    return {
        "run_dir": str(out_dir),
        "run_id": run_id,
        "final": str(out_dir / run_folder.FINAL),
        "steps": int(trainer.state.global_step),
        "max_steps": cfg.max_steps,
        "stopped_early": bool(trainer.bridge.exhausted and trainer.state.global_step < cfg.max_steps),
        "resumed_from": str(checkpoint) if checkpoint else None,
        "prompts": prompts,
        "dropped_long_prompts": dropped,
        "padded_chunks": trainer.bridge.padded_chunks,
        "curriculum": dict(trainer.bridge.curriculum.counts),
        "sampler_state_sha256": state_hash(curriculum_state),
        "train_loss": train_loss,  # over the steps this call trained (None: none were left)
        "device": str(trainer.args.device),  # where it trained, for the card: cuda:0 / cpu
        "precision": "bf16" if trainer.args.bf16 else "float32",
        "wall_s": round(time.perf_counter() - t0, 2),
        "ledger": {"pool": pool, "model": ledger_model, "run_id": run_id} if pool else None,
        "ladder": trainer.ladder.summary() if trainer.ladder is not None else None,
    }


def _train_and_save(trainer: Any, checkpoint: Path | None, at_end: bool, out_dir: Path, main: bool) -> float | None:
    """Train (resuming from ``checkpoint``), or take the model of a checkpoint at the run's end (``at_end``: the
    trainer was built on it), then save ``final/`` and, on the main process, Adam's state at the end
    (``optimizer.pt``: the next chained stage may start from it). Returns the mean loss of the steps trained here."""
    if at_end:
        trainer.state, train_loss = run_folder.trainer_state(checkpoint), None
    else:
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        train_loss = float(result.training_loss) if result.training_loss is not None else None
    trainer.save_model(str(out_dir / run_folder.FINAL))
    if main and not at_end:
        import torch

        torch.save(trainer.optimizer.state_dict(), out_dir / OPTIMIZER)
    elif main and (checkpoint / OPTIMIZER).is_file():  # the checkpoint saved the same state_dict at the same step
        io.copy_file(checkpoint / OPTIMIZER, out_dir / OPTIMIZER)
    return train_loss


def _ledger_writer(
    cfg: RLConfig, home: str | Path | None, pool: str | None, model: str, run_id: str
) -> LedgerWriter | None:
    """The writer of the stage's rollouts into ``pool``'s ledger under ``model`` (none without a pool), with the
    stage's sampling settings on every row."""
    if pool is None:
        return None
    ws = io.Workspace.resolve(home)
    return LedgerWriter(ws, pool, model, run_id, cfg.temperature, cfg.top_p, cfg.max_completion_length, cfg.seed)


def _check_inputs(
    model: str | Path, train: str | Path, optimizer_from: str | Path | None
) -> tuple[str, Path, Path | None]:
    """The stage's inputs, each checked before any work (one ``InputError`` line for a missing one)."""
    train = Path(train)
    if not train.is_file():
        raise InputError(f"train file {train} not found")
    optimizer = Path(optimizer_from) if optimizer_from else None
    if optimizer is not None and not optimizer.is_file():
        raise InputError(f"{optimizer} not found: the previous stage saves it when it finishes")
    return run_folder.check_model(model), train, optimizer


def _write_card(final: Path, cfg, model, train, identity, rows, dropped, pool, summary) -> None:
    from training.card import write_model_card

    write_model_card(
        final,
        kind="rl",
        base_model=str(model),
        data={
            "pool": pool,
            "source": str(train),
            "source_sha256": identity["train_sha256"],
            "problems": rows,
            "dropped": {"too_long_prompt": dropped} if dropped else {},
        },
        recipe={"rl": cfg.to_dict()},
        metrics={
            k: summary[k]
            for k in ("steps", "reward_first", "reward_last", "train_loss", "device", "precision", "wall_s")
        },
    )
