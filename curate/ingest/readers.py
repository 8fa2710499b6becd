r"""Generic readers of source files: decompression, the records of each container, file-level checks.

``records(path)`` yields ``(row, record, error, detail)`` for any supported container: JSONL / JSON (an array, a
``{"data": [...]}`` object or a dict of columns) / Parquet / CSV / TSV files and HF ``save_to_disk`` folders. A record
it cannot read (invalid UTF-8, bad or too deeply nested JSON, a CSV row with more cells than the header) comes back
with an error reason (``undecodable`` or ``malformed``) so ingest can quarantine it; a file that cannot be read at
all (a truncated ``.gz``, a corrupt Parquet, duplicate column names: which ``answer`` is the gold?) is an
``InputError`` naming the file.

Compressed text inputs (``train.jsonl.gz``, ``test.csv.bz2``, ``data.json.zst``) are read as they are: gzip, bz2 and
xz through the standard library, zstd through pyarrow's codec. A UTF-8 byte-order mark (Excel, Windows editors) is
dropped before the first record or the CSV header.
"""

from __future__ import annotations

import contextlib
import csv
import io as _io
import json
import lzma
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from curate.errors import InputError


COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}
BOM = b"\xef\xbb\xbf"


def compression(path: Path) -> str | None:
    """The compression of a file from its last suffix (``gzip``, ``bz2``, ``xz``, ``zstd``), or None."""
    return COMPRESSIONS.get(path.suffix.lower())


def data_suffix(path: Path) -> str:
    """The suffix that names the data format, under any compression suffix: ``a.jsonl.gz`` -> ``.jsonl``."""
    return (path.with_name(path.name[: -len(path.suffix)]) if compression(path) else path).suffix.lower()


def open_binary(path: Path) -> BinaryIO:
    """A binary file object over the (decompressed) bytes of ``path`` (read it inside ``decompressed``)."""
    kind = compression(path)
    if kind == "gzip":
        import gzip

        return gzip.open(path, "rb")
    if kind == "bz2":
        import bz2

        return bz2.open(path, "rb")
    if kind == "xz":
        import lzma

        return lzma.open(path, "rb")
    if kind == "zstd":
        import pyarrow as pa

        try:
            with pa.input_stream(str(path), compression="zstd") as stream:
                return _io.BytesIO(stream.read())
        except (pa.ArrowException, OSError) as exc:
            raise _corrupt(path, exc) from None
    return open(path, "rb")


def _corrupt(path: Path, exc: BaseException) -> InputError:
    kind = compression(path)
    if isinstance(exc, EOFError):
        why = "is truncated: it ends before its compressed stream does (an interrupted download or copy?)"
    else:
        why = f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    return InputError(f"{path}: {'the ' + kind + ' file' if kind else 'the file'} {why}")


@contextlib.contextmanager
def decompressed(path: Path) -> Iterator[BinaryIO]:
    """``open_binary`` whose read errors (a truncated or corrupt ``.gz``/``.bz2``/``.xz``/``.zst``) are one
    ``InputError`` naming the file, not an ``EOFError`` the CLI would turn into a bare "Aborted!"."""
    try:
        with open_binary(path) as fh:
            yield fh
    except (FileNotFoundError, PermissionError):
        raise
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise _corrupt(path, exc) from None


def read_text(path: Path) -> str:
    """The whole (decompressed) file as UTF-8 text without a byte-order mark; a clear error when not UTF-8."""
    with decompressed(path) as fh:
        data = fh.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def read_jsonl_records(path: Path) -> Iterator[tuple[int, dict | None, str | None, str | None]]:
    """Yield ``(row, record, error_reason, detail)`` per non-blank line; bad bytes and bad JSON are reported."""
    with decompressed(path) as fh:
        i = -1
        for n, raw in enumerate(fh):
            if n == 0 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if not raw.strip():
                continue
            i += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield i, None, "undecodable", f"line {i + 1}: invalid UTF-8 ({exc.reason} at byte {exc.start})"
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                yield i, None, "malformed", f"line {i + 1}: invalid JSON ({exc.msg}); starts {line[:80]!r}"
                continue
            except RecursionError:
                yield i, None, "malformed", f"line {i + 1}: JSON nested too deeply to read; starts {line[:80]!r}"
                continue
            if not isinstance(rec, dict):
                yield i, None, "malformed", f"line {i + 1}: expected a JSON object, got {type(rec).__name__}"
                continue
            yield i, rec, None, None


def _read_json_array(path: Path) -> list[Any]:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply to read") from None
    if isinstance(data, dict):
        # {"data": [...]} or a dict of columns
        for key in ("data", "rows", "examples", "train", "test"):
            if isinstance(data.get(key), list):
                return data[key]
        if data and all(isinstance(v, list) for v in data.values()):
            n = len(next(iter(data.values())))
            return [{k: v[i] if i < len(v) else None for k, v in data.items()} for i in range(n)]
        raise InputError(f"{path}: JSON object without a list of records")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    return data


def records(path: Path) -> Iterator[tuple[int, dict | None, str | None, str | None]]:
    """Records of any supported container, as ``(row, record, error, detail)``."""
    suffix = data_suffix(path)
    if path.is_dir():
        for i, rec in enumerate(_read_disk_dataset(path)):
            yield i, rec, None, None
    elif suffix in (".jsonl", ".ndjson"):
        yield from read_jsonl_records(path)
    elif suffix == ".json":
        for i, rec in enumerate(_read_json_array(path)):
            if isinstance(rec, dict):
                yield i, rec, None, None
            else:
                yield i, None, "malformed", f"element {i}: expected an object, got {type(rec).__name__}"
    elif suffix == ".parquet":
        for i, rec in enumerate(read_parquet_file(path).iter_rows(named=True)):
            yield i, rec, None, None
    elif suffix in (".csv", ".tsv"):
        text = read_text(path)
        reader = csv.DictReader(_io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ",")
        _unique_columns(path, reader.fieldnames or [])
        for i, rec in enumerate(reader):
            if None in rec:  # more cells than header fields
                yield i, None, "malformed", f"row {i + 1}: {len(rec[None])} cell(s) beyond the header"
            else:
                yield i, rec, None, None
    else:
        raise InputError(
            f"{path}: unsupported file type {suffix!r}; use JSONL, JSON, Parquet, CSV or a dataset folder "
            f"(JSONL/JSON/CSV may be compressed: {', '.join(sorted(COMPRESSIONS))})"
        )


def _unique_columns(path: Path, names: list[str]) -> None:
    """A file whose header names a column twice is refused: a reader keeps one of them silently (the wrong gold
    answer was admitted from a CSV with two ``answer`` columns)."""
    twice = sorted(name for name, n in Counter(names).items() if n > 1 and name.strip())
    if twice:
        raise InputError(
            f"{path}: duplicate column name(s) {', '.join(repr(n) for n in twice)}; rename them so each column "
            "says what it holds (and map the right one with --field answer=COLUMN)"
        )


def read_parquet_file(path: Path, n_rows: int | None = None) -> pl.DataFrame:
    """A Parquet source as a frame; a corrupt file or duplicate column names are one ``InputError``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        _unique_columns(path, pq.read_schema(path).names)
        return pl.read_parquet(path, n_rows=n_rows)
    except (pa.ArrowException, pl.exceptions.PolarsError, OSError) as exc:
        if isinstance(exc, FileNotFoundError | PermissionError):
            raise
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a readable Parquet file ({first})") from None


def _read_disk_dataset(path: Path) -> list[dict]:
    """An HF ``save_to_disk`` folder (a Dataset, or a DatasetDict whose splits are read in order)."""
    from datasets import load_from_disk

    ds = load_from_disk(str(path))
    if hasattr(ds, "keys"):  # DatasetDict
        rows = []
        for split in ds:
            rows.extend({**r, "split": r.get("split", split)} for r in ds[split])
        return rows
    return list(ds)


def peek(path: Path) -> dict | None:
    """The first readable record; Parquet files and dataset folders read one row, not the whole file."""
    if path.is_dir():
        from datasets import load_from_disk

        ds = load_from_disk(str(path))
        first = ds[next(iter(ds))] if hasattr(ds, "keys") else ds
        return first[0] if len(first) else None
    if data_suffix(path) == ".parquet":
        rows = read_parquet_file(path, n_rows=1).to_dicts()
        return rows[0] if rows else None
    for _, rec, err, _ in records(path):
        if err is None:
            return rec
    return None
