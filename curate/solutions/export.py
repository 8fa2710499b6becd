"""The SFT export of the solutions stage: ``<home>/solutions/<name>/`` for TRL's SFTTrainer.

- ``sft.parquet``: one row per solution, the first K (by ``rank``) of every problem in scope. ``prompt`` and
  ``completion`` are built by ``curate.prompts.sft_row``, so the user turn is exactly the RL prompt
  (``"<problem> Let's think step by step and output the final answer within \\boxed{}."``) and TRL's default
  completion-only loss trains on the solution alone. Beside them, for lineage and filtering: ``problem_id``,
  ``solution_id``, ``origin``, ``model``, ``run_id``, ``sample_idx``, ``answer``.
- ``lineage.json``: which pool and selection (content hashes), the solutions table (rows, a hash of its solution
  ids; paths relative to the workspace), every ledger part file a
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
from curate.cards import size_category
from curate.manifest import Manifest, file_hash, hash_inputs, write_manifest
from curate.solutions.config import SolutionsConfig


SFT_FILE = "sft.parquet"
# ``verdict``: the checker's verdict on each row's answer, kept even when ``recheck: false`` exports wrong ones, so
# the card and every model trained on the rows state the measured share (``answer_check``).
EXPORT_COLUMNS = (S.PROBLEM_ID, S.SOLUTION_ID, S.ORIGIN, S.MODEL, S.RUN_ID, S.SAMPLE_IDX, S.ANSWER, S.VERDICT)


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


def answer_check(rows: pl.DataFrame) -> dict[str, Any] | None:
    """How the answers of SFT rows fared against the checker: ``{"rows": n, "verdicts": {verdict: count}}`` from
    their ``verdict`` column (``correct`` for all of them when the export re-checked them); None for rows without
    one (data this project did not check). The solutions card and the SFT model card both state it."""
    if S.VERDICT not in rows.columns:
        return None
    counts = rows[S.VERDICT].fill_null("unchecked").value_counts()
    return {"rows": rows.height, "verdicts": dict(sorted(counts.iter_rows()))}


def lineage(
    ws: io.Workspace,
    pool: str,
    cfg: SolutionsConfig,
    sft: pl.DataFrame,
    kept: pl.DataFrame,
    summary: dict[str, Any],
    *,
    table: Path,
    selection_file: Path | None = None,
    teacher_run: str | None = None,
) -> dict[str, Any]:
    """Where every exported row came from (see the module docstring). ``selection_file`` / ``teacher_run`` /
    ``table``: the selection table, teacher run id and the set's solutions table the stage resolved (passed in, so
    this module never imports the stage)."""
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
        selection = {"name": cfg.selection, "path": ws.model_name(str(path)), "sha256": file_hash(path)}
    teacher = None
    if cfg.teacher is not None:
        teacher = {
            **dataclasses.asdict(cfg.teacher),
            "run_id": teacher_run,
            **{k: v for k, v in (summary.get("teacher") or {}).items() if k.endswith(("total", "this_run"))},
        }
        teacher["openai"].pop("api_key_env", None)
        teacher["model"] = ws.model_name(teacher["model"])  # a folder of this workspace by its relative path
    problems_path = ws.table(pool, "problems")
    ids = "\n".join(sorted(kept[S.SOLUTION_ID].to_list()))
    return {
        "pool": pool,
        "problems": {"path": ws.model_name(str(problems_path)), "sha256": file_hash(problems_path)},
        "selection": selection,
        "solutions_table": {  # solution ids are content hashes: this identifies the table's content
            "path": ws.model_name(str(table)),
            "rows": kept.height,
            "solution_ids_sha256": hashlib.sha256(ids.encode()).hexdigest(),
        },
        "rows": sft.height,
        "answers": {"rechecked": cfg.recheck, **(answer_check(sft) or {})},
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
    table: Path,
    selection_file: Path | None = None,
    teacher_run: str | None = None,
) -> Path:
    """Write ``sft.parquet``, ``lineage.json``, ``README.md`` and ``manifest.json`` (the manifest last)."""
    sft = sft_frame(problems, kept, cfg.k, cfg.instruction)
    io.write_parquet(sft, out_dir / SFT_FILE)
    info = lineage(
        ws, pool, cfg, sft, kept, summary, table=table, selection_file=selection_file, teacher_run=teacher_run
    )
    io.write_json(out_dir / "lineage.json", info)
    name = out_dir.name
    sources_path = ws.pool_dir(pool) / "sources.json"
    sources = json.loads(sources_path.read_text(encoding="utf-8")) if sources_path.is_file() else []
    io.write_text(out_dir / "README.md", dataset_card(name, summary, info, cfg, sources))
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
    lines += [f"| {k} | {v:,} |" if isinstance(v, int) else f"| {k} | {v} |" for k, v in pairs.items()]
    return "\n".join(lines) if pairs else "(none)"


def answers_text(answers: dict[str, Any] | None, cfg: SolutionsConfig, bound: str) -> tuple[str, str]:
    """The card's title word and its paragraph on what was checked: "verified" only when every exported answer
    was re-checked correct; otherwise what was not checked and the measured share of wrong answers."""
    verdicts = dict((answers or {}).get("verdicts") or {})
    rows = (answers or {}).get("rows") or 0
    other_drops = (
        f"truncated generations, answers without reasoning (fewer than {cfg.min_reasoning_words} words before the "
        f"final answer), solutions over the length bound ({bound}; never truncated), exact duplicates and "
        f"near-duplicates (word {cfg.ngram}-gram Jaccard >= {cfg.near_duplicate})"
    )
    if cfg.recheck:
        return "verified SFT solutions", (
            "Every solution was re-checked against the gold answer by `curate.verify` (a ledger's or dataset's "
            f"correctness flag only nominates it): {verdicts.get('correct', 0):,} of the {rows:,} rows box the gold "
            f"answer. Dropped: wrong answers, {other_drops}."
        )
    wrong, correct = verdicts.get("wrong", 0), verdicts.get("correct", 0)
    rest = ", ".join(f"{n:,} {v}" for v, n in verdicts.items() if v not in ("wrong", "correct"))
    share = (lambda n: f"{n / rows:.1%}") if rows else (lambda n: "n/a")
    return "SFT solutions (answers NOT verified)", (
        "The answers were NOT re-checked against the gold answer (`solutions.recheck: false`): every row keeps its "
        "source's answer, right or wrong. The checker's verdict on each row is recorded (`verdict` column): "
        f"{wrong:,} of the {rows:,} rows ({share(wrong)}) box an answer `curate.verify` finds wrong, {correct:,} "
        f"({share(correct)}) the gold answer" + (f", and {rest}" if rest else "") + ". Filter on `verdict == "
        f'"correct"` to keep the verified rows only. Dropped: {other_drops} (not wrong answers).'
    )


CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ name }}: {{ kind }}

{{ rows }} rows: up to K = {{ k }} distinct solutions for each of {{ problems }} problems of pool `{{ pool }}` \
({{ scope }}), written by `curate solutions` (CoScale-RL's data scaling: several solutions per problem rather than \
more problems; METHODS.md §2). Task: {{ task }}.

{{ checked }}

## Format

TRL conversational prompt/completion: `prompt` = `[{"role": "user", "content": problem + " " + instruction}]` (the \
same user turn as the RL prompts, built by `curate.prompts`), `completion` = `[{"role": "assistant", "content": \
solution}]`. SFTTrainer trains on the completion only by default. Also: `problem_id`, `solution_id` (hash of the \
problem id and the normalized text), `origin` (reference, imported, ledger, teacher), `model`, `run_id`, \
`sample_idx` (the ledger row), `answer` (gold), `verdict` (the checker's verdict on the row's answer).

Instruction: `{{ instruction }}`

## Counts

{{ origins }}

Solutions per problem (kept, before the K cap; problems in scope: {{ in_scope }}):

{{ per_problem }}

CoScale-RL pools (pass rate from {{ rate_source }}; unsolvable < {{ unsolvable }}, solved > {{ solved }}, failed = \
teacher budget spent without K solutions):

{{ coscale }}

Drops (`pools/{{ pool }}/solutions_quarantine.parquet` lists each with its reason):

{{ drops }}

## Lineage

Teacher: {{ teacher }}

Sources and licences: {{ licences }}

`lineage.json` names the problems table, the selection and the solutions table with content hashes, and each \
rollout-ledger part file that rows came from.

## How to load

```python
from datasets import load_dataset

train = load_dataset("parquet", data_files="sft.parquet", split="train")  # SFTTrainer(train_dataset=train, ...)
```

Or `training sft --data sft.parquet --out runs/sft` (the project's SFT verb).
"""


def dataset_card(
    name: str, summary: dict[str, Any], info: dict[str, Any], cfg: SolutionsConfig, sources: list[dict[str, Any]]
) -> str:
    """The README.md of an SFT export (``huggingface_hub.DatasetCard`` from ``CARD_TEMPLATE``): what is in it, what
    was and was not checked about its answers, where it came from (``sources``: the pool's ``sources.json``
    entries, for the licence, the Hub ids and the task), how to load it."""
    from huggingface_hub import DatasetCard, DatasetCardData

    from curate.select import provenance

    known = [provenance.source_provenance(s.get("name", ""), s.get("path")) for s in sources]
    teacher = info.get("teacher")
    teacher_line = (
        f"`{teacher['model']}` through the `{teacher['backend']}` backend (run `{teacher['run_id']}`, budget "
        f"{teacher['budget']} samples per problem, temperature {teacher['temperature']}, top_p {teacher['top_p']}, "
        f"max_tokens {teacher['max_tokens']}); {teacher.get('samples_total', 0):,} teacher samples in the ledger "
        "for these problems."
        if teacher
        else "none (only the pool's reference solutions and the rollout ledger)."
    )
    bound = f"max_chars {cfg.max_chars}"
    if cfg.tokenizer:
        bound = f"max_tokens {cfg.max_tokens} of tokenizer `{cfg.tokenizer}`, " + bound
    selection = info.get("selection")
    kind, checked = answers_text(info.get("answers"), cfg, bound)
    data = DatasetCardData(
        language=["en"],
        license=provenance.hub_license(known),
        pretty_name=f"{name}: {kind}",
        task_categories=["text-generation"],
        size_categories=[size_category(info["rows"])],
        source_datasets=provenance.hub_datasets(known) or None,
        tags=["math", "sft", "curate-rl", "verified" if cfg.recheck else "unverified"],
    )
    card = DatasetCard.from_template(
        data,
        template_str=CARD_TEMPLATE,
        name=name,
        kind=kind,
        rows=f"{info['rows']:,}",
        k=cfg.k,
        problems=f"{info['problems_exported']:,}",
        pool=info["pool"],
        scope=f"selection `{selection['name']}`" if selection else f"the `{', '.join(cfg.splits)}` split",
        task=provenance.task_description(sources),
        checked=checked,
        instruction=cfg.instruction,
        origins=_table(info["rows_by_origin"], ("origin", "rows")),
        in_scope=f"{summary.get('problems', 0):,}",
        per_problem=_table(summary.get("solutions_per_problem", {}), ("solutions", "problems")),
        rate_source=summary.get("pass_rate_source") or "no student's rollouts: not measured",
        unsolvable=cfg.unsolvable_below,
        solved=cfg.solved_above,
        coscale=_table(summary.get("coscale_pools", {}), ("pool", "problems")),
        drops=_table(summary.get("drops", {}), ("reason", "candidates")),
        teacher=teacher_line,
        licences="; ".join(sorted({f"{s.get('name')}: {p['licence']}" for s, p in zip(sources, known, strict=True)}))
        or "not recorded",
    )
    return str(card)


def read_lineage(out_dir: Path) -> dict[str, Any]:
    """``lineage.json`` of an export folder."""
    return json.loads((Path(out_dir) / "lineage.json").read_text(encoding="utf-8"))
