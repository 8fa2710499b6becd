"""What a new user hit at ingest (issue 11, item 10): UTF-8 byte-order marks, unclosed ``\\boxed{`` golds,
compressed inputs, ``curate ingest --json``'s wall time."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import time

import polars as pl

from curate import schema as S
from tests.curate.user_pools import ingest, plain_problems, write_jsonl


# --------------------------------------------------------------------------------------------------- item 10
def test_byte_order_marks_are_stripped_in_csv_jsonl_and_json(ws, tmp_path):
    bom = b"\xef\xbb\xbf"
    d = tmp_path / "bom"
    d.mkdir()
    (d / "a.csv").write_bytes(bom + b"problem,answer\nWhat is 1+1?,2\nWhat is 2+2?,4\n")
    (d / "b.jsonl").write_bytes(
        bom + b'{"problem": "What is 3+3?", "answer": "6"}\n{"problem": "What is 4+4?", "answer": "8"}\n'
    )
    (d / "c.json").write_bytes(bom + b'[{"problem": "What is 5+5?", "answer": "10"}]')
    summary = ingest(ws, "bom", d / "a.csv", d / "b.jsonl", d / "c.json")
    assert (summary["read"], summary["admitted"], summary["quarantined"]) == (5, 5, 0)
    problems = pl.read_parquet(ws.table("bom", "problems"))
    assert sorted(problems[S.ANSWER].to_list(), key=int) == ["2", "4", "6", "8", "10"]


def test_unclosed_boxed_gold_answers_are_quarantined_as_unparseable(ws, tmp_path):
    rows = [
        *plain_problems(3),
        {"problem": "Unclosed one.", "answer": r"\boxed{6"},
        {"problem": "Empty box.", "answer": r"\boxed{"},
        {"problem": "A lone brace.", "answer": "}"},
    ]
    summary = ingest(ws, "boxes", write_jsonl(tmp_path / "mine" / "boxes.jsonl", rows))
    assert summary["admitted"] == 3 and summary["drops"] == {"unparseable_answer": 3}
    q = pl.read_parquet(ws.table("boxes", "quarantine"))
    assert set(q[S.ANSWER_RAW]) == {r"\boxed{6", r"\boxed{", "}"}
    assert set(q[S.DETAIL].str.split(":").list.first()) == {"unclosed \\boxed{", "unbalanced braces"}


def test_compressed_inputs_are_read(ws, tmp_path):
    import pyarrow as pa

    d = tmp_path / "packed"
    d.mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in plain_problems(4)).encode()
    (d / "train.jsonl.gz").write_bytes(gzip.compress(lines))
    (d / "more.csv.bz2").write_bytes(bz2.compress(b"problem,answer\nWhat is 9+9?,18\n"))
    (d / "arr.json.xz").write_bytes(lzma.compress(json.dumps(plain_problems(2, 10)).encode()))
    with pa.output_stream(str(d / "z.jsonl.zst"), compression="zstd") as out:
        out.write(b'{"problem": "What is 7+7?", "answer": "14"}\n')
    summary = ingest(ws, "packed", *sorted(d.iterdir()))
    assert summary["admitted"] == 8 and summary["quarantined"] == 0
    names = {s["source"] for s in summary["sources"]}
    assert {"packed/train", "packed/more", "packed/arr", "packed/z"} == names  # no ".jsonl" left in the names


def test_curate_ingest_json_reports_the_real_wall_time(ws, tmp_path, capsys, monkeypatch):
    """The reported time covers the whole ingest, reading the sources included (it was 0.0, then only the
    merge): reading is made to take 0.5 s here, so a wall_s below that leaves the reading out."""
    from curate.cli import main
    from curate.ingest import sources

    read = sources.read_source

    def slow_read(spec):
        time.sleep(0.5)
        return read(spec)

    monkeypatch.setattr(sources, "read_source", slow_read)
    path = write_jsonl(tmp_path / "mine" / "timed.jsonl", plain_problems(200))
    t0 = time.perf_counter()
    assert main(["ingest", str(path), "--pool", "timed", "--json"]) == 0
    elapsed = time.perf_counter() - t0
    payload = json.loads(capsys.readouterr().out)
    assert 0.5 <= payload["wall_s"] <= elapsed + 0.01
