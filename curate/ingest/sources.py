r"""Source adapters: read one input (file, folder, hub name or generator URI) into raw rows.

``read_source`` is the one entry point ingest calls. Files and folders go through ``curate.ingest.readers`` (the
generic readers: JSONL / JSON / Parquet / CSV / HF ``save_to_disk`` folders, compressed or not, and the checks of a
file as a whole) and ``curate.ingest.formats`` (the named datasets' formats, detected from the file's shape where that
is unambiguous, ``--format`` overrides; the generic field mapping ``{"problem": "question", "answer": "gt"}``; the
checks of each row); hub names ``hf://org/name`` load through ``datasets`` and fail with a clear message where there
is no internet; ``gen://`` URIs run the built-in generator (``curate.ingest.generate``).

An adapter never drops a row: a row it cannot use comes back with an ``error`` reason (``undecodable``: invalid
UTF-8 or a lone surrogate such as ``"\ud800"``; ``malformed``: bad or too deeply nested JSON, a field of the wrong
type, a JSON ``true`` as the answer, NUL bytes in the text) so ingest can put it in quarantine and the counts
reconcile. A file that cannot be read at all (a truncated ``.gz``, a corrupt Parquet, duplicate column names: which
``answer`` is the gold?) is an ``InputError`` naming the file, before anything is written. Every raw row has::

    source_row, problem, answer_raw, answers (list of raw alternatives), solution, level, difficulty, subject,
    split, meta (dict), error, error_detail
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curate.config import SourceSpec
from curate.errors import InputError, MissingInput
from curate.ingest.formats import FORMATS, adapt, bad_row, detect_format, raw_row
from curate.ingest.readers import compression, records


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


def read_source(spec: SourceSpec) -> RawSource:
    """Read one source into raw rows (see module docstring); the one entry point ingest calls."""
    path_str = spec.location
    name = spec.name or source_name(spec.path)
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
    for i, rec, err, detail in records(path):
        rows.append(bad_row(i, err, detail) if err is not None else adapt(i, rec, fmt, path, spec.fields))
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

    opts = generate.parse_uri(spec.location)
    rows = [
        raw_row(
            i,
            problem=p["problem"],
            answer_raw=p["answer"],
            answers=[p["answer"]],
            solution=p["solution"],
            level=p["level"],
            difficulty=float(p["level"]),
            subject=p["family"],
            # every reference solution, and an arithmetic chain's length (``ops``: evaluation by level)
            # ``waste``: what a row of a realistic pool is (curate.ingest.waste), ground truth no stage reads
            meta={"family": p["family"], "solutions": p["solutions"], **{k: p[k] for k in ("ops", "waste") if k in p}},
        )
        for i, p in enumerate(generate.generate(**opts))
    ]
    return RawSource(name=name, format="generator", path=spec.location, rows=rows)


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
        row = adapt(i, rec, spec.format or "generic", Path(ref), spec.fields)
        if row["split"] is None:
            row["split"] = "test" if split.startswith("test") else "train"
        rows.append(row)
    return RawSource(name=name, format="hf", path=spec.path, rows=rows)


def content_hash(spec: SourceSpec) -> str:
    """What identifies a source's content: file bytes, folder files, or the generator/hub URI itself."""
    from curate.manifest import file_hash

    if spec.path.startswith(("gen://", "hf://")):
        return "uri:" + spec.location
    return file_hash(Path(spec.path).expanduser())
