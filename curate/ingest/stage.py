r"""Ingest: sources -> one pool of unique, answer-checked problems, and a quarantine of every row not admitted.

Pipeline position: the first stage. Pure steps, then one I/O wrapper (``ingest``):

1. ``raw_frame``: an adapter's rows (``curate.ingest.sources``) with gold answers normalized
   (``curate.verify.answers``). Each source's raw frame is kept under ``pools/<pool>/raw/`` so adding a source
   later reads only that source.
2. ``clean``: every row gets a ``problem_id`` or a drop reason: ``undecodable``, ``malformed``, ``empty_problem``,
   ``missing_answer`` (missing, null or empty after normalization), ``unparseable_answer`` (an unclosed ``\boxed{``
   or unbalanced braces: no completion could ever match it), ``too_long``. Gold answers the checker cannot verify
   (prose, several values in a sentence) are admitted but flagged ``unverifiable_answer`` in ``meta`` and counted
   in the summary's ``flags``; selection leaves them out of RL sets by default.
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
import hashlib
import json
import secrets
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import polars as pl

from curate import schema as S
from curate.config import ConfigError, IngestConfig, Recipe
from curate.io import Workspace, pool_locked, read_parquet, read_quarantine, write_json
from curate.io import write_parquet as _write
from curate.stage_wrapper import StageOutput, StageResult, run_wrapped
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
        elif (why := A.unbalanced_reason(answer_raw, alts)) is not None:  # "\boxed{6", a lone "}": no gold at all
            reason, detail = "unparseable_answer", f"{why}: {answer_raw!r}"[:500]
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
        test = [i for i in members if recs[i][S.SPLIT] in S.HELDOUT_SPLITS]
        if test and len(test) < len(members):
            for i in members:
                if recs[i][S.SPLIT] not in S.HELDOUT_SPLITS:
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
                S.META: flag_answer(rep[S.META], alts),
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


ANSWER_FLAG = "answer_flag"  # key in a problem's ``meta`` JSON
UNVERIFIABLE = "unverifiable_answer"


def flag_answer(meta: str | None, alternatives: list[str]) -> str | None:
    """``meta`` with ``answer_flag: unverifiable_answer`` (and why) when the checker cannot verify any gold form.

    Such problems stay in the pool (a reference solution or SFT can still use them) but their RL reward would be
    wrong: selection leaves them out by default (``select.drop_unverifiable``) and counts them in the card.
    """
    why = A.unverifiable_alternatives(alternatives)
    if why is None:
        return meta
    data = json.loads(meta) if meta else {}
    flagged = {**data, ANSWER_FLAG: UNVERIFIABLE, "answer_flag_detail": why}
    return json.dumps(flagged, ensure_ascii=False, sort_keys=True)


def answer_flags(problems: pl.DataFrame) -> dict[str, Any]:
    """The ingest summary's count of flagged gold answers, with a few examples (``flag_answer``)."""
    flagged = problems.filter(pl.col(S.META).str.contains(f'"{ANSWER_FLAG}": "{UNVERIFIABLE}"', literal=True))
    return {UNVERIFIABLE: flagged.height, "examples": flagged[S.ANSWER].head(5).to_list()} if flagged.height else {}


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


@pool_locked
def ingest(ws: Workspace, pool: str, cfg: IngestConfig, *, force: bool = False, progress: bool = False) -> StageResult:
    """Add ``cfg.sources`` to ``pool`` (reading only new or changed sources) and rebuild problems + quarantine.

    Safe beside other writers, all or nothing: it holds the pool's lock for the whole read-modify-write (a second
    ingest into the pool waits, then adds its source to this one's). Every new source is read before anything is
    written; their raw tables go to new names that ``sources.json`` does not list yet; ``sources.json``, the
    pool's record of what it holds, is replaced last, after problems and quarantine. A failure (or a kill) before
    that leaves the pool as it was, and the next ingest removes the unlisted raw tables.
    """
    from curate.ingest import sources as src_mod

    t0 = time.perf_counter()  # the whole call, reading the sources included (`curate ingest --json` reports it)
    state = _state(ws, pool)
    if not cfg.sources and not state:
        raise ConfigError("no sources given; pass files, folders, hf:// names or gen:// URIs")
    _remove_unlisted_raw(ws, pool, state)
    listed = {s["raw"] for s in state}
    state = list(state)
    by_name = {s["name"]: s for s in state}
    raw_dir = ws.raw_dir(pool)
    new_sources: list[str] = []
    staged: list[tuple[pl.DataFrame, Path]] = []
    for spec in cfg.sources:
        name = spec.name or src_mod.source_name(spec.path)
        digest = src_mod.content_hash(spec)
        key = {"format": spec.format, "fields": spec.fields, "split": spec.split}
        old = by_name.get(name)
        if old and old["hash"] == digest and old["options"] == key and (raw_dir / old["raw"]).is_file() and not force:
            continue
        _log(progress, f"reading {name} ...")
        raw = src_mod.read_source(dataclasses.replace(spec, name=name))
        frame = raw_frame(name, raw.rows, spec.split)
        raw_path = raw_dir / _raw_name(name, digest, key, taken=listed)
        staged.append((frame, raw_path))
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

    problems_path, q_path = ws.table(pool, "problems"), ws.table(pool, "quarantine")
    raw_paths = [raw_dir / s["raw"] for s in state]
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "sources"}
    config["order"] = [s["name"] for s in state]

    def work(_manifest) -> StageOutput:
        rows = pl.concat([read_parquet(p, RAW) for p in raw_paths], how="vertical") if raw_paths else S.empty(RAW)
        _log(progress, f"cleaning and merging {rows.height} rows from {len(state)} source(s) ...")
        cleaned = clean(rows, cfg)
        problems, quarantine, outcome = merge(cleaned, cfg)
        drops = Counter(o for o in outcome if o not in ("admitted", "merged"))
        summary = {
            "pool": pool,
            "read": rows.height,
            "admitted": problems.height,
            "merged": outcome.count("merged"),
            "quarantined": sum(drops.values()),
            "splits": dict(Counter(problems[S.SPLIT].to_list())),
            "drops": dict(sorted(drops.items())),
            "sources": reconcile(cleaned, outcome),
            "flags": answer_flags(problems),
            "warnings": _warnings(problems, quarantine),
        }
        return StageOutput(
            summary,
            tables={q_path: (quarantine, S.QUARANTINE), problems_path: (problems, S.PROBLEMS)},
            rows_in=rows.height,
            rows_out=problems.height,
            drops=dict(drops),
            check=lambda: {"reconciles": reconciles_on_disk(raw_paths, problems_path, q_path)},
        )

    try:
        for frame, raw_path in staged:  # every source was read: write their tables under names nothing lists yet
            _write(frame, raw_path, RAW)
        result = run_wrapped(
            ws, "ingest", inputs=raw_paths, config=config, outputs=[problems_path, q_path], fn=work, force=force
        )
    except BaseException:
        for _, raw_path in staged:
            raw_path.unlink(missing_ok=True)
        raise
    if new_sources:  # the commit point: from here on the pool lists the new sources
        write_json(ws.pool_dir(pool) / STATE_FILE, state)
        _remove_unlisted_raw(ws, pool, state)
    result.summary = {**result.summary, "new_sources": new_sources}
    result.wall_s = round(time.perf_counter() - t0, 3)
    return result


def _raw_name(name: str, digest: str, options: dict[str, Any], taken: set[str]) -> str:
    """``<source>-<hash of content and options>.parquet``: a changed source gets a new raw table beside the one the
    pool still lists, never written over it (a random suffix when re-reading an unchanged source with force)."""
    key = hashlib.sha256(json.dumps([digest, options], sort_keys=True, default=str).encode()).hexdigest()[:12]
    out = f"{S.slug(name)}-{key}.parquet"
    return out if out not in taken else f"{S.slug(name)}-{key}-{secrets.token_hex(4)}.parquet"


def _remove_unlisted_raw(ws: Workspace, pool: str, state: list[dict[str, Any]]) -> None:
    """Remove raw tables ``sources.json`` does not list: a replaced source's old table, or the tables of an ingest
    that failed or was killed before its commit. Only under the pool's lock."""
    raw_dir = ws.raw_dir(pool)
    if not raw_dir.is_dir():
        return
    listed = {s["raw"] for s in state}
    for path in raw_dir.glob("*.parquet"):
        if path.name not in listed and not path.name.startswith("."):
            path.unlink()


def reconciles_on_disk(raw_paths: list, problems_path, q_path) -> bool:
    """Rows of the raw source tables on disk = rows behind the problems table on disk (each problem lists every
    source row merged into it in ``sources``) + the ingest rows of the quarantine on disk. Read back from the
    files, so a row lost or duplicated between merge and write makes it False."""
    read = sum(pl.scan_parquet(p).select(pl.len()).collect().item() for p in raw_paths)
    behind = pl.scan_parquet(problems_path).select(pl.col(S.SOURCES).list.len().sum()).collect().item() or 0
    quarantined = (
        pl.scan_parquet(q_path).filter(pl.col(S.STAGE) == "ingest").select(pl.len()).collect().item()
        if q_path.is_file()
        else 0
    )
    return read == behind + quarantined


_HINTS = {
    "missing_answer": "if the answers are in a column with another name, map it with --field answer=COLUMN "
    "(recipe: fields: {answer: COLUMN} on the source)",
    "malformed": "if the problems are in a column with another name, map it with --field problem=COLUMN",
}


def _warnings(problems: pl.DataFrame, quarantine: pl.DataFrame) -> list[str]:
    """A hint when nothing was admitted and every ingest row fell for one reason a ``--field`` mapping fixes."""
    rows = quarantine.filter(pl.col(S.STAGE) == "ingest")
    reasons = Counter(rows[S.DROP_REASON].to_list())
    if problems.height or len(reasons) != 1:
        return []
    reason = next(iter(reasons))
    hint = _HINTS.get(reason)
    return [f"all {rows.height} rows were quarantined as {reason}; {hint}"] if hint else []


def run_stage(ws: Workspace, recipe: Recipe, *, force: bool = False, progress: bool = False) -> StageResult:
    """The recipe's ingest stage: its sources into ``recipe.pool``."""
    return ingest(ws, recipe.pool, recipe.ingest, force=force, progress=progress)


def pool_summary(ws: Workspace, pool: str, detailed: bool = False) -> dict[str, Any]:
    """Counts and paths of a pool (``curate pools`` / ``curate show``)."""
    problems = read_parquet(ws.require_pool(pool))
    quarantine = read_quarantine(ws, pool)  # every stage's quarantine file
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
        sets = [_solution_set(folder) for folder in ws.solution_sets(pool)]  # `curate solutions`, one per set
        if sets:
            out["solution_sets"] = sets
    return out


def _solution_set(folder: Path) -> dict[str, Any]:
    """One solution set's counts (``curate show``): its name, solutions kept, per problem, CoScale pools, folder."""
    sp = read_parquet(folder / "solution_pools.parquet", S.SOLUTION_POOLS)
    return {
        "set": folder.name,
        "solutions": int(sp[S.N_SOLUTIONS].sum()),
        "solutions_per_problem": {str(n): c for n, c in sorted(Counter(sp[S.N_SOLUTIONS].to_list()).items())},
        "coscale_pools": dict(sorted(Counter(sp[S.COSCALE_POOL].to_list()).items())),
        "folder": str(folder),
    }


def _log(progress: bool, message: str) -> None:
    from curate.progress import log

    log(message, progress)


__all__ = ["clean", "ingest", "merge", "pool_summary", "raw_frame", "reconcile", "run_stage"]
