"""The selection's HF, TRL and verl exports use int64 like the rest of the HF ecosystem (issue 23.16).

``rank``, ``cluster``, ``prompt_chars`` and ``level`` are Int32 in the polars tables; exported as int32 they made
``datasets.concatenate_datasets`` with a dataset built the ordinary way (``Dataset.from_list``: Python ints are int64)
fail. Writes one selection folder from literal frames (no network, no plots).
"""

from __future__ import annotations

import polars as pl

from curate import schema as S
from curate.select import export
from tests.curate.select.test_export import manifest, selection


INTS = (S.RANK, S.CLUSTER, S.PROMPT_CHARS, S.LEVEL)


def test_exports_are_int64_and_concatenate_with_a_from_list_dataset(tmp_path):
    from datasets import Dataset, Value, concatenate_datasets, load_dataset, load_from_disk

    table = selection().with_columns(pl.Series(S.LEVEL, [1 + i % 5 for i in range(12)], pl.Int32))
    out = tmp_path / "selections" / "toy-sel"
    drops = pl.DataFrame({S.PROBLEM_ID: ["x"], S.DROP_REASON: ["contaminated"]})
    export.write_selection(out, table, table, drops, manifest(12), instruction=" Think.", plots=False)

    hf = load_from_disk(str(out / "hf"))
    assert {c: hf.features[c] for c in INTS} == {c: Value("int64") for c in INTS}
    mine = Dataset.from_list([{**hf[0], S.PROBLEM_ID: "f" * 16, S.RANK: 99}])  # built the ordinary way
    both = concatenate_datasets([hf, mine])
    assert both.num_rows == 13 and both[-1][S.RANK] == 99

    for name in ("trl.parquet", "verl.parquet"):
        ds = load_dataset("parquet", data_files=str(out / name), split="train")
        assert "int32" not in str(ds.features), (name, ds.features)
        assert concatenate_datasets([ds, Dataset.from_list([ds[0]])]).num_rows == 13

    # the polars-side table keeps the schema's types: the curriculum and other readers validate against them
    assert pl.read_parquet(out / "selection.parquet").schema[S.RANK] == pl.Int32
