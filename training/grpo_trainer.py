r"""``CurateGRPOTrainer``: TRL's ``GRPOTrainer`` with the curriculum sampler, reward feedback, the rollout ledger,
ScaleRL's batch hygiene and the sampler state in every checkpoint. Where a new loss or batch rule goes.

The objective of each ``loss_type`` (``training.rl.LOSS_TYPES``), as trl 1.16's ``_compute_loss`` computes it with
token-level importance sampling (its default) and one optimizer step per generation batch. R completions o_i of
T_i loss tokens, N = sum_i T_i; r_it = pi(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t), 1 in value on-policy;
A_i = (R_i - mean_g R) / (s + 1e-4) over the prompt's group g, s its std (``scale_rewards``: ``batch`` the batch's,
``none`` no division), which ``group_hygiene`` may replace and weight; sg[.] stops the gradient; eps_low =
``epsilon``, eps_high = ``epsilon_high`` (or epsilon):

- ``grpo``: L = -(1/R) sum_i (1/T_i) sum_t min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i): PPO's
  clipped ratio, averaged over each completion's tokens, then over the completions.
- ``dapo``: L = -(1/N) sum_i sum_t min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i): the same clipped
  term, averaged over all the batch's tokens at once (DAPO's token-level loss; clip-higher is eps_high > eps_low).
- ``cispo``: L = -(1/N) sum_i sum_t sg[min(r_it, eps_high)] A_i log pi(o_it | q, o_i<t): REINFORCE with a
  truncated importance weight outside the gradient (eps_high an absolute cap: ``training.rl`` sets 5.0 unless
  given), so no token's gradient is clipped away.

In each, ``beta`` > 0 adds beta (exp(d) - d - 1) per token, d = log pi_ref - log pi (the k3 estimate of KL to the
reference), inside the same average; ``entropy_coef`` subtracts its multiple of the mean token entropy; with vLLM,
TRL's ``vllm_importance_sampling_correction`` (on by default) multiplies each token's term by the trainer/sampler
probability ratio (truncated or masked as ``vllm_importance_sampling_mode`` says). TRL's other loss types (``dr_grpo``,
``bnpo``, ``sapo``, ...) are refused by ``training.rl``.

What it adds (every override checked against trl 1.16; ``training.rl`` builds it and runs the stage):

- ``_get_train_sampler``: ``training.sampler_bridge.CurriculumRepeatSampler`` (RepeatSampler's group layout over
  ``curate.curriculum.sampler.CurriculumSampler``).
- ``_calculate_rewards``: after TRL's gathered rewards, gathers the problem ids, feeds each group to the curriculum
  (identically on every rank) and hands every rollout to the ledger writer (``ledger``; the main process writes).
- ``_generate_and_score_completions``: ScaleRL hygiene applied to TRL's output (``group_hygiene``), switched by the
  constructor's ``zero_variance_filter`` (drop all-equal groups, no refill, out of the loss normaliser),
  ``batch_adv_norm`` (group-centred advantages over the std of the kept groups' advantages, batch level) and
  ``prompt_level_loss`` (every prompt weighs equally: its tokens are averaged over the group's own token count).
- ``_save_checkpoint``: writes ``sampler_state.json`` (and ``metrics.parquet``) into the checkpoint folder BEFORE
  the trainer state, so a checkpoint is complete only with both; ``log``: per-step metrics and a progress line.
- ``ladder`` (CoScale's rollout ladder, ``training.ladder.LadderWatch``): after each step's log, a plateau or
  collapse of the training reward ends the segment at that step (a checkpoint whose ``trainer_state.json`` says the
  segment ended there, its ``sampler_state.json`` with the ladder's state); ``load_sampler_state(continuing=True)``
  starts the next rung from such a checkpoint.

A new loss: TRL's ``loss_type`` covers grpo, dapo and cispo (``training.rl.LOSS_TYPES`` lists what we allow; add
it there with its validation); a loss TRL lacks is an override of ``_compute_loss`` here, with a test beside
``tests/training/test_rl.py``'s hygiene tests that checks its value on a hand-made batch. A new batch rule is a
switch on ``group_hygiene`` and a constructor argument.

Importing this module imports trl (seconds): ``training.rl`` imports it only inside the function that builds the
trainer.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from curate import io
from curate import schema as S
from curate.errors import ConfigError
from training.run_folder import SAMPLER_STATE


# --------------------------------------------------------------------------------------------------- hygiene
@dataclass(frozen=True)
class Hygiene:
    """Per-row result of ``group_hygiene`` over a gathered generation batch (R rows, G per group).

    keep: rows whose tokens stay in the loss and its normaliser. weight: multiplier on each row's advantage (the
    policy term is linear in it for grpo, dapo and cispo). advantages: replacement advantages (``batch_adv_norm``)
    or None (keep TRL's). signal_groups: groups whose rewards are not all equal.
    """

    keep: Any
    weight: Any
    advantages: Any
    groups: int
    signal_groups: int


def group_hygiene(
    rewards,
    tokens,
    num_generations: int,
    *,
    loss_type: str,
    zero_variance_filter: bool = False,
    batch_adv_norm: bool = False,
    prompt_level_loss: bool = False,
    eps: float = 1e-4,
) -> Hygiene:
    """ScaleRL's batch hygiene (METHODS §4.3) as masks and weights on TRL's per-row quantities.

    rewards: (R,) gathered rewards (NaN = unscorable); tokens: (R,) loss tokens per completion.
    How TRL normalises (trl 1.16 ``_compute_loss``, with steps_per_generation = gradient accumulation): dapo/cispo
    weigh every token 1/N (N = loss tokens of the generation batch, ``num_items_in_batch``); grpo weighs a token of
    row i 1/(T_i R). The targets:

    - zero_variance_filter: rows of all-equal (or unscorable) groups leave the loss; dapo/cispo: N counts the kept
      tokens only (the caller recomputes ``num_items_in_batch``); grpo: weight R / R_kept.
    - prompt_level_loss: every token of prompt p weighs 1/(P_kept T_p) (T_p = the group's kept tokens, P_kept =
      prompts with kept tokens): weight N / (P_kept T_p) for dapo/cispo, T_i R / (P_kept T_p) for grpo.
    - batch_adv_norm: A_i = r_i - mean(group), divided by (std of A over the groups with signal + eps).
    """
    r = rewards.detach().float().reshape(-1)
    n_rows, g = r.numel(), num_generations
    if n_rows % g:
        raise ValueError(f"{n_rows} rewards are not whole groups of {g}")
    n_groups = n_rows // g
    grouped = r.view(n_groups, g)
    valid = ~torch.isnan(grouped)
    hi = torch.where(valid, grouped, torch.full_like(grouped, -math.inf)).amax(dim=1)
    lo = torch.where(valid, grouped, torch.full_like(grouped, math.inf)).amin(dim=1)
    signal = (valid.sum(dim=1) >= 2) & (hi > lo)
    if zero_variance_filter:
        keep = signal.repeat_interleave(g) & valid.reshape(-1)
    else:
        keep = torch.ones(n_rows, dtype=torch.bool, device=r.device)

    advantages = None
    if batch_adv_norm:
        centred = torch.nan_to_num(grouped - torch.nanmean(grouped, dim=1, keepdim=True), nan=0.0).reshape(-1)
        rows = signal.repeat_interleave(g) & valid.reshape(-1)
        std = centred[rows].std() if int(rows.sum()) > 1 else torch.tensor(0.0, device=r.device)
        advantages = centred / (std + eps)

    t = tokens.detach().float().reshape(-1).to(r.device) * keep
    t_prompt = t.view(n_groups, g).sum(dim=1).repeat_interleave(g)
    live = keep & (t_prompt > 0)
    p_kept = int(((t.view(n_groups, g).sum(dim=1)) > 0).sum())
    weight = torch.ones(n_rows, device=r.device)
    if prompt_level_loss and p_kept:
        safe = torch.where(live, t_prompt, torch.ones_like(t_prompt))
        if loss_type == "grpo":
            weight = torch.where(live, t * n_rows / (p_kept * safe), torch.zeros_like(t))
        else:
            weight = torch.where(live, t.sum() / (p_kept * safe), torch.zeros_like(t))
    elif zero_variance_filter and loss_type == "grpo" and int(keep.sum()):
        weight = torch.full_like(t, n_rows / int(keep.sum()))
    weight = weight * keep
    return Hygiene(keep, weight, advantages, n_groups, int(signal.sum()))


# --------------------------------------------------------------------------------------------------- trainer
class CurateGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` plus (keyword arguments; the rest go to ``GRPOTrainer``):

    bridge: the curriculum sampler (``training.sampler_bridge.CurriculumRepeatSampler``). zero_variance_filter /
    batch_adv_norm / prompt_level_loss: ScaleRL's batch hygiene (``group_hygiene``). ledger: an object whose
    ``write(step, **columns)`` records a generation batch's rollouts (``training.rl``'s ledger writer), or None;
    the main process calls it. metrics_log: ``training.rl_records.MetricsLog`` or None.
    """

    def __init__(
        self,
        *args: Any,
        bridge,
        zero_variance_filter: bool = False,
        batch_adv_norm: bool = False,
        prompt_level_loss: bool = False,
        ledger=None,
        metrics_log=None,
        ladder=None,
        engine: str = "auto",
        **kwargs: Any,
    ):
        self.bridge = bridge
        self.engine = engine
        self.zero_variance_filter = zero_variance_filter
        self.batch_adv_norm = batch_adv_norm
        self.prompt_level_loss = prompt_level_loss
        self.ledger = ledger
        self.metrics_log = metrics_log
        self.ladder = ladder
        self.resume_rng_from: str | None = None  # set by training.rl when resuming: see ``training_step``
        self.optimizer_from: Path | None = None  # set by training.rl to carry Adam's moments: see ``create_optimizer``
        self._rl_rewards = None
        super().__init__(*args, **kwargs)
        per_chunk = self.num_iterations * self.args.steps_per_generation
        if per_chunk % self.args.gradient_accumulation_steps:
            raise ConfigError("num_iterations x steps_per_generation must be a multiple of gradient accumulation")
        self.steps_per_chunk = per_chunk // self.args.gradient_accumulation_steps

    # -------------------------------------------------------------- data
    def _get_train_sampler(self, dataset=None):
        return self.bridge

    def create_optimizer(self, model=None):
        # Chained stages (``rl.carry_optimizer``): start from the previous stage's Adam moments instead of a fresh
        # Adam, keeping this stage's own learning rate and schedule (only the per-parameter state is loaded). A
        # resumed stage then loads its own checkpoint's optimizer over this, as usual.
        optimizer = super().create_optimizer(model)
        if self.optimizer_from is not None:
            saved = torch.load(self.optimizer_from, weights_only=True, map_location="cpu")
            current = optimizer.state_dict()
            n_params = sum(len(group["params"]) for group in current["param_groups"])
            if any(int(index) >= n_params for index in saved["state"]):
                raise ConfigError(f"{self.optimizer_from}: the optimizer state of another model ({n_params} here)")
            optimizer.load_state_dict({**current, "state": saved["state"]})
        return optimizer

    def training_step(self, model, inputs, num_items_in_batch=None):
        # An exact resume: transformers restores the checkpoint's RNG state only when it skips data, and the
        # curriculum needs ``ignore_data_skip``; so restore it here, before the first generation after a resume,
        # where the uninterrupted run stood when it saved (the loader's new iterator has drawn from it since).
        if self.resume_rng_from is not None:
            self._load_rng_state(self.resume_rng_from)
            self.resume_rng_from = None
        return super().training_step(model, inputs, num_items_in_batch)

    # -------------------------------------------------------------- rollouts
    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's rollouts, through the project's rollout engine (``curate.rollout.engine``: KV cache, continuous
        batching) where it supports the policy and the sampling is what the engine does (temperature, top_p, the
        EOS tokens); vLLM, transformers' continuous batching, images, ``engine: hf`` and other sampling settings
        keep TRL's own path. One completion per row, the EOS included, as TRL's regular path returns them. Each
        row's seed comes from the global RNG (which a resumed stage restores) and the row's index, so a batch is
        the same on a rerun and a resume."""
        from curate.rollout.backends import request_seed
        from curate.rollout.engine import Engine, EngineRequest, supports

        policy = self.accelerator.unwrap_model(self.model)
        plain = not (self.use_vllm or self.use_transformers_continuous_batching or images or multimodal_fields)
        default = not self.top_k and self.min_p is None and self.repetition_penalty == 1.0
        if self.engine != "auto" or not (plain and default) or supports(policy) is not None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)  # fmt: skip
        base = int(torch.randint(0, 2**31 - 1, (1,)))
        rows = [EngineRequest(tuple(ids), request_seed(base, "rl", i), self.max_completion_length)
                for i, ids in enumerate(prompt_ids)]  # fmt: skip
        longest = max(len(r.prompt_ids) for r in rows) + self.max_completion_length
        engine = Engine(policy, slots=len(rows), context=longest)
        with torch.no_grad():
            outs = engine.generate(rows, temperature=self.temperature, top_p=self.top_p or 1.0,
                                   stop_ids=set(self.eos_token_ids))  # fmt: skip
        return [o.token_ids for o in outs], None

    # -------------------------------------------------------------- rewards
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if not self.model.training:
            return rewards_per_func
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        self._rl_rewards = rewards
        step = self.state.global_step + 1
        problem_ids = gather_object([x[S.PROBLEM_ID] for x in inputs])
        self.bridge.feed(problem_ids, rewards.tolist(), step)
        n = len(prompts)
        texts = gather_object([_completion_text(c) for c in completions])
        verdicts = gather_object(list(self._pending_extra_logs.get("verdict", [None] * n)))
        extracted = gather_object(list(self._pending_extra_logs.get("extracted_answer", [None] * n)))
        lengths = gather_object([len(ids) for ids in completion_ids_list])
        stops = set(self.eos_token_ids) | {self._tokenizer.pad_token_id}
        finish = gather_object(["stop" if ids and ids[-1] in stops else "length" for ids in completion_ids_list])
        if self.ledger is not None and self.accelerator.is_main_process:
            self.ledger.write(
                step,
                problem_ids=problem_ids,
                completions=texts,
                rewards=rewards.tolist(),
                verdicts=verdicts,
                extracted=extracted,
                completion_tokens=lengths,
                finish_reasons=finish,
            )
        return rewards_per_func

    # -------------------------------------------------------------- hygiene
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training and self._rl_rewards is not None:
            output = self.apply_hygiene(output, self._rl_rewards)
        return output

    def apply_hygiene(self, output: dict, rewards) -> dict:
        """Apply ``group_hygiene`` to one process's slice of a generation batch (``rewards``: gathered)."""
        mask = output["completion_mask"]
        loss_mask = mask if "tool_mask" not in output else mask * output["tool_mask"]
        tokens = self.accelerator.gather(loss_mask.sum(dim=1))
        h = group_hygiene(
            rewards,
            tokens,
            self.num_generations,
            loss_type=self.loss_type,
            zero_variance_filter=self.zero_variance_filter,
            batch_adv_norm=self.batch_adv_norm,
            prompt_level_loss=self.prompt_level_loss,
        )
        n = mask.size(0)
        local = slice(self.accelerator.process_index * n, (self.accelerator.process_index + 1) * n)
        keep = h.keep[local].to(mask.device)
        advantages = output["advantages"] if h.advantages is None else h.advantages[local]
        output["advantages"] = (advantages.to(mask.device) * h.weight[local].to(mask.device)).float()
        if self.zero_variance_filter:
            output["completion_mask"] = mask * keep.unsqueeze(1).to(mask.dtype)
            output["num_items_in_batch"] = (tokens * h.keep.to(tokens.device)).sum()
        self._metrics["train"]["kept_group_frac"].append(h.signal_groups / max(h.groups, 1))
        return output

    # -------------------------------------------------------------- checkpoints and logs
    def load_sampler_state(self, checkpoint: Path, *, continuing: bool = False) -> None:
        """Restore the curriculum's position (and the rollout ladder's state) from a checkpoint's
        ``sampler_state.json`` (``_save_checkpoint`` writes it): a resumed run draws the prompts the uninterrupted
        one would have, on the same rung. ``continuing``: this run is the next segment of the stage the checkpoint
        ended (a rung of the rollout ladder, ``training.ladder``): its curriculum position and undrawn chunks, the
        ladder's next rung, which must be this run's N and lr. The caller restores the checkpoint's RNG state."""
        state = json.loads((Path(checkpoint) / SAMPLER_STATE).read_text())
        if continuing:
            self.bridge.continue_state(state)
        else:
            self.bridge.load_checkpoint_state(state)
        if self.ladder is not None and (state.get("ladder") or continuing):
            if not state.get("ladder"):
                raise ConfigError(f"{checkpoint} has no rollout ladder state: not the end of a ladder's rung")
            self.ladder.load_state_dict(state["ladder"], fresh=continuing)
            self.ladder.check(self.num_generations, self.args.learning_rate)

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        """No card from TRL: its stub (``a fine-tuned version of [None](https://huggingface.co/None)``) went into
        ``checkpoints/README.md`` at every save. The model card is the project's own, in ``final/``
        (``training.card``)."""

    def _save_checkpoint(self, model, trial):
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        state = self.bridge.checkpoint_state(self.state.global_step // self.steps_per_chunk)
        if self.ladder is not None:
            state["ladder"] = self.ladder.state_dict()
        if self.args.should_save:
            io.write_json(
                folder / SAMPLER_STATE, state
            )  # before trainer_state.json: see training.run_folder.last_checkpoint
            if self.metrics_log is not None:
                self.metrics_log.write()
        super()._save_checkpoint(model, trial)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)  # TRL merges its step metrics into ``logs`` in place
        if self.metrics_log is not None and self.accelerator.is_main_process:
            self.metrics_log.add(self.state.global_step, logs)
        if self.accelerator.is_main_process and "reward" in logs:  # one line per step on stderr (stdout: result)
            print(_progress_line(self.state.global_step, self.args.max_steps, logs), file=sys.stderr, flush=True)
        if self.ladder is not None and self.model.training and "reward" in logs:
            self._ladder_step(logs["reward"])

    def _ladder_step(self, reward: float | None) -> None:
        """The rollout ladder reads the step's reward (every rank sees the same, gathered); when its rule fires the
        segment ends here: a checkpoint now, recorded as the segment's last step (``max_steps``), then stop."""
        from training.ladder import event_line

        event = self.ladder.observe(self.state.global_step, reward)
        if event is None:
            return
        self.state.max_steps = self.state.global_step  # the checkpoint is the segment's end (run_folder.at_end)
        self.control.should_save = True
        self.control.should_training_stop = True
        if self.accelerator.is_main_process:
            print(f"rl rollout ladder: {event_line(event)}", file=sys.stderr, flush=True)


def _progress_line(step: int, max_steps: int, logs: Mapping[str, Any]) -> str:
    keys = [
        ("reward", "reward"),
        ("kept_group_frac", "kept"),
        ("entropy", "entropy"),
        ("completions/mean_length", "len"),
        ("completions/clipped_ratio", "trunc"),
        ("step_time", "s"),
    ]
    parts = [f"{name}={logs[key]:.3g}" for key, name in keys if isinstance(logs.get(key), int | float)]
    return f"rl step {step}/{max_steps}: " + " ".join(parts)


def _completion_text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion)
