"""`curate verify FILE`: check a JSONL or Parquet file of (gold answer, completion) pairs with the one answer checker.

    curate verify pairs.jsonl --gold-col answer --completion-col completion
    curate verify ../shared/data/gsm8k/example_model_solutions.jsonl --gold-col ground_truth \\
        --completion-col 175b_verification.solution --label-col 175b_verification.is_correct

Each row gets its verdict, correctness, extracted answer and detail (the columns ``verdict``, ``correct``,
``extracted_answer``, ``detail``) in ``--out`` (default ``<file stem>.verified.parquet`` in the current folder), and
the summary gives counts per verdict, accuracy, agreement with shipped labels and throughput. Column names may be
dotted to reach into struct fields; a list-valued completion column (several samples per row) is exploded, together
with a list-valued label column.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer

from curate import schema as S
from curate.cli.common import USER_ERRORS, Json, emit, fail, out
from curate.errors import InputError
from curate.io import read_rows


def read_pairs(path: Path) -> pl.DataFrame:
    """The (gold, completion) rows to verify: ``curate.io.read_rows`` (one line for an empty or unreadable file)."""
    return read_rows(path, "pairs to verify")


def _column(df: pl.DataFrame, name: str) -> pl.Expr:
    """``name`` as a column, or ``a.b`` as field ``b`` of struct column ``a``."""
    if name in df.columns:
        return pl.col(name)
    head, *fields = name.split(".")
    if head not in df.columns or not fields:
        raise InputError(f"no column {name!r}; columns: {df.columns}")
    expr = pl.col(head)
    for f in fields:
        expr = expr.struct.field(f)
    return expr


def _as_gold(value: Any) -> Any:
    """A gold value; a JSON list of strings (polars reads a JSONL column that mixes lists and strings as text)
    becomes the list of alternatives it was. Bare ``[1, 2]`` stays a string: it is an interval."""
    if isinstance(value, str) and value.startswith('["') and value.endswith("]"):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        if isinstance(decoded, list) and all(isinstance(x, str) for x in decoded):
            return decoded
    return value


def _as_label(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return str(value).strip().lower() in ("true", "1", "yes", "correct")


def verify_frame(
    df: pl.DataFrame,
    gold_col: str,
    completion_col: str,
    *,
    label_col: str | None = None,
    finish_col: str | None = None,
    prompt_col: str | None = None,
    cfg: Any = None,
    workers: int | None = None,
    progress: bool = False,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Check every row; returns the frame with the verdict columns added and the summary."""
    from curate import verify

    cfg = cfg or verify.VerifyConfig()
    picked = {"_gold": gold_col, "_completion": completion_col, "_label": label_col}
    picked |= {"_finish": finish_col, "_prompt": prompt_col}
    df = df.with_columns(_column(df, c).alias(k) for k, c in picked.items() if c)
    lists = [k for k in ("_completion", "_label") if k in df.columns and isinstance(df.schema[k], pl.List)]
    if "_completion" in lists:
        df = df.explode(lists)
    col = {k: df[k].to_list() if k in df.columns else None for k in picked}
    t0 = time.perf_counter()
    verdicts = verify.check_batch(
        [c or "" for c in col["_completion"]],
        [_as_gold(g) for g in col["_gold"]],
        cfg,
        finish_reasons=col["_finish"],
        prompts=col["_prompt"],
        workers=workers,
        progress=progress,
    )
    wall = time.perf_counter() - t0
    df = df.drop([k for k in picked if k in df.columns]).with_columns(
        pl.Series(S.VERDICT, [v.verdict for v in verdicts], dtype=pl.String),
        pl.Series(S.CORRECT, [v.correct for v in verdicts], dtype=pl.Boolean),
        pl.Series(S.EXTRACTED_ANSWER, [v.extracted for v in verdicts], dtype=pl.String),
        pl.Series(S.DETAIL, [v.detail for v in verdicts], dtype=pl.String),
    )
    n = len(verdicts)
    summary: dict[str, Any] = {
        "rows": n,
        "verdicts": {v: sum(x.verdict == v for x in verdicts) for v in S.VERDICTS},
        "accuracy": round(sum(v.correct for v in verdicts) / n, 4) if n else None,
        "agreement": None,
        "wall_s": round(wall, 3),
        "items_per_s": round(n / wall, 1) if wall > 0 else None,
    }
    if label_col:
        pairs = [(v.correct, lab) for v, lab in zip(verdicts, map(_as_label, col["_label"]), strict=True)]
        pairs = [(ours, lab) for ours, lab in pairs if lab is not None]
        agree = sum(ours == lab for ours, lab in pairs)
        summary["agreement"] = {
            "labelled": len(pairs),
            "agree": agree,
            "rate": round(agree / len(pairs), 4) if pairs else None,
            "ours_correct_label_wrong": sum(ours and not lab for ours, lab in pairs),
            "ours_wrong_label_correct": sum(lab and not ours for ours, lab in pairs),
        }
    return df, summary


def register(app: typer.Typer) -> None:
    """Add this module's verbs to the `curate` app."""

    @app.command("verify")
    def verify_cmd(
        file: Annotated[Path, typer.Argument(help="JSONL, JSON or Parquet file of (gold answer, completion) rows.")],
        gold_col: Annotated[
            str, typer.Option("--gold-col", help="Gold answer column (string, number or list of alternatives).")
        ] = "answer",
        completion_col: Annotated[
            str, typer.Option("--completion-col", help="Completion column (a list column is exploded).")
        ] = "completion",
        label_col: Annotated[
            str | None,
            typer.Option("--label-col", help="Shipped correctness labels to compare against (bool, 0/1 or text)."),
        ] = None,
        finish_col: Annotated[
            str | None, typer.Option("--finish-col", help="Finish reason column ('length' marks truncation).")
        ] = None,
        prompt_col: Annotated[
            str | None, typer.Option("--prompt-col", help="Prompt column; echoes of the prompt are ignored.")
        ] = None,
        out_path: Annotated[
            Path | None,
            typer.Option("--out", help="Output Parquet (default: <file stem>.verified.parquet in this folder)."),
        ] = None,
        workers: Annotated[int, typer.Option(help="Worker processes (0: one per CPU core).")] = 0,
        item_timeout: Annotated[float, typer.Option(help="Seconds per check (waits for a CPU not counted).")] = 10.0,
        as_json: Json = False,
    ) -> None:
        """Check (gold, completion) pairs: write each row's verdict beside it and summarize.

        Verdicts: correct, wrong, no_answer, unparseable, timeout, truncated; with --label-col, the agreement with
        the shipped labels. The same checker as training's reward and curation's pass rates.
        """
        from curate import io, verify

        cfg = verify.VerifyConfig(item_timeout_s=item_timeout, workers=workers)
        try:
            df = read_pairs(file)
            df, summary = verify_frame(
                df,
                gold_col,
                completion_col,
                label_col=label_col,
                finish_col=finish_col,
                prompt_col=prompt_col,
                cfg=cfg,
                progress=not as_json,
            )
            target = out_path or Path(f"{file.stem}.verified.parquet")
            io.write_parquet(df, target)
        except (*USER_ERRORS, pl.exceptions.PolarsError) as exc:
            fail(str(exc))
        payload = {"file": str(file), "out": str(target), **summary}
        emit(payload, as_json, _render)


def _render(p: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"verify {p['file']}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("rows", str(p["rows"]))
    for verdict, count in p["verdicts"].items():
        if count:
            table.add_row(f"  {verdict}", str(count))
    table.add_row("accuracy", f"{p['accuracy']:.4f}" if p["accuracy"] is not None else "-")
    if p["agreement"]:
        a = p["agreement"]
        table.add_row("agreement with labels", f"{a['rate']} ({a['agree']}/{a['labelled']})")
        table.add_row("  ours correct, label wrong", str(a["ours_correct_label_wrong"]))
        table.add_row("  ours wrong, label correct", str(a["ours_wrong_label_correct"]))
    table.add_row("items/s", str(p["items_per_s"]))
    table.add_row("written", p["out"])
    out.print(table)
