"""`curate verify` on a file with nothing to verify (issue 23.7): one line in the project's words, exit 2, nothing
written (in-process CLI, local files, no network)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("name", "content"),
    [("pairs.jsonl", b""), ("pairs.jsonl", b"\n \n"), ("pairs.json", b""), ("pairs.parquet", b"")],
)
def test_an_empty_file_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, name, content):
    from curate import cli

    monkeypatch.chdir(tmp_path)
    src = tmp_path / name
    src.write_bytes(content)
    assert cli.main(["verify", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {src}: the file is empty; no pairs to verify (expected {_kind(name)} rows)", err
    assert list(tmp_path.iterdir()) == [src]


def test_an_unreadable_file_names_itself(tmp_path, monkeypatch, capsys):
    from curate import cli

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "pairs.parquet"
    src.write_text("answer,completion\n1,2\n", encoding="utf-8")
    assert cli.main(["verify", str(src)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {src}: not a readable Parquet file ("), line
    assert list(tmp_path.iterdir()) == [src]


def _kind(name: str) -> str:
    return {"jsonl": "JSONL", "json": "JSON", "parquet": "Parquet"}[name.rsplit(".", 1)[1]]
