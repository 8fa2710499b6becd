"""Re-distillation (CoScale-RL's model merge, METHODS.md 2.2 and 2.7): SFT the INITIAL model on RL's latest wins.

After independent RL runs (one per difficulty group), the gains are merged by collecting, for each problem, the
latest correct solution(s) from the runs' rollout ledgers over their final steps, and fine-tuning the initial
policy on them. This keeps every group's progress in one model and avoids the forgetting of training one run on
top of another. Defaults follow the predecessor code (on1262/deep-reasoning, ``KK_re_distillation.py``): the last
10 steps, one response per problem, SFT with lr 1e-5 for 2 epochs.

The ledger is the RL run's rollout record: Parquet parts under ``<workspace>/pools/<pool>/rollouts/<model>/``
(``schema.ROLLOUTS``: ``problem_id``, ``completion``, ``correct`` / ``verdict`` / ``reward``, and ``step`` where the
trainer wrote it). Selection rules, and why:

- a completion counts as correct by its ``correct`` column, else ``verdict == "correct"``, else ``reward > 0``;
- with a ``step`` column, only rows with a step count (other rows are not RL samples); the window is the last
  ``last_steps`` steps *of each run* (by ``model``, where present), since groups train for different lengths;
  "latest" is the highest step, then the later row;
- without a ``step`` column, order of appearance (part files by name, rows in order) is time and every row is in
  the window;
- identical completions of a problem count once; at most ``per_problem`` per problem; ``max_rows`` caps the set
  (a seeded shuffle first, as the predecessor's cap of 1,000 did).

    training redistill --initial models/sft/final --ledger "ws/pools/p/rollouts/rl-*" \
        --problems ws/pools/p/problems.parquet --out runs/redistill
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate import io
from curate import schema as S
from curate.config import from_mapping
from curate.errors import ConfigError, InputError
from curate.prompts import INSTRUCTION, sft_row
from training import layout
from training.sft import SFTRunConfig, train_sft


DATA = layout.REDISTILL_DATA
ORDER = "_order"


@dataclass(frozen=True)
class RedistillConfig:
    """Re-distillation (recipe key ``redistill``). ``sft`` holds the SFT settings (defaults lr 1e-5, 2 epochs).

    last_steps: window of the latest RL steps per run. per_problem: solutions kept per problem (latest first).
    max_rows: cap on the SFT set (None: no cap), drawn with ``seed``. instruction: the user-turn instruction the
    RL prompts used (the SFT rows must match them).
    """

    last_steps: int = 10
    per_problem: int = 1
    max_rows: int | None = None
    seed: int = 0
    instruction: str = INSTRUCTION
    sft: SFTRunConfig = field(default_factory=lambda: SFTRunConfig(learning_rate=1e-5, epochs=2.0))

    def __post_init__(self) -> None:
        if self.last_steps < 1 or self.per_problem < 1:
            raise ConfigError("redistill.last_steps and redistill.per_problem must be >= 1")
        if self.max_rows is not None and self.max_rows < 1:
            raise ConfigError("redistill.max_rows must be >= 1 (or null for no cap)")


def load_config(data: dict[str, Any] | None, overrides: dict[str, Any] | None = None) -> RedistillConfig:
    """``RedistillConfig`` from a mapping plus dotted overrides (``sft.learning_rate=2e-5``); unknown keys fail."""
    from curate.config import apply_overrides

    merged = apply_overrides(dict(data or {}), overrides)
    return from_mapping(RedistillConfig, merged, "redistill")


def read_ledger(location: str | Path) -> pl.DataFrame:
    """The rows of the ledger parts at ``location`` (a part, a model's folder, a ``rollouts/`` folder or a glob:
    ``curate.rollout.ledger.files_at``), in order of appearance (``_order``), with the columns re-distillation
    uses; a column a part lacks is null."""
    from curate.rollout import ledger as rollout_ledger

    files = rollout_ledger.files_at(location)
    if not files:
        raise InputError(f"no ledger parquet files at {location}")
    wanted = (S.PROBLEM_ID, S.COMPLETION, S.CORRECT, S.VERDICT, S.REWARD, S.STEP, S.MODEL)
    df = rollout_ledger.read_files(files, wanted)
    if df[S.COMPLETION].null_count() == df.height:
        raise InputError(f"ledger at {location} holds no completions (rows written without the text)")
    return df.with_row_index(ORDER)


def _correct_expr(columns: list[str]) -> pl.Expr:
    """A row is correct by its ``correct`` flag, else its verdict, else a positive reward (the first it has)."""
    rules = {S.CORRECT: pl.col(S.CORRECT), S.VERDICT: pl.col(S.VERDICT) == "correct", S.REWARD: pl.col(S.REWARD) > 0}
    have = [rule for col, rule in rules.items() if col in columns]
    if not have:
        raise InputError("ledger has none of the columns `correct`, `verdict`, `reward`: cannot tell correct rows")
    return pl.coalesce(have).fill_null(False)


def select_solutions(ledger: pl.DataFrame, *, last_steps: int = 10, per_problem: int = 1) -> pl.DataFrame:
    """Latest distinct correct completions per problem from the last ``last_steps`` steps of each run (pure).

    Returns ``problem_id``, ``completion``, ``step`` (null without a step column), sorted by problem_id then
    recency. See the module docstring for the rules.
    """
    df = ledger.filter(_correct_expr(ledger.columns) & pl.col(S.COMPLETION).is_not_null())
    has_step = S.STEP in df.columns and ledger[S.STEP].is_not_null().any()
    if has_step:
        run = [S.MODEL] if S.MODEL in df.columns else []
        df = df.filter(pl.col(S.STEP).is_not_null())
        last = pl.col(S.STEP).max().over(run) if run else pl.col(S.STEP).max()
        df = df.filter(pl.col(S.STEP) > last - last_steps)
    else:
        df = df.with_columns(pl.lit(None, pl.Int64).alias(S.STEP))
    return (
        df.sort([S.STEP, ORDER], descending=True, nulls_last=True)
        .unique([S.PROBLEM_ID, S.COMPLETION], keep="first", maintain_order=True)
        .group_by(S.PROBLEM_ID, maintain_order=True)
        .head(per_problem)
        .sort(S.PROBLEM_ID, maintain_order=True)
        .select(S.PROBLEM_ID, S.COMPLETION, pl.col(S.STEP).cast(pl.Int64))
    )


def build_rows(chosen: pl.DataFrame, problems: pl.DataFrame, cfg: RedistillConfig) -> tuple[pl.DataFrame, int]:
    """SFT rows (``curate.prompts.sft_row``) for the chosen solutions; also the count whose problem is unknown."""
    if S.PROBLEM_ID not in problems.columns or S.PROBLEM not in problems.columns:
        raise InputError(f"problems table needs {S.PROBLEM_ID!r} and {S.PROBLEM!r}; has {problems.columns}")
    joined = chosen.join(problems.select(S.PROBLEM_ID, S.PROBLEM).unique(S.PROBLEM_ID), on=S.PROBLEM_ID, how="left")
    unknown = joined.filter(pl.col(S.PROBLEM).is_null()).height
    joined = joined.filter(pl.col(S.PROBLEM).is_not_null())
    if cfg.max_rows is not None and joined.height > cfg.max_rows:
        joined = joined.sample(n=cfg.max_rows, seed=cfg.seed, shuffle=True).sort(S.PROBLEM_ID, maintain_order=True)
    rows = [
        {**sft_row(p, c, cfg.instruction), S.PROBLEM_ID: pid, S.STEP: step}
        for pid, p, c, step in joined.select(S.PROBLEM_ID, S.PROBLEM, S.COMPLETION, S.STEP).iter_rows()
    ]
    schema = {"prompt": None, "completion": None, S.PROBLEM_ID: pl.String, S.STEP: pl.Int64}
    return pl.DataFrame(rows, schema_overrides={k: v for k, v in schema.items() if v is not None}), unknown


def redistill(
    cfg: RedistillConfig, *, initial: str | Path, ledger: str | Path, problems: Path, out_dir: Path
) -> dict[str, Any]:
    """Pick the solutions, write them to ``out_dir/redistill.parquet``, SFT ``initial`` on them (``out_dir/final``).

    Returns the SFT metrics plus the selection counts. Re-running with the same ledger and settings skips the
    finished SFT (or resumes it from its last checkpoint).
    """
    from accelerate import PartialState

    out_dir = Path(out_dir)
    ledger_df = read_ledger(ledger)
    chosen = select_solutions(ledger_df, last_steps=cfg.last_steps, per_problem=cfg.per_problem)
    rows, unknown = build_rows(chosen, io.read_parquet(problems), cfg)
    if rows.height == 0:
        raise InputError(
            f"no correct solutions in the last {cfg.last_steps} steps of {ledger} (of {ledger_df.height} rows) "
            "for problems in the problems table"
        )
    state = PartialState()  # several GPUs: one process writes the SFT set, the others wait for it
    if state.is_main_process:
        io.write_parquet(rows, out_dir / DATA)
    state.wait_for_everyone()
    has_step = rows[S.STEP].is_not_null().any()
    selection = {
        "ledger": str(ledger),
        "ledger_rows": ledger_df.height,
        "problems": rows[S.PROBLEM_ID].n_unique(),
        "solutions": rows.height,
        "unknown_problems_skipped": unknown,
        "steps": [int(rows[S.STEP].min()), int(rows[S.STEP].max())] if has_step else None,
        "last_steps": cfg.last_steps,
        "per_problem": cfg.per_problem,
    }
    metrics = train_sft(
        cfg.sft,
        model=str(initial),
        data=out_dir / DATA,
        out_dir=out_dir,
        kind="redistill",
        lineage={"selection": selection, "problems_table": str(problems)},
    )
    return {**metrics, "selection": selection, "config": dataclasses.asdict(cfg)}
