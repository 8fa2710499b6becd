r"""Writers of a selection folder: Parquet, HF ``datasets``, TRL- and verl-ready files, plots, card, manifest.

``selections/<name>/`` holds::

    selection.parquet   schema.SELECTIONS, then select_score, DES components, ... (what the curriculum reads)
    drops.parquet       problem_id, drop_reason for every filtered row
    trl.parquet         prompt = [{"role": "user", "content": problem + instruction}], answer, problem_id
    verl.parquet        data_source, prompt (chat list), ability="math", reward_model={ground_truth, style="rule"},
                        extra_info={index, problem_id, split}
    hf/                 ``Dataset.save_to_disk`` of the selection plus its chat ``prompt``
                        (trl, verl and hf in standard Arrow types: string, list, int64, float64; ``standard_type``)
    README.md           the dataset card, generated from the manifest
    *.png               pool-vs-selection figures
    manifest.json

The folder is built beside its target and swapped into place (``io.replace_dir``), under the selection's lock, so a
reader never sees half a selection nor none, and two ``curate select --name A`` at once take turns.

Example TRL row::

    {"prompt": [{"role": "user", "content": "What is 2+3? Let's think step by step and output the final answer
    within \\boxed{}."}], "answer": "5", "problem_id": "3f9c0a1b2c4d5e6f"}
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl

from curate import io, prompts
from curate import schema as S
from curate.cards import fmt, size_category
from curate.manifest import Manifest, write_manifest
from curate.score import des


PROMPT = "prompt"
# Columns kept after schema.SELECTIONS in selection.parquet, when present.
EXTRA_COLUMNS = (S.SELECT_SCORE, *des.COLUMNS, S.DIFFICULTY_SCORE, S.COT_LENGTH, S.COSCALE_POOL)
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
    manifest: Manifest,
    *,
    instruction: str,
    plots: bool = True,
) -> list[Path]:
    """Write the whole selection folder atomically (build beside it, then swap); returns the files written.

    Holds the selection's lock (``<root>/locks/selection-<name>.lock``, the root being two levels above ``out``),
    which first repairs what a killed writer left: a folder missing after a crash mid-swap is put back, temp
    folders are removed. The folder is replaced by ``io.replace_dir``, so it is never absent.
    """
    with io.Workspace(out.parent.parent).lock("selection", out.name), io.naming(out):  # a full disk names the folder
        return _write_selection(out, selection, pool, drops, manifest, instruction=instruction, plots=plots)


def _write_selection(
    out: Path,
    selection: pl.DataFrame,
    pool: pl.DataFrame,
    drops: pl.DataFrame,
    manifest: Manifest,
    *,
    instruction: str,
    plots: bool,
) -> list[Path]:
    from datasets import Dataset

    tmp = io.temp_dir(out)
    try:
        table = selection_table(selection)
        io.write_parquet(table, tmp / "selection.parquet")
        io.write_parquet(drops.sort(S.PROBLEM_ID), tmp / "drops.parquet")
        # the training files in standard Arrow types (string, list), not polars' large ones: an ordinary HF dataset
        # concatenates with them (``tmp`` is swapped in whole, so these plain writes are atomic with the folder)
        write_standard_parquet(trl_frame(table, instruction), tmp / "trl.parquet")
        write_standard_parquet(verl_frame(table, instruction), tmp / "verl.parquet")
        hf_rows = standard_arrow(table.with_columns(prompts.chat_prompt_expr(instruction)))
        _save_hf(Dataset(hf_rows), tmp / "hf")
        figures = []
        if plots:
            from curate.select.plots import selection_plots

            figures = selection_plots(pool, table, tmp)
        manifest.extra["files"] = sorted(p.name for p in tmp.iterdir())
        manifest.extra["pool_quarantine"] = pool_quarantine(
            io.Workspace(out.parent.parent), manifest.config.get("pool")
        )
        manifest.extra["provenance"], manifest.extra["task"] = sources_provenance(
            io.Workspace(out.parent.parent), manifest.config.get("pool"), list(manifest.summary.get("sources") or {})
        )
        manifest.wall_s = round(_elapsed(manifest), 3)
        io.write_text(tmp / "README.md", dataset_card(manifest, table, [f.name for f in figures]))
        write_manifest(tmp, manifest)  # last: a folder with its manifest is complete (``io.recover_dir``)
        io.replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(out.iterdir())


def standard_type(t: Any) -> Any:
    """``t`` with Arrow's large and view types replaced by the standard ones, recursively (large_string -> string,
    large_list -> list, string_view -> string, ...), and narrow numbers widened (int8-32 and uint8-32 -> int64,
    float16/32 -> float64): what ``datasets`` builds from plain Python values, so an ordinary ``Dataset.from_list``
    concatenates with the export (else ``rank``, ``cluster``, ``prompt_chars``, ``level`` are int32)."""
    import pyarrow as pa

    if pa.types.is_integer(t) and t.bit_width < 64:
        return pa.int64()
    if pa.types.is_floating(t) and t.bit_width < 64:
        return pa.float64()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t) or pa.types.is_list_view(t):
        return pa.list_(pa.field(t.value_field.name, standard_type(t.value_type), t.value_field.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, standard_type(f.type), f.nullable) for f in t])
    return t


def standard_arrow(frame: pl.DataFrame) -> Any:
    """``frame`` as a ``pyarrow.Table`` in standard types (see ``standard_type``)."""
    import pyarrow as pa

    table = frame.to_arrow()
    schema = pa.schema([pa.field(f.name, standard_type(f.type), f.nullable) for f in table.schema])
    return table.cast(schema)


def write_standard_parquet(frame: pl.DataFrame, path: Path) -> Path:
    """Write ``frame`` as Parquet in standard Arrow types (into a folder that is swapped into place whole)."""
    import pyarrow.parquet as pq

    pq.write_table(standard_arrow(frame), path, compression="zstd")
    return path


def sources_provenance(ws: io.Workspace, pool: str | None, names: list[str]) -> tuple[dict[str, dict[str, str]], str]:
    """Licence, upstream and Hub id of each selected source, and what the selected problems are
    (``curate.select.provenance``), from the pool's record."""
    from curate.select.provenance import pool_provenance, task_description

    record = ws.pool_dir(pool) / "sources.json" if pool else None
    text = record.read_text(encoding="utf-8") if record is not None and record.is_file() else None
    entries = [e for e in (json.loads(text) if text else []) if isinstance(e, dict) and e.get("name") in names]
    return pool_provenance(text, names), task_description(entries)


# verl loads the reward by path: a command that finds the file wherever curate-rl is installed, so the card holds no
# path of the machine that wrote it (``training/verl_reward.py`` of a curate-rl checkout is the same file).
VERL_REWARD_PATH = "$(python -c 'import training.verl_reward as m; print(m.__file__)')"


def _sources_table(counts: dict[str, int], provenance: dict[str, dict[str, str]]) -> str:
    lines = ["| source | problems | licence | upstream |", "|---|---:|---|---|"]
    for name, n in counts.items():
        p = provenance.get(name) or {"licence": "unknown", "upstream": "unknown"}
        lines.append(f"| {name} | {n:,} | {p['licence']} | {p['upstream']} |")
    return "\n".join(lines)


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


def pool_quarantine(ws: io.Workspace, pool: str | None) -> dict[str, int]:
    """Rows the pool's stages quarantined before selection, by ``stage: reason``, read from every stage's
    quarantine file (``io.read_quarantine``); empty when the pool is unknown."""
    if not pool or not ws.pool_dir(pool).is_dir():
        return {}
    q = io.read_quarantine(ws, pool)
    counts = (
        q.group_by(S.STAGE, S.DROP_REASON).len().sort(["len", S.STAGE, S.DROP_REASON], descending=[True, False, False])
    )
    return {f"{stage}: {reason}": int(n) for stage, reason, n in counts.iter_rows()}


def _elapsed(manifest: Manifest) -> float:
    import datetime as dt

    return (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(manifest.started_at)).total_seconds()


# --------------------------------------------------------------------------------------------------- card
def _rows(pairs: dict[str, Any], head: tuple[str, str]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---:|"]
    lines += [f"| {k} | {fmt(v)} |" for k, v in pairs.items()]
    return "\n".join(lines)


SELECTION_CARD = """---
{{ card_data }}
---

# {{ name }}

{{ rows }} problems selected by `curate select` from the pool `{{ pool }}` ({{ rows_in }} problems) for RL \
post-training of reasoning models. Task: {{ task }}. Each row has a problem, a normalized gold answer (check answers \
with math-verify; `answer_alternatives` lists every accepted form) and the scores it was selected on.

## Sources in the selection

{{ sources }}

Licences are those of the upstream files (`unknown` where the upstream states none); check them before \
redistributing this selection.

## Filters and drops

Filters run in this order; each dropped row is counted once, under the first filter it fails (`drops.parquet` lists \
them by problem_id). Rows in {{ rows_in }} = selected {{ selected }} + dropped {{ dropped }} + not sampled \
{{ not_sampled }}.

{{ drops }}

Settings: {{ settings }}.

Quarantined by the pool's stages (every stage's quarantine file, by stage and reason): ingest's rows never entered \
the pool; a later stage's (decontaminate) stay in it and are counted again under the filters above.

{{ quarantined }}

## Sampling

{{ sampling }} Seed: {{ seed }}. Deterministic for a given seed and inputs.

Scoring: {{ scoring }} DES = λ_d·D + λ_c·C + λ_r·R with λ = softmax(φ): D and C are Gaussian scores of the difficulty \
1 − p and of the standardized log chain-of-thought length around the pool's mean, R a Gaussian score of the recent \
reward (0 for problems whose rollouts all agree). The three-term structure is ScalingRL's ([Scale Down to Speed Up, \
Findings of EMNLP 2025](https://aclanthology.org/2025.findings-emnlp.412/)); the paper gives no formulas, so these \
are RECONSTRUCTED (`curate/score/des.py` in curate-rl).

## Warnings

{{ warnings }}

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

verl: `data.train_files=<this folder>/verl.parquet`. verl's default reward does not know these `data_source` values; \
score with the same answer checker the selection was made with (it reads `extra_info.answer_alternatives`). In the \
environment where curate-rl is installed (the path is found there, so it holds on any machine; in a curate-rl \
checkout it is `training/verl_reward.py`):

```
custom_reward_function.path={{ verl_reward }} custom_reward_function.name=compute_score
```

The reward's answer checker runs in worker processes: a script that calls it needs `if __name__ == "__main__":`.

## Versions

{{ versions }}

## Figures

{{ plots }}
"""


def dataset_card(manifest: Manifest, table: pl.DataFrame, figures: list[str]) -> str:
    """The selection's README.md (``huggingface_hub.DatasetCard`` from ``SELECTION_CARD``, with licence, language,
    Hub source datasets and size as card data): what it is, where it came from, every filter and drop, seed, sizes,
    versions, and how to load it. Generated from the manifest so the card and the numbers cannot disagree."""
    from huggingface_hub import DatasetCard, DatasetCardData

    from curate.select import provenance

    s, cfg = manifest.summary, manifest.config
    score_manifest = manifest.extra.get("score_manifest") or {}
    extra = score_manifest.get("extra") or {}
    prior = extra.get("prior_predictor") or {}
    drops = dict(s["dropped"]) | {"not sampled (over the size cap)": s["not_sampled"]}
    scoring = (
        f"DES with weights {fmt(extra.get('des_weights'))} at time weight w = {fmt(extra.get('time_weight'))}; the "
        f"pass-rate prior ({fmt(prior.get('kind'))}, trained on {fmt(prior.get('n_train'))} problems) has held-out "
        f"MAE {fmt(prior.get('mae'))} (predicting the mean: {fmt(prior.get('baseline_mae'))})."
        if score_manifest
        else "No `scores.parquet`: no DES, clusters, zero-variance or solved filters."
    )
    sampling = (
        f"{s['size_requested']:,} rows drawn with quotas per cluster ({s['clusters_eligible']} clusters, "
        f"largest-remainder rounding) and, within a cluster, P ∝ exp(`{s['by']}` / {fmt(s['temperature'])}) without "
        f"replacement (Gumbel-top-k, noise hashed from seed {s['seed']} and problem_id)."
        if s["sampled"]
        else f"Every row passing the filters was taken (no sampling); ranked by `{s['by']}`."
    )
    keys = ("max_prompt_chars", "drop_contaminated", "drop_duplicates", "drop_zero_variance", "drop_solved")
    settings = [f"{k}={fmt(cfg.get(k))}" for k in keys] + [f"min={fmt(cfg.get('min_value'))}",
                                                             f"max={fmt(cfg.get('max_value'))}"]  # fmt: skip
    known = list((manifest.extra.get("provenance") or {}).values())
    pool_q = manifest.extra.get("pool_quarantine") or {}
    data = DatasetCardData(
        language=["en"],
        license=provenance.hub_license(known),
        pretty_name=s["selection"],
        task_categories=["text-generation"],
        size_categories=[size_category(table.height)],
        source_datasets=provenance.hub_datasets(known) or None,
        tags=["math", "reasoning", "reinforcement-learning", "curate-rl"],
    )
    card = DatasetCard.from_template(
        data,
        template_str=SELECTION_CARD,
        name=s["selection"],
        rows=f"{table.height:,}",
        task=manifest.extra.get("task") or "math problems",
        pool=s["pool"],
        rows_in=f"{s['rows_in']:,}",
        sources=_sources_table(s["sources"], manifest.extra.get("provenance") or {}),
        selected=f"{s['selected']:,}",
        dropped=f"{sum(s['dropped'].values()):,}",
        not_sampled=f"{s['not_sampled']:,}",
        drops=_rows(drops, ("reason", "rows")),
        settings=", ".join(settings),
        quarantined=_rows(pool_q, ("stage: reason", "rows")) if pool_q else "(none recorded)",
        sampling=sampling,
        seed=s["seed"],
        scoring=scoring,
        warnings="\n".join(f"- {w}" for w in s["warnings"]) or "- none",
        verl_reward=VERL_REWARD_PATH,
        versions="\n".join(f"- {k} {v}" for k, v in sorted(manifest.versions.items())),
        plots="\n\n".join(f"![{Path(f).stem}]({f})" for f in figures) or "(plots disabled)",
    )
    return str(card)
