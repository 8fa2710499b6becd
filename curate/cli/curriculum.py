"""`curate` verbs of the curriculum stage: ``curriculum`` (write an offline plan) and ``simulate`` (replay it)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from curate.cli.common import Force, Home, Json, LockWait, emit, out, workspace


def register(app: typer.Typer) -> None:
    """Add this module's verbs to the `curate` app."""
    app.command()(curriculum)
    app.command()(simulate)


def curriculum(
    name: Annotated[str, typer.Option("--name", "-n", help="Curriculum name (folder under curricula/).")],
    selection: Annotated[str | None, typer.Option("--selection", help="Plan over this selection.")] = None,
    pool: Annotated[
        str | None,
        typer.Option("--pool", "-p", help="Plan over this pool's train split (with --selection: its evidence)."),
    ] = None,
    plan: Annotated[str, typer.Option("--plan", help="fastcurl | bands | scalingrl.")] = "fastcurl",
    preset: Annotated[str, typer.Option("--preset", help="FastCuRL stage preset: preview | v2 | v3.")] = "preview",
    unit: Annotated[str, typer.Option("--unit", help="Prompt length unit of the FastCuRL split: chars | tokens.")] = (
        "chars"
    ),
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="Local tokenizer folder (needed with --unit tokens).")
    ] = None,
    threshold: Annotated[
        float | None, typer.Option("--threshold", help="Split length (default: the mean prompt length).")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Stats model for pass rates if the pool has several (* = pooled).")
    ] = None,
    size: Annotated[int, typer.Option("--size", help="scalingrl: prompts per epoch (K_t).")] = 1500,
    epochs: Annotated[int, typer.Option("--epochs", help="scalingrl: epochs planned (also T of w_t = t/T).")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every random choice in the plan and sampler.")] = 0,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Write a stage plan, one training shard per stage, and a figure of the plan."""
    from curate.curriculum import stage as C
    from curate.curriculum.sampler import SamplerConfig

    cfg = C.CurriculumConfig(
        name=name, selection=selection, pool=pool, plan=plan, preset=preset, unit=unit, tokenizer=tokenizer,
        threshold=threshold, model=model, sampler=SamplerConfig(size=size, epochs=epochs, seed=seed),
    )  # fmt: skip
    result = C.build(workspace(home, lock_timeout), cfg, force=force, progress=not as_json)
    emit(result.to_dict(), as_json, _render_plan)


def simulate(
    curriculum: Annotated[str, typer.Option("--curriculum", "-c", help="Curriculum name to replay.")],
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated: uniform, des, each optionally +filters, +zv or +npr.")
    ] = "uniform,des,des+filters",
    steps: Annotated[int, typer.Option("--steps", help="Training steps to simulate (shared out over stages).")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Seed of true pass rates, rewards and samplers.")] = 0,
    lr: Annotated[float, typer.Option("--lr", help="Learning rate: p += lr·(1−p) per signal group.")] = 0.05,
    init: Annotated[str, typer.Option("--init", help="sample | mean of the ledger posterior as true pass rate.")] = (
        "sample"
    ),
    model: Annotated[
        str | None, typer.Option("--model", help="Ledger model whose stats give the evidence (* = all pooled).")
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Pool whose stats give the evidence.")] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Prompts per step (default: the stage's).")] = None,
    rollouts: Annotated[int | None, typer.Option("--rollouts", help="Rollouts per prompt (default: stage's).")] = None,
    home: Home = None,
    as_json: Json = False,
) -> None:
    """Replay a curriculum against a simple model of per-problem learning and compare sampling policies."""
    from curate.curriculum.simulate import SimulateConfig, run_simulation

    cfg = SimulateConfig(
        policies=tuple(p.strip() for p in policies.split(",") if p.strip()), steps=steps, seed=seed, lr=lr,
        init=init, model=model, pool=pool, batch=batch, rollouts=rollouts,
    )  # fmt: skip
    result = run_simulation(workspace(home), curriculum, cfg, progress=not as_json)
    if as_json:
        for row in result["policies"].values():
            row["curve"] = [[s, round(r, 4)] for s, r in row["curve"]]
    emit(result, as_json, _render_simulation)


def _render_plan(payload: dict) -> None:
    s = payload["summary"]
    state = "skipped (up to date)" if payload["skipped"] else "written"
    out.print(f"[bold]curriculum {s['name']}[/] ({s['plan']}) {state}: {s['kept']} of {s['rows_in']} problems kept")
    if s.get("drops"):
        out.print("drops: " + ", ".join(f"{k}={v}" for k, v in s["drops"].items()))
    if "split_counts" in s:
        c = s["split_counts"]
        out.print(f"split at {s['threshold']:.2f} {s['unit']}: L1={c['L1']} L2={c['L2']} L3={c['L3']}")
    table = Table()
    for col in ("stage", "rows", "n", "prompt_batch", "steps", "max_response_length"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for st in s["stages"]:
        table.add_row(*(str(st[c]) for c in ("stage", "rows", "n", "prompt_batch", "steps", "max_response_length")))
    out.print(table)
    out.print(f"[dim]{payload['outputs'][0] if payload['outputs'] else ''}[/]")


def _render_simulation(result: dict) -> None:
    ev = result["evidence"]
    out.print(
        f"[bold]simulation of {result['curriculum']}[/]: {result['problems']} problems, {result['steps']} steps; "
        f"starting pass rates from ledger {ev['ledger']}, prior {ev['prior']}, default {ev['default']}"
    )
    table = Table()
    cols = ("policy", "signal", "wasted", "rollouts", "skips", "retired", "pass rate", "stopped early")
    for col in cols:
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, r in result["policies"].items():
        table.add_row(
            name, f"{r['signal_fraction']:.1%}", f"{r['wasted_fraction']:.1%}", str(r["rollouts"]),
            str(r["backoff_skips"]), str(r["retired"]), f"{r['initial_pass_rate']:.3f} → {r['final_pass_rate']:.3f}",
            "yes" if r["stopped_early"] else "no",
        )  # fmt: skip
    out.print(table)
