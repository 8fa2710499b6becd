r"""Source adapters: read one input (file, folder, hub name or generator URI) into raw rows.

An adapter never drops a row: a row it cannot use comes back with an ``error`` reason (``undecodable``,
``malformed``) so ingest can put it in quarantine and the counts reconcile. Every raw row has::

    source_row, problem, answer_raw, answers (list of raw alternatives), solution, level, difficulty, subject,
    split, meta (dict), error, error_detail

Known formats (``FORMATS``) are detected from the file's shape where that is unambiguous; ``--format`` overrides.
The generic adapter reads any JSONL / JSON / Parquet / CSV / HF ``save_to_disk`` folder with a field mapping
(``{"problem": "question", "answer": "gt"}``); hub names ``hf://org/name`` load through ``datasets`` and fail with a
clear message where there is no internet.
"""

from __future__ import annotations

import csv
import io as _io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from curate import schema as S
from curate.config import SourceSpec
from curate.errors import InputError, MissingInput


FORMATS: dict[str, str] = {
    "gsm8k": "GSM8K JSONL: question, answer (worked solution ending in '#### n')",
    "gsm8k-solutions": "GSM8K example_model_solutions.jsonl: question, ground_truth ('A: n'); problems only",
    "math500": "MATH-500 JSONL: problem, solution, answer, subject, level, unique_id",
    "deepscaler": "DeepScaleR JSON arrays: problem, answer (str, float or list of alternatives), difficulty, ...",
    "fastcurl": "FastCuRL / verl Parquet: prompt (chat list, instruction suffix), reward_model.ground_truth",
    "limr": "LIMR math.8k.json: id, prompt, answer, source",
    "limr-disk": "LIMR save_to_disk folder: context, context_messages, id, answer",
    "simplerl": "simpleRL math_cot_100.jsonl: question, gt, level, solution; problems only",
    "openr1": "OpenR1-Math layout: problem, answer, solution, generations, correctness_math_verify; problems only",
    "generic": "any JSONL/JSON/Parquet/CSV/save_to_disk folder with --field problem=COL --field answer=COL",
    "hf": "hf://org/name[:config][@split] through datasets.load_dataset (needs internet), generic mapping",
    "generator": "gen://FAMILY?n=N&seed=S&min_level=A&max_level=B: the built-in procedural generator",
}
_PROBLEM_KEYS = ("problem", "question", "prompt", "context", "query", "input")
_ANSWER_KEYS = ("answer", "gt", "ground_truth", "final_answer", "target", "solution_answer")
_OPTIONAL = ("solution", "level", "difficulty", "subject", "split")
_GENERIC_DIRS = {"train", "test", "data", "eval", "validation", "valid", "dev", "splits", "raw"}


@dataclass
class RawSource:
    """What an adapter produced: the rows plus where they came from."""

    name: str
    format: str
    path: str
    rows: list[dict[str, Any]] = field(default_factory=list)


def source_name(path: str) -> str:
    """A readable default name: ``.../fastcurl/train_L1.parquet`` -> ``fastcurl/train_L1``,
    ``.../deepscaler/test/aime.json`` -> ``deepscaler/test/aime``, ``hf://org/x`` -> ``org/x``."""
    if path.startswith("hf://"):
        return path[len("hf://") :]
    if path.startswith("gen://"):
        return "gen/" + re.sub(r"[^A-Za-z0-9=_.-]+", "_", path[len("gen://") :])
    p = Path(path)
    if compression(p):  # train.jsonl.gz -> train
        p = p.with_name(p.name[: -len(p.suffix)])
    parts = [p.stem if p.is_file() or p.suffix else p.name]
    parent = p.parent
    while parent.name in _GENERIC_DIRS:
        parts.insert(0, parent.name)
        parent = parent.parent
    if parent.name:
        parts.insert(0, parent.name)
    return "/".join(parts)


def _row(i: int, **kw: Any) -> dict[str, Any]:
    row = {
        "source_row": i,
        "problem": None,
        "answer_raw": None,
        "answers": None,
        "solution": None,
        "level": None,
        "difficulty": None,
        "subject": None,
        "split": None,
        "meta": {},
        "error": None,
        "error_detail": None,
    }
    row.update(kw)
    return row


def _bad(i: int, reason: str, detail: str, raw: Any = None) -> dict[str, Any]:
    text = raw if isinstance(raw, str) else None
    return _row(i, error=reason, error_detail=detail[:500], problem=text[:2000] if text else None)


# --------------------------------------------------------------------------------------------------- readers
# Compressed text inputs (``train.jsonl.gz``, ``test.csv.bz2``, ``data.json.zst``) are read as they are: gzip, bz2
# and xz through the standard library, zstd through pyarrow's codec. A UTF-8 byte-order mark (Excel, Windows
# editors) is dropped before the first record or the CSV header.
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}
BOM = b"\xef\xbb\xbf"


def compression(path: Path) -> str | None:
    """The compression of a file from its last suffix (``gzip``, ``bz2``, ``xz``, ``zstd``), or None."""
    return COMPRESSIONS.get(path.suffix.lower())


def data_suffix(path: Path) -> str:
    """The suffix that names the data format, under any compression suffix: ``a.jsonl.gz`` -> ``.jsonl``."""
    return (path.with_name(path.name[: -len(path.suffix)]) if compression(path) else path).suffix.lower()


def open_binary(path: Path) -> BinaryIO:
    """A binary file object over the (decompressed) bytes of ``path``."""
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

        with pa.input_stream(str(path), compression="zstd") as stream:
            return _io.BytesIO(stream.read())
    return open(path, "rb")


def read_text(path: Path) -> str:
    """The whole (decompressed) file as UTF-8 text without a byte-order mark; a clear error when not UTF-8."""
    with open_binary(path) as fh:
        data = fh.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


def read_jsonl_records(path: Path) -> Iterator[tuple[int, dict | None, str | None, str | None]]:
    """Yield ``(row, record, error_reason, detail)`` per non-blank line; bad bytes and bad JSON are reported."""
    with open_binary(path) as fh:
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


def _records(path: Path) -> Iterator[tuple[int, dict | None, str | None, str | None]]:
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
        for i, rec in enumerate(pl.read_parquet(path).iter_rows(named=True)):
            yield i, rec, None, None
    elif suffix in (".csv", ".tsv"):
        text = read_text(path)
        reader = csv.DictReader(_io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ",")
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


# --------------------------------------------------------------------------------------------------- detection
def _peek(path: Path) -> dict | None:
    """The first readable record; Parquet files and dataset folders read one row, not the whole file."""
    if path.is_dir():
        from datasets import load_from_disk

        ds = load_from_disk(str(path))
        first = ds[next(iter(ds))] if hasattr(ds, "keys") else ds
        return first[0] if len(first) else None
    if data_suffix(path) == ".parquet":
        rows = pl.read_parquet(path, n_rows=1).to_dicts()
        return rows[0] if rows else None
    for _, rec, err, _ in _records(path):
        if err is None:
            return rec
    return None


def detect_format(path: Path) -> str:
    """The adapter for a file or folder, from its shape; raises when the shape does not say."""
    if path.is_dir():
        if not (path / "dataset_info.json").exists() and not (path / "dataset_dict.json").exists():
            raise InputError(f"{path}: a folder must be a datasets save_to_disk folder (dataset_info.json missing)")
        rec = _peek(path) or {}
        return "limr-disk" if {"context", "context_messages", "answer"} <= set(rec) else "generic"
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes)")
    rec = _peek(path)
    if rec is None:
        raise InputError(f"{path}: no readable record; pass --format to choose an adapter")
    keys = set(rec)
    if {"prompt", "reward_model"} <= keys:
        return "fastcurl"
    if {"question", "ground_truth"} <= keys and any(isinstance(v, dict) and "is_correct" in v for v in rec.values()):
        return "gsm8k-solutions"
    if {"question", "gt", "code", "score"} <= keys:
        return "simplerl"
    if {"problem", "generations", "correctness_math_verify"} <= keys:
        return "openr1"
    if {"problem", "solution", "answer", "subject", "level", "unique_id"} <= keys:
        return "math500"
    if keys == {"question", "answer"}:
        return "gsm8k"
    if {"id", "prompt", "answer"} <= keys and data_suffix(path) == ".json":
        return "limr"
    if "problem" in keys and "answer" in keys and data_suffix(path) == ".json":
        return "deepscaler"
    return "generic"


# --------------------------------------------------------------------------------------------------- adapters
def _level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value) if 1 <= value <= 10 and float(value).is_integer() else None
    m = re.search(r"(\d+)", str(value))
    return int(m.group(1)) if m else None


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _map_record(i: int, rec: dict, fmt: str, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    """One record of a known format (or the generic mapping) into a raw row."""
    meta: dict[str, Any] = {}
    if fmt == "gsm8k":
        ans = rec.get("answer")
        return _row(i, problem=rec.get("question"), answer_raw=ans, answers=[ans], solution=ans)
    if fmt == "gsm8k-solutions":
        gt = rec.get("ground_truth")
        return _row(i, problem=rec.get("question"), answer_raw=gt, answers=[gt], solution=gt, split="test")
    if fmt == "math500":
        meta = {"unique_id": rec.get("unique_id")}
        return _row(
            i,
            problem=rec.get("problem"),
            answer_raw=rec.get("answer"),
            answers=[rec.get("answer")],
            solution=rec.get("solution"),
            level=_level(rec.get("level")),
            difficulty=_num(rec.get("level")),
            subject=rec.get("subject"),
            split="test",
            meta=meta,
        )
    if fmt == "deepscaler":
        ans = rec.get("answer")
        answers = list(ans) if isinstance(ans, list) else [ans]
        solution = rec.get("solution")
        if isinstance(solution, list):
            solution = "\n\n".join(str(s) for s in solution)
        meta = {
            k: rec[k]
            for k in (
                "year",
                "aime_number",
                "problem_number",
                "url",
                "unique_id",
                "idx",
                "id",
                "type",
                "subfield",
                "answer_type",
                "unit",
                "is_multiple_answer",
            )
            if rec.get(k) is not None
        }
        split = "test" if "test" in path.parts else "train"
        subject = rec.get("type") or rec.get("subfield")
        diff = _num(rec.get("difficulty"))
        level = _level(rec.get("difficulty")) if (rec.get("type") and diff is not None) else None
        return _row(
            i,
            problem=rec.get("problem"),
            answer_raw=ans,
            answers=answers,
            solution=solution,
            difficulty=diff,
            level=level,
            subject=subject,
            split=split,
            meta=meta,
        )
    if fmt == "fastcurl":
        prompt = rec.get("prompt")
        text = None
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            text = next((m.get("content") for m in prompt if m.get("role") == "user"), prompt[0].get("content"))
        elif isinstance(prompt, str):
            text = prompt
        if isinstance(text, str):
            text = S.strip_instruction(text)
        rm = rec.get("reward_model") or {}
        gt = rm.get("ground_truth") if isinstance(rm, dict) else None
        extra = rec.get("extra_info") or {}
        meta = {"index": extra.get("index")} if isinstance(extra, dict) else {}
        split = extra.get("split") if isinstance(extra, dict) else None
        return _row(
            i, problem=text, answer_raw=gt, answers=[gt], split=split if split in S.SPLITS else None, meta=meta
        )
    if fmt == "limr":
        return _row(
            i,
            problem=rec.get("prompt"),
            answer_raw=rec.get("answer"),
            answers=[rec.get("answer")],
            split="train",
            meta={"id": rec.get("id"), "origin": rec.get("source")},
        )
    if fmt == "limr-disk":
        return _row(
            i,
            problem=rec.get("context"),
            answer_raw=rec.get("answer"),
            answers=[rec.get("answer")],
            split="train",
            meta={"id": rec.get("id")},
        )
    if fmt == "simplerl":
        return _row(
            i,
            problem=rec.get("question"),
            answer_raw=rec.get("gt"),
            answers=[rec.get("gt")],
            solution=rec.get("solution"),
            level=_level(rec.get("level")),
            difficulty=_num(_level(rec.get("level"))),
            split="test",
            meta={"idx": rec.get("idx")},
        )
    if fmt == "openr1":
        meta = {k: rec[k] for k in ("uuid", "problem_type", "question_type", "source") if rec.get(k) is not None}
        return _row(
            i,
            problem=rec.get("problem"),
            answer_raw=rec.get("answer"),
            answers=[rec.get("answer")],
            solution=rec.get("solution"),
            meta=meta,
        )
    # generic
    pk = fields.get("problem") or next((k for k in _PROBLEM_KEYS if k in rec), None)
    ak = fields.get("answer") or next((k for k in _ANSWER_KEYS if k in rec), None)
    if pk is None:
        return _bad(i, "malformed", f"no problem field; have {sorted(rec)[:12]}; map it with --field problem=COL")
    problem = rec.get(pk)
    if isinstance(problem, list) and problem and isinstance(problem[0], dict):  # chat format
        problem = next((m.get("content") for m in problem if m.get("role") == "user"), None)
        problem = S.strip_instruction(problem) if isinstance(problem, str) else problem
    ans = rec.get(ak) if ak else None  # no answer field at all: ingest quarantines it as missing_answer
    if isinstance(ans, dict):
        ans = ans.get("ground_truth", ans)
    answers = list(ans) if isinstance(ans, list) else [ans]
    row = _row(i, problem=problem, answer_raw=ans, answers=answers)
    for key in _OPTIONAL:
        col = fields.get(key) or (key if key in rec else None)
        if col and col in rec:
            row[key] = rec[col]
    row["level"] = _level(row["level"])
    row["difficulty"] = _num(row["difficulty"])
    row["split"] = row["split"] if row["split"] in S.SPLITS else None
    used = {pk, ak or pk, *(fields.values())}
    row["meta"] = {k: v for k, v in rec.items() if k not in used and isinstance(v, str | int | float | bool)}
    return row


def _check_types(row: dict[str, Any]) -> dict[str, Any]:
    """Wrong types become ``malformed`` rows with a detail naming the field (never a crash)."""
    if row["error"]:
        return row
    if row["problem"] is not None and not isinstance(row["problem"], str):
        kind = type(row["problem"]).__name__
        return {
            **row,
            "problem": str(row["problem"])[:2000],
            "error": "malformed",
            "error_detail": f"problem is {kind}, not text",
        }
    for a in row["answers"] or []:
        if a is not None and not isinstance(a, str | int | float):
            return {**row, "error": "malformed", "error_detail": f"answer is {type(a).__name__}, not text or number"}
    if row["solution"] is not None and not isinstance(row["solution"], str):
        row = {**row, "solution": None}
    if row["subject"] is not None and not isinstance(row["subject"], str):
        row = {**row, "subject": str(row["subject"])}
    return row


def read_source(spec: SourceSpec) -> RawSource:
    """Read one source into raw rows (see module docstring); the one entry point ingest calls."""
    path_str = spec.path
    name = spec.name or source_name(path_str)
    if path_str.startswith("gen://"):
        return _read_generator(spec, name)
    if path_str.startswith("hf://"):
        return _read_hub(spec, name)
    path = Path(path_str).expanduser()
    if not path.exists():
        raise MissingInput(f"source {path_str} not found")
    fmt = spec.format or ("generic" if spec.fields else detect_format(path))
    if fmt not in FORMATS or fmt in ("hf", "generator"):
        raise InputError(f"unknown format {fmt!r} for a file; formats: {sorted(set(FORMATS) - {'hf', 'generator'})}")
    if not path.is_dir() and path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes)")
    rows = []
    for i, rec, err, detail in _records(path):
        if err is not None:
            rows.append(_bad(i, err, detail))
            continue
        try:
            row = _check_types(_map_record(i, rec, fmt, path, spec.fields))
        except (AttributeError, TypeError, KeyError) as exc:
            row = _bad(i, "malformed", f"{type(exc).__name__}: {exc}")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no records")
    split = default_split(name)
    for row in rows:
        row["split"] = row["split"] or split
    return RawSource(name=name, format=fmt, path=str(path), rows=rows)


def default_split(name: str) -> str:
    """``test`` for sources named like evaluation sets (``gsm8k/test``, ``limr/eval_amc23``), else ``train``.

    >>> default_split("gsm8k/test"), default_split("limr/eval_amc23"), default_split("fastcurl/train_L1")
    ('test', 'test', 'train')
    """
    return "test" if re.search(r"(^|[/_.-])(test|eval|evaluation)([/_.-]|\d|$)", name.lower()) else "train"


def _read_generator(spec: SourceSpec, name: str) -> RawSource:
    from curate.ingest import generate

    opts = generate.parse_uri(spec.path)
    rows = [
        _row(
            i,
            problem=p["problem"],
            answer_raw=p["answer"],
            answers=[p["answer"]],
            solution=p["solution"],
            level=p["level"],
            difficulty=float(p["level"]),
            subject=p["family"],
            meta={"family": p["family"], "solutions": p["solutions"]},  # every reference solution (issue 13)
        )
        for i, p in enumerate(generate.generate(**opts))
    ]
    return RawSource(name=name, format="generator", path=spec.path, rows=rows)


def _read_hub(spec: SourceSpec, name: str) -> RawSource:
    """``hf://org/name[:config][@split]`` through ``datasets.load_dataset``; a clear error offline."""
    ref = spec.path[len("hf://") :]
    split = "train"
    if "@" in ref:
        ref, split = ref.rsplit("@", 1)
    config = None
    if ":" in ref:
        ref, config = ref.split(":", 1)
    try:
        from datasets import load_dataset

        ds = load_dataset(ref, config, split=split)
    except Exception as exc:  # datasets raises many types for "no network"; give one clear message
        raise InputError(
            f"could not load {spec.path} from the Hugging Face hub ({type(exc).__name__}: {str(exc)[:200]}). "
            "Without internet, download it elsewhere and pass the local file or save_to_disk folder instead."
        ) from None
    rows = []
    for i, rec in enumerate(ds):
        try:
            row = _check_types(_map_record(i, rec, spec.format or "generic", Path(ref), spec.fields))
        except (AttributeError, TypeError, KeyError) as exc:
            row = _bad(i, "malformed", f"{type(exc).__name__}: {exc}")
        if row["split"] is None:
            row["split"] = "test" if split.startswith("test") else "train"
        rows.append(row)
    return RawSource(name=name, format="hf", path=spec.path, rows=rows)


def content_hash(spec: SourceSpec) -> str:
    """What identifies a source's content: file bytes, folder files, or the generator/hub URI itself."""
    from curate.io import file_hash

    if spec.path.startswith(("gen://", "hf://")):
        return "uri:" + spec.path
    return file_hash(Path(spec.path).expanduser())
