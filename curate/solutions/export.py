"""The SFT export of the solutions stage: ``<home>/solutions/<name>/`` for TRL's SFTTrainer (issue 13).

- ``sft.parquet``: one row per solution, the first K (by ``rank``) of every problem in scope. ``prompt`` and
  ``completion`` are built by ``curate.prompts.sft_row``, so the user turn is exactly the RL prompt
  (``"<problem> Let's think step by step and output the final answer within \\boxed{}."``) and TRL's default
  completion-only loss trains on the solution alone. Beside them, for lineage and filtering: ``problem_id``,
  ``solution_id``, ``origin``, ``model``, ``run_id``, ``sample_idx``, ``answer``.
- ``lineage.json``: which pool and selection (content hashes), the solutions table (rows, a hash of its solution
  ids), every ledger part file a
  row came from with how many rows it gave, the teacher (model, backend, sampling, run id, samples), the answer
  checker's settings and the stage config.
- ``README.md``: the dataset card (counts, origins, drops, pools, how to load); ``manifest.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from curate import io, prompts
from curate import schema as S
from curate.manifest import Manifest, file_hash, hash_inputs, write_manifest
from curate.solutions.config import SolutionsConfig


SFT_FILE = "sft.parquet"
EXPORT_COLUMNS = (S.PROBLEM_ID, S.SOLUTION_ID, S.ORIGIN, S.MODEL, S.RUN_ID, S.SAMPLE_IDX, S.ANSWER)


def sft_frame(problems: pl.DataFrame, kept: pl.DataFrame, k: int, instruction: str) -> pl.DataFrame:
    """TRL conversational prompt/completion rows: the first ``k`` solutions of each problem, by problem and rank."""
    rows = (
        kept.filter(pl.col(S.RANK) < k)
        .join(problems.select(S.PROBLEM_ID, S.PROBLEM, S.ANSWER), on=S.PROBLEM_ID, how="inner")
        .sort([S.PROBLEM_ID, S.RANK])
    )
    records = []
    for r in rows.iter_rows(named=True):
        records.append({**prompts.sft_row(r[S.PROBLEM], r[S.TEXT], instruction), **{c: r[c] for c in EXPORT_COLUMNS}})
    message = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
    schema = {prompts.PROMPT: message, prompts.COMPLETION: message, **{c: kept.schema.get(c) for c in EXPORT_COLUMNS}}
    schema[S.ANSWER] = pl.String
    return pl.DataFrame(records, schema=schema)


def lineage(
    ws: io.Workspace,
    pool: str,
    cfg: SolutionsConfig,
    sft: pl.DataFrame,
    kept: pl.DataFrame,
    summary: dict[str, Any],
    *,
    selection_file: Path | None = None,
    teacher_run: str | None = None,
) -> dict[str, Any]:
    """Where every exported row came from (see the module docstring). ``selection_file`` / ``teacher_run``: the
    selection table and teacher run id the stage resolved (passed in, so this module never imports the stage)."""
    used = kept.join(sft.select(S.SOLUTION_ID), on=S.SOLUTION_ID, how="semi")
    files = Counter(f for f in used["ledger_file"].to_list() if f)
    base = ws.pool_dir(pool)
    ledger_files = [
        {"file": f, "bytes": (base / f).stat().st_size if (base / f).is_file() else None, "rows_used": n}
        for f, n in sorted(files.items())
    ]
    selection = None
    if cfg.selection:
        path = selection_file if selection_file is not None else ws.selection_dir(cfg.selection) / "selection.parquet"
        selection = {"name": cfg.selection, "path": str(path), "sha256": file_hash(path)}
    teacher = None
    if cfg.teacher is not None:
        teacher = {
            **dataclasses.asdict(cfg.teacher),
            "run_id": teacher_run,
            **{k: v for k, v in (summary.get("teacher") or {}).items() if k.endswith(("total", "this_run"))},
        }
        teacher["openai"].pop("api_key_env", None)
    problems_path = ws.table(pool, "problems")
    ids = "\n".join(sorted(kept[S.SOLUTION_ID].to_list()))
    return {
        "pool": pool,
        "problems": {"path": str(problems_path), "sha256": file_hash(problems_path)},
        "selection": selection,
        "solutions_table": {  # solution ids are content hashes: this identifies the table's content
            "path": str(ws.table(pool, "solutions")),
            "rows": kept.height,
            "solution_ids_sha256": hashlib.sha256(ids.encode()).hexdigest(),
        },
        "rows": sft.height,
        "problems_exported": sft[S.PROBLEM_ID].n_unique() if sft.height else 0,
        "rows_by_origin": dict(sorted(Counter(sft[S.ORIGIN].to_list()).items())),
        "rows_by_model": dict(sorted(Counter(m or "reference" for m in sft[S.MODEL].to_list()).items())),
        "ledger_files": ledger_files,
        "teacher": teacher,
        "verify": dataclasses.asdict(cfg.verify),
        "instruction": cfg.instruction,
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("teacher", "verify")},
    }


def write_export(
    ws: io.Workspace,
    pool: str,
    cfg: SolutionsConfig,
    problems: pl.DataFrame,
    kept: pl.DataFrame,
    summary: dict[str, Any],
    out_dir: Path,
    *,
    selection_file: Path | None = None,
    teacher_run: str | None = None,
) -> Path:
    """Write ``sft.parquet``, ``lineage.json``, ``README.md`` and ``manifest.json`` (the manifest last)."""
    sft = sft_frame(problems, kept, cfg.k, cfg.instruction)
    io.write_parquet(sft, out_dir / SFT_FILE)
    info = lineage(ws, pool, cfg, sft, kept, summary, selection_file=selection_file, teacher_run=teacher_run)
    io.write_json(out_dir / "lineage.json", info)
    name = out_dir.name
    io.write_text(out_dir / "README.md", dataset_card(name, summary, info, cfg))
    manifest = Manifest(
        stage="solutions-export",
        inputs=hash_inputs([ws.table(pool, "problems")]),
        config={"k": cfg.k, "instruction": cfg.instruction, "pool": pool, "selection": cfg.selection},
        rows_in=kept.height,
        rows_out=sft.height,
        extra={"files": [SFT_FILE, "lineage.json", "README.md"]},
    )
    write_manifest(out_dir, manifest)
    return out_dir


def _table(pairs: dict[str, Any], head: tuple[str, str]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in pairs.items()]
    return "\n".join(lines) if pairs else "(none)"


def dataset_card(name: str, summary: dict[str, Any], info: dict[str, Any], cfg: SolutionsConfig) -> str:
    """The README.md of an SFT export: what is in it, where it came from, how to load it."""
    teacher = info.get("teacher")
    teacher_line = (
        f"`{teacher['model']}` through the `{teacher['backend']}` backend (run `{teacher['run_id']}`, budget "
        f"{teacher['budget']} samples per problem, temperature {teacher['temperature']}, top_p {teacher['top_p']}, "
        f"max_tokens {teacher['max_tokens']}); {teacher.get('samples_total', 0)} teacher samples in the ledger for "
        "these problems."
        if teacher
        else "none (only the pool's reference solutions and the rollout ledger)."
    )
    bound = f"max_chars {cfg.max_chars}"
    if cfg.tokenizer:
        bound = f"max_tokens {cfg.max_tokens} of tokenizer `{cfg.tokenizer}`, " + bound
    selection = info.get("selection")
    scope = f"selection `{selection['name']}`" if selection else f"the `{', '.join(cfg.splits)}` split"
    return f"""---
task_categories:
- text-generation
tags:
- math
- sft
- curate-rl
size_categories:
- {"n<1K" if info["rows"] < 1000 else "1K<n<10K" if info["rows"] < 10_000 else "10K<n<100K"}
---

# {name}: verified solutions for SFT

{info["rows"]:,} rows: up to K = {cfg.k} distinct verified solutions for each of {info["problems_exported"]:,}
problems of pool `{info["pool"]}` ({scope}), written by `curate solutions` (CoScale-RL's data scaling: several
solutions per problem rather than more problems; METHODS.md §2).

Every solution was re-checked against the gold answer by `curate.verify` (a ledger's or dataset's correctness flag
only nominates it). Dropped: wrong answers, truncated generations, answers without reasoning (fewer than
{cfg.min_reasoning_words} words before the final answer), solutions over the length bound ({bound}; never
truncated), exact duplicates and near-duplicates (word {cfg.ngram}-gram Jaccard >= {cfg.near_duplicate}).

## Format

TRL conversational prompt/completion: `prompt` = `[{{"role": "user", "content": problem + " " + instruction}}]`
(the same user turn as the RL prompts, built by `curate.prompts`), `completion` =
`[{{"role": "assistant", "content": solution}}]`. SFTTrainer trains on the completion only by default. Also:
`problem_id`, `solution_id` (hash of the problem id and the normalized text), `origin` (reference, imported,
ledger, teacher), `model`, `run_id`, `sample_idx` (the ledger row), `answer` (gold).

Instruction: `{cfg.instruction}`

## Counts

{_table(info["rows_by_origin"], ("origin", "rows"))}

Solutions per problem (kept, before the K cap; problems in scope: {summary.get("problems")}):

{_table(summary.get("solutions_per_problem", {}), ("solutions", "problems"))}

CoScale-RL pools (pass rate from {summary.get("pass_rate_source")}; unsolvable < {cfg.unsolvable_below},
solved > {cfg.solved_above}, failed = teacher budget spent without K solutions):

{_table(summary.get("coscale_pools", {}), ("pool", "problems"))}

Drops (`pools/{info["pool"]}/solutions_quarantine.parquet` lists each with its reason):

{_table(summary.get("drops", {}), ("reason", "candidates"))}

## Lineage

Teacher: {teacher_line}

`lineage.json` names the problems table, the selection and the solutions table with content hashes, and each
rollout-ledger part file that rows came from.

## How to load

```python
from datasets import load_dataset

train = load_dataset("parquet", data_files="sft.parquet", split="train")  # SFTTrainer(train_dataset=train, ...)
```

Or `training sft --data sft.parquet --out runs/sft` (the project's SFT verb).
"""


def read_lineage(out_dir: Path) -> dict[str, Any]:
    """``lineage.json`` of an export folder."""
    return json.loads((Path(out_dir) / "lineage.json").read_text(encoding="utf-8"))
