"""Plain user pools for the tests that walk a new user's path (issue 11): JSONL files with a problem and an
answer only, ingested, scored and selected through the stages' own functions."""

from __future__ import annotations

import json
from pathlib import Path

from curate.config import IngestConfig, SourceSpec
from curate.ingest import stage as ingest_stage
from curate.score import stage as score_stage
from curate.select import stage as select_stage


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def plain_problems(n: int, start: int = 0) -> list[dict]:
    """Problems with an answer only: no level, difficulty, subject or solution (a pool "never tuned on")."""
    return [
        {"problem": f"Compute {i} + {i * 3}." + " Then check your work carefully." * (i % 7), "answer": str(4 * i)}
        for i in range(start, start + n)
    ]


def ingest(ws, pool: str, *paths: Path, **kw) -> dict:
    cfg = IngestConfig(sources=tuple(SourceSpec(path=str(p), **kw) for p in paths))
    return ingest_stage.ingest(ws, pool, cfg).summary


def score_and_select(ws, pool: str, name: str, **select) -> tuple[dict, dict]:
    scored = score_stage.score_pool(ws, pool, score_stage.ScoreConfig(use_embeddings=False), progress=False)
    cfg = select_stage.SelectConfig(**{"size": 0, **select})
    selected = select_stage.select_pool(ws, pool, cfg, name=name, progress=False)
    return scored.summary, selected.summary
