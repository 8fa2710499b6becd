"""Bad curation input through the real CLI (issue 24.7): a bad row is quarantined with a reason and the counts
reconcile; a file that cannot be read at all is one line naming the file and the problem, exit 2, nothing written.

Each input is written here in a few bytes (``curate.cli.main`` in-process, local files, no network).
"""

from __future__ import annotations

import gzip
import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate import schema as S
from curate.cli import main
from curate.io import read_parquet


GOOD = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(1, 4)]


def _jsonl(path, rows, raw_lines=()):
    lines = [json.dumps(r) for r in rows] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _ingest(path, capsys) -> tuple[int, dict | None, str]:
    rc = main(["ingest", str(path), "--pool", "p", "--json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out)["summary"] if rc == 0 else None), out.err


def _quarantine(ws) -> pl.DataFrame:
    return read_parquet(ws.table("p", "quarantine"), S.QUARANTINE)


def _problems(ws) -> pl.DataFrame:
    return read_parquet(ws.table("p", "problems"), S.PROBLEMS)


def _reconciles(summary, admitted, quarantined, merged=0):
    assert (summary["read"], summary["admitted"], summary["quarantined"], summary["merged"]) == (
        admitted + quarantined + merged,
        admitted,
        quarantined,
        merged,
    )


def _unreadable(ws, path, err, *words):
    """One ``error:`` line that names the file and says why; nothing written to the workspace."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0] and "Traceback" not in err and "Aborted" not in err, err
    for word in words:
        assert word in lines[0], err
    assert not list(ws.root.rglob("*.parquet")) if ws.root.exists() else True


# --------------------------------------------------------------------------------------------------- bad rows
def test_a_lone_surrogate_quarantines_its_row(ws, tmp_path, capsys):
    bad = [
        r'{"problem": "What is \ud800 + 1?", "answer": "2"}',
        r'{"problem": 5, "answer": "\udfff"}',  # already malformed: its answer must still fit in the quarantine
    ]
    src = _jsonl(tmp_path / "s.jsonl", GOOD, bad)
    rc, summary, err = _ingest(src, capsys)
    assert rc == 0, err
    _reconciles(summary, admitted=3, quarantined=2)
    first, second = _quarantine(ws).sort(S.SOURCE_ROW).to_dicts()
    assert (first[S.SOURCE_ROW], first[S.DROP_REASON]) == (3, "undecodable")
    assert "surrogate" in first[S.DETAIL] and first[S.PROBLEM] == "What is \ufffd + 1?"
    assert (second[S.SOURCE_ROW], second[S.DROP_REASON]) == (4, "malformed")


def test_deeply_nested_json_row_is_quarantined(ws, tmp_path, capsys):
    deep = '{"problem": "x", "answer": ' + "[" * 100_000 + "]" * 100_000 + "}"
    src = _jsonl(tmp_path / "deep.jsonl", GOOD, [deep])
    rc, summary, err = _ingest(src, capsys)
    assert rc == 0, err
    _reconciles(summary, admitted=3, quarantined=1)
    [row] = _quarantine(ws).to_dicts()
    assert row[S.DROP_REASON] == "malformed" and "nested" in row[S.DETAIL]


def test_nul_bytes_in_a_problem_quarantine_the_row(ws, tmp_path, capsys):
    src = _jsonl(tmp_path / "nul.jsonl", [*GOOD, {"problem": "What is 7\x00 + 1?", "answer": "8"}])
    rc, summary, err = _ingest(src, capsys)
    assert rc == 0, err
    _reconciles(summary, admitted=3, quarantined=1)
    [row] = _quarantine(ws).to_dicts()
    assert row[S.DROP_REASON] == "malformed" and "NUL" in row[S.DETAIL]
    assert not _problems(ws)[S.PROBLEM].str.contains("\x00", literal=True).any()


def test_json_true_is_not_a_gold_answer(ws, tmp_path, capsys):
    src = _jsonl(tmp_path / "bool.jsonl", [*GOOD, {"problem": "Is 7 prime?", "answer": True}])
    rc, summary, err = _ingest(src, capsys)
    assert rc == 0, err
    _reconciles(summary, admitted=3, quarantined=1)
    [row] = _quarantine(ws).to_dicts()
    assert row[S.DROP_REASON] == "malformed" and "bool" in row[S.DETAIL]


def test_zero_width_variants_are_one_problem_and_their_conflict_is_quarantined(ws, tmp_path, capsys):
    rows = [
        *GOOD,
        {"problem": "What is 2 + 5?", "answer": "7"},
        {"problem": "What is 2\u200b + 5?", "answer": "8"},
        {"problem": "What\ufeff is 2 + 5?\u2060", "answer": "9"},
    ]
    rc, summary, err = _ingest(_jsonl(tmp_path / "zw.jsonl", rows), capsys)
    assert rc == 0, err
    _reconciles(summary, admitted=3, quarantined=3)
    q = _quarantine(ws)
    assert q[S.DROP_REASON].to_list() == ["duplicate_conflict"] * 3
    assert q[S.PROBLEM_ID].n_unique() == 1
    assert S.problem_id("What is 2\u200b + 5?") == S.problem_id("What is 2 + 5?")


def test_zero_width_variants_with_the_same_answer_merge(ws, tmp_path, capsys):
    rows = [{"problem": "What is 2 + 5?", "answer": "7"}, {"problem": "What is\u200c 2 + 5?", "answer": "7"}]
    rc, summary, err = _ingest(_jsonl(tmp_path / "zw.jsonl", rows), capsys)
    assert rc == 0, err
    _reconciles(summary, admitted=1, quarantined=0, merged=1)


# --------------------------------------------------------------------------------------------------- bad files
def test_a_csv_with_two_answer_columns_is_refused(ws, tmp_path, capsys):
    src = tmp_path / "two.csv"
    src.write_text("problem,answer,answer\nWhat is 1 + 1?,2,3\n", encoding="utf-8")
    rc, _, err = _ingest(src, capsys)
    assert rc == 2
    _unreadable(ws, src, err, "answer", "duplicate")


def test_a_parquet_with_duplicate_column_names_is_refused(ws, tmp_path, capsys):
    src = tmp_path / "dup.parquet"
    table = pa.Table.from_arrays(
        [pa.array(["What is 1 + 1?"]), pa.array(["2"]), pa.array(["3"])], names=["problem", "answer", "answer"]
    )
    pq.write_table(table, src)
    rc, _, err = _ingest(src, capsys)
    assert rc == 2
    _unreadable(ws, src, err, "answer", "duplicate")


def test_a_corrupt_parquet_is_one_line(ws, tmp_path, capsys):
    good = tmp_path / "good.parquet"
    pl.DataFrame(GOOD * 50).write_parquet(good)
    src = tmp_path / "corrupt.parquet"
    data = bytearray(good.read_bytes())
    data[8:200] = b"\xff" * 192  # the column data, between the magic bytes and the footer
    src.write_bytes(bytes(data))
    rc, _, err = _ingest(src, capsys)
    assert rc == 2
    _unreadable(ws, src, err, "Parquet")


def test_a_parquet_that_is_not_one_is_one_line(ws, tmp_path, capsys):
    src = tmp_path / "text.parquet"
    src.write_text("problem,answer\n", encoding="utf-8")
    rc, _, err = _ingest(src, capsys)
    assert rc == 2
    _unreadable(ws, src, err, "Parquet")


@pytest.mark.parametrize("name", ["cut.jsonl.gz", "cut.csv.gz", "cut.json.gz"])
def test_a_truncated_gz_is_one_line_not_aborted(ws, tmp_path, capsys, name):
    rows = GOOD * 200
    if name.endswith(".jsonl.gz"):
        text = "\n".join(json.dumps(r) for r in rows) + "\n"
    elif name.endswith(".csv.gz"):
        text = "problem,answer\n" + "".join(f'"{r["problem"]}",{r["answer"]}\n' for r in rows)
    else:
        text = json.dumps(rows)
    whole = gzip.compress(text.encode())
    src = tmp_path / name
    src.write_bytes(whole[: len(whole) // 2])
    rc, _, err = _ingest(src, capsys)
    assert rc == 2, err
    _unreadable(ws, src, err, "truncated")


def test_a_deeply_nested_json_file_is_one_line(ws, tmp_path, capsys):
    src = tmp_path / "deep.json"
    src.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    rc, _, err = _ingest(src, capsys)
    assert rc == 2, err
    _unreadable(ws, src, err, "nested")
