r"""The solutions stage (DESIGN.md stage 7): K distinct verified solutions per problem, CoScale-RL pools.

Pipeline position: ingest -> ... -> rollout -> score -> select -> **solutions** (-> SFT in ``training/``). Reads the
pool's problems (and a selection's ids with ``selection``), the rollout ledger, and the student's pass rates; writes
one solution set, named ``<set>`` (``set_name``: ``name``, else the selection, else the pool), into its own folder
``pools/<pool>/solutions/<set>/`` (``Workspace.solution_set_dir``), so two recipes on one pool (the curated set and
the raw one, ``datasets/tiny/raw.yaml``) never replace each other's tables:

- ``solutions.parquet`` (schema.SOLUTIONS) + manifest: the kept solutions, ``rank`` 0.. per problem;
- ``solutions_quarantine.parquet`` (schema.SOLUTIONS_QUARANTINE): every dropped candidate and why;
- ``solution_pools.parquet`` (schema.SOLUTION_POOLS): per problem, solutions kept, the student's pass rate, teacher
  samples spent, and the CoScale-RL pool;
- ``<home>/solutions/<set>/`` (or ``export``): ``sft.parquet`` (TRL conversational prompt/completion, the first K
  solutions of every problem), ``README.md`` (dataset card), ``lineage.json``, ``manifest.json``
  (``curate.solutions.export``). A set whose tables were exported to another folder is refused (one line).

Candidates (curate.solutions.candidates): the pool's reference solutions, imported generations, rollouts of any
model and a teacher's samples, each re-checked by ``curate.verify`` and dropped with a reason when it is truncated,
wrong, answer-only, over-long or a (near-)duplicate (``curate.solutions.distinct``). The teacher
(curate.solutions.teacher) samples more for problems short of K, within a budget, through the rollout ledger.
Settings: curate.solutions.config (recipe key ``solutions``).

CoScale-RL pools (METHODS.md 2.2) from the student's pass rate: ``unsolvable`` (< 5%), ``solvable``, ``solved``
(> 70%), and ``failed``. The pass rate is the student's empirical rate in the ledger (``student``), else the
scores table's ``pass_rate``, else unknown, which counts as unsolvable (every problem starts unsolvable).

Skip-if-done (``run_wrapped``): the manifest fingerprints the problems, the selection, the ledger's part files,
the scores table, the config and the code; an unchanged re-run writes nothing (a teacher, if set, first checks that
no problem is short of K with budget left, which costs a re-check of the candidates and no samples).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from curate import config as config_mod
from curate import io
from curate import schema as S
from curate.errors import InputError
from curate.manifest import Manifest
from curate.rollout import ledger, stats
from curate.score.des import coscale_pool_expr
from curate.solutions.candidates import Checker, State, evaluate, scope, selection_path
from curate.solutions.config import SolutionsConfig, load_config
from curate.solutions.teacher import fill_with_teacher, teacher_run_id, teacher_spent, teacher_summary
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped


def set_name(cfg: SolutionsConfig, pool: str) -> str:
    """The solution set's name: ``name``, else the ``export`` folder's name, else the selection, else the pool."""
    return cfg.name or (Path(cfg.export).expanduser().name if cfg.export else None) or cfg.selection or pool


def set_tables(ws: io.Workspace, pool: str, cfg: SolutionsConfig) -> tuple[Path, Path, Path]:
    """The set's tables: (solutions, solutions_quarantine, solution_pools) in ``pools/<pool>/solutions/<set>/``."""
    folder = ws.solution_set_dir(pool, set_name(cfg, pool))
    return tuple(folder / f"{n}.parquet" for n in ("solutions", "solutions_quarantine", "solution_pools"))


def export_dir(ws: io.Workspace, pool: str, cfg: SolutionsConfig) -> Path:
    """Where the SFT dataset goes: ``export``, else ``<home>/solutions/<name | selection | pool>/``."""
    if cfg.export:
        return Path(cfg.export).expanduser().resolve()
    return ws.root / "solutions" / (cfg.name or cfg.selection or pool)


def export_key(ws: io.Workspace, out_dir: Path) -> str:
    """The export folder as the set's manifest records its owner: relative to the workspace when inside it (a moved
    workspace keeps its sets), else absolute."""
    return str(out_dir.relative_to(ws.root)) if out_dir.is_relative_to(ws.root) else str(out_dir)


def _check_owner(out_path: Path, key: str, name: str, pool: str) -> None:
    """Refuse to replace a set whose tables were exported to another folder: two recipes gave their sets one name
    (a re-run of the same set, with any other setting changed, exports to the same folder and goes on)."""
    from curate.manifest import read_manifest

    before = ((read_manifest(out_path) or {}).get("extra") or {}).get("export")
    if before and before != key:
        raise InputError(
            f"solution set {name!r} of pool {pool!r} was exported to {before}, and this one exports to {key}; "
            "give this recipe its own `solutions.name` (or --force to replace that set)"
        )


# --------------------------------------------------------------------------------------------------- pools
def student_pass_rates(
    ws: io.Workspace, pool: str, ledger_rows: pl.DataFrame, cfg: SolutionsConfig
) -> tuple[pl.DataFrame, str]:
    """(problem_id, pass_rate) and where it came from: the student's ledger rows, the scores table, or nothing."""
    if cfg.student:
        rows = ledger_rows.filter(pl.col(S.MODEL) == cfg.student)
        if rows.height == 0:
            raise InputError(f"student {cfg.student!r} has no rows in pool {pool!r}'s ledger; run `curate rollout`")
        rates = rows.group_by(S.PROBLEM_ID).agg(pl.col(S.CORRECT).fill_null(False).mean().alias(S.PASS_RATE))
        return rates, f"ledger:{cfg.student}"
    scores = ws.table(pool, "scores")
    if scores.is_file():
        return pl.read_parquet(scores, columns=[S.PROBLEM_ID, S.PASS_RATE]).unique(S.PROBLEM_ID), "scores"
    return pl.DataFrame(schema={S.PROBLEM_ID: pl.String, S.PASS_RATE: pl.Float64}), "none"


def problem_pools(
    ids: pl.DataFrame, kept: pl.DataFrame, rates: pl.DataFrame, spent: pl.DataFrame, cfg: SolutionsConfig
) -> pl.DataFrame:
    """schema.SOLUTION_POOLS for every problem in scope (pure).

    ``failed`` (a teacher is set, its budget is spent and fewer than K solutions were found) overrides the
    pass-rate pool; an unknown pass rate is ``unsolvable`` (CoScale-RL starts every problem there).
    """
    counts = kept.group_by(S.PROBLEM_ID).agg(pl.len().cast(pl.Int32).alias(S.N_SOLUTIONS))
    df = (
        ids.select(S.PROBLEM_ID)
        .join(counts, on=S.PROBLEM_ID, how="left")
        .join(rates.select(S.PROBLEM_ID, pl.col(S.PASS_RATE).cast(pl.Float64)), on=S.PROBLEM_ID, how="left")
        .join(spent, on=S.PROBLEM_ID, how="left")
        .with_columns(pl.col(S.N_SOLUTIONS).fill_null(0), pl.col(S.TEACHER_SAMPLES).fill_null(0))
    )
    by_rate = coscale_pool_expr(cfg.unsolvable_below, cfg.solved_above)
    by_rate = pl.when(pl.col(S.PASS_RATE).is_null()).then(pl.lit("unsolvable")).otherwise(by_rate)
    if cfg.teacher is not None:
        failed = (pl.col(S.N_SOLUTIONS) < cfg.k) & (pl.col(S.TEACHER_SAMPLES) >= cfg.teacher.budget)
        by_rate = pl.when(failed).then(pl.lit("failed")).otherwise(by_rate)
    return S.validate(df.with_columns(by_rate.alias(S.COSCALE_POOL)).sort(S.PROBLEM_ID), S.SOLUTION_POOLS)


# --------------------------------------------------------------------------------------------------- summary
def histogram(pools: pl.DataFrame) -> dict[str, int]:
    """Problems per number of kept solutions, ``{"0": 3, "1": 10, ...}`` in order."""
    counts = Counter(pools[S.N_SOLUTIONS].to_list())
    return {str(n): counts[n] for n in sorted(counts)}


def summarize(
    kept: pl.DataFrame,
    drops: pl.DataFrame,
    pools: pl.DataFrame,
    cands: pl.DataFrame,
    cfg: SolutionsConfig,
    extra: dict[str, Any],
) -> dict[str, Any]:
    def counts(df: pl.DataFrame, col: str) -> dict[str, int]:
        return dict(sorted(Counter(df[col].to_list()).items())) if df.height else {}

    n = pools.height
    return {
        "problems": n,
        "k": cfg.k,
        "candidates": counts(cands, S.ORIGIN),
        "kept": kept.height,
        "kept_by_origin": counts(kept, S.ORIGIN),
        "drops": counts(drops, S.DROP_REASON),
        "problems_with_k": int((pools[S.N_SOLUTIONS] >= cfg.k).sum()) if n else 0,
        "mean_solutions": round(float(pools[S.N_SOLUTIONS].mean()), 3) if n else None,
        "solutions_per_problem": histogram(pools),
        "coscale_pools": counts(pools, S.COSCALE_POOL),
        "near_duplicate_threshold": cfg.near_duplicate,
        **extra,
    }


# --------------------------------------------------------------------------------------------------- job
def _config(cfg: SolutionsConfig, pool: str) -> dict[str, Any]:
    out = dataclasses.asdict(cfg)
    out["verify_workers"] = None  # how many processes check answers does not change the output
    if cfg.teacher is not None:
        out["teacher"]["openai"].pop("api_key_env", None)
    return {**out, "pool": pool}


@io.pool_locked
def solutions(
    ws: io.Workspace, pool: str, cfg: SolutionsConfig, *, force: bool = False, progress: bool = False
) -> StageResult:
    """Gather, re-check, filter and deduplicate solutions; run the teacher; write the tables and the SFT export.

    The teacher phase runs first (it only appends to the ledger, and does nothing when no problem is short of K
    with budget left); the rest goes through ``run_wrapped`` with the ledger as it then is, so an unchanged
    re-run is skipped. The table writes hold the pool's lock.
    """
    from curate.solutions import export as export_mod

    problems, excluded = scope(ws, pool, cfg)
    checker = Checker(problems, cfg)
    state: State | None = None
    rounds = teacher_samples = 0
    if cfg.teacher is not None and "teacher" in cfg.origins:
        state, rounds, teacher_samples = fill_with_teacher(ws, pool, problems, checker, cfg, progress)
        if rounds:
            stats.refresh_stats(ws, pool)
    out_path, q_path, pools_path = set_tables(ws, pool, cfg)
    out_dir = export_dir(ws, pool, cfg)
    if not force:
        _check_owner(out_path, export_key(ws, out_dir), set_name(cfg, pool), pool)
    inputs = [ws.require_pool(pool), *ledger.files(ws, pool)]
    if cfg.selection:
        inputs.append(selection_path(ws, cfg.selection))
    if not cfg.student:
        inputs.append(ws.table(pool, "scores"))

    def work(_manifest: Manifest) -> StageOutput:
        nonlocal state
        files = tuple(str(f) for f in ledger.files(ws, pool))
        if state is None or state.files != files:
            state = evaluate(ws, pool, problems, checker, cfg)
        ids = problems.select(S.PROBLEM_ID)
        rates, rate_source = student_pass_rates(ws, pool, state.ledger, cfg)
        spent = teacher_spent(state.ledger, cfg)
        pools = problem_pools(ids, state.kept, rates, spent, cfg)
        extra = {
            "pool": pool,
            "set": set_name(cfg, pool),
            "selection": cfg.selection,
            "excluded": excluded,
            "pass_rate_source": rate_source,
            "rechecked": checker.checked,
            "teacher": teacher_summary(state.ledger, ids, cfg, rounds, teacher_samples),
            "export": str(out_dir),
        }
        summary = summarize(state.kept, state.drops, pools, state.cands, cfg, extra)
        export_mod.write_export(
            ws, pool, cfg, problems, state.kept, summary, out_dir, table=out_path,
            selection_file=selection_path(ws, cfg.selection) if cfg.selection else None,
            teacher_run=teacher_run_id(cfg),
        )  # fmt: skip
        return StageOutput(
            summary,
            tables={
                q_path: (state.drops, S.SOLUTIONS_QUARANTINE),
                pools_path: (pools, S.SOLUTION_POOLS),
                out_path: (state.kept, S.SOLUTIONS),
            },
            rows_in=state.cands.height,
            rows_out=state.kept.height,
            drops=summary["drops"],
            extra={"export": export_key(ws, out_dir)},  # the set's owner (``_check_owner``)
        )

    outputs = [out_path, q_path, pools_path, out_dir / export_mod.SFT_FILE]
    with ws.lock("pool", pool):  # the tables' read-modify-write; the teacher phase above takes the ledger's lock
        return run_wrapped(
            ws, "solutions", inputs=inputs, config=_config(cfg, pool), outputs=outputs, fn=work, force=force
        )


def run_stage(
    ws: io.Workspace, recipe: config_mod.Recipe, *, force: bool = False, progress: bool = False
) -> StageResult:
    """Stage wrapper: the recipe's ``solutions`` settings on ``recipe.pool``."""
    return solutions(ws, recipe.pool, load_config(recipe), force=force, progress=progress)
