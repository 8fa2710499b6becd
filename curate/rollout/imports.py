"""Imported generations: completions that datasets ship with correctness labels, re-verified into the ledger.

``curate import-generations FILE --pool P --format F`` reads a file of (problem, generations, labels), matches each
problem to the pool by ``schema.problem_id`` of its text, re-checks every generation with ``curate.verify`` against
the pool's gold answer, and appends the rows to the same ledger as rollouts (backend ``import``, the dataset's own
label in ``shipped_label``). It reports how often our verdict agrees with the shipped label.

Formats (one source row -> several ledger rows):

- ``gsm8k-solutions``: GSM8K ``example_model_solutions.jsonl``; four generators per row, ``{is_correct, solution}``
  under ``6b_finetuning``, ``6b_verification``, ``175b_finetuning``, ``175b_verification``; model
  ``gsm8k/<key>``, sample_idx 0.
- ``simplerl``: simpleRL ``math_cot_100.jsonl``; ``code`` (8 responses) and ``score`` (8 labels); model
  ``simplerl/math_cot_100`` (the generator is not named by the source), sample_idx = position.
- ``openr1``: the OpenR1-Math-220k layout (JSONL or Parquet): ``problem``, ``answer``, ``generations`` and
  ``correctness_math_verify`` lists, optional ``finish_reasons``; model ``openr1/deepseek-r1``.

Work is sharded by source-row ranges with the same guarantees as rollouts: each shard writes one atomic part file
per model, named by the import's run id (``import-`` + a hash of the file and format) and a digest of its keys;
already-present keys are skipped, so an interrupted import resumes and a repeated one writes nothing. sample_idx is
the dataset's own (position in its list of generations): the one exception to ``curate.rollout.ledger``'s
numbering rule, so that a re-import finds the same keys. Problems not
in the pool are counted and listed (``--add-problems`` first ingests the file's problems through ``curate.ingest``).

Example report: ``{"model": "gsm8k/175b_verification", "rows": 1319, "agreement": 0.99, "both_correct": 740, ...}``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate import io, verify
from curate import schema as S
from curate.errors import ConfigError, InputError
from curate.manifest import file_hash
from curate.progress import bar
from curate.rollout import ledger, stats
from curate.rollout.backends import load_tokenizer
from curate.verify.answers import answer_key, normalize_answer


FORMATS = ("gsm8k-solutions", "simplerl", "openr1")
GSM8K_MODELS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
DEFAULT_MODEL = {"simplerl": "simplerl/math_cot_100", "openr1": "openr1/deepseek-r1"}
_EXAMPLES = 5  # problems listed by name in the report when not in the pool


@dataclass(frozen=True)
class ImportConfig:
    """One import. model: generator name for single-generator formats (default per format). limit: first source
    rows only. shard_rows: source rows per shard. tokenizer: a local tokenizer to count completion tokens (else
    they stay null). add_problems: ingest the file's problems into the pool first."""

    path: str
    format: str
    model: str | None = None
    limit: int | None = None
    shard_rows: int = 256
    tokenizer: str | None = None
    add_problems: bool = False
    verify: verify.VerifyConfig = field(default_factory=verify.VerifyConfig)
    verify_workers: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"import format must be one of {FORMATS}, got {self.format!r}")
        if self.model is not None and self.format == "gsm8k-solutions":
            raise ConfigError("gsm8k-solutions names its four generators itself; drop --model")


@dataclass(frozen=True)
class ImportShard:
    """Source rows ``[start, stop)`` of an import and the ledger keys (model, problem_id, sample_idx) to write."""

    index: int
    run_id: str
    start: int
    stop: int
    keys: tuple[tuple[str, str, int], ...]
    golds: tuple[tuple[str, tuple[str, ...]], ...]  # problem_id -> the pool's gold answers


# --------------------------------------------------------------------------------------------------- reading
def records(path: str | Path, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row index, record)`` of a JSONL, JSON-array or Parquet file, rows ``[start, stop)`` only.

    JSONL lines outside the range are skipped unparsed; Parquet is read in batches.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        i = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
            if stop is not None and i >= stop:
                return
            if i + batch.num_rows > start:
                for rec in batch.to_pylist():
                    if start <= i and (stop is None or i < stop):
                        yield i, rec
                    i += 1
            else:
                i += batch.num_rows
        return
    with open(path, encoding="utf-8") as fh:
        if path.suffix == ".json":
            for i, rec in enumerate(json.load(fh)):
                if start <= i and (stop is None or i < stop):
                    yield i, rec
            return
        for i, line in enumerate(itertools.islice(fh, start, stop), start=start):
            if line.strip():
                yield i, json.loads(line)


def generations(rec: dict[str, Any], fmt: str, model: str | None) -> tuple[str | None, Any, list[dict[str, Any]]]:
    """(problem text, gold answer as shipped, [{model, sample_idx, completion, shipped_label, finish_reason}])."""
    if fmt == "gsm8k-solutions":
        gens = []
        for key in GSM8K_MODELS:
            sol = rec.get(key)
            if isinstance(sol, dict):
                label = sol.get("is_correct")
                gens.append(_gen(f"gsm8k/{key}", 0, sol.get("solution"), label, None))
        return rec.get("question"), rec.get("ground_truth"), gens
    name = model or DEFAULT_MODEL[fmt]
    if fmt == "simplerl":
        texts, labels, reasons = rec.get("code") or [], rec.get("score") or [], []
        problem, gold = rec.get("question"), rec.get("gt")
    else:
        texts, labels = rec.get("generations") or [], rec.get("correctness_math_verify") or []
        reasons = rec.get("finish_reasons") or []
        problem, gold = rec.get("problem"), rec.get("answer")
    gens = [
        _gen(name, i, t, labels[i] if i < len(labels) else None, reasons[i] if i < len(reasons) else None)
        for i, t in enumerate(texts)
    ]
    return problem, gold, gens


def _gen(model: str, idx: int, text: Any, label: Any, reason: Any) -> dict[str, Any]:
    return {
        S.MODEL: model,
        S.SAMPLE_IDX: idx,
        S.COMPLETION: text if isinstance(text, str) else None,
        S.SHIPPED_LABEL: bool(label) if isinstance(label, bool | int) else None,
        S.FINISH_REASON: reason if reason in ("stop", "length") else None,
    }


def import_run_id(cfg: ImportConfig) -> str:
    """``import-`` + a hash of the file's bytes, its format and the model name: the same import, the same id."""
    digest = hashlib.sha256(f"{file_hash(cfg.path)}:{cfg.format}:{cfg.model}".encode()).hexdigest()
    return f"import-{digest[:12]}"


# --------------------------------------------------------------------------------------------------- planning
def plan_import(ws: io.Workspace, pool: str, cfg: ImportConfig) -> tuple[list[ImportShard], dict[str, Any]]:
    """Shards of the import still missing from the ledger, and the counts behind them.

    Every generation in the file is counted once: ``generations = present + planned + dropped`` with drop reasons
    ``not_in_pool`` (problem not in the pool), ``missing_completion`` (no text) and ``duplicate_in_file`` (the same
    problem and generation index again).
    """
    problems = pl.read_parquet(ws.require_pool(pool), columns=[S.PROBLEM_ID, S.ANSWER, S.ANSWER_ALTERNATIVES])
    gold_of = {
        r[S.PROBLEM_ID]: tuple(a for a in (r[S.ANSWER_ALTERNATIVES] or [r[S.ANSWER]]) if a)
        for r in problems.iter_rows(named=True)
    }
    rid = import_run_id(cfg)
    present: dict[str, set[tuple[str, int]]] = {}
    planned: set[tuple[str, str, int]] = set()
    drops = {"not_in_pool": 0, "missing_completion": 0, "duplicate_in_file": 0}
    missing_problems: list[str] = []
    counts = {"source_rows": 0, "problems_not_in_pool": 0, "generations": 0, "present": 0, "planned": 0}
    counts["gold_mismatch"] = 0  # the file's gold answer differs from the pool's (ours is used)
    by_range: dict[int, dict[str, Any]] = {}
    for i, rec in records(cfg.path, 0, cfg.limit):
        counts["source_rows"] += 1
        problem, gold, gens = generations(rec, cfg.format, cfg.model)
        counts["generations"] += len(gens)
        pid = S.problem_id(problem) if isinstance(problem, str) and problem.strip() else None
        if pid is None or pid not in gold_of:
            drops["not_in_pool"] += len(gens)
            if len(missing_problems) < _EXAMPLES:
                missing_problems.append(str(problem)[:120])
            counts["problems_not_in_pool"] += 1
            continue
        if gold is not None and answer_key(normalize_answer(gold)) not in {answer_key(g) for g in gold_of[pid]}:
            counts["gold_mismatch"] += 1
        chunk = by_range.setdefault(i // cfg.shard_rows, {"keys": [], "golds": {}})
        for g in gens:
            model = g[S.MODEL]
            if model not in present:
                have = ledger.read(ws, pool, model, columns=[])
                present[model] = set(zip(have[S.PROBLEM_ID].to_list(), have[S.SAMPLE_IDX].to_list(), strict=True))
            if g[S.COMPLETION] is None:
                drops["missing_completion"] += 1
            elif (pid, g[S.SAMPLE_IDX]) in present[model]:
                counts["present"] += 1
            elif (model, pid, g[S.SAMPLE_IDX]) in planned:  # the same problem twice in the file: imported once
                drops["duplicate_in_file"] += 1
            else:
                planned.add((model, pid, g[S.SAMPLE_IDX]))
                chunk["keys"].append((model, pid, g[S.SAMPLE_IDX]))
                chunk["golds"][pid] = gold_of[pid]
                counts["planned"] += 1
    shards = [
        ImportShard(
            index=k,
            run_id=rid,
            start=k * cfg.shard_rows,
            stop=(k + 1) * cfg.shard_rows,
            keys=tuple(v["keys"]),
            golds=tuple(sorted(v["golds"].items())),
        )
        for k, v in sorted(by_range.items())
        if v["keys"]
    ]
    report = {"run_id": rid, **counts, "drops": drops, "not_in_pool_examples": missing_problems}
    return shards, report


# --------------------------------------------------------------------------------------------------- one shard
def run_import_shard(ws: io.Workspace, pool: str, cfg: ImportConfig, shard: ImportShard) -> list[Path]:
    """Re-verify one shard's generations and write one part file per model (already written ones are kept)."""
    want = set(shard.keys)
    golds = dict(shard.golds)
    rows = []
    for _, rec in records(cfg.path, shard.start, shard.stop):
        problem, _, gens = generations(rec, cfg.format, cfg.model)
        pid = S.problem_id(problem) if isinstance(problem, str) and problem.strip() else None
        for g in gens:
            if (g[S.MODEL], pid, g[S.SAMPLE_IDX]) in want:
                want.discard((g[S.MODEL], pid, g[S.SAMPLE_IDX]))
                rows.append({**g, S.PROBLEM_ID: pid})
    if want:
        raise InputError(f"import shard {shard.index}: {len(want)} planned generations not found in {cfg.path}")
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_model.setdefault(r[S.MODEL], []).append(r)
    written = []
    for model, items in sorted(by_model.items()):
        keys = ";".join(f"{r[S.PROBLEM_ID]}:{r[S.SAMPLE_IDX]}" for r in items)
        name = ledger.part_name(shard.run_id, f"{shard.index:06d}", ledger.digest(keys))
        path = ledger.part_path(ws, pool, model, name)
        if not path.exists():
            ledger.write_part(_verified_rows(items, golds, cfg, shard.run_id), path)
        written.append(path)
    return written


def _verified_rows(
    items: list[dict[str, Any]], golds: dict[str, tuple[str, ...]], cfg: ImportConfig, rid: str
) -> pl.DataFrame:
    texts = [r[S.COMPLETION] for r in items]
    verdicts = verify.check_batch(
        texts,
        [list(golds[r[S.PROBLEM_ID]]) for r in items],
        cfg.verify,
        finish_reasons=[r[S.FINISH_REASON] for r in items],
        workers=cfg.verify_workers,
    )
    tokens: list[int | None] = [None] * len(items)
    if cfg.tokenizer:
        tok = load_tokenizer(cfg.tokenizer)
        tokens = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    values = {
        S.SAMPLE_IDX: [r[S.SAMPLE_IDX] for r in items],
        S.COMPLETION: texts,
        S.COMPLETION_TOKENS: tokens,
        S.FINISH_REASON: [r[S.FINISH_REASON] for r in items],
        S.EXTRACTED_ANSWER: [v.extracted for v in verdicts],
        S.VERDICT: [v.verdict for v in verdicts],
        S.CORRECT: [v.correct for v in verdicts],
        S.REWARD: [verify.reward_of(v, cfg.verify) for v in verdicts],
        S.SHIPPED_LABEL: [r[S.SHIPPED_LABEL] for r in items],
    }
    pids = [r[S.PROBLEM_ID] for r in items]
    frame = ledger.build_rows(items[0][S.MODEL], pids, values, backend="import", run_id=rid)
    return frame.sort([S.PROBLEM_ID, S.SAMPLE_IDX])


# --------------------------------------------------------------------------------------------------- report
def agreement(ledger: pl.DataFrame) -> list[dict[str, Any]]:
    """Our verdicts vs the shipped labels, per model and in total: confusion counts and agreement.

    >>> led = pl.DataFrame({"model": ["m"] * 3, "correct": [True, False, True], "shipped_label": [True, True, None]})
    >>> agreement(led)[0]["agreement"], agreement(led)[0]["ours_wrong_shipped_correct"]
    (0.5, 1)
    """
    out = []
    groups = [(m, ledger.filter(pl.col(S.MODEL) == m)) for m in sorted(ledger[S.MODEL].unique().to_list())]
    if len(groups) > 1:
        groups.append(("all", ledger))
    for name, rows in groups:
        labelled = rows.filter(pl.col(S.SHIPPED_LABEL).is_not_null())
        ours, theirs = labelled[S.CORRECT].fill_null(False), labelled[S.SHIPPED_LABEL]
        n = labelled.height
        both = int((ours & theirs).sum())
        neither = int((~ours & ~theirs).sum())
        out.append(
            {
                "model": name,
                "rows": rows.height,
                "labelled": n,
                "both_correct": both,
                "both_wrong": neither,
                "ours_correct_shipped_wrong": int((ours & ~theirs).sum()),
                "ours_wrong_shipped_correct": int((~ours & theirs).sum()),
                "agreement": round((both + neither) / n, 4) if n else None,
                "ours_accuracy": round(float(rows[S.CORRECT].fill_null(False).mean()), 4) if rows.height else None,
                "shipped_accuracy": round(float(theirs.mean()), 4) if n else None,
            }
        )
    return out


def import_generations(ws: io.Workspace, pool: str, cfg: ImportConfig, *, progress: bool = False) -> dict[str, Any]:
    """Plan, run every shard, refresh stats, and report agreement over all of this import's ledger rows."""
    added: dict[str, Any] | None = None
    if cfg.add_problems:
        added = _add_problems(ws, pool, cfg)
    shards, report = plan_import(ws, pool, cfg)
    total = sum(len(s.keys) for s in shards)
    with bar(total, f"import {Path(cfg.path).name}", enabled=progress and total > 0, unit="samples") as advance:
        for shard in shards:
            run_import_shard(ws, pool, cfg, shard)
            advance(len(shard.keys))
    refreshed = stats.refresh_stats(ws, pool)
    rows = _import_rows(ws, pool, report["run_id"])
    verdicts = {k: int(v) for k, v in rows[S.VERDICT].value_counts().sort(S.VERDICT).iter_rows()}
    return {
        "pool": pool,
        "path": str(cfg.path),
        "format": cfg.format,
        **report,
        "added_problems": added,
        "shards_run": len(shards),
        "ledger_rows": rows.height,
        "verdicts": verdicts,
        "agreement": agreement(rows),
        "stats": refreshed,
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "verify"},
    }


def _import_rows(ws: io.Workspace, pool: str, rid: str) -> pl.DataFrame:
    return ledger.read(ws, pool, run_id=rid, columns=[S.CORRECT, S.SHIPPED_LABEL, S.VERDICT])


def _add_problems(ws: io.Workspace, pool: str, cfg: ImportConfig) -> dict[str, Any]:
    """Ingest the file's problems through the ingest stage (it adds only what is new)."""
    from curate.config import ConfigError, IngestConfig, SourceSpec
    from curate.ingest import stage as ingest

    spec = SourceSpec(path=str(cfg.path), format=cfg.format)
    try:
        result = ingest.ingest(ws, pool, IngestConfig(sources=(spec,)))
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        return {"error": str(exc)}
    return {"skipped": result.skipped, **{k: v for k, v in result.summary.items() if isinstance(v, int | str)}}
