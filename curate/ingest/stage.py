r"""Ingest: sources -> one pool of unique, answer-checked problems, and a quarantine of every row not admitted.

Pipeline position: the first stage. Pure steps, then one I/O wrapper (``ingest``):

1. ``raw_frame``: an adapter's rows (``curate.sources``) with gold answers normalized (``curate.answers``).
   Each source's raw frame is kept under ``pools/<pool>/raw/`` so adding a source later reads only that source.
2. ``clean``: every row gets a ``problem_id`` or a drop reason: ``undecodable``, ``malformed``, ``empty_problem``,
   ``missing_answer`` (missing, null or empty after normalization), ``too_long``.
3. ``merge``: rows with the same ``problem_id`` are one problem that remembers all its sources. A train row that
   exactly matches a test (evaluation) row is quarantined as ``contaminated``. Rows whose gold answers differ after
   normalization are checked with math-verify (``curate.verify.equivalent_batch``); if any pair is not equivalent
   the whole group is a ``duplicate_conflict`` and every row of it is quarantined (DeepScaleR has such groups).

Counts reconcile exactly, per source and in total: rows read = admitted + merged as duplicates + quarantined.
Re-ingesting an unchanged source is a no-op; a changed source replaces its old rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import Counter, defaultdict
from typing import Any

import polars as pl

from curate import schema as S
from curate.config import IngestConfig, Recipe
from curate.io import (
    Manifest,
    StageResult,
    Workspace,
    hash_inputs,
    read_parquet,
    up_to_date,
    write_json,
    write_manifest,
)
from curate.io import write_parquet as _write
from curate.verify import answers as A


RAW = pl.Schema(
    {
        S.SOURCE: pl.String,
        S.SOURCE_ROW: pl.Int64,
        S.PROBLEM: pl.String,
        S.ANSWER_RAW: pl.String,
        S.ANSWER_ALTERNATIVES: pl.List(pl.String),
        S.SOLUTION: pl.String,
        S.LEVEL: pl.Int32,
        S.DIFFICULTY: pl.Float64,
        S.SUBJECT: pl.String,
        S.SPLIT: pl.String,
        S.META: pl.String,
        "error": pl.String,
        "error_detail": pl.String,
    }
)
STATE_FILE = "sources.json"


def load_config(recipe: Recipe) -> IngestConfig:
    return recipe.ingest


# --------------------------------------------------------------------------------------------------- pure steps
def raw_frame(source: str, rows: list[dict[str, Any]], default_split: str | None) -> pl.DataFrame:
    """An adapter's rows as a frame, gold answers normalized (alternatives kept), split defaulted."""
    out = defaultdict(list)
    for r in rows:
        out[S.SOURCE].append(source)
        out[S.SOURCE_ROW].append(r["source_row"])
        out[S.PROBLEM].append(r["problem"])
        out[S.ANSWER_RAW].append(A.raw_answer_text(r["answer_raw"]))
        out[S.ANSWER_ALTERNATIVES].append(A.normalize_alternatives(r["answers"]) if not r["error"] else [])
        out[S.SOLUTION].append(r["solution"])
        out[S.LEVEL].append(r["level"])
        out[S.DIFFICULTY].append(r["difficulty"])
        out[S.SUBJECT].append(r["subject"])
        out[S.SPLIT].append(default_split or r["split"] or "train")
        out[S.META].append(json.dumps(r["meta"] or {}, ensure_ascii=False, default=str, sort_keys=True))
        out["error"].append(r["error"])
        out["error_detail"].append(r["error_detail"])
    return pl.DataFrame(dict(out), schema=RAW)


def clean(raw: pl.DataFrame, cfg: IngestConfig) -> pl.DataFrame:
    """Add ``problem_id``, ``drop_reason`` and ``detail`` to raw rows (reasons only; nothing is removed here)."""
    ids, reasons, details = [], [], []
    for problem, alts, answer_raw, err, err_detail in raw.select(
        S.PROBLEM, S.ANSWER_ALTERNATIVES, S.ANSWER_RAW, "error", "error_detail"
    ).iter_rows():
        reason = detail = pid = None
        if err:
            reason, detail = err, err_detail
        elif problem is None or not problem.strip():
            reason, detail = "empty_problem", "problem is missing or blank"
        elif not alts:
            reason = "missing_answer"
            detail = "answer is missing" if answer_raw is None else f"answer empty after normalization: {answer_raw!r}"
        elif len(problem) > cfg.max_problem_chars:
            reason, detail = (
                "too_long",
                f"problem has {len(problem)} chars > max_problem_chars={cfg.max_problem_chars}",
            )
        elif max(len(a) for a in alts) > cfg.max_answer_chars:
            reason, detail = "too_long", f"answer longer than max_answer_chars={cfg.max_answer_chars}"
        if problem is not None and reason not in ("undecodable", "malformed"):
            pid = S.problem_id(problem)
        ids.append(pid)
        reasons.append(reason)
        details.append(detail)
    return raw.with_columns(
        pl.Series(S.PROBLEM_ID, ids, pl.String),
        pl.Series(S.DROP_REASON, reasons, pl.String),
        pl.Series(S.DETAIL, details, pl.String),
    )


def merge(rows: pl.DataFrame, cfg: IngestConfig, equivalent=None) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Merge exact duplicates, quarantine conflicts and train copies of test problems.

    ``rows`` is the output of ``clean`` for every source in ingest order. Returns ``(problems, quarantine,
    outcome)`` where ``outcome[i]`` is ``"admitted"``, ``"merged"`` or a drop reason for row ``i``.
    ``equivalent(pairs) -> list[bool]`` decides whether two differing gold answers are the same answer
    (default: ``curate.verify.equivalent_batch`` when ``cfg.check_equivalence``, else never).
    """
    recs = rows.to_dicts()
    outcome: list[str | None] = [r[S.DROP_REASON] for r in recs]
    detail: list[str | None] = [r[S.DETAIL] for r in recs]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(recs):
        if outcome[i] is None:
            groups[r[S.PROBLEM_ID]].append(i)

    def ref(i: int) -> str:
        return f"{recs[i][S.SOURCE]}#{recs[i][S.SOURCE_ROW]}"

    pending: list[tuple[str, int, int]] = []  # (problem_id, representative row, other row) needing math-verify
    for pid, members in groups.items():
        test = [i for i in members if recs[i][S.SPLIT] == "test"]
        if test and len(test) < len(members):
            for i in members:
                if recs[i][S.SPLIT] != "test":
                    outcome[i], detail[i] = "contaminated", f"exact match of test problem {ref(test[0])}"
            groups[pid] = members = test
        rep = members[0]
        rep_keys = {A.answer_key(a) for a in recs[rep][S.ANSWER_ALTERNATIVES]}
        for i in members[1:]:
            if not rep_keys & {A.answer_key(a) for a in recs[i][S.ANSWER_ALTERNATIVES]}:
                pending.append((pid, rep, i))

    if pending:
        if equivalent is None:
            equivalent = _default_equivalent(cfg)
        pairs = [(recs[r][S.ANSWER_ALTERNATIVES][0], recs[i][S.ANSWER_ALTERNATIVES][0]) for _, r, i in pending]
        verdicts = equivalent(pairs)
        conflicted = {pid for (pid, _, _), same in zip(pending, verdicts, strict=True) if not same}
        for pid in conflicted:
            members = groups.pop(pid)
            answers = sorted({recs[i][S.ANSWER_ALTERNATIVES][0] for i in members})
            for i in members:
                outcome[i] = "duplicate_conflict"
                detail[i] = f"{len(members)} rows of this problem disagree on the answer: {answers[:5]}"

    problems = []
    for pid, members in groups.items():
        rep = recs[members[0]]
        alts: list[str] = []
        for i in members:
            alts.extend(a for a in recs[i][S.ANSWER_ALTERNATIVES] if a not in alts)
        first = {
            k: next((recs[i][k] for i in members if recs[i][k] is not None), None)
            for k in (S.SOLUTION, S.LEVEL, S.DIFFICULTY, S.SUBJECT)
        }
        problems.append(
            {
                S.PROBLEM_ID: pid,
                S.PROBLEM: rep[S.PROBLEM],
                S.ANSWER: alts[0],
                S.ANSWER_ALTERNATIVES: alts,
                S.ANSWER_RAW: rep[S.ANSWER_RAW],
                **first,
                S.SPLIT: rep[S.SPLIT],
                S.SOURCE: rep[S.SOURCE],
                S.SOURCE_ROW: rep[S.SOURCE_ROW],
                S.SOURCES: [ref(i) for i in members],
                S.META: rep[S.META],
            }
        )
        outcome[members[0]] = "admitted"
        for i in members[1:]:
            outcome[i] = "merged"
    problems_df = pl.DataFrame(problems, schema=S.PROBLEMS) if problems else S.empty(S.PROBLEMS)
    problems_df = problems_df.sort(S.PROBLEM_ID)

    q = [
        {
            S.SOURCE: r[S.SOURCE],
            S.SOURCE_ROW: r[S.SOURCE_ROW],
            S.STAGE: "ingest",
            S.DROP_REASON: outcome[i],
            S.DETAIL: detail[i],
            S.PROBLEM_ID: r[S.PROBLEM_ID],
            S.PROBLEM: (r[S.PROBLEM] or "")[:2000] or None,
            S.ANSWER_RAW: r[S.ANSWER_RAW],
        }
        for i, r in enumerate(recs)
        if outcome[i] not in ("admitted", "merged")
    ]
    quarantine = pl.DataFrame(q, schema=S.QUARANTINE) if q else S.empty(S.QUARANTINE)
    return problems_df, quarantine, [o or "admitted" for o in outcome]


def _default_equivalent(cfg: IngestConfig):
    if not cfg.check_equivalence:
        return lambda pairs: [False] * len(pairs)
    from curate import verify

    return verify.equivalent_batch


def reconcile(rows: pl.DataFrame, outcome: list[str]) -> list[dict[str, Any]]:
    """Per-source counts: read = admitted + merged + quarantined (by reason)."""
    per: dict[str, Counter] = defaultdict(Counter)
    for src, out in zip(rows[S.SOURCE].to_list(), outcome, strict=True):
        per[src][out] += 1
    report = []
    for src in dict.fromkeys(rows[S.SOURCE].to_list()):
        c = per[src]
        dropped = {k: v for k, v in sorted(c.items()) if k not in ("admitted", "merged")}
        read = sum(c.values())
        entry = {
            "source": src,
            "read": read,
            "admitted": c["admitted"],
            "merged": c["merged"],
            "quarantined": sum(dropped.values()),
            "drops": dropped,
        }
        assert entry["admitted"] + entry["merged"] + entry["quarantined"] == read
        report.append(entry)
    return report


# --------------------------------------------------------------------------------------------------- I/O wrapper
def _state(ws: Workspace, pool: str) -> list[dict[str, Any]]:
    path = ws.pool_dir(pool) / STATE_FILE
    return json.loads(path.read_text()) if path.is_file() else []


def ingest(ws: Workspace, pool: str, cfg: IngestConfig, *, force: bool = False, progress: bool = False) -> StageResult:
    """Add ``cfg.sources`` to ``pool`` (reading only new or changed sources) and rebuild problems + quarantine."""
    from curate.ingest import sources as src_mod

    if not cfg.sources and not _state(ws, pool):
        raise ValueError("no sources given; pass files, folders, hf:// names or gen:// URIs")
    state = _state(ws, pool)
    by_name = {s["name"]: s for s in state}
    raw_dir = ws.raw_dir(pool)
    new_sources: list[str] = []
    for spec in cfg.sources:
        name = spec.name or src_mod.source_name(spec.path)
        digest = src_mod.content_hash(spec)
        key = {"format": spec.format, "fields": spec.fields, "split": spec.split}
        old = by_name.get(name)
        raw_path = raw_dir / f"{S.slug(name)}.parquet"
        if old and old["hash"] == digest and old["options"] == key and raw_path.is_file() and not force:
            continue
        _log(progress, f"reading {name} ...")
        raw = src_mod.read_source(dataclasses.replace(spec, name=name))
        frame = raw_frame(name, raw.rows, spec.split)
        _write(frame, raw_path, RAW)
        entry = {
            "name": name,
            "path": raw.path,
            "format": raw.format,
            "hash": digest,
            "options": key,
            "rows": frame.height,
            "raw": raw_path.name,
            "ingested_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        if old:
            state[state.index(old)] = entry
        else:
            state.append(entry)
        by_name[name] = entry
        new_sources.append(name)
        write_json(ws.pool_dir(pool) / STATE_FILE, state)

    problems_path = ws.table(pool, "problems")
    raw_paths = [raw_dir / s["raw"] for s in state]
    inputs = hash_inputs(raw_paths)
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "sources"}
    config["order"] = [s["name"] for s in state]
    stored = None if force else up_to_date(problems_path, inputs, config)
    if stored is not None:
        return StageResult(
            "ingest",
            skipped=True,
            outputs=[str(problems_path)],
            summary={**stored["extra"]["summary"], "new_sources": []},
        )

    manifest = Manifest(stage="ingest", inputs=inputs, config=config)
    rows = pl.concat([read_parquet(p, RAW) for p in raw_paths], how="vertical") if raw_paths else S.empty(RAW)
    _log(progress, f"cleaning and merging {rows.height} rows from {len(state)} source(s) ...")
    cleaned = clean(rows, cfg)
    problems, quarantine, outcome = merge(cleaned, cfg)
    per_source = reconcile(cleaned, outcome)

    q_path = ws.table(pool, "quarantine")
    if q_path.is_file():  # keep rows other stages (decontaminate, ...) put there
        others = read_parquet(q_path, S.QUARANTINE).filter(pl.col(S.STAGE) != "ingest")
        quarantine = pl.concat([quarantine, others], how="vertical")
    _write(quarantine, q_path, S.QUARANTINE)
    _write(problems, problems_path, S.PROBLEMS)

    drops = Counter(o for o in outcome if o not in ("admitted", "merged"))
    totals = {
        "read": rows.height,
        "admitted": problems.height,
        "merged": outcome.count("merged"),
        "quarantined": sum(drops.values()),
    }
    summary = {
        "pool": pool,
        **totals,
        "splits": dict(Counter(problems[S.SPLIT].to_list())),
        "drops": dict(sorted(drops.items())),
        "new_sources": new_sources,
        "sources": per_source,
        "reconciles": totals["read"] == totals["admitted"] + totals["merged"] + totals["quarantined"],
    }
    manifest.rows_in, manifest.rows_out, manifest.drops = rows.height, problems.height, dict(drops)
    manifest.extra = {"summary": summary}
    write_manifest(problems_path, manifest)
    write_manifest(
        q_path,
        Manifest(
            stage="ingest",
            inputs=inputs,
            config=config,
            rows_in=rows.height,
            rows_out=quarantine.height,
            drops=dict(drops),
        ),
    )
    return StageResult("ingest", outputs=[str(problems_path), str(q_path)], summary=summary)


def run_stage(ws: Workspace, recipe: Recipe, *, force: bool = False) -> StageResult:
    """The recipe's ingest stage: its sources into ``recipe.pool``."""
    return ingest(ws, recipe.pool, recipe.ingest, force=force)


def pool_summary(ws: Workspace, pool: str, detailed: bool = False) -> dict[str, Any]:
    """Counts and paths of a pool (``curate pools`` / ``curate show``)."""
    problems = read_parquet(ws.require_pool(pool))
    q_path = ws.table(pool, "quarantine")
    quarantine = read_parquet(q_path) if q_path.is_file() else S.empty(S.QUARANTINE)
    out: dict[str, Any] = {
        "pool": pool,
        "problems": problems.height,
        "splits": dict(Counter(problems[S.SPLIT].to_list())),
        "quarantined": quarantine.height,
        "sources": [s["name"] for s in _state(ws, pool)],
    }
    if detailed:
        out["drops"] = {
            f"{st}:{r}": n
            for (st, r), n in Counter(
                zip(quarantine[S.STAGE].to_list(), quarantine[S.DROP_REASON].to_list(), strict=True)
            ).most_common()
        }
        out["by_source"] = [
            {"source": k, "problems": v} for k, v in Counter(problems[S.SOURCE].to_list()).most_common()
        ]
        out["tables"] = {p.stem: str(p) for p in sorted(ws.pool_dir(pool).glob("*.parquet"))}
        manifest = ws.pool_dir(pool) / "problems.manifest.json"
        if manifest.is_file():
            out["last_ingest"] = json.loads(manifest.read_text()).get("started_at")
    return out


def _log(progress: bool, message: str) -> None:
    from curate.progress import log

    log(message, progress)


__all__ = ["clean", "ingest", "merge", "pool_summary", "raw_frame", "reconcile", "run_stage"]
