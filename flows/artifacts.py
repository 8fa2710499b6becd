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

The training flow's artifacts (``publish_training``: chain summary, lineage table, solutions histogram, learning
curves, eval curve, sigmoid fit) are described at the end of this module.
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


# --------------------------------------------------------------------------------------------------- training
# What a training flow run (flows/training.py) shows, from its summary (``training.outcome.write_summary``), keys
# per training recipe name: ``<name>-chain`` (Markdown: steps, pass rates, decisions, CoScale notes, fit advice,
# step timings), ``<name>-lineage`` (table: pool -> selection -> curriculum -> solutions -> each model folder with
# its pass rate), ``<name>-solutions`` (image: problems per number of kept solutions, from the pool's
# ``solution_pools.parquet``), ``<name>-training`` / ``-eval`` / ``-fit`` (images: learning curves, held-out pass
# rate against compute, the fitted sigmoid with its extrapolation).
TRAINING_FIGURES = ("training", "eval", "fit")


def publish_training(summary: dict[str, Any]) -> None:
    """Create the chain summary, lineage table and figure artifacts of one training flow run."""
    name = summary["name"]
    create_markdown_artifact(
        markdown=training_markdown(summary),
        key=key(name, "chain"),
        description=f"Training chain {name} (pool {summary['pool']}): {summary['run_dir']}",
    )
    create_table_artifact(
        table=lineage_rows(summary), key=key(name, "lineage"), description=f"Lineage of the models of run {name}"
    )
    pools = Path((summary.get("lineage") or {}).get("solution_pools") or "")  # the run's solution set (chain_lineage)
    if pools.name and pools.is_file():
        create_image_artifact(
            image_url=solutions_histogram_uri(pools), key=key(name, "solutions"), description=f"{pools}"
        )
    for path in (Path(p) for p in summary.get("figures") or []):
        if path.stem in TRAINING_FIGURES and path.is_file() and path.stat().st_size <= MAX_IMAGE_BYTES:
            create_image_artifact(image_url=data_uri(path), key=key(name, path.stem), description=str(path))


def _rows(path: Path) -> int | None:
    import polars as pl

    if path.is_file() and path.suffix == ".parquet":
        return pl.scan_parquet(path).select(pl.len()).collect().item()
    return None


def lineage_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per link of the chain, oldest first: the pool's problems, the selection, the curriculum, the
    solutions table, then every model folder of the run (the model it started from, its held-out pass rate)."""
    from curate.curriculum.stage import read_plan
    from training.card import LINEAGE, read_lineage

    lineage = summary.get("lineage") or {}
    home, pool = Path(summary["home"]), summary["pool"]
    rows: list[dict[str, Any]] = []

    def add(item: str, path: Path | str, made_from: str = "", rows_: int | None = None, step: dict | None = None):
        step = step or {}
        rows.append({
            "item": item, "path": str(path), "rows": rows_, "made_from": made_from,
            "pass_at_1": step.get("pass_at_1"), "stderr": step.get("stderr"), "wall_s": step.get("wall_s"),
        })  # fmt: skip

    problems = home / "pools" / pool / "problems.parquet"
    add("pool", problems, rows_=_rows(problems))
    if lineage.get("selection"):
        add("selection", lineage["selection"], "pool", _rows(Path(lineage["selection"])))
    if lineage.get("curriculum"):
        kept = (read_plan(lineage["curriculum"]) or {}).get("kept")
        add("curriculum", lineage["curriculum"], "selection" if lineage.get("selection") else "pool", kept)
    elif lineage.get("train"):
        add("train", lineage["train"], "pool", _rows(Path(lineage["train"])))
    if lineage.get("solutions"):
        add("solutions", lineage["solutions"], "selection" if lineage.get("selection") else "pool",
            _rows(Path(lineage["solutions"])))  # fmt: skip
    for step in summary.get("steps") or []:
        has_card = (Path(step["model"]) / LINEAGE).is_file()
        base = read_lineage(step["model"]).get("base_model") if has_card else None
        add(f"model: {step['step']}", step["model"], base or "", step=step)
    return [{k: v if v is None or isinstance(v, bool | int | float) else _cell(v) for k, v in r.items()} for r in rows]


def training_markdown(summary: dict[str, Any]) -> str:
    """The run's Markdown summary: the steps, the decisions, CoScale notes, the fit's advice, step timings."""
    lines = [
        f"# Training chain: {summary['name']}",
        "",
        f"pool `{summary['pool']}` · run folder `{summary['run_dir']}` · final model `{summary.get('final_model')}`"
        + (f" · this run {summary['wall_s']:.0f} s" if summary.get("wall_s") is not None else ""),
        "",
        "| step | held-out pass@1 | ± SE | problems x k | wall s | model |",
        "|---|---:|---:|---|---:|---|",
    ]
    for s in summary.get("steps") or []:
        lines.append(
            f"| {s['step']} | {s.get('pass_at_1', float('nan')):.3f} | {s.get('stderr', float('nan')):.3f} | "
            f"{s.get('n_problems')} x {s.get('k')} | {s.get('wall_s', 0):.0f} | `{s['model']}` |"
        )
    if summary.get("failed"):
        lines += ["", f"**failed:** `{_cell(summary['failed'], 1000)}` (trigger the run again to resume)"]
    if summary.get("decisions"):
        lines += ["", "## Decisions", "", "| after | action | reason |", "|---|---|---|"]
        lines += [f"| {d['after']} | {d['action']} | {_cell(d['reason'])} |" for d in summary["decisions"]]
    if summary.get("coscale"):
        lines += ["", "## CoScale iterations", "", *_summary_lines({"coscale steps": summary["coscale"]})[2:]]
    fit = summary.get("fit") or {}
    if fit.get("fit"):
        f = fit["fit"]
        params = f"A = {f['A']:.4f} · B = {f['B']:.3f} · C_mid = {f['C_mid']:.4g} · R0 = {f['R0']:.4f}"
        lines += ["", "## Scaling fit", "", f"{params} ({f['n_fit']} of {f['n_points']} points)", ""]
        lines.append(fit["advice"]["message"])
    elif fit.get("error"):
        lines += ["", "## Scaling fit", "", f"no fit: {_cell(fit['error'], 500)}"]
    if summary.get("timings"):
        lines += ["", "## Step timings", "", "| step | in step s | with task s |", "|---|---:|---:|"]
        lines += [f"| {t['step']} | {t['wall_s']:.2f} | {t['call_s']:.2f} |" for t in summary["timings"]]
    return "\n".join(lines) + "\n"


def solutions_histogram_uri(pools: Path) -> str:
    """A bar chart of problems per number of kept solutions (``solution_pools.parquet``), as a PNG data URI."""
    import io as _io

    import polars as pl
    from matplotlib.figure import Figure

    counts = pl.read_parquet(pools, columns=["n_solutions"]).group_by("n_solutions").len().sort("n_solutions")
    fig = Figure(figsize=(6.0, 3.5), layout="constrained")
    ax = fig.subplots()
    ax.bar(counts["n_solutions"].to_list(), counts["len"].to_list(), color="#1f77b4")
    ax.set_xlabel("verified solutions kept per problem")
    ax.set_ylabel("problems")
    ax.set_title(f"solutions: {pools.parent.name} ({counts['len'].sum()} problems)")
    ax.grid(alpha=0.3, axis="y")
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
