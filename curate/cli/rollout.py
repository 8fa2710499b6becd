"""`curate rollout`, `curate stats` and `curate import-generations`: thin wrappers over ``curate.rollout``,
``curate.rollout.stats`` and ``curate.rollout.imports``.

curate rollout --pool demo --backend hf --model ./tiny --n 8 --limit 100 --max-tokens 512
curate rollout --pool big --backend vllm --model Qwen/Qwen2.5-Math-1.5B --n 8 --tp 1 --dp-size 8 --dp-rank 3
curate rollout --pool big --backend openai --model qwen --base-url http://gpu:8000/v1 --concurrency 64
curate stats --pool demo [--model M] [--json]
curate import-generations gsm8k/example_model_solutions.jsonl --pool gsm8k --format gsm8k-solutions
"""

from __future__ import annotations

from typing import Annotated

import typer

from curate.cli.common import Force, Home, Json, LockWait, Workers, emit, out, render_summary, workspace


Pool = Annotated[str, typer.Option("--pool", "-p", help="Pool to read (see `curate pools`).")]


def rollout(
    pool: Pool,
    model: Annotated[str, typer.Option("--model", "-m", help="HF id or local path (openai: the served name).")],
    backend: Annotated[str, typer.Option(help="Generation backend: hf, vllm or openai.")] = "hf",
    n: Annotated[int, typer.Option("--n", help="Samples per problem (sample_idx 0..n-1).")] = 8,
    limit: Annotated[int | None, typer.Option(help="Only the first K problems by problem_id.")] = None,
    selection: Annotated[
        str | None, typer.Option(help="Only the problems of this selection (fresh samples of it: raise --n).")
    ] = None,
    only_unsolved: Annotated[
        bool, typer.Option("--only-unsolved", help="Skip problems this model already solved in an earlier run.")
    ] = False,
    shard_size: Annotated[int, typer.Option(help="Problems per shard (unit of atomic writes and resume).")] = 64,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling top_p.")] = 1.0,
    max_tokens: Annotated[int, typer.Option(help="Maximum completion tokens.")] = 4096,
    seed: Annotated[int, typer.Option(help="Run seed (per-request seeds derive from it).")] = 0,
    instruction: Annotated[str | None, typer.Option(help="Instruction appended to each problem.")] = None,
    split: Annotated[list[str] | None, typer.Option(help="Problem splits to sample (repeatable).")] = None,
    revision: Annotated[str | None, typer.Option(help="Model revision to pin (hf, vllm).")] = None,
    batch_size: Annotated[int, typer.Option(help="hf: sequences per generate call (the engine's rows).")] = 32,
    device: Annotated[str, typer.Option(help="hf: auto, cpu, cuda, cuda:1 ...")] = "auto",
    threads: Annotated[int, typer.Option(help="hf: torch CPU threads (0: torch's default).")] = 0,
    engine: Annotated[
        str, typer.Option(help="hf: auto (the rollout engine where it supports the model, else generate) or hf.")
    ] = "auto",
    dtype: Annotated[str, typer.Option(help="hf/vllm: auto, float32, bfloat16, float16.")] = "auto",
    tp: Annotated[int, typer.Option("--tp", help="vllm: tensor_parallel_size.")] = 1,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vllm: fraction of GPU memory.")] = 0.9,
    max_model_len: Annotated[int | None, typer.Option(help="vllm: context length (default: the model's).")] = None,
    dp_size: Annotated[int, typer.Option(help="Data parallel: processes sharing the job.")] = 1,
    dp_rank: Annotated[int, typer.Option(help="Data parallel: this process takes shards i % dp-size == dp-rank.")] = 0,
    base_url: Annotated[str, typer.Option(help="openai: server URL ending in /v1.")] = "http://127.0.0.1:8000/v1",
    api: Annotated[str, typer.Option(help="openai: chat or completions endpoint.")] = "chat",
    concurrency: Annotated[int, typer.Option(help="openai: requests in flight.")] = 16,
    timeout: Annotated[float, typer.Option(help="openai: seconds per request.")] = 600.0,
    max_retries: Annotated[int, typer.Option(help="openai: retries on 429/5xx/timeouts.")] = 5,
    tokenizer: Annotated[
        str | None, typer.Option(help="openai: local tokenizer to count tokens / render completions prompts.")
    ] = None,
    workers: Workers = None,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Sample --n completions per problem, verify each, append to the resumable ledger; refresh stats.

    Killed or interrupted? Run the same command again: finished shards are kept, the rest is done.
    """
    from curate.prompts import INSTRUCTION as DEFAULT_INSTRUCTION
    from curate.rollout import stage as rollout_mod
    from curate.rollout.backends import HFOptions, OpenAIOptions
    from curate.rollout.vllm_engine import VLLMOptions

    cfg = rollout_mod.RolloutConfig(
        model=model,
        backend=backend,
        revision=revision,
        n=n,
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        seed=seed,
        instruction=DEFAULT_INSTRUCTION if instruction is None else instruction,
        splits=tuple(split or ("train",)),
        limit=limit,
        selection=selection,
        only_unsolved=only_unsolved,
        shard_size=shard_size,
        data_parallel_size=dp_size,
        data_parallel_rank=dp_rank,
        hf=HFOptions(device=device, dtype=dtype, batch_size=batch_size, threads=threads, engine=engine),
        vllm=VLLMOptions(
            tensor_parallel_size=tp,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
        ),
        openai=OpenAIOptions(
            base_url=base_url,
            api=api,
            concurrency=concurrency,
            timeout_s=timeout,
            max_retries=max_retries,
            tokenizer=tokenizer,
        ),
        verify_workers=workers,
    )
    result = rollout_mod.rollout(workspace(home, lock_timeout), pool, cfg, force=force, progress=not as_json)
    emit(result.to_dict(), as_json, _render_result)


def stats(
    pool: Pool,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Only this ledger model.")] = None,
    bins: Annotated[int, typer.Option(help="Pass-rate histogram bins.")] = 10,
    prior: Annotated[
        tuple[float, float] | None,
        typer.Option(help="Beta prior A B of the pass rate (default: the table's current one, else 1 1)."),
    ] = None,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Refresh the stats table from the ledger (new part files only) and summarize pass rates per model."""
    from curate.rollout import stats as stats_mod

    ws = workspace(home, lock_timeout)
    ws.require_pool(pool)
    refreshed = stats_mod.refresh_stats(ws, pool, prior=prior, force=force)
    summary = stats_mod.summarize(stats_mod.read_stats(ws, pool), model=model, bins=bins)
    payload = {"pool": pool, "refresh": refreshed, **summary}
    emit(payload, as_json, _render_stats)


def import_generations(
    path: Annotated[str, typer.Argument(help="File of generations with labels (JSONL, JSON or Parquet).")],
    pool: Pool,
    fmt: Annotated[str, typer.Option("--format", "-f", help="gsm8k-solutions, simplerl or openr1.")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="Generator name (default per format).")] = None,
    add_problems: Annotated[
        bool, typer.Option("--add-problems", help="Ingest the file's problems into the pool first.")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Only the first N source rows.")] = None,
    shard_rows: Annotated[int, typer.Option(help="Source rows per shard (unit of atomic writes).")] = 256,
    tokenizer: Annotated[str | None, typer.Option(help="Local tokenizer to count completion tokens.")] = None,
    workers: Workers = None,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
) -> None:
    """Re-verify a dataset's shipped generations into the ledger and report agreement with its labels."""
    from curate.rollout import imports

    cfg = imports.ImportConfig(
        path=path,
        format=fmt,
        model=model,
        limit=limit,
        shard_rows=shard_rows,
        tokenizer=tokenizer,
        add_problems=add_problems,
        verify_workers=workers,
    )
    payload = imports.import_generations(workspace(home, lock_timeout), pool, cfg, progress=not as_json)
    emit(payload, as_json, _render_import)


def headroom(
    pool: Pool,
    model: Annotated[str, typer.Option("--model", "-m", help="The ledger model (HF id or model folder).")],
    n: Annotated[int, typer.Option("--n", help="Rollouts per prompt the report reads (the first n of each).")] = 8,
    k: Annotated[int | None, typer.Option("--k", help="pass@k at this k (default: n).")] = None,
    by: Annotated[
        str | None, typer.Option(help="Bands: a problems column or meta.<key> (meta.ops), or des (bins of 0.1).")
    ] = None,
    source: Annotated[list[str] | None, typer.Option(help="Only problems of these ingest sources.")] = None,
    out_dir: Annotated[
        str | None, typer.Option("--out", help="Write headroom.parquet, .json, .png and the tables here.")
    ] = None,
    home: Home = None,
    as_json: Json = False,
) -> None:
    """What RL can still sharpen, before any RL step: per band and pass-rate bucket, pass@1, pass@k, the share of
    prompts in the middle (0 < p < 1), the ceiling (pass@k - pass@1), where each prompt belongs (RL, SFT, nowhere),
    and the suspected wrong golds, from the ledger's rollouts of MODEL on POOL.
    """
    from curate.score import headroom as headroom_mod

    rep = headroom_mod.pool_report(workspace(home), pool, model, n=n, k=k, by=by, sources=source)
    payload = headroom_mod.summary(rep)
    if out_dir:
        payload["files"] = headroom_mod.write_report(rep, out_dir)
    emit(payload, as_json, lambda _: [out.print(line, highlight=False) for line in headroom_mod.lines(rep)])


# --------------------------------------------------------------------------------------------------- rendering
def _render_result(payload: dict) -> None:

    state = "nothing missing (up to date)" if payload["skipped"] else f"done in {payload['wall_s']:.1f}s"
    out.print(f"[bold]rollout[/] {state}")
    render_summary(payload["summary"])


def _render_stats(payload: dict) -> None:
    from curate.rollout.stats import histogram_lines

    if not payload["models"]:
        out.print(f"no ledger rows in pool {payload['pool']}; run `curate rollout` or `curate import-generations`")
        return
    for m in payload["models"]:
        out.print(
            f"[bold]{m['model']}[/]: {m['problems']} problems with evidence, {m['samples']} samples, "
            f"mean pass rate {m['mean_pass_rate']:.3f} (posterior {m['mean_posterior']:.3f}), "
            f"zero-variance {m['zero_variance']:.1%} ({m['all_correct']} all correct, {m['none_correct']} none)",
            highlight=False,
        )
        for line in histogram_lines(m["histogram"]):
            out.print("  " + line, highlight=False)


_AGREEMENT_COLUMNS = (
    ("model", "model"),
    ("labelled", "n"),
    ("agreement", "agree"),
    ("both_correct", "both ok"),
    ("both_wrong", "both wrong"),
    ("ours_correct_shipped_wrong", "only ours ok"),
    ("ours_wrong_shipped_correct", "only shipped ok"),
    ("ours_accuracy", "ours acc"),
    ("shipped_accuracy", "shipped acc"),
)


def _render_import(payload: dict) -> None:
    from rich.table import Table

    render_summary({k: v for k, v in payload.items() if k not in ("agreement", "config", "not_in_pool_examples")})
    table = Table(title="ours vs shipped labels")
    for col, head in _AGREEMENT_COLUMNS:
        table.add_column(head, justify="left" if col == "model" else "right")
    for row in payload["agreement"]:
        table.add_row(*(str(row[c]) for c, _ in _AGREEMENT_COLUMNS))
    out.print(table)
    if payload.get("not_in_pool_examples"):
        out.print("not in the pool (first few; --add-problems ingests them):")
        for text in payload["not_in_pool_examples"]:
            out.print(f"  - {text}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add this module's verbs to the `curate` app."""
    app.command()(rollout)
    app.command()(stats)
    app.command("import-generations")(import_generations)
    app.command()(headroom)
