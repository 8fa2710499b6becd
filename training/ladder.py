"""CoScale-RL's rollout ladder inside one RL segment (METHODS.md §2.2, rule RECONSTRUCTED in §2.7).

The paper: when a difficulty group's RL plateaus or fails, scale its rollouts per prompt N up, keeping the update
efficiency's x = lr/N (so lr doubles with N). TRL fixes ``num_generations`` for a trainer's life, so each rung of
the ladder is its own RL segment (one ``training.rl.train_rl`` run folder):

- ``LadderWatch`` runs inside the trainer (``training.grpo_trainer.CurateGRPOTrainer.log``). After every optimizer
  step it reads the step's training reward (TRL's mean reward of the generation batch: the group's own prompts,
  since a group trains on its shard alone), averages the last ``window`` steps and asks the plan's rule
  (``curate.curriculum.rules.RolloutLadder.check``): a ``plateau`` (no new peak for ``patience`` steps) or a
  ``collapse`` (more than ``collapse_drop`` below the peak) ends the segment at that step. The trainer then saves
  a checkpoint there and stops; its ``trainer_state.json`` records that step as the segment's end (a resumed
  segment takes its final model from it, ``training.run_folder.at_end``), and its ``sampler_state.json`` carries
  the watch's state (``state_dict``: the rung's N and lr, the peak, the reward window, the event), so a killed
  segment resumes on the same rung with the same window.
- ``training.groups.next_rung`` (the chain) reads the event from the segment's ``summary.json`` and starts the
  next rung from that checkpoint: its weights, Adam's moments, RNG and curriculum position, with N x ``factor``
  and lr x ``factor`` (``RolloutLadder.lr``: lr/N kept), warm-up off, for the stage's budget left
  (``LadderConfig.next_steps``; a decaying ``lr_scheduler_type`` starts again over the rung's steps: the recipes
  use ``constant``). At N = ``n_max`` a further plateau ends the group instead ("exhausted").

The budget (``budget``): ``rollouts`` (default) counts the stage's ``max_steps`` x ``prompts_per_step`` x its
first rung's N; each rung gets what is left at its own N, rounded down to whole steps, so a ladder spends at most
what a fixed-N run of the stage spends (less by under one step's rollouts per doubling). ``steps`` counts optimizer
steps instead: every rung after a doubling costs more rollouts per step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from curate.curriculum.rules import RolloutLadder
from curate.errors import ConfigError


BUDGETS = ("rollouts", "steps")
GROUP = "stage"  # the one group a segment's RolloutLadder tracks
SIGNAL = "training reward of the stage's prompts (TRL's mean reward per step)"


@dataclass(frozen=True)
class LadderConfig:
    """The rollout ladder of an RL stage (``rl.ladder``; from a ``bands`` plan's ``stop_rule`` and ``ladder`` when
    the recipe's ``plan_fields`` names ``ladder``, ``training.plan``). None (the default): N stays fixed.

    factor: N's multiplier at a plateau. n_max: the top rung. patience: steps without a new peak of the averaged
    reward that make a plateau. collapse_drop: a fall below the peak that makes a collapse. window: steps averaged
    into the reward the rule reads (1: each step's own). budget: what the stage's ``max_steps`` counts across its
    rungs: ``rollouts`` or ``steps`` (module docstring).
    """

    factor: int = 2
    n_max: int = 64
    patience: int = 20
    collapse_drop: float = 0.1
    window: int = 1
    budget: str = "rollouts"

    def __post_init__(self) -> None:
        if self.factor < 2 or self.n_max < 2 or self.patience < 1 or self.window < 1 or self.collapse_drop <= 0:
            raise ConfigError("rl.ladder: factor and n_max >= 2, patience and window >= 1, collapse_drop > 0")
        if self.budget not in BUDGETS:
            raise ConfigError(f"rl.ladder.budget {self.budget!r} is not one of {BUDGETS}")

    def next_steps(self, max_steps: int, done: int, n_from: int, n_to: int) -> int:
        """Steps of the next rung (at ``n_to``) after a rung of ``max_steps`` planned steps at ``n_from`` stopped
        after ``done``: the rollouts left at the new N (``rollouts``), or the steps left (``steps``)."""
        left = max(0, max_steps - done)
        return left * n_from // n_to if self.budget == "rollouts" else left


class LadderWatch:
    """The rollout ladder of one segment, as the trainer sees it (module docstring).

    cfg: the rule. n, lr: the segment's rollouts per prompt and learning rate (the first rung's unless
    ``load_state_dict`` brings a later rung's). ``observe`` returns the event that ends the segment, once.
    """

    def __init__(self, cfg: LadderConfig, n: int, lr: float) -> None:
        self.cfg = cfg
        self.n0, self.lr0 = n, lr
        self.rule = self._rule()
        self.rewards: list[float] = []
        self.event: dict[str, Any] | None = None

    def _rule(self) -> RolloutLadder:
        cfg = self.cfg
        return RolloutLadder(n0=self.n0, factor=cfg.factor, n_max=max(cfg.n_max, self.n0), patience=cfg.patience,
                             collapse_drop=cfg.collapse_drop, lr0=self.lr0)  # fmt: skip

    @property
    def n(self) -> int:
        return self.rule.n(GROUP)

    @property
    def lr(self) -> float:
        return self.rule.lr(GROUP)

    def observe(self, step: int, reward: float | None) -> dict[str, Any] | None:
        """Record the step's reward; the event (``step``, ``rule``, the averaged ``value``, ``peak`` and its
        ``peak_step``, N and lr before and after, ``exhausted`` at the top rung) when the rule fires, else None."""
        if self.event is not None or reward is None or not math.isfinite(reward):
            return None
        self.rewards = [*self.rewards, float(reward)][-self.cfg.window :]
        if len(self.rewards) < self.cfg.window:
            return None
        value = sum(self.rewards) / len(self.rewards)
        fired = self.rule.check(GROUP, step, value)
        if fired is None:
            return None
        seen = self.rule.state_dict()[GROUP]
        n_from, lr_from = self.n, self.lr
        self.rule.on_plateau(GROUP)
        self.event = {
            "step": step, "rule": fired, "value": value, "window": self.cfg.window, "peak": seen["peak"],
            "peak_step": seen["since"], "patience": self.cfg.patience, "collapse_drop": self.cfg.collapse_drop,
            "n_from": n_from, "n_to": self.n, "lr_from": lr_from, "lr_to": self.lr, "exhausted": self.n == n_from,
        }  # fmt: skip
        return self.event

    def check(self, n: int, lr: float) -> None:
        """Refuse a segment whose N or lr is not this rung's (a state saved on another rung; after the event, the
        rung it fired on)."""
        at_n, at_lr = (self.event["n_from"], self.event["lr_from"]) if self.event else (self.n, self.lr)
        if n != at_n or not math.isclose(lr, at_lr, rel_tol=1e-9):
            raise ConfigError(f"the rollout ladder's state is on the rung N={at_n}, lr={at_lr:g}; this stage "
                              f"trains N={n}, lr={lr:g}")  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (inside its ``sampler_state.json``): JSON only."""
        return {"n0": self.n0, "lr0": self.lr0, "rule": self.rule.state_dict(), "rewards": list(self.rewards),
                "event": self.event}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any], *, fresh: bool = False) -> None:
        """Restore a saved state: the same segment (resume), or with ``fresh`` the next rung's start after an event
        (its N and lr, an empty window, no event; the peak was forgotten at the doubling)."""
        self.n0, self.lr0 = int(state["n0"]), float(state["lr0"])
        self.rule = self._rule()
        self.rule.load_state_dict(state["rule"])
        self.rewards = [] if fresh else [float(r) for r in state.get("rewards") or []]
        self.event = None if fresh else state.get("event")

    def summary(self) -> dict[str, Any]:
        """The segment's ladder for its ``summary.json``: the rule, the first rung's N and lr, the event or None."""
        return {"rule": dataclasses.asdict(self.cfg), "signal": SIGNAL, "n0": self.n0, "lr0": self.lr0,
                "event": self.event}  # fmt: skip


def event_line(event: dict[str, Any]) -> str:
    """One line for an event: ``plateau at step 12 (reward 0.412, mean of 3 steps; peak 0.431 at step 7, patience
    5): N 8 -> 16, lr 0.0001 -> 0.0002`` (or ``...: N = 32 is the top rung: the ladder is exhausted``)."""
    what = (f"{event['rule']} at step {event['step']} (reward {event['value']:.3f}, mean of {event['window']} "
            f"step(s); peak {event['peak']:.3f} at step {event['peak_step']}, patience {event['patience']}, "
            f"collapse {event['collapse_drop']:g})")  # fmt: skip
    if event["exhausted"]:
        return f"{what}: N = {event['n_from']} is the top rung: the ladder is exhausted"
    return f"{what}: N {event['n_from']} -> {event['n_to']}, lr {event['lr_from']:g} -> {event['lr_to']:g}"
