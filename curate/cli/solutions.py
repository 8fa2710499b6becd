"""`curate solutions`: K distinct verified solutions per problem and the TRL SFT export (``curate.solutions``).

curate solutions --pool demo --k 4
curate solutions --pool demo --selection demo --k 4 --teacher-backend openai --teacher-model qwq \\
    --base-url http://gpu:8000/v1 --budget 16
curate solutions --pool gsm8k --split test --k 4 --export runs/gsm8k-sft
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from curate.cli.common import (
    USER_ERRORS,
    Force,
    Home,
    Json,
    LockWait,
    Workers,
    emit,
    fail,
    out,
    render_summary,
    workspace,
)


def register(app: typer.Typer) -> None:
    """Add this module's verb to the `curate` app."""
    app.command()(solutions)


def solutions(
    pool: Annotated[str, typer.Option("--pool", "-p", help="Pool to gather solutions for.")],
    selection: Annotated[str | None, typer.Option(help="Only this selection's problems.")] = None,
    k: Annotated[int, typer.Option("--k", help="Distinct verified solutions wanted per problem.")] = 4,
    name: Annotated[str | None, typer.Option(help="Export name: <home>/solutions/NAME/ (default selection/pool).")] = (
        None
    ),
    export: Annotated[str | None, typer.Option(help="Export folder (overrides --name).")] = None,
    split: Annotated[
        list[str] | None, typer.Option(help="Problem splits in scope (repeatable; default train).")
    ] = None,
    origin: Annotated[
        list[str] | None, typer.Option(help="Sources: reference, imported, ledger, teacher (repeatable; default all).")
    ] = None,
    model: Annotated[
        list[str] | None, typer.Option(help="Ledger models to take solutions from (default all).")
    ] = None,
    student: Annotated[str | None, typer.Option(help="Ledger model whose pass rate sets the CoScale pool.")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Tokenizer to count solution tokens (--max-tokens).")] = None,
    max_tokens: Annotated[int, typer.Option(help="SFT length bound in tokens (with --tokenizer).")] = 4096,
    max_chars: Annotated[int, typer.Option(help="SFT length bound in characters (0: off).")] = 16_000,
    min_reasoning_words: Annotated[int, typer.Option(help="Fewer words before the answer is an answer leak.")] = 5,
    near_duplicate: Annotated[
        float, typer.Option(help="Word 3-gram Jaccard at or above which two solutions count once.")
    ] = 0.4,
    boxed: Annotated[
        bool, typer.Option("--boxed/--no-boxed", help="Append a boxed answer line to '#### 72'-style solutions.")
    ] = True,
    teacher_model: Annotated[str | None, typer.Option(help="Teacher model (HF id, path, or served name).")] = None,
    teacher_backend: Annotated[str, typer.Option(help="Teacher backend: openai, hf or vllm.")] = "openai",
    budget: Annotated[int, typer.Option(help="Teacher samples per problem at most.")] = 16,
    per_round: Annotated[
        int, typer.Option(help="At least this many teacher samples per short problem per round.")
    ] = 4,
    teacher_temperature: Annotated[float, typer.Option(help="Teacher sampling temperature.")] = 0.7,
    teacher_top_p: Annotated[float, typer.Option(help="Teacher nucleus sampling top_p.")] = 0.95,
    teacher_max_tokens: Annotated[int, typer.Option(help="Teacher completion tokens at most.")] = 4096,
    teacher_seed: Annotated[int, typer.Option(help="Teacher run seed.")] = 0,
    base_url: Annotated[str, typer.Option(help="openai: server URL ending in /v1.")] = "http://127.0.0.1:8000/v1",
    api: Annotated[str, typer.Option(help="openai: chat or completions endpoint.")] = "chat",
    concurrency: Annotated[int, typer.Option(help="openai: requests in flight.")] = 16,
    teacher_tokenizer: Annotated[
        str | None, typer.Option(help="openai: local tokenizer to count teacher tokens / render prompts.")
    ] = None,
    device: Annotated[str, typer.Option(help="hf: auto, cpu, cuda ...")] = "auto",
    batch_size: Annotated[int, typer.Option(help="hf: sequences per generate call.")] = 32,
    tp: Annotated[int, typer.Option("--tp", help="vllm: tensor_parallel_size.")] = 1,
    max_model_len: Annotated[int | None, typer.Option(help="vllm: context length.")] = None,
    workers: Workers = None,
    home: Home = None,
    lock_timeout: LockWait = None,
    as_json: Json = False,
    force: Force = False,
) -> None:
    """Gather K distinct verified solutions per problem (reference, imported, ledger, teacher) and export SFT data.

    Every solution is re-checked; near-duplicates, wrong answers, answers without reasoning and over-length ones are
    dropped with a reason (never truncated). Teacher samples go to the ledger, so a killed run resumes. Writes the
    CoScale pools (unsolvable, solvable, solved, failed) and solutions/NAME/sft.parquet with its card and lineage.
    """
    from curate import schema as S
    from curate.rollout.backends import HFOptions, OpenAIOptions
    from curate.rollout.vllm_engine import VLLMOptions
    from curate.solutions import stage as st
    from curate.solutions.config import SolutionsConfig, TeacherConfig

    try:
        teacher = None
        if teacher_model:
            teacher = TeacherConfig(
                model=teacher_model, backend=teacher_backend, budget=budget, per_round=per_round,
                temperature=teacher_temperature, top_p=teacher_top_p, max_tokens=teacher_max_tokens,
                seed=teacher_seed,
                hf=HFOptions(device=device, batch_size=batch_size),
                vllm=VLLMOptions(tensor_parallel_size=tp, max_model_len=max_model_len),
                openai=OpenAIOptions(base_url=base_url, api=api, concurrency=concurrency, tokenizer=teacher_tokenizer),
            )  # fmt: skip
        cfg = SolutionsConfig(
            k=k, selection=selection, name=name, export=export, splits=tuple(split or ("train",)),
            origins=tuple(origin or S.ORIGINS), models=tuple(model or ()), student=student, tokenizer=tokenizer,
            max_tokens=max_tokens, max_chars=max_chars or None, min_reasoning_words=min_reasoning_words,
            near_duplicate=near_duplicate, boxed=boxed, teacher=teacher, verify_workers=workers,
        )  # fmt: skip
        result = st.solutions(workspace(home, lock_timeout), pool, cfg, force=force, progress=not as_json)
    except USER_ERRORS as exc:  # config, input, lock and teacher-backend errors: one line, exit 2
        fail(str(exc))
    emit(result.to_dict(), as_json, _render)


def _render(payload: dict) -> None:
    summary = dict(payload["summary"])
    hist = summary.pop("solutions_per_problem", {})
    if payload["skipped"]:
        out.print("[dim]solutions: up to date (skipped)[/]")
    render_summary(summary)
    if hist:
        table = Table(title="solutions per problem")
        table.add_column("solutions", justify="right")
        table.add_column("problems", justify="right")
        for n, count in hist.items():
            table.add_row(n, str(count))
        out.print(table)
