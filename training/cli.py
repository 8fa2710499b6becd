"""The ``training`` command line.

Today it has one verb, ``training reward``: score a file of completions with the exact reward function the GRPO/CISPO
trainer will call (``training.rewards.accuracy_reward``, TRL's signature, over ``curate.verify``), so a user can
check a shard's rewards before spending GPU hours. ``training run`` (SFT, RL stages, re-distillation) arrives with
the training issue.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer


app = typer.Typer(
    name="training",
    help="Train on curated shards (GRPO/CISPO with TRL). Today: `training reward` checks rewards on a file.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def reward(
    file: Annotated[Path, typer.Argument(help="JSONL or Parquet with a completion column and a gold answer column.")],
    completion_col: Annotated[str, typer.Option(help="Column holding the model's completion.")] = "completion",
    answer_col: Annotated[str, typer.Option(help="Column holding the gold answer (or a list of them).")] = "answer",
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Score completions with the training reward (the same checker curation's pass rates use)."""
    import polars as pl

    from training.rewards import accuracy_reward

    if not file.is_file():
        typer.echo(f"error: {file} not found", err=True)
        raise typer.Exit(2)
    df = pl.read_parquet(file) if file.suffix == ".parquet" else pl.read_ndjson(file)
    missing = [c for c in (completion_col, answer_col) if c not in df.columns]
    if missing:
        typer.echo(f"error: column(s) {missing} not in {file}; have {df.columns}", err=True)
        raise typer.Exit(2)
    rewards = accuracy_reward(df[completion_col].to_list(), df[answer_col].to_list())
    scored = [r for r in rewards if r is not None]
    summary = {
        "rows": len(rewards),
        "scored": len(scored),
        "skipped_unreadable_gold": len(rewards) - len(scored),
        "mean_reward": round(sum(scored) / len(scored), 4) if scored else None,
    }
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        for k, v in summary.items():
            typer.echo(f"{k:>24}: {v}")


@app.callback()
def _root() -> None:
    """Train on curated shards."""


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    from curate.cli_common import run_app

    return run_app(app, argv)


if __name__ == "__main__":
    raise SystemExit(main())
