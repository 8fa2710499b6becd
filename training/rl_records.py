"""What an RL stage records while it trains (``training.rl``): its rollouts, into the pool's rollout ledger
(``LedgerWriter``), and its metrics, one row per optimizer step in the stage's ``metrics.parquet`` (``MetricsLog``).
The trainer (``training.grpo_trainer.CurateGRPOTrainer``) calls both at every generation and logging step."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S


BACKEND = "trl"  # the ledger rows' backend


# --------------------------------------------------------------------------------------------------- ledger
@dataclass(frozen=True)
class LedgerWriter:
    """Writes a stage's rollouts into the pool's ledger under ``model`` through ``curate.rollout.ledger`` (the one
    reader and writer of the ledger): one part per generation batch, ``part-<run_id>-step<step>``, so a resumed step
    replaces its own part (same rows, same sample indices) instead of adding a second copy. Sample indices follow
    the ledger's one numbering rule (the lowest free ones per problem, chosen under the ledger's lock)."""

    ws: io.Workspace
    pool: str
    model: str
    run_id: str
    temperature: float
    top_p: float
    max_tokens: int
    seed: int

    def write(
        self,
        step: int,
        *,
        problem_ids: Sequence[str],
        completions: Sequence[str],
        rewards: Sequence[float | None],
        verdicts: Sequence[str | None],
        extracted: Sequence[str | None],
        completion_tokens: Sequence[int],
        finish_reasons: Sequence[str],
    ) -> Path:
        from curate.rollout import ledger

        values = {
            S.COMPLETION: list(completions), S.COMPLETION_TOKENS: [int(n) for n in completion_tokens],
            S.FINISH_REASON: list(finish_reasons), S.EXTRACTED_ANSWER: [e or None for e in extracted],
            S.VERDICT: list(verdicts), S.REWARD: [None if r is None else float(r) for r in rewards],
            S.TEMPERATURE: self.temperature, S.TOP_P: self.top_p, S.MAX_TOKENS: self.max_tokens, S.SEED: self.seed,
            S.STEP: step,
        }  # fmt: skip
        rows = ledger.build_rows(self.model, problem_ids, values, backend=BACKEND, run_id=self.run_id)
        return ledger.append(
            self.ws, self.pool, self.model, rows, part=ledger.part_name(self.run_id, f"step{step:07d}")
        )


# --------------------------------------------------------------------------------------------------- metrics
_METRIC_NAMES = {
    "rewards/accuracy_reward/mean": None,  # same as reward with one reward function
    "rewards/accuracy_reward/std": None,
    "completions/mean_length": "completion_mean_length",
    "completions/min_length": "completion_min_length",
    "completions/max_length": "completion_max_length",
    "completions/clipped_ratio": "truncation_rate",
    "completions/mean_terminated_length": "completion_mean_terminated_length",
    "completions/min_terminated_length": None,
    "completions/max_terminated_length": None,
    "num_tokens": "tokens",
    "cispo_clip_ratio": "clip_ratio",
    "clip_ratio/region_mean": "clip_ratio",
    "clip_ratio/low_mean": "clip_ratio_low",
    "clip_ratio/high_mean": "clip_ratio_high",
    "epoch": None,  # the Trainer's epoch counter means nothing with an online sampler
}


class MetricsLog:
    """Per-step training metrics -> ``metrics.parquet`` (written at every checkpoint and at the end).

    Columns: step, wall_s (cumulative across resumes), reward, reward_std, frac_reward_zero_std, kept_group_frac,
    entropy, completion lengths, truncation_rate, clip_ratio, tokens (cumulative prompt + completion tokens: the
    compute axis), loss, grad_norm, learning_rate, step_time, and any other key TRL logs (``/`` -> ``_``).
    """

    def __init__(self, path: Path, resume_step: int = 0) -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = []
        if resume_step and self.path.is_file():
            self.rows = pl.read_parquet(self.path).filter(pl.col("step") <= resume_step).to_dicts()
        self.offset = float(self.rows[-1]["wall_s"]) if self.rows else 0.0
        self.t0 = time.perf_counter()

    def add(self, step: int, logs: Mapping[str, Any]) -> None:
        if "train_runtime" in logs or step < 1:
            return
        row: dict[str, Any] = {"step": int(step), "wall_s": self.offset + time.perf_counter() - self.t0}
        for key, value in logs.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            name = _METRIC_NAMES.get(key, key.replace("/", "_"))
            if name is not None:
                row[name] = float(value)
        self.rows = [r for r in self.rows if r["step"] != step] + [row]

    def write(self) -> Path | None:
        if not self.rows:
            return None
        frame = pl.from_dicts(self.rows, infer_schema_length=None).sort("step")
        return io.write_parquet(frame, self.path)
