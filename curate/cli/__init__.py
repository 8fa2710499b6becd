"""The ``curate`` command line: one verb per stage, thin wrappers over the stage functions.

    curate ingest SOURCE... --pool NAME        read sources into a pool (problems + quarantine)
    curate run --recipe datasets/demo/recipe.yaml   run the stages a recipe lists
    curate pools / curate show POOL             what the workspace holds

Verbs of the other stages live in one module per verb group (``curate/cli/rollout.py``, ``select.py``, ...) and
are added to the app at the bottom of this file. Errors: ``curate.console.run_app`` (one line and exit 2 for a user
error or a usage error, a traceback for a bug, 130 on Ctrl-C); ``curate --version`` prints the version.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from curate.cli.common import (
    Force,
    Home,
    Json,
    LockWait,
    console,
    emit,
    out,
    render_summary,
    workspace,
)
from curate.console import VERSION_OPTION, run_app, whole_summaries


app = typer.Typer(
    name="curate",
    help="Curate small, verified, well-ordered RL training sets for reasoning LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: Rich's read "[default: 4]" and ".[gpu]" as markup, kept docstrings' hard line breaks and
    # squeezed the option table at 80 columns
    rich_markup_mode=None,
)


# --------------------------------------------------------------------------------------------------- run
@app.command()
def run(
    recipe: Annotated[Path, typer.Option("--recipe", "-r", help="Recipe YAML (e.g. datasets/demo/recipe.yaml).")],
    stage: Annotated[
        list[str] | None, typer.Option("--stage", "-s", help="Run only these stages (repeatable).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a recipe key, e.g. --set select.size=500 (repeatable)."),
    ] = None,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Run the stages a recipe lists, in order; finished stages are skipped (their manifests match).

    The whole recipe is validated first (every section, every key), so a typo fails before any work starts.
    Workspace root: --home, else $CURATE_HOME, else the recipe's home:, else ./workspace (the same rule the Prefect
    flow uses).
    """
    from curate import config, pipeline

    rec = pipeline.load_recipe(recipe, config.parse_overrides(set_))
    ws = workspace(home, lock_timeout, recipe_home=rec.home)

    def show(result: pipeline.StageResult) -> None:
        if not as_json:
            state = "[dim]skipped (up to date)[/]" if result.skipped else f"done in {result.wall_s:.1f}s"
            console.print(f"[bold]{result.stage}[/] {state}")
            render_summary(result.summary)

    t0 = time.perf_counter()
    results = pipeline.run_recipe(rec, ws, only=stage, force=force, on_result=show, progress=not as_json)
    payload = {
        "recipe": str(recipe),
        "home": str(ws.root),
        "wall_s": round(time.perf_counter() - t0, 3),
        "stages": [r.to_dict() for r in results],
    }
    emit(payload, as_json, lambda p: console.print(f"[green]recipe {rec.name} finished in {p['wall_s']:.1f}s[/]"))


# --------------------------------------------------------------------------------------------------- ingest
@app.command()
def ingest(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Files or folders (JSONL, JSON, Parquet, CSV, HF save_to_disk), hf://org/name, or "
            "gen://mixed?n=2000&seed=0 (the built-in generator)."
        ),
    ],
    pool: Annotated[str, typer.Option("--pool", "-p", help="Pool to add the problems to.")],
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="Adapter; detected when unambiguous. See `curate formats`."),
    ] = None,
    split: Annotated[
        str | None, typer.Option("--split", help="train, validation or test (default: from the source).")
    ] = None,
    field_map: Annotated[
        list[str] | None,
        typer.Option("--field", help="Generic adapter mapping, e.g. --field problem=question --field answer=gt."),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Source name in the pool (one source only).")] = None,
    max_problem_chars: Annotated[int, typer.Option(help="Longer problems go to quarantine as too_long.")] = 20_000,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Read sources into a pool: normalize answers, merge exact duplicates, quarantine bad rows with reasons.

    Quarantine reasons: missing_answer, empty_problem, too_long, undecodable, malformed, duplicate_conflict (same
    problem, answers that differ), contaminated (a train row identical to a test row), unparseable_answer. Gold
    answers the checker cannot verify stay, flagged unverifiable_answer (selection leaves them out). Compressed
    inputs (.gz, .bz2, .xz, .zst) are read. Ingest eval sets with --split test so decontamination knows them.
    """
    from curate import config
    from curate.ingest import stage as ingest_mod

    fields = dict(_split_pair(f) for f in field_map or ())
    if name and len(sources) > 1:
        raise config.ConfigError("--name names one source; give one source per call or drop --name")
    specs = [config.SourceSpec(path=s, format=fmt, fields=fields, split=split, name=name) for s in sources]
    cfg = config.IngestConfig(sources=tuple(specs), max_problem_chars=max_problem_chars)
    result = ingest_mod.ingest(workspace(home, lock_timeout), pool, cfg, force=force, progress=not as_json)
    emit(result.to_dict(), as_json, lambda p: render_summary(p["summary"]))


@app.command()
def formats() -> None:
    """List the source adapters `curate ingest --format` accepts, with what each reads."""
    from curate.ingest.formats import FORMATS

    table = Table(title="ingest formats")
    table.add_column("format")
    table.add_column("reads")
    for fmt, desc in FORMATS.items():
        table.add_row(fmt, escape(desc))  # "[:config][@split]" is text, not rich markup
    out.print(table)


# --------------------------------------------------------------------------------------------------- inspect
@app.command()
def pools(home: Home = None, as_json: Json = False) -> None:
    """List the pools in the workspace with their problem and quarantine counts."""
    from curate.ingest import stage as ingest_mod

    ws = workspace(home)
    payload = {"home": str(ws.root), "pools": [ingest_mod.pool_summary(ws, p) for p in ws.pools()]}

    def render(p: dict) -> None:
        if not p["pools"]:
            console.print(f"no pools under {p['home']}; create one with `curate ingest SOURCE --pool NAME`")
            return
        table = Table(title=f"pools in {p['home']}")
        for col in ("pool", "problems", "train", "test", "quarantined", "sources"):
            table.add_column(col, justify="left" if col == "pool" else "right")
        for row in p["pools"]:
            table.add_row(
                row["pool"],
                str(row["problems"]),
                str(row["splits"].get("train", 0)),
                str(row["splits"].get("test", 0)),
                str(row["quarantined"]),
                str(len(row["sources"])),
            )
        out.print(table)

    emit(payload, as_json, render)


@app.command()
def show(pool: Annotated[str, typer.Argument(help="Pool name.")], home: Home = None, as_json: Json = False) -> None:
    """One pool's summary: counts by source, split and drop reason, and where its tables are."""
    from curate.ingest import stage as ingest_mod

    ws = workspace(home)
    ws.require_pool(pool)
    emit(ingest_mod.pool_summary(ws, pool, detailed=True), as_json, _render_show)


def _render_show(payload: dict) -> None:
    """``curate show`` on the terminal: the pool's folder once, then its tables by file name, so no line is wider
    than the folder's path (whole paths made lines of 82-108 columns at 80). ``--json`` keeps them."""
    tables = payload.get("tables") or {}
    shown = {k: v for k, v in payload.items() if k != "tables"} | {"sources": ", ".join(payload["sources"]) or "-"}
    if tables:
        shown |= {"folder": str(Path(next(iter(tables.values()))).parent), "tables": {k: Path(p).name for k, p in
                                                                                     tables.items()}}  # fmt: skip
    render_summary(shown)


# --------------------------------------------------------------------------------------------------- helpers
def _split_pair(item: str) -> tuple[str, str]:
    from curate.errors import ConfigError

    if "=" not in item:
        raise ConfigError(f"--field {item!r} is not OURS=THEIRS (e.g. problem=question)")
    k, v = item.split("=", 1)
    return k.strip(), v.strip()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (testable without a subprocess)."""
    return run_app(app, argv)


# Verbs of later stages, defined beside their stage code.
from curate.cli import curriculum as _curriculum  # noqa: E402
from curate.cli import decontaminate as _decontaminate  # noqa: E402
from curate.cli import rollout as _rollout  # noqa: E402
from curate.cli import select as _select  # noqa: E402
from curate.cli import solutions as _solutions  # noqa: E402
from curate.cli import verify as _verify  # noqa: E402


for _group in (_verify, _rollout, _decontaminate, _select, _curriculum, _solutions):
    _group.register(app)
whole_summaries(app)


@app.callback()
def _root(version: Annotated[bool, VERSION_OPTION] = False) -> None:
    """Curate small, verified, well-ordered RL training sets for reasoning LLMs."""


if __name__ == "__main__":
    raise SystemExit(main())
