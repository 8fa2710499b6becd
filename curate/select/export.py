r"""Writers of a selection folder: Parquet, HF ``datasets``, TRL- and verl-ready files, plots, card, manifest.

``selections/<name>/`` holds::

    selection.parquet   schema.SELECTIONS, then select_score, DES components, ... (what the curriculum reads)
    drops.parquet       problem_id, drop_reason for every filtered row
    trl.parquet         prompt = [{"role": "user", "content": problem + instruction}], answer, problem_id
    verl.parquet        data_source, prompt (chat list), ability="math", reward_model={ground_truth, style="rule"},
                        extra_info={index, problem_id, split}
    hf/                 ``Dataset.save_to_disk`` of the selection plus its chat ``prompt``
    README.md           the dataset card, generated from the manifest
    *.png               pool-vs-selection figures
    manifest.json

The folder is built beside its target and renamed into place, so a reader never sees half a selection.

Example TRL row::

    {"prompt": [{"role": "user", "content": "What is 2+3? Let's think step by step and output the final answer
    within \\boxed{}."}], "answer": "5", "problem_id": "3f9c0a1b2c4d5e6f"}
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from curate import io, prompts
from curate import schema as S


PROMPT = "prompt"
# Columns kept after schema.SELECTIONS in selection.parquet, when present.
EXTRA_COLUMNS = (S.SELECT_SCORE, S.DES_D, S.DES_C, S.DES_R, S.DIFFICULTY_SCORE, S.COT_LENGTH, S.COSCALE_POOL)
EXTRA_COLUMNS += (S.LEVEL, S.DIFFICULTY, S.SUBJECT)


def trl_frame(selection: pl.DataFrame, instruction: str) -> pl.DataFrame:
    """TRL's conversational prompt-only layout in rank order (``curate.prompts`` builds the rows)."""
    return prompts.trl_frame(selection.sort(S.RANK), instruction)


def verl_frame(selection: pl.DataFrame, instruction: str) -> pl.DataFrame:
    """verl's RL parquet layout in rank order (``curate.prompts`` builds the rows)."""
    return prompts.verl_frame(selection.sort(S.RANK), instruction)


def selection_table(selection: pl.DataFrame) -> pl.DataFrame:
    """The SELECTIONS columns (validated, rank order) followed by whichever extra columns the selection has."""

    ordered = selection.sort(S.RANK)
    extras = [c for c in EXTRA_COLUMNS if c in ordered.columns]
    return S.validate(ordered, S.SELECTIONS, table="selection").hstack(ordered.select(extras))


def write_selection(
    out: Path,
    selection: pl.DataFrame,
    pool: pl.DataFrame,
    drops: pl.DataFrame,
    manifest: io.Manifest,
    *,
    instruction: str,
    plots: bool = True,
) -> list[Path]:
    """Write the whole selection folder atomically (build beside it, then swap); returns the files written."""
    from datasets import Dataset

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        table = selection_table(selection)
        io.write_parquet(table, tmp / "selection.parquet")
        io.write_parquet(drops.sort(S.PROBLEM_ID), tmp / "drops.parquet")
        io.write_parquet(trl_frame(table, instruction), tmp / "trl.parquet")
        io.write_parquet(verl_frame(table, instruction), tmp / "verl.parquet")
        _save_hf(Dataset(table.with_columns(prompts.chat_prompt_expr(instruction)).to_arrow()), tmp / "hf")
        figures = []
        if plots:
            from curate.select.plots import selection_plots

            figures = selection_plots(pool, table, tmp)
        manifest.extra["files"] = sorted(p.name for p in tmp.iterdir())
        manifest.wall_s = round(_elapsed(manifest), 3)
        io.write_text(tmp / "README.md", dataset_card(manifest, table, [f.name for f in figures]))
        io.write_manifest(tmp, manifest)
        tmp.chmod(0o755)  # mkdtemp makes it private; a selection is meant to be read by others
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(out.iterdir())


def _save_hf(dataset: Any, path: Path) -> None:
    """``save_to_disk`` without datasets' own progress bar (restored afterwards)."""
    from datasets.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        dataset.save_to_disk(str(path))
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _swap(tmp: Path, out: Path) -> None:
    """Replace ``out`` by ``tmp`` with two renames; the old folder is removed only after the new one is in place."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{tmp.name.rsplit('.', 2)[-2]}")
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _elapsed(manifest: io.Manifest) -> float:
    import datetime as dt

    return (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(manifest.started_at)).total_seconds()


# --------------------------------------------------------------------------------------------------- card
def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "n>1M"


def _rows(pairs: dict[str, Any], head: tuple[str, str]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" if isinstance(v, int) else f"| {k} | {v} |" for k, v in pairs.items()]
    return "\n".join(lines)


def dataset_card(manifest: io.Manifest, table: pl.DataFrame, figures: list[str]) -> str:
    """The selection's README.md: what it is, where it came from, every filter and drop, seed, sizes, versions,
    and how to load it. Generated from the manifest so the card and the numbers cannot disagree."""
    s, cfg = manifest.extra["summary"], manifest.config
    score_manifest = manifest.extra.get("score_manifest") or {}
    extra = score_manifest.get("extra") or {}
    prior = extra.get("prior_predictor") or {}
    drops = dict(s["dropped"]) | {"not sampled (over the size cap)": s["not_sampled"]}
    scoring = (
        f"DES with weights {extra.get('des_weights')} at time weight w = {extra.get('time_weight')}; the pass-rate "
        f"prior ({prior.get('kind')}, trained on {prior.get('n_train')} problems) has held-out MAE {prior.get('mae')} "
        f"(predicting the mean: {prior.get('baseline_mae')})."
        if score_manifest
        else "No `scores.parquet`: no DES, clusters, zero-variance or solved filters."
    )
    sampling = (
        f"{s['size_requested']:,} rows drawn with quotas per cluster ({s['clusters_eligible']} clusters, "
        f"largest-remainder rounding) and, within a cluster, P ∝ exp(`{s['by']}` / {s['temperature']}) without "
        f"replacement (Gumbel-top-k, noise hashed from seed {s['seed']} and problem_id)."
        if s["sampled"]
        else f"Every row passing the filters was taken (no sampling); ranked by `{s['by']}`."
    )
    warnings = "\n".join(f"- {w}" for w in s["warnings"]) or "- none"
    versions = "\n".join(f"- {k} {v}" for k, v in sorted(manifest.versions.items()))
    plots = "\n\n".join(f"![{Path(f).stem}]({f})" for f in figures) or "(plots disabled)"
    return f"""---
pretty_name: {s["selection"]}
size_categories: [{_size_category(table.height)}]
task_categories: [text-generation]
tags: [math, reasoning, reinforcement-learning, curate-rl]
---

# {s["selection"]}

{table.height:,} math problems selected by `curate select` from the pool `{s["pool"]}` ({s["rows_in"]:,} problems)
for RL post-training of reasoning models. Each row has a problem, a normalized gold answer (check answers with
math-verify; `answer_alternatives` lists every accepted form) and the scores it was selected on.

## Sources in the selection

{_rows(s["sources"], ("source", "problems"))}

## Filters and drops

Filters run in this order; each dropped row is counted once, under the first filter it fails
(`drops.parquet` lists them by problem_id). Rows in {s["rows_in"]:,} = selected {s["selected"]:,}
+ dropped {sum(s["dropped"].values()):,} + not sampled {s["not_sampled"]:,}.

{_rows(drops, ("reason", "rows"))}

Settings: max_prompt_chars={cfg.get("max_prompt_chars")}, drop_contaminated={cfg.get("drop_contaminated")},
drop_duplicates={cfg.get("drop_duplicates")}, drop_zero_variance={cfg.get("drop_zero_variance")},
drop_solved={cfg.get("drop_solved")}, min={cfg.get("min_value")}, max={cfg.get("max_value")}.

## Sampling

{sampling} Seed: {s["seed"]}. Deterministic for a given seed and inputs.

Scoring: {scoring} The DES formula is RECONSTRUCTED from ScalingRL's description (its paper gives no formula;
see METHODS.md §1.2 in the project docs).

## Warnings

{warnings}

## Files

- `selection.parquet`: the selection (read with polars or pandas); `rank` 1 is the highest sampling key.
- `hf/`: the same rows plus a chat `prompt`, as a Hugging Face `datasets` folder.
- `trl.parquet`: `prompt` (conversational), `answer`, `problem_id` for TRL's GRPOTrainer.
- `verl.parquet`: verl's RL layout (`data_source`, `prompt`, `ability`, `reward_model`, `extra_info`).
- `drops.parquet`, `manifest.json` (inputs with content hashes, config, counts, versions), figures.

## How to load

```python
import polars as pl
from datasets import load_dataset, load_from_disk

rows = pl.read_parquet("selection.parquet")
ds = load_from_disk("hf")
train = load_dataset("parquet", data_files="trl.parquet", split="train")  # GRPOTrainer(train_dataset=train, ...)
```

verl: `data.train_files=<this folder>/verl.parquet`.

## Versions

{versions}

## Figures

{plots}
"""
