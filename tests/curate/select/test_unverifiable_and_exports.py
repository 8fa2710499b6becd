"""What a new user hit in selections (issue 11, items 7, 12, 13), each through the code path the user takes.

- 7: gold answers the checker cannot verify are flagged at ingest, kept in the pool, left out of RL selections and
  counted in the card.
- 12: trl.parquet, verl.parquet and hf/ concatenate with an ordinary ``datasets.Dataset.from_dict``.
- 13: the card carries licence and upstream per source and links only what the user can open.
"""

from __future__ import annotations

import polars as pl

from curate import schema as S
from tests.curate.user_pools import ingest, plain_problems, score_and_select, write_jsonl


def test_unverifiable_golds_are_flagged_kept_and_left_out_of_rl_selections(ws, tmp_path):
    rows = [
        *plain_problems(10),
        {"problem": "Two trains meet. Find both speeds.", "answer": "12 km/h and 15 km/h"},
        {"problem": "Describe the monotonicity of f.", "answer": r"\text{The function is increasing}"},
        {"problem": "Solve x^2 + 1 = 0 over the reals.", "answer": "no real solution"},
        {"problem": "How fast does the car go?", "answer": "60 km/h"},
    ]
    summary = ingest(ws, "flags", write_jsonl(tmp_path / "mine" / "flags.jsonl", rows))
    assert summary["admitted"] == 14  # kept in the pool
    assert summary["flags"]["unverifiable_answer"] == 2
    problems = pl.read_parquet(ws.table("flags", "problems"))
    flagged = problems.filter(pl.col(S.META).str.contains("unverifiable_answer"))
    assert sorted(flagged[S.ANSWER].to_list()) == sorted(["12 km/h and 15 km/h", r"\text{The function is increasing}"])

    _, selected = score_and_select(ws, "flags", "flags-sel", plots=False)
    assert selected["dropped"]["unverifiable_answer"] == 2 and selected["selected"] == 12
    chosen = pl.read_parquet(ws.selection_dir("flags-sel") / "selection.parquet")
    assert not set(chosen[S.ANSWER]) & set(flagged[S.ANSWER])
    card = (ws.selection_dir("flags-sel") / "README.md").read_text(encoding="utf-8")
    assert "| unverifiable_answer | 2 |" in card
    _, kept = score_and_select(ws, "flags", "flags-all", plots=False, drop_unverifiable=False)
    assert kept["selected"] == 14


# --------------------------------------------------------------------------------------------------- items 12, 13
def test_exports_concatenate_with_an_ordinary_hf_dataset_and_the_card_has_licences(ws, tmp_path):
    import pyarrow.parquet as pq

    from datasets import Dataset, concatenate_datasets, load_dataset, load_from_disk

    ingest(ws, "mix", write_jsonl(tmp_path / "gsm8k" / "train.jsonl", plain_problems(6)))
    ingest(ws, "mix", write_jsonl(tmp_path / "mine" / "own.jsonl", plain_problems(6, 100)))
    score_and_select(ws, "mix", "mix", plots=False)
    out = ws.selection_dir("mix")

    for name in ("trl.parquet", "verl.parquet"):
        assert "large" not in str(pq.read_schema(out / name))
    trl = load_dataset("parquet", data_files=str(out / "trl.parquet"), split="train")
    mine = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "What is 1+1?"}]],
            "answer": ["2"],
            "problem_id": ["0000000000000000"],
        }
    )
    assert len(concatenate_datasets([trl, mine])) == trl.num_rows + 1
    verl = load_dataset("parquet", data_files=str(out / "verl.parquet"), split="train")
    row = verl[0]
    other = Dataset.from_dict({k: [v] for k, v in row.items()})  # a row built from plain Python values
    assert len(concatenate_datasets([verl, other])) == verl.num_rows + 1
    hf = load_from_disk(str(out / "hf"))
    plain = Dataset.from_dict({S.PROBLEM: ["What is 1+1?"], S.ANSWER: ["2"]})
    assert len(concatenate_datasets([hf.select_columns([S.PROBLEM, S.ANSWER]), plain])) == hf.num_rows + 1

    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| gsm8k/train | 6 | MIT | https://github.com/openai/grade-school-math" in card
    assert "| mine/own | 6 | unknown | unknown |" in card
    assert "METHODS.md" not in card and "https://aclanthology.org/2025.findings-emnlp.412/" in card
