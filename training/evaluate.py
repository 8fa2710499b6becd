r"""Held-out evaluation: pass@1 as mean@k over a pool's test problems, through curate's generation and checker.

The model is sampled with curate's ``hf`` backend (``curate.rollout.backends.generate_hf``: the user turn from
``curate.prompts.user_message`` inside the model's own chat template, seeded per batch) and every completion is
judged by ``curate.verify.check_batch``, the same checker behind curation's pass rates and the training reward, so
an eval score, a rollout pass rate and a reward can never disagree on what "correct" means.

pass@1 is estimated as mean@k (ScaleRL: mean@16 over 1,000 held-out prompts; FastCuRL: 16 samples at temperature
0.6): each problem's mean over its k samples, averaged over problems. Its standard error is the standard deviation
(ddof=1) of the per-problem means over sqrt(n problems), which counts both the sampling noise and the spread of
problem difficulty. Fewer than ``min_samples`` samples in all (n problems x k) earns a weak-evidence warning: with
16 problems x 4 samples an SE of 0.1 is typical, too wide to tell two checkpoints apart.

Problems come from the pool's problems table, ``split == "test"`` by default (``heldout_problems``), so evaluation
never sees a training problem; a ``limit`` takes the first problems by ``problem_id`` (a hash, so a fixed
pseudo-random subset: every checkpoint of a run is scored on the same problems).

During an RL run ``append_eval`` adds one row per evaluation to ``<run_dir>/eval.parquet`` (step, compute,
pass_at_1, stderr, n, k), the curve ``training fit`` reads.

    problems = heldout_problems("workspace", "demo", limit=200)
    result = evaluate("runs/rl/checkpoint-100", problems, EvalConfig(k=4))
    append_eval("runs/rl", step=100, compute=3.2, result=result)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from curate import io, verify
from curate import schema as S
from curate.config import placement
from curate.errors import ConfigError, InputError
from curate.progress import bar
from curate.prompts import INSTRUCTION, user_message
from curate.rollout.backends import (
    Completion,
    HFOptions,
    OnDone,
    OpenAIOptions,
    Request,
    Sampling,
    check_engine,
    generate_hf,
    generate_openai,
    load_hf,
    request_seed,
    sampler_name,
)
from curate.rollout.model_check import check_model
from curate.rollout.vllm_engine import VLLMOptions
from training import layout


EVAL_FILE = layout.EVAL_CURVE
EVAL_SCHEMA = pl.Schema(
    {
        "step": pl.Int64,
        "compute": pl.Float64,
        "pass_at_1": pl.Float64,
        "stderr": pl.Float64,
        "n": pl.Int64,
        "k": pl.Int64,
    }
)
GenerateFn = Callable[[Sequence[Request], Sampling], list[Completion]]
BACKENDS = ("hf", "vllm", "openai")  # curate rollout's (``curate.rollout.stage.BACKENDS``)


@dataclass(frozen=True)
class EvalConfig:
    """How a model is evaluated.

    k: samples per problem (pass@1 = mean@k). temperature / top_p: sampling (FastCuRL and ScalingRL evaluate at
    temperature 0.6, top_p 1). max_new_tokens: generation budget; a completion cut there is ``truncated`` (wrong).
    batch_size: sequences per ``generate`` call. seed: the run seed (per-problem seeds derive from it), so the same
    seed and batch size give the same completions. limit: at most this many problems (the first by problem_id).
    instruction: appended to each problem (``curate.prompts``). device / dtype / threads: the hf backend's
    (``HFOptions``). engine: the hf backend's sampler, ``auto`` (the rollout engine where it supports the model)
    or ``hf`` (``generate``). min_samples: fewer samples than this in all gives a weak-evidence warning.
    backend: ``hf`` (transformers ``generate``, CPU or one GPU), ``vllm`` (the offline engine: the GPU recipe's
    long answers at a fraction of the time; ``pip install -e '.[gpu]'``) or ``openai`` (a server already serving
    the model, ``served_model`` the name it serves it under; default the model as given), as ``curate rollout``;
    ``vllm`` / ``openai``: their options (``curate.rollout``'s ``VLLMOptions`` / ``OpenAIOptions``).
    """

    k: int = 4
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int = 4096
    batch_size: int = 32
    seed: int = 0
    limit: int | None = None
    instruction: str = INSTRUCTION
    device: str = placement("auto")
    dtype: str = "auto"
    threads: int = placement(0)
    engine: str = "auto"
    min_samples: int = 200
    backend: str = "hf"
    vllm: VLLMOptions = field(default_factory=VLLMOptions)
    openai: OpenAIOptions = field(default_factory=OpenAIOptions)
    served_model: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"eval.backend must be one of {BACKENDS}, got {self.backend!r}")
        check_engine(self.engine, "eval.engine")


# --------------------------------------------------------------------------------------------------- problems
def heldout_problems(
    workspace: io.Workspace | str | Path | None,
    pool: str,
    split: str = "test",
    limit: int | None = None,
    sources: Sequence[str] | None = None,
) -> pl.DataFrame:
    """The pool's problems of one split (default ``test``, never the training problems), sorted by problem_id;
    ``sources``: only those first read from these ingest sources (a band added to a split as a new source then
    leaves a ``limit`` over the others choosing the same problems as before it existed)."""
    ws = workspace if isinstance(workspace, io.Workspace) else io.Workspace.resolve(workspace)
    df = io.read_parquet(ws.require_pool(pool))
    if S.SPLIT not in df.columns:
        raise InputError(f"pool {pool!r}: problems table has no {S.SPLIT!r} column; cannot tell test from train")
    have = sorted(df[S.SPLIT].drop_nulls().unique().to_list())
    df = df.filter(pl.col(S.SPLIT) == split)
    if df.is_empty():
        raise InputError(f"pool {pool!r} has no {split!r} problems (splits present: {have or 'none'})")
    if sources is not None:
        named = sorted(df[S.SOURCE].drop_nulls().unique().to_list()) if S.SOURCE in df.columns else []
        df = df.filter(pl.col(S.SOURCE).is_in(list(sources))) if S.SOURCE in df.columns else df.clear()
        if df.is_empty():
            raise InputError(f"pool {pool!r} has no {split!r} problems from sources {list(sources)} "
                             f"(its {split!r} sources: {named or 'none'})")  # fmt: skip
    cols = [c for c in (S.PROBLEM_ID, S.PROBLEM, S.ANSWER, S.ANSWER_ALTERNATIVES, S.LEVEL, S.META) if c in df.columns]
    df = df.select(cols).sort(S.PROBLEM_ID)
    return df.head(limit) if limit is not None else df


# --------------------------------------------------------------------------------------------------- evaluate
def _golds(df: pl.DataFrame) -> list[Any]:
    """Each problem's acceptable answers: ``answer_alternatives`` where present and non-empty, else ``answer``."""
    answers = df[S.ANSWER].to_list()
    if S.ANSWER_ALTERNATIVES not in df.columns:
        return answers
    return [alt or gold for alt, gold in zip(df[S.ANSWER_ALTERNATIVES].to_list(), answers, strict=True)]


def summarize(per_problem: pl.DataFrame, k: int, min_samples: int = 200) -> dict[str, Any]:
    """pass@1 (mean of per-problem means), its standard error and the weak-evidence warning, from the table
    ``evaluate`` builds (columns ``mean`` and ``scored``; problems whose gold is unreadable are left out)."""
    scored = per_problem.filter(pl.col("scored"))
    means = scored["mean"].to_list()
    n = len(means)
    p = sum(means) / n if n else float("nan")
    if n > 1:
        var = sum((m - p) ** 2 for m in means) / (n - 1)
        se = math.sqrt(var / n)
    else:
        se = float("nan")
    samples = n * k
    warning = None
    if samples < min_samples:
        warning = (
            f"weak evidence: {n} problems x {k} samples = {samples} samples (< {min_samples}); pass@1 "
            f"{p:.3f} +- {se:.3f} (SE) cannot separate checkpoints closer than ~{2 * se:.2f}. Raise --k or --limit."
        )
    return {"pass_at_1": p, "stderr": se, "n_problems": n, "k": k, "n_samples": samples, "warning": warning}


def _per_problem(
    df: pl.DataFrame, rows: Sequence[Completion], messages: Sequence[str], verify_cfg: verify.VerifyConfig
) -> tuple[pl.DataFrame, list[verify.Verdict]]:
    """Every sample of ``rows`` (in problem order, ``k`` per problem) judged against its problem's golds, and the
    per-problem table ``evaluate`` returns (n_samples, n_correct, mean, truncated, mean_tokens, scored); also the
    verdicts, one per row."""
    ids = df[S.PROBLEM_ID].to_list()
    golds = _golds(df)
    golds_of = dict(zip(ids, golds, strict=True))
    # Which golds the checker can read, asked once per problem with a stand-in answer: a problem whose samples
    # never reached the gold (no answer extracted) must still be told apart from one whose gold is unreadable.
    probe = verify.check_batch(["\\boxed{0}"] * len(ids), golds, verify_cfg)
    gold_ok = {pid: v.detail != verify.GOLD_UNPARSEABLE for pid, v in zip(ids, probe, strict=True)}
    msg_of = dict(zip(ids, messages, strict=True))
    verdicts = verify.check_batch(
        [c.text for c in rows],
        [golds_of[c.problem_id] for c in rows],
        verify_cfg,
        finish_reasons=[c.finish_reason for c in rows],
        prompts=[msg_of[c.problem_id] for c in rows],
    )
    table = (
        pl.DataFrame(
            {
                S.PROBLEM_ID: [c.problem_id for c in rows],
                "correct": [v.correct for v in verdicts],
                "verdict": [v.verdict for v in verdicts],
                "gold_ok": [
                    gold_ok[c.problem_id] and v.detail != verify.GOLD_UNPARSEABLE
                    for c, v in zip(rows, verdicts, strict=True)
                ],
                "truncated": [c.finish_reason == "length" for c in rows],
                "tokens": [c.completion_tokens for c in rows],
            },
            schema_overrides={"tokens": pl.Int64},
        )
        .group_by(S.PROBLEM_ID, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("n_samples"),
            pl.col("correct").sum().cast(pl.Int64).alias("n_correct"),
            pl.col("correct").mean().alias("mean"),
            pl.col("truncated").sum().cast(pl.Int64).alias("truncated"),
            pl.col("tokens").mean().alias("mean_tokens"),
            pl.col("gold_ok").all().alias("scored"),
        )
    )
    return table, verdicts


def evaluate(
    model_dir: str | Path,
    problems: pl.DataFrame,
    cfg: EvalConfig = EvalConfig(),
    *,
    generate: GenerateFn | None = None,
    verify_cfg: verify.VerifyConfig = verify.DEFAULT,
    progress: bool = False,
) -> dict[str, Any]:
    """pass@1 (mean@k) of a model on ``problems`` (columns problem_id, problem, answer[, answer_alternatives]).

    ``generate`` replaces the configured backend (``backend_generate``; a stub in tests): it takes the requests and
    the sampling settings and returns one ``Completion`` per (problem, sample index). ``progress``: a progress line
    (samples done/total, rate, time left; ``curate.progress.bar``), also in the run's status file. Returns
    pass_at_1, stderr, n_problems, k, n_samples, warning, verdict counts, truncation rate, mean completion tokens,
    runtime, ``per_problem`` (a polars frame: problem_id, n_correct, mean, truncated, mean_tokens, scored) and
    ``samples`` (one row per sample: problem_id, sample_idx, completion, correct, verdict: what a reader inspects to
    see how the model answers, e.g. which share finishes an arithmetic chain).
    """
    if cfg.k < 1:
        raise ValueError(f"k must be >= 1, got {cfg.k}")
    missing = [c for c in (S.PROBLEM_ID, S.PROBLEM, S.ANSWER) if c not in problems.columns]
    if missing:
        raise ValueError(f"problems frame lacks column(s) {missing}; have {problems.columns}")
    df = problems.unique(S.PROBLEM_ID, keep="first", maintain_order=True)
    if cfg.limit is not None:
        df = df.sort(S.PROBLEM_ID).head(cfg.limit)
    if df.is_empty():
        raise ValueError("no problems to evaluate")
    if generate is None and cfg.backend != "openai" and Path(model_dir).exists():  # never sample NaN logits
        check_model(model_dir)  # a damaged folder is one line, before any sample
    t0 = time.perf_counter()
    ids = df[S.PROBLEM_ID].to_list()
    messages = [user_message(p, cfg.instruction) for p in df[S.PROBLEM].to_list()]
    requests = [
        Request(pid, msg, tuple(range(cfg.k)), request_seed(cfg.seed, pid, 0))
        for pid, msg in zip(ids, messages, strict=True)
    ]
    sampling = Sampling(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens, seed=cfg.seed)
    what = f"eval {Path(model_dir).name if Path(model_dir).name != 'final' else Path(model_dir).parent.name}"
    with bar(len(requests) * cfg.k, what, enabled=progress, unit="samples") as advance:

        def on_done(n: int, tokens: int) -> None:
            advance(n, tokens=tokens)

        sample = generate or backend_generate(model_dir, cfg, on_done)
        completions = sample(requests, sampling)
    by_key = {(c.problem_id, c.sample_idx): c for c in completions}
    wanted = [(pid, i) for pid in ids for i in range(cfg.k)]
    absent = [key for key in wanted if key not in by_key]
    if absent:
        raise RuntimeError(
            f"generation returned {len(completions)} completions; {len(absent)} missing, e.g. {absent[0]}"
        )
    rows = [by_key[key] for key in wanted]
    table, verdicts = _per_problem(df, rows, messages, verify_cfg)
    samples = pl.DataFrame(
        {
            S.PROBLEM_ID: [c.problem_id for c in rows],
            "sample_idx": [c.sample_idx for c in rows],
            "completion": [c.text for c in rows],
            "correct": [v.correct for v in verdicts],
            "verdict": [v.verdict for v in verdicts],
        }
    )
    out = summarize(table, cfg.k, cfg.min_samples)
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    tokens = [c.completion_tokens for c in rows if c.completion_tokens is not None]
    out.update(
        model=str(model_dir),
        skipped_unreadable_gold=int(table.height - out["n_problems"]),
        verdicts=counts,
        truncation_rate=sum(c.finish_reason == "length" for c in rows) / len(rows),
        mean_completion_tokens=sum(tokens) / len(tokens) if tokens else None,
        runtime_s=time.perf_counter() - t0,
        sampler=getattr(sample, "sampler", cfg.backend if generate is None else "given"),
        config=asdict(cfg),
        per_problem=table,
        samples=samples,
    )
    return out


def backend_generate(model_dir: str | Path, cfg: EvalConfig, on_done: OnDone | None = None) -> GenerateFn:
    """The generation function of ``cfg.backend`` for one model: curate's ``hf``, ``vllm`` or ``openai`` backend,
    as ``curate rollout`` uses them. vLLM's engine is released after the evaluation (the chain evaluates in its own
    process, and the next training step needs the GPU memory); a box without vLLM gets one line saying so."""
    model = str(model_dir)
    if cfg.backend == "openai":
        return lambda reqs, s: generate_openai(reqs, cfg.served_model or model, s, cfg.openai, on_done=on_done)
    if cfg.backend == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("eval.backend vllm: vLLM is not installed (pip install -e '.[gpu]'; scripts/setup gpu)")
        from curate.rollout import vllm_engine

        def generate_vllm(reqs: Sequence[Request], s: Sampling) -> list[Completion]:
            try:
                return vllm_engine.generate_vllm(reqs, model, s, cfg.vllm, on_done=on_done)
            finally:
                vllm_engine.release_engine()

        return generate_vllm
    opts = HFOptions(device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size, threads=cfg.threads,
                     engine=cfg.engine)  # fmt: skip

    def generate(reqs: Sequence[Request], s: Sampling) -> list[Completion]:
        out = generate_hf(reqs, model, s, opts, on_done=on_done)
        generate.sampler = sampler_name(load_hf(model, None, opts)[1], opts)  # type: ignore[attr-defined]
        return out

    return generate


# --------------------------------------------------------------------------------------------------- run log
def append_eval(run_dir: str | Path, step: int, compute: float, result: dict[str, Any]) -> Path:
    """Add (or replace) the row of ``step`` in ``<run_dir>/eval.parquet``; written atomically, sorted by step."""
    path = Path(run_dir) / EVAL_FILE
    row = pl.DataFrame(
        [
            {
                "step": int(step),
                "compute": float(compute),
                "pass_at_1": float(result["pass_at_1"]),
                "stderr": float(result["stderr"]),
                "n": int(result["n_problems"]),
                "k": int(result["k"]),
            }
        ],
        schema=EVAL_SCHEMA,
    )
    if path.is_file():
        old = pl.read_parquet(path).select(list(EVAL_SCHEMA)).cast(EVAL_SCHEMA)
        row = pl.concat([old.filter(pl.col("step") != int(step)), row])
    return io.write_parquet(row.sort("step"), path)


def read_eval(run_dir: str | Path) -> pl.DataFrame:
    """A run's eval curve (empty frame with the eval schema when none was written)."""
    path = Path(run_dir) / EVAL_FILE
    return pl.read_parquet(path) if path.is_file() else pl.DataFrame(schema=EVAL_SCHEMA)


def groups(problems: pl.DataFrame, by: str) -> pl.DataFrame:
    """(problem_id, group) for a per-level breakdown: ``by`` is a column of the problems table (``level``,
    ``difficulty``, ``subject``) or ``meta.<key>``, a field of its JSON ``meta`` (``meta.ops``: the built-in
    arithmetic chains' length). Raises ``ValueError`` when the problems have no such field. The grouping is
    ``curate.schema.field_groups``, the one the headroom report's bands use."""
    return S.field_groups(problems, by, "group", label="eval.by ")


def group_order(group: str) -> tuple[int, float, str]:
    """Sort key of a breakdown's groups: numbers by value (chain lengths 3, 4, ..., 10, not "10" before "3"), then
    the rest by name."""
    try:
        return (0, float(group), group)
    except ValueError:
        return (1, 0.0, group)


def paired_gain_by(after: pl.DataFrame, before: pl.DataFrame, grouping: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """``paired_gain`` within each group of ``grouping`` (groups with fewer than 2 problems left out)."""
    out = {}
    for group in sorted(set(grouping["group"].to_list()), key=group_order):
        ids = grouping.filter(pl.col("group") == group).select(S.PROBLEM_ID)
        a, b = after.join(ids, on=S.PROBLEM_ID, how="semi"), before.join(ids, on=S.PROBLEM_ID, how="semi")
        try:
            out[group] = paired_gain(a, b)
        except ValueError:
            continue
    return out


def paired_gain(after: pl.DataFrame, before: pl.DataFrame) -> dict[str, Any]:
    """How much ``after`` beats ``before`` on the same held-out problems, with the paired standard error.

    Both are ``evaluate``'s ``per_problem`` tables (problem_id, mean, scored). Two models scored on the same
    problems share each problem's difficulty, so the right error bar for their difference is that of the
    per-problem differences: SE = sd(mean_after - mean_before) / sqrt(n), over problems scored in both. It is
    smaller than either model's own SE (which mostly measures how hard the problems are), and is what "RL beats
    SFT by z standard errors" means here. Returns gain, stderr, z (gain / stderr), n_problems and the two pass
    rates on the common problems (after_rate, before_rate).
    """
    key = [S.PROBLEM_ID]
    a = after.filter(pl.col("scored")).select(*key, pl.col("mean").alias("a"))
    b = before.filter(pl.col("scored")).select(*key, pl.col("mean").alias("b"))
    both = a.join(b, on=key, how="inner")
    n = both.height
    if n < 2:
        raise ValueError(f"paired_gain needs >= 2 problems scored by both models, got {n}")
    diff = (both["a"] - both["b"]).to_list()
    gain = sum(diff) / n
    var = sum((d - gain) ** 2 for d in diff) / (n - 1)
    se = math.sqrt(var / n)
    return {
        "gain": gain,
        "stderr": se,
        "z": gain / se if se > 0 else (math.inf if gain > 0 else -math.inf if gain < 0 else 0.0),
        "n_problems": n,
        "after_rate": float(both["a"].mean()),
        "before_rate": float(both["b"].mean()),
    }
