r"""The named datasets' formats: detection from a file's shape, and one record into a checked raw row.

``FORMATS`` lists them (``curate formats`` prints it). ``detect_format`` picks one from the first readable record where
the shape is unambiguous (``--format`` overrides); ``adapt`` maps one record of a format, or of the generic field
mapping (``{"problem": "question", "answer": "gt"}``), into a raw row (``raw_row``)::

    source_row, problem, answer_raw, answers (list of raw alternatives), solution, level, difficulty, subject,
    split, meta (dict), error, error_detail

An adapter never drops a record: one it cannot use comes back with an ``error`` reason (``undecodable``: a lone
surrogate such as ``"\ud800"``; ``malformed``: a field of the wrong type, a JSON ``true`` as the answer, NUL bytes in
the text) so ingest can put it in quarantine and the counts reconcile.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from curate import schema as S
from curate.errors import InputError
from curate.ingest.readers import data_suffix, peek


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


def raw_row(i: int, **kw: Any) -> dict[str, Any]:
    """Raw row ``i`` of a source: every field of the module docstring, None (``meta`` empty) unless in ``kw``."""
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


def bad_row(i: int, reason: str, detail: str, raw: Any = None) -> dict[str, Any]:
    """Raw row ``i`` in error (``reason``, ``detail``), for quarantine; ``raw``: its text, kept as the problem."""
    text = _SURROGATE.sub("\ufffd", raw) if isinstance(raw, str) else None
    return raw_row(i, error=reason, error_detail=detail[:500], problem=text[:2000] if text else None)


# --------------------------------------------------------------------------------------------------- detection
def detect_format(path: Path) -> str:
    """The adapter for a file or folder, from its shape; raises when the shape does not say."""
    if path.is_dir():
        if not (path / "dataset_info.json").exists() and not (path / "dataset_dict.json").exists():
            raise InputError(f"{path}: a folder must be a datasets save_to_disk folder (dataset_info.json missing)")
        rec = peek(path) or {}
        return "limr-disk" if {"context", "context_messages", "answer"} <= set(rec) else "generic"
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes)")
    rec = peek(path)
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


# One mapper per format: ``(i, record, path, fields) -> raw row``; ``_map_record`` picks it (generic otherwise).
def _gsm8k(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    ans = rec.get("answer")
    return raw_row(i, problem=rec.get("question"), answer_raw=ans, answers=[ans], solution=ans)


def _gsm8k_solutions(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    gt = rec.get("ground_truth")
    return raw_row(i, problem=rec.get("question"), answer_raw=gt, answers=[gt], solution=gt, split="test")


def _math500(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    return raw_row(
        i,
        problem=rec.get("problem"),
        answer_raw=rec.get("answer"),
        answers=[rec.get("answer")],
        solution=rec.get("solution"),
        level=_level(rec.get("level")),
        difficulty=_num(rec.get("level")),
        subject=rec.get("subject"),
        split="test",
        meta={"unique_id": rec.get("unique_id")},
    )


_DEEPSCALER_META = ("year", "aime_number", "problem_number", "url", "unique_id", "idx", "id", "type", "subfield",
                    "answer_type", "unit", "is_multiple_answer")  # fmt: skip


def _deepscaler(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    ans = rec.get("answer")
    solution = rec.get("solution")
    if isinstance(solution, list):
        solution = "\n\n".join(str(s) for s in solution)
    diff = _num(rec.get("difficulty"))
    return raw_row(
        i,
        problem=rec.get("problem"),
        answer_raw=ans,
        answers=list(ans) if isinstance(ans, list) else [ans],
        solution=solution,
        difficulty=diff,
        level=_level(rec.get("difficulty")) if (rec.get("type") and diff is not None) else None,
        subject=rec.get("type") or rec.get("subfield"),
        split="test" if "test" in path.parts else "train",
        meta={k: rec[k] for k in _DEEPSCALER_META if rec.get(k) is not None},
    )


def _fastcurl(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
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
    return raw_row(i, problem=text, answer_raw=gt, answers=[gt], split=split if split in S.SPLITS else None, meta=meta)


def _limr(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    return raw_row(
        i,
        problem=rec.get("prompt"),
        answer_raw=rec.get("answer"),
        answers=[rec.get("answer")],
        split="train",
        meta={"id": rec.get("id"), "origin": rec.get("source")},
    )


def _limr_disk(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    return raw_row(
        i,
        problem=rec.get("context"),
        answer_raw=rec.get("answer"),
        answers=[rec.get("answer")],
        split="train",
        meta={"id": rec.get("id")},
    )


def _simplerl(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    return raw_row(
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


def _openr1(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    return raw_row(
        i,
        problem=rec.get("problem"),
        answer_raw=rec.get("answer"),
        answers=[rec.get("answer")],
        solution=rec.get("solution"),
        meta={k: rec[k] for k in ("uuid", "problem_type", "question_type", "source") if rec.get(k) is not None},
    )


def _generic(i: int, rec: dict, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    """The ``--field`` mapping, else the usual column names (``_PROBLEM_KEYS``, ``_ANSWER_KEYS``); a chat-format
    problem gives its user turn; other scalar columns go to ``meta``."""
    pk = fields.get("problem") or next((k for k in _PROBLEM_KEYS if k in rec), None)
    ak = fields.get("answer") or next((k for k in _ANSWER_KEYS if k in rec), None)
    if pk is None:
        return bad_row(i, "malformed", f"no problem field; have {sorted(rec)[:12]}; map it with --field problem=COL")
    problem = rec.get(pk)
    if isinstance(problem, list) and problem and isinstance(problem[0], dict):  # chat format
        problem = next((m.get("content") for m in problem if m.get("role") == "user"), None)
        problem = S.strip_instruction(problem) if isinstance(problem, str) else problem
    ans = rec.get(ak) if ak else None  # no answer field at all: ingest quarantines it as missing_answer
    if isinstance(ans, dict):
        ans = ans.get("ground_truth", ans)
    answers = list(ans) if isinstance(ans, list) else [ans]
    row = raw_row(i, problem=problem, answer_raw=ans, answers=answers)
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


_MAPPERS = {"gsm8k": _gsm8k, "gsm8k-solutions": _gsm8k_solutions, "math500": _math500, "deepscaler": _deepscaler,
            "fastcurl": _fastcurl, "limr": _limr, "limr-disk": _limr_disk, "simplerl": _simplerl,
            "openr1": _openr1}  # fmt: skip


def _map_record(i: int, rec: dict, fmt: str, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    """One record of a known format (or the generic mapping) into a raw row."""
    return _MAPPERS.get(fmt, _generic)(i, rec, path, fields)


_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate (JSON "\ud800"): not Unicode, cannot be written
_TEXT_FIELDS = ("problem", "answers", "solution")  # NUL bytes here mean binary junk, not a problem


def _strings(value: Any) -> Iterator[str]:
    """Every string inside ``value`` (dict keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _check_text(row: dict[str, Any]) -> dict[str, Any]:
    """Text no table can hold (lone surrogates) makes the row ``undecodable``; NUL bytes in the problem, answer or
    solution make it ``malformed``. Either way the row goes to quarantine, never into a crash or the pool."""
    for key in ("problem", "answer_raw", "answers", "solution", "subject", "meta"):
        bad = next((t for t in _strings(row[key]) if _SURROGATE.search(t)), None)
        if bad is not None:  # also on a row already in error: its text must still fit in the quarantine table
            code = ord(_SURROGATE.search(bad).group())
            reason, detail = (
                row["error"] or "undecodable",
                row["error_detail"] or f"{key} has a lone surrogate U+{code:04X}",
            )
            return bad_row(row["source_row"], reason, detail, row["problem"])
    if row["error"]:
        return row
    for key in _TEXT_FIELDS:
        if any("\x00" in t for t in _strings(row[key])):
            field = "answer" if key == "answers" else key
            return {**row, "error": "malformed", "error_detail": f"{field} contains NUL bytes (binary data?)"}
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
        if a is not None and (isinstance(a, bool) or not isinstance(a, str | int | float)):
            return {**row, "error": "malformed", "error_detail": f"answer is {type(a).__name__}, not text or number"}
    if row["solution"] is not None and not isinstance(row["solution"], str):
        row = {**row, "solution": None}
    if row["subject"] is not None and not isinstance(row["subject"], str):
        row = {**row, "subject": str(row["subject"])}
    return row


def adapt(i: int, rec: dict, fmt: str, path: Path, fields: dict[str, str]) -> dict[str, Any]:
    """One record into a checked raw row (``_map_record``, then ``_check_types`` and ``_check_text``)."""
    try:
        return _check_text(_check_types(_map_record(i, rec, fmt, path, fields)))
    except (AttributeError, TypeError, KeyError) as exc:
        return bad_row(i, "malformed", f"{type(exc).__name__}: {exc}")
    except RecursionError:
        return bad_row(i, "malformed", "a field is nested too deeply to read")
