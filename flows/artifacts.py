"""What a curation flow run shows in the Prefect UI: a Markdown summary, the selection as a table, plots as images.

Everything is derived generically from the stages' ``StageResult`` dicts (``stage``, ``skipped``, ``outputs``,
``summary``, ``wall_s``), so a new stage's counts, drops by reason or contamination figures appear without a
change here. Three kinds of artifact, each with a stable key per recipe so the UI's Artifacts page keeps their
history across runs:

- ``<recipe>-summary`` (Markdown): one row per stage (state, wall time, outputs), then each stage's summary.
- ``<recipe>-selections-selection`` (table): the first ``TABLE_ROWS`` rows of any ``selection.parquet`` written.
- ``<recipe>-<folder>-<plot>`` (image): every PNG in a stage's output folders (``demo-curricula-plan``).

Images: Prefect 3.7's image artifact stores one URL and the UI renders it as ``<img src=URL>``. A ``file://`` URI
does not display there (a page served over http may not load local files), so the PNG is embedded as a
``data:image/png;base64,...`` URI, which the browser renders from the artifact itself with no file server.
PNGs larger than ``MAX_IMAGE_BYTES`` (or past the first ``MAX_IMAGES``) are only listed by path in the summary.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from prefect.artifacts import create_image_artifact, create_markdown_artifact, create_table_artifact

from curate.io import Workspace


TABLE_ROWS = 50
MAX_CELL_CHARS = 200
MAX_IMAGES = 12
MAX_IMAGE_BYTES = 2_000_000
SELECTION_FILE = "selection.parquet"


def key(*parts: str) -> str:
    """An artifact key (lowercase letters, digits, dashes): ``key("Demo v1", "summary") == "demo-v1-summary"``."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-") or "curation"


def file_key(name: str, path: Path, ws: Workspace) -> str:
    """The key of a file's artifact: recipe name + the file's workspace path without the recipe name repeated.

    ``selections/demo/des.png`` of recipe ``demo`` -> ``demo-selections-des``.
    """
    rel = path.relative_to(ws.root) if path.is_relative_to(ws.root) else Path(path.parent.name) / path.name
    return key(name, *(part for part in rel.with_suffix("").parts if part != name))


def publish(report: dict[str, Any], ws: Workspace) -> None:
    """Create the summary, selection-table and plot artifacts of one flow run (see the module docstring)."""
    name = report["name"]
    tables = selection_files(report["stages"])
    plots = plot_files(report["stages"])
    images = [p for p in plots if p.stat().st_size <= MAX_IMAGE_BYTES][:MAX_IMAGES]
    create_markdown_artifact(
        markdown=summary_markdown(report, tables, plots),
        key=key(name, "summary"),
        description=f"Curation summary of recipe {name} (pool {report['pool']})",
    )
    for path in tables:
        create_table_artifact(
            table=table_rows(path), key=file_key(name, path, ws), description=f"First {TABLE_ROWS} rows of {path}"
        )
    for path in images:
        create_image_artifact(image_url=data_uri(path), key=file_key(name, path, ws), description=str(path))


# --------------------------------------------------------------------------------------------------- finding
def _output_paths(stages: list[dict[str, Any]]) -> list[Path]:
    return [Path(p) for result in stages for p in result.get("outputs", [])]


def selection_files(stages: list[dict[str, Any]]) -> list[Path]:
    """Every ``selection.parquet`` among the stages' outputs (an output file itself, or inside an output folder)."""
    found = []
    for path in _output_paths(stages):
        candidate = path if path.name == SELECTION_FILE else path / SELECTION_FILE
        if candidate.is_file() and candidate not in found:
            found.append(candidate)
    return found


def plot_files(stages: list[dict[str, Any]]) -> list[Path]:
    """Every PNG among the stages' outputs: a ``.png`` output, or PNGs anywhere under an output folder."""
    found: list[Path] = []
    for path in _output_paths(stages):
        if path.is_dir():
            candidates = sorted(path.rglob("*.png"))
        elif path.suffix == ".png" and path.is_file():
            candidates = [path]
        else:
            candidates = []
        found.extend(p for p in candidates if p not in found)
    return found


# --------------------------------------------------------------------------------------------------- rendering
def summary_markdown(report: dict[str, Any], tables: list[Path], plots: list[Path]) -> str:
    """The run's Markdown summary: a stage table, each stage's summary, the failure if any, where things are."""
    lines = [
        f"# Curation: {report['name']}",
        "",
        f"recipe `{report['recipe']}` · pool `{report['pool']}` · workspace `{report['home']}` · "
        f"{report['wall_s']:.1f} s",
        "",
        "| stage | state | wall s | outputs |",
        "|---|---|---:|---|",
    ]
    for result in report["stages"]:
        state = "skipped (up to date)" if result["skipped"] else "done"
        outputs = "<br>".join(f"`{o}`" for o in result.get("outputs", [])) or "-"
        lines.append(f"| {result['stage']} | {state} | {result['wall_s']:.1f} | {outputs} |")
    failed = report.get("failed")
    if failed:
        lines.append(f"| {failed['stage']} | **failed** | - | - |")
        lines += ["", f"**{failed['stage']} failed:** `{_cell(failed['error'], 1000)}`"]
    for result in report["stages"]:
        if result.get("summary"):
            lines += ["", f"## {result['stage']}", "", *_summary_lines(result["summary"])]
    if tables or plots:
        lines += ["", "## Files", ""]
        lines += [f"- selection table: `{p}`" for p in tables]
        lines += [f"- plot: `{p}`" for p in plots]
    return "\n".join(lines) + "\n"


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    """Scalars and small mappings as a key/value table; lists of row dicts as their own tables."""
    lines = ["| key | value |", "|---|---|"]
    nested = []
    for k, value in summary.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            nested.append((k, value))
        elif isinstance(value, dict):
            lines.append(f"| {k} | {', '.join(f'{a}={b}' for a, b in value.items()) or '-'} |")
        else:
            lines.append(f"| {k} | {_cell(value)} |")
    for k, rows in nested:
        cols = list(dict.fromkeys(c for row in rows for c in row))
        lines += ["", f"**{k}**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in cols) + " |" for row in rows]
    return lines


def _cell(value: Any, limit: int = MAX_CELL_CHARS) -> str:
    if isinstance(value, dict):
        text = ", ".join(f"{a}={b}" for a, b in value.items()) or "-"
    elif isinstance(value, list | tuple):
        text = json.dumps(list(value), default=str)
    else:
        text = str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table_rows(path: Path, n: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """The first ``n`` rows of a Parquet file as JSON-simple dicts (long text cut, lists and structs as JSON)."""
    import polars as pl

    frame = pl.read_parquet(path, n_rows=n)
    return [
        {k: v if v is None or isinstance(v, bool | int | float) else _cell(v) for k, v in row.items()}
        for row in frame.to_dicts()
    ]


def data_uri(path: Path) -> str:
    """``data:image/png;base64,...`` for a PNG, so the UI shows it without access to the file system."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
