"""Selection folder writers: TRL and verl layouts, the HF folder, plots, the card, the atomic swap (no network)."""

from __future__ import annotations

import polars as pl
import pytest

from curate import schema as S
from curate.manifest import Manifest, read_manifest
from curate.select import export


def selection(n: int = 12) -> pl.DataFrame:
    return pl.DataFrame(
        {
            S.PROBLEM_ID: [f"{i:016x}" for i in range(n)],
            S.PROBLEM: [f"What is {i}+{i}?" for i in range(n)],
            S.ANSWER: [str(2 * i) for i in range(n)],
            S.ANSWER_ALTERNATIVES: [[str(2 * i)] for i in range(n)],
            S.SOURCE: ["toy-a" if i % 3 else "toy-b" for i in range(n)],
            S.SPLIT: ["train"] * n,
            S.RANK: list(range(n, 0, -1)),
            S.CLUSTER: [i % 3 for i in range(n)],
            S.PASS_RATE: [i / n for i in range(n)],
            S.DES: [0.5 + i / (3 * n) for i in range(n)],
            S.PROMPT_CHARS: [12 + i for i in range(n)],
            S.SELECT_SCORE: [0.5 + i / (3 * n) for i in range(n)],
            S.COSCALE_POOL: ["solvable"] * n,
        },
        schema_overrides={S.RANK: pl.Int32, S.CLUSTER: pl.Int32, S.PROMPT_CHARS: pl.Int32},
    )


def manifest(n: int) -> Manifest:
    summary = {
        "selection": "toy-sel",
        "pool": "toy",
        "rows_in": n + 5,
        "dropped": {"contaminated": 2, "split_test": 1},
        "eligible": n + 2,
        "selected": n,
        "not_sampled": 2,
        "sampled": True,
        "size_requested": n,
        "clusters_eligible": 3,
        "by": "des",
        "temperature": 1.0,
        "seed": 7,
        "sources": {"toy-a": 8, "toy-b": 4},
        "warnings": ["no filters.parquet: not decontaminated"],
    }
    return Manifest(stage="select", config={"max_prompt_chars": 8192}, summary=summary)


def test_trl_frame_is_conversational_and_in_rank_order():
    trl = export.trl_frame(selection(), " Think.")
    assert trl.columns == ["prompt", S.ANSWER, S.PROBLEM_ID]
    first = trl.row(0, named=True)
    assert first["prompt"] == [{"role": "user", "content": "What is 11+11? Think."}] and first[S.ANSWER] == "22"


def test_verl_frame_layout():
    row = export.verl_frame(selection(), " Think.").row(0, named=True)
    assert row["data_source"] == "toy-a" and row["ability"] == "math"
    assert row["prompt"] == [{"role": "user", "content": "What is 11+11? Think."}]
    assert row["reward_model"] == {"ground_truth": "22", "style": "rule"}
    assert row["extra_info"] == {
        "index": 0, "problem_id": f"{11:016x}", "split": "train", "answer_alternatives": ["22"]
    }  # fmt: skip


def test_write_selection_folder_loads_everywhere_and_replaces_atomically(tmp_path):
    from datasets import load_from_disk

    out = tmp_path / "selections" / "toy-sel"
    table = selection()
    drops = pl.DataFrame({S.PROBLEM_ID: ["x", "y"], S.DROP_REASON: ["contaminated", "split_test"]})
    pool = pl.concat([table, table.with_columns(pl.col(S.PASS_RATE) * 0.5)])
    files = export.write_selection(out, table, pool, drops, manifest(12), instruction=" Think.")
    names = {p.name for p in files}
    expected = {"selection.parquet", "drops.parquet", "trl.parquet", "verl.parquet", "hf", "README.md"}
    assert expected | {"manifest.json", "pass_rate.png", "des.png", "length.png", "clusters.png"} == names
    assert (out / "clusters.png").read_bytes()[:4] == b"\x89PNG"
    written = pl.read_parquet(out / "selection.parquet")
    S.validate(written, S.SELECTIONS)
    assert written[S.RANK].to_list() == list(range(1, 13)) and S.SELECT_SCORE in written.columns
    ds = load_from_disk(str(out / "hf"))
    assert len(ds) == 12 and ds[0]["prompt"][0]["role"] == "user"
    card = (out / "README.md").read_text()
    assert "| contaminated | 2 |" in card and "Seed: 7" in card and "no filters.parquet" in card
    assert "RECONSTRUCTED" in card and 'load_from_disk("hf")' in card
    stored = read_manifest(out)
    assert stored["summary"]["selected"] == 12 and "trl.parquet" in stored["extra"]["files"]
    # a second write swaps the whole folder: nothing of the old one (here its figures) survives
    export.write_selection(out, table.head(3), pool, drops, manifest(3), instruction=" Think.", plots=False)
    assert pl.read_parquet(out / "selection.parquet").height == 3 and not (out / "des.png").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["toy-sel"]


def test_failed_write_leaves_the_old_selection_untouched(tmp_path):
    out = tmp_path / "toy-sel"
    drops = pl.DataFrame(schema={S.PROBLEM_ID: pl.String, S.DROP_REASON: pl.String})
    export.write_selection(out, selection(), selection(), drops, manifest(12), instruction="", plots=False)
    with pytest.raises(S.SchemaError):
        export.write_selection(out, selection().drop(S.ANSWER), selection(), drops, manifest(12), instruction="")
    assert pl.read_parquet(out / "selection.parquet").height == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy-sel"]


def test_card_is_a_hub_dataset_card_with_licence_language_and_sources_and_no_python_reprs(tmp_path):
    """Issue 30.10: the card's front matter carries the Hub's licence, language and source datasets (from the pool's
    sources), values print as a reader expects (no ``None``, no 16-digit floats), and the verl command holds no
    path of this machine."""
    import json
    import re

    from huggingface_hub import DatasetCard

    (tmp_path / "pools" / "toy").mkdir(parents=True)
    (tmp_path / "pools" / "toy" / "sources.json").write_text(json.dumps([
        {"name": "toy-a", "path": "/data/gsm8k/train.jsonl"}, {"name": "toy-b", "path": "/data/gsm8k/test.jsonl"},
    ]))  # fmt: skip
    m = manifest(12)
    m.config.update(pool="toy", min_value=None, max_value=0.30000000000000004)
    m.extra["score_manifest"] = {"extra": {"des_weights": [1 / 3, 1 / 3, 1 / 3], "time_weight": 0.1 + 0.2,
                                           "prior_predictor": {"kind": "ridge", "mae": None}}}  # fmt: skip
    out = tmp_path / "selections" / "toy-sel"
    drops = pl.DataFrame(schema={S.PROBLEM_ID: pl.String, S.DROP_REASON: pl.String})
    export.write_selection(out, selection(), selection(), drops, m, instruction="", plots=False)
    card = DatasetCard.load(out / "README.md")
    assert (card.data.license, card.data.language, card.data.source_datasets) == ("mit", ["en"], ["openai/gsm8k"])
    assert card.data.size_categories == ["n<1K"] and card.data.pretty_name == "toy-sel"
    assert "None" not in card.text and not re.search(r"\d\.\d{6,}", card.text), card.text
    assert "min=n/a, max=0.3." in card.text and "weights 0.3333, 0.3333, 0.3333" in card.text
    assert "math problems from toy-a, toy-b" in card.text and str(tmp_path) not in card.text
