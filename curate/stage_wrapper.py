"""The one stage wrapper, ``run_wrapped``: fingerprint -> skip if done -> run -> atomic writes -> one manifest.

Every stage's entry point goes through it (directly, or through its ``run_stage``), so the CLI verbs,
``curate run`` (curate.pipeline) and the Prefect tasks skip, write and report the same way. A stage hands it a
function that does the work and returns a ``StageOutput`` (the summary, the tables to write, the manifest's
counts); the wrapper writes the tables together (``io.commit``), the manifest (curate.manifest) beside the first
output, and returns a ``StageResult``, which the CLI prints, ``--json`` dumps and the flows show as an artifact.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate.io import Workspace, commit
from curate.manifest import (
    Manifest,
    code_version,
    fingerprint,
    hash_inputs,
    output_identity,
    read_manifest,
    write_manifest,
)


@dataclass
class StageResult:
    """What one stage did: printed by the CLI, returned as JSON, shown as a Prefect artifact."""

    stage: str
    skipped: bool = False
    outputs: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "skipped": self.skipped,
            "outputs": self.outputs,
            "summary": self.summary,
            "wall_s": round(self.wall_s, 3),
        }


@dataclass
class StageOutput:
    """What a stage's work returns to ``run_wrapped``.

    summary: the numbers printed by the CLI and stored in the manifest. tables: ``{path: (frame, schema or
    None)}`` the wrapper writes atomically, in order (a stage that writes a folder itself leaves this empty).
    rows_in / rows_out / drops / extra: the manifest's counts and any further facts. check: called after the
    tables are written; returns entries for the summary computed from the files on disk (e.g. ``reconciles``).
    """

    summary: dict[str, Any]
    tables: dict[Path, tuple[pl.DataFrame, pl.Schema | None]] = field(default_factory=dict)
    rows_in: int = 0
    rows_out: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    check: Callable[[], dict[str, Any]] | None = None


def _input_key(ws: Workspace, path: Path) -> str:
    """Inputs and outputs under the workspace are recorded relative to it, so a moved or copied workspace still
    skips finished stages (with absolute paths, a copy under another ``--home`` redid all five curation stages)."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ws.root))
    except ValueError:
        return str(path)


def run_wrapped(
    ws: Workspace,
    stage: str,
    *,
    inputs: Sequence[str | os.PathLike],
    config: Mapping[str, Any],
    outputs: Sequence[str | os.PathLike],
    fn: Callable[[Manifest], StageOutput],
    force: bool = False,
) -> StageResult:
    """The one stage wrapper: fingerprint -> skip if done -> run -> atomic writes -> one manifest layout.

    1. Fingerprint: the content hash of every input (files or folders; missing ones hash as "missing"), the
       JSON-able ``config`` and ``code_version()``.
    2. Skip: when the manifest of ``outputs[0]`` (``manifest_path``) carries the same fingerprint and every output
       is still as it was written (``output_identity``), return its stored summary with ``skipped=True``
       (``force`` always runs).
    3. Run ``fn(manifest)``: the stage's work (pure functions on frames plus whatever the stage writes itself).
       It gets the manifest being built, already holding stage, inputs, config and code version (the select stage
       writes it into its folder's dataset card).
    4. Write ``StageOutput.tables`` together (``commit``: all or none), run ``StageOutput.check`` on what is now
       on disk.
    5. Write the manifest (``Manifest``: stage, fingerprint, inputs, config, code_version, versions, rows_in,
       rows_out, drops, summary, extra, outputs, started_at, wall_s) beside ``outputs[0]``: ``x.manifest.json``
       for a table, ``<folder>/manifest.json`` for a folder.

    The CLI verbs, ``curate run`` and the Prefect tasks reach this through each stage's ``run_stage`` (or its
    named entry point), so all of them skip, write and report the same way.
    """
    t0 = dt.datetime.now(dt.UTC)
    hashed = {_input_key(ws, Path(p)): v for p, v in hash_inputs(inputs).items()}
    config = dict(config)
    code = code_version()
    first = Path(outputs[0])
    stored = None if force else read_manifest(first)
    if stored is not None and stored.get("fingerprint") == fingerprint(hashed, config, code):
        recorded = stored.get("outputs") or {}
        if "summary" in stored and all(recorded.get(_input_key(ws, Path(o))) == output_identity(o) for o in outputs):
            return StageResult(stage, skipped=True, outputs=[str(o) for o in outputs], summary=stored["summary"])
    manifest = Manifest(stage=stage, inputs=hashed, config=config, code_version=code).seal()
    out = fn(manifest)
    if out.tables:
        with commit(Path(next(iter(out.tables))).parent) as staged:  # the tables change together or not at all
            for path, (frame, schema) in out.tables.items():
                staged.parquet(frame, path, schema)
    summary = dict(out.summary)
    if out.check is not None:
        summary.update(out.check())
    manifest.summary, manifest.rows_in, manifest.rows_out = summary, out.rows_in, out.rows_out
    manifest.drops = dict(out.drops)
    manifest.extra.update(out.extra)
    manifest.wall_s = round((dt.datetime.now(dt.UTC) - t0).total_seconds(), 3)
    manifest.outputs = {_input_key(ws, Path(o)): output_identity(o) for o in outputs}
    write_manifest(first, manifest)
    return StageResult(stage, outputs=[str(o) for o in outputs], summary=summary, wall_s=manifest.wall_s)
